"""Every public release gestalt reads, declared once: where it lives, its licence, its citation.

The per-file sha256 of each release is in ``manifests/<name>.sha256`` (sha256sum format), so the
declaration and the hashes cannot drift apart. A file's download URL is the longest matching
prefix in ``urls`` joined with its path; files with no matching prefix were derived by whoever
mirrored the release and come only from a mirror.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from importlib import resources


@dataclass(frozen=True)
class Release:
    name: str
    description: str
    licence: str
    citation: str
    urls: dict[str, str] = field(default_factory=dict)  # local path prefix -> URL base
    # path prefixes of declared files a mirror may hold only some of (a large image set): an absent
    # one is fetched by URL where downloads are allowed, else left out and counted by the task
    partial: tuple[str, ...] = ()

    @cached_property
    def files(self) -> dict[str, str]:
        """relative path -> expected sha256."""
        text = resources.files("harness.sources").joinpath("manifests", f"{self.name}.sha256").read_text()
        out = {}
        for line in text.splitlines():
            if line.strip():
                digest, path = line.split(maxsplit=1)
                out[path.strip()] = digest
        return out

    def is_partial(self, path: str) -> bool:
        return any(path.startswith(p) for p in self.partial)

    def url(self, path: str) -> str | None:
        matches = [p for p in self.urls if path.startswith(p)]
        if not matches:
            return None
        prefix = max(matches, key=len)
        return self.urls[prefix] + path[len(prefix):]


_GH = "https://raw.githubusercontent.com"
_FANLAB = f"{_GH}/cogtoolslab/human-machine-datavis-cogsci/9a6a232413084483bbcf5652654d108519518b45/"
_DAVINCI = f"{_GH}/cogtoolslab/davinci_public2023/fffad2c0c0dcfb3056583e59072303433cc27557/"
_REVISIT = f"{_GH}/revisit-studies/study/e416f37b4831d41d1ff1b8c3fc6100007c2d9e3c/"

RELEASES: dict[str, Release] = {
    r.name: r
    for r in [
        Release(
            name="geirhos-silhouettes",
            description="Filled silhouettes (16 classes x 10) and 10 observers' per-trial responses",
            licence="CC BY 4.0 (stimuli per DATASET_LICENSE; raw data per model-vs-human's overview)",
            citation=(
                "Geirhos, Rubisch, Michaelis, Bethge, Wichmann & Brendel (2019). ImageNet-trained "
                "CNNs are biased towards texture; increasing shape bias improves accuracy and "
                "robustness. ICLR 2019."
            ),
            urls={"": f"{_GH}/rgeirhos/texture-vs-shape/ccd0c01d42c0a8a834e90ec141e7f24fa915dc23/"},
        ),
        Release(
            name="geirhos-edges-cue-conflict",
            description=("Edge drawings (16 classes x 10), cue-conflict images (1,280; a mirror may "
                         "hold a subset), 10 observers' trials each and published CNN decisions"),
            licence="CC BY 4.0 (stimuli per DATASET_LICENSE; raw data per model-vs-human's overview)",
            citation=(
                "Geirhos, Rubisch, Michaelis, Bethge, Wichmann & Brendel (2019). ImageNet-trained "
                "CNNs are biased towards texture; increasing shape bias improves accuracy and "
                "robustness. ICLR 2019. Geirhos, Meding & Wichmann (2020). Beyond accuracy: "
                "quantifying trial-by-trial behaviour of CNNs and humans by measuring error "
                "consistency. NeurIPS 2020."
            ),
            urls={"": f"{_GH}/rgeirhos/texture-vs-shape/ccd0c01d42c0a8a834e90ec141e7f24fa915dc23/"},
            partial=("stimuli/style-transfer-preprocessed-512/",),
        ),
        Release(
            name="imagenet-16-class-mapping",
            description="ImageNet-1k class indices of the 16 entry-level classes (model-vs-human)",
            licence="MIT (bethgelab/model-vs-human); the index lists taken as data",
            citation=(
                "Geirhos, Narayanappa, Mitzkus, Thieringer, Bethge, Wichmann & Brendel (2021). "
                "Partial success in closing the gap between human and machine vision. NeurIPS 2021."
            ),
            # indices.json was read out of model-vs-human's source by the mirror: mirror only
        ),
        Release(
            name="perceptual-kernels",
            description="Tableau-10 colour kernels and 20 subjects' raw triplet judgments",
            licence="none stated (the repository has no LICENSE file)",
            citation=(
                "Demiralp, Bernstein & Heer (2014). Learning Perceptual Kernels for Visualization "
                "Design. IEEE TVCG 20(12) (Proc. InfoVis 2014)."
            ),
            urls={"data/": f"{_GH}/uwdata/perceptual-kernels/eda46ab3d4018e42ef77746e8750777613531238/data/"},
        ),
        Release(
            name="things",
            description="THINGS odd-one-out noise-ceiling triplets (1,000 x ~20 responses), concepts",
            licence="triplets: GPL-3.0 repository (Hebart lab data, CC BY 4.0 per cblearn); concepts: MIT",
            citation=(
                "Hebart, Zheng, Pereira & Baker (2020). Revealing the multidimensional mental "
                "representations of natural objects underlying human similarity judgements. "
                "Nature Human Behaviour 4, 1173-1185. Hebart et al. (2019). THINGS: A database of "
                "1,854 object concepts and more than 26,000 naturalistic object images. PLoS ONE."
            ),
            urls={
                "LukasMut-VICE/data/": f"{_GH}/LukasMut/VICE/f484c1446459c12c15deb2df1476f53969ad6f4d/data/",
                "thingsvision/data/files/": (
                    f"{_GH}/ViCCo-Group/thingsvision/57e91c9754dfea8579ffc58c0ae42d9dc60080af/data/files/"
                ),
            },
        ),
        Release(
            name="chart6",
            description="CHART-6 cross-test item index (635 available items), written by the mirror",
            licence="derived index of the MIT/BSD-3 item files it lists (see each test's release)",
            citation=(
                "Verma, Mukherjee, Potts, Kreiss & Fan (2025). CHART-6: Human-Centered Evaluation of "
                "Data Visualization Understanding in Vision-Language Models. arXiv 2505.17202."
            ),
        ),
        Release(
            name="ggr",
            description="GGR graph literacy, 13 items as the Fan lab gave them; CogSci-2024 human accuracy",
            licence="MIT (Cognitive Tools Lab repository); items from Galesic & Garcia-Retamero (2011)",
            citation=(
                "Galesic & Garcia-Retamero (2011). Graph literacy: a cross-cultural comparison. "
                "Medical Decision Making 31(3). Verma, Mukherjee, Potts, Kreiss & Fan (2024). "
                "Evaluating human and machine understanding of data visualizations. CogSci 2024."
            ),
            urls={
                "questions.csv": _FANLAB + "stimuli/ggr/questions.csv",
                "instructions.txt": _FANLAB + "stimuli/ggr/instructions.txt",
                "images/": _FANLAB + "stimuli/ggr/images/",
                "human/cogsci2024_accuracy_scatter_df_": _FANLAB + "results/dataframe/accuracy_scatter_df/",
                "human/cogsci2024_accuracy_ci_df_": _FANLAB + "results/dataframe/accuracy_ci_df/",
                "human/cogsci2024_pairwise_heatmap_df_": (
                    _FANLAB + "results/dataframe/pairwise_heatmap_df/pairwise_heatmap_df_"),
            },
        ),
        Release(
            name="vlat",
            description="VLAT, 53 multiple-choice items as the Fan lab gave them; CogSci-2024 human accuracy",
            licence="MIT (Cognitive Tools Lab repository); items from Lee, Kim & Kwon (2017)",
            citation=(
                "Lee, Kim & Kwon (2017). VLAT: Development of a Visualization Literacy Assessment "
                "Test. IEEE TVCG 23(1). Verma et al. (2024), CogSci 2024."
            ),
            urls={
                "questions.csv": _FANLAB + "stimuli/vlat/questions.csv",
                "instructions.txt": _FANLAB + "stimuli/vlat/instructions.txt",
                "images/": _FANLAB + "stimuli/vlat/images/",
                "human/cogsci2024_accuracy_scatter_df_": _FANLAB + "results/dataframe/accuracy_scatter_df/",
                "human/cogsci2024_accuracy_ci_df_": _FANLAB + "results/dataframe/accuracy_ci_df/",
                "human/cogsci2024_pairwise_heatmap_df_": (
                    _FANLAB + "results/dataframe/pairwise_heatmap_df/pairwise_heatmap_df_"),
            },
        ),
        Release(
            name="calvi",
            description="CALVI, 60 items (15 standard, 45 misleading): reVISit images; items.csv derived",
            licence="BSD-3-Clause (reVISit repository); items by Ge, Cui & Kay (2023)",
            citation=(
                "Ge, Cui & Kay (2023). CALVI: Critical Thinking Assessment for Literacy in "
                "Visualizations. CHI 2023. doi:10.1145/3544548.3581406"
            ),
            urls={
                "images/N": _REVISIT + "public/libraries/calvi/assets/questions/normal/N",
                "images/T": _REVISIT + "public/libraries/calvi/assets/questions/trick/T",
                "revisit_calvi_library_config.json": _REVISIT + "public/libraries/calvi/config.json",
            },
        ),
        Release(
            name="holf",
            description="HOLF, 64 bar charts x 6 questions (384 items); davinci-2023 raw trials (N=542)",
            licence="MIT (Cognitive Tools Lab repositories)",
            citation=(
                "Huey, Oey, Lloyd & Fan (2023). How do communicative goals guide which data "
                "visualizations people think are effective? CogSci 2023. Verma et al. (2024), "
                "CogSci 2024."
            ),
            urls={
                "questions.csv": _FANLAB + "stimuli/holf/questions.csv",
                "instructions.txt": _FANLAB + "stimuli/holf/instructions.txt",
                "images/": _FANLAB + "stimuli/holf/images/",
                "human/cogsci2024_accuracy_scatter_df_": _FANLAB + "results/dataframe/accuracy_scatter_df/",
                "human/cogsci2024_accuracy_ci_df_": _FANLAB + "results/dataframe/accuracy_ci_df/",
                "human/cogsci2024_pairwise_heatmap_df_": (
                    _FANLAB + "results/dataframe/pairwise_heatmap_df/pairwise_heatmap_df_"),
                "davinci2023/cogsci_": _DAVINCI + "results/cogsci_",
                "davinci2023/davinci_barcharts.csv": _DAVINCI + "stimuli/davinci_barcharts.csv",
            },
        ),
        Release(
            name="holf-multi",
            description="HOLF-Multi (216 items): only in CHART-6's OSF release; search notes only",
            licence="n/a (no files)",
            citation="Verma, Mukherjee, Potts, Kreiss & Fan (2025). CHART-6. arXiv 2505.17202.",
        ),
        Release(
            name="chartqa-human",
            description="ChartQA-Human item table (125 ChartQA test questions); no chart images",
            licence="MIT (Cognitive Tools Lab repository); ChartQA's own licence not verified",
            citation=(
                "Masry, Long, Tan, Joty & Hoque (2022). ChartQA: A Benchmark for Question Answering "
                "about Charts with Visual and Logical Reasoning. Findings of ACL 2022. Verma et al. "
                "(2025), CHART-6, arXiv 2505.17202."
            ),
            urls={"experiments.csv": _FANLAB + "experiments/api/stimuli/experiments.csv"},
        ),
        Release(
            name="viz-item-measures-cogsci2025",
            description="Verma & Fan CogSci-2025: per-item and per-participant 0/1 for GGR-MC, VLAT, CALVI",
            licence="MIT (Cognitive Tools Lab repository)",
            citation=(
                "Verma & Fan (2025). Measuring and predicting variation in the difficulty of "
                "questions about data visualizations. CogSci 2025."
            ),
            urls={"dataframes/": (f"{_GH}/cogtoolslab/viz_item_measures_cogsci2025/"
                                  "f9f3ffd6ae6a75a98881e52c0314be51baa5570c/analysis/dataframes/")},
        ),
        Release(
            name="grape",
            description=("GRAPE bar-chart generalization: generator configs, user-study responses, "
                         "result figures and tables digitised from them, colour pools"),
            licence="MIT (Copyright (c) 2024 IDEAS Lab)",
            citation=(
                "Cui, Chen, Wang, Haehn, Wang & Pfister (2025). Generalization of CNNs on "
                "Relational Reasoning with Bar Charts. IEEE TVCG; arXiv 2503.00086."
            ),
            # user_study/user_data and user_progressive are pseudonymised copies and derived/ was
            # written by the mirror: those files come only from a mirror.
            urls={
                "configs/": f"{_GH}/Ideas-Laboratory/Graphical-Perception/"
                            "f62ec5ffedec321e63864c3d013e5d816ac742e5/eval_generalization/TASK/",
                "user_study/web_tasks.json": (
                    f"{_GH}/Ideas-Laboratory/Graphical-Perception/f62ec5ffedec321e63864c3d013e5d816ac742e5/"
                    "user_study/web_program_code/static/data/tasks.json"),
                "user_study/screenshots/": f"{_GH}/Ideas-Laboratory/Graphical-Perception/"
                                           "f62ec5ffedec321e63864c3d013e5d816ac742e5/user_study/screenshots/",
                "examples/fig_example.png": (
                    f"{_GH}/Ideas-Laboratory/Graphical-Perception/f62ec5ffedec321e63864c3d013e5d816ac742e5/"
                    "eval_generalization/GRAPE/fig_example.png"),
                "figures_svg/": f"{_GH}/Ideas-Laboratory/Graphical-Perception/"
                                "988b400d03151bdfe6065345bd3ee36490605ec9/data/svg_data/",
            },
        ),
        Release(
            name="haehn-perception",
            description=("Haehn et al. position-length experiment: human MLAE references "
                         "(Cleveland & McGill; Heer & Bostock), CNN MLAE/MSE tables, figures"),
            licence="not stated (repository has no LICENSE); tables transcribed from it",
            citation=(
                "Haehn, Tompkin & Pfister (2019). Evaluating 'Graphical Perception' with CNNs. "
                "IEEE TVCG 25(1) (IEEE VIS 2018). Cleveland & McGill (1984), JASA 79(387)."
            ),
            # the CSVs were transcribed by the mirror; only the two figures are byte copies
            urls={
                "figures/Ours_PositionLength.svg": (
                    f"{_GH}/Rhoana/perception/28fa35091545a50b908163e1ff385d6f0081e591/"
                    "PAPER/SUPPLEMENTAL/gfx/CMcG_Comparison/Ours_PositionLength.svg"),
                "figures/figure4_mlae_with_multi_and_humans_all_NEW.pdf": (
                    f"{_GH}/Rhoana/perception/28fa35091545a50b908163e1ff385d6f0081e591/"
                    "PAPER/gfx/figure4_mlae_with_multi_and_humans_all_NEW.pdf"),
            },
        ),
    ]
}
