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

    def url(self, path: str) -> str | None:
        matches = [p for p in self.urls if path.startswith(p)]
        if not matches:
            return None
        prefix = max(matches, key=len)
        return self.urls[prefix] + path[len(prefix):]


_GH = "https://raw.githubusercontent.com"

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
    ]
}
