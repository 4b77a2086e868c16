"""GRAPE's CNN generalisation figure beside gestalt's networks: the digitised curves joined to the
right config levels, the agreement recomputed from the data file by its own arithmetic, and the
page and figures kept in step with that file."""

from __future__ import annotations

import csv
import re
from types import SimpleNamespace

import pytest
from scipy.stats import pearsonr, spearmanr

from benchmarks import grape_generalization as G
from harness.stimuli.bars.grape import perturbation_levels
from tests.conftest import MIRROR

DIGITISED = MIRROR / "grape" / G.DIGITISED
EFFECT = 0.1  # MLAE: the largest effect, a point value on either side, above which a parameter hurts
UNTRAINED = 3.0  # IID MLAE above which a network's ratios are off by about 8 points in 100: not yet learnt


def test_each_curve_point_joins_the_config_level_it_was_drawn_at(sources):
    """Where the paper's x axis is the level itself (bar width and stroke width in px, title font
    size in pt), the point joined to a config level is the one drawn at that x."""
    with DIGITISED.open(newline="") as f:
        drawn = {(int(r["inferred_cm_type"]), r["parameter"], float(r["x_axis_value"])): float(r["cnn_mlae"])
                 for r in csv.DictReader(f)}
    curves = G.paper_curves(DIGITISED)
    checked = 0
    for t in (1, 3):  # bar types: the bar-width axis is the width in px
        for lv in perturbation_levels(sources, t):
            grape_name = {"bar_width": "barWidth", "stroke_width": "strokeWidth",
                          "title_font_size": "titleFontSize"}.get(lv.parameter)
            if grape_name:
                assert curves[t][lv.parameter][lv.testdata] == drawn[(t, grape_name, float(lv.level))], lv
                checked += 1
    assert checked == 2 * (4 + 2 + 6)


def test_the_paper_iid_is_the_curves_unperturbed_points(sources):
    """Type 1's unperturbed points sit at MLAE -2.52 in every panel (bar width 7, stroke width 1, ...)."""
    base = G.paper_iid(G.paper_curves(DIGITISED)[1], perturbation_levels(sources, 1))
    assert base == pytest.approx(-2.523, abs=0.002)


def test_an_unknown_parameter_in_the_digitised_file_is_named_with_its_line(tmp_path):
    path = tmp_path / "curves.csv"
    path.write_text(DIGITISED.read_text().replace("barWidth.svg,barWidth,", "barWidth.svg,barHeight,", 1))
    with pytest.raises(SystemExit, match=r"curves.csv:37: unknown parameter 'barHeight'"):
        G.paper_curves(path)


def test_a_seed_trains_for_every_epoch_it_is_given(monkeypatch, tmp_path):
    """The column network's loss sits at chance for its first few tens of thousands of charts: a
    seed stopped early on that plateau's noisy validation loss would score an untrained network."""
    seen = []

    def run_recipe(recipe, echo):
        seen.append(recipe)
        task = recipe.tasks[0]
        return [SimpleNamespace(scores={task: [SimpleNamespace(name="mlae", value=1.0, ci_low=0.5, ci_high=1.5)]})]

    monkeypatch.setattr("harness.run.run_recipe", run_recipe)
    assert G.one_run(3, 2, 400, 7, 10, str(tmp_path)) == {"mlae": (1.0, 0.5, 1.5)}
    (recipe,) = seen
    options = recipe.models[0].options
    assert (options["seed"], options["max_epochs"]) == (2, 7)
    assert options["patience"] >= 7
    assert recipe.tasks == ["ratio.chart.grape_type3"]
    assert recipe.task_options["ratio.chart.grape_type3"]["n_train"] == 400


def _nums(cell: str) -> list[float]:
    return [float(x) for x in cell.split()]


GUESS_ZERO = ("title_position", "title_font_size")  # the guess: titles have no effect, everything else hurts


def _paper_iid_means(sources) -> dict[int, float]:
    """Per type, the mean of the digitised curves' points at config levels that equal the IID chart."""
    from harness.stimuli.bars.grape import PARAMETERS

    points: dict[tuple[int, str], list[tuple[float, float]]] = {}
    with DIGITISED.open(newline="") as f:
        for r in csv.DictReader(f):
            key = (int(r["inferred_cm_type"]), PARAMETERS[r["parameter"]])
            points.setdefault(key, []).append((float(r["x_axis_value"]), float(r["cnn_mlae"])))
    out = {}
    for t in range(1, 6):
        ood = {(lv.parameter, lv.testdata) for lv in perturbation_levels(sources, t)}
        iid = [y for (ct, p), pts in points.items() if ct == t
               for i, (_, y) in enumerate(sorted(pts)) if (p, f"testdata_{i + 1}") not in ood]
        out[t] = sum(iid) / len(iid)
    return out


def _level_cells() -> dict[int, dict]:
    """Per type: x (the paper's level minus IID MLAE), y (gestalt's seed-mean delta_mlae) and the guess."""
    rows = list(csv.DictReader(G.RESULTS.open(newline="")))
    out: dict[int, dict] = {}
    for r in rows:
        if r["parameter"] == "iid" or not r["paper_mlae"]:
            continue
        cell = out.setdefault(int(r["chart_type"]), {"x": [], "y": [], "guess": [], "parameter": []})
        delta = _nums(r["delta_by_seed"])
        cell["x"].append(float(r["paper_mlae"]) - float(r["paper_iid_mlae"]))
        cell["y"].append(sum(delta) / len(delta))
        cell["guess"].append(0.0 if r["parameter"] in GUESS_ZERO else 1.0)
        cell["parameter"].append(r["parameter"])
    return out


def _agreement_file() -> tuple[list[str], dict[int, dict]]:
    with G.AGREEMENT.open(newline="") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames), {int(r["chart_type"]): r for r in reader}


def test_the_data_file_carries_the_paper_iid_means_of_the_digitised_curves(sources):
    means = _paper_iid_means(sources)
    for r in csv.DictReader(G.RESULTS.open(newline="")):
        assert float(r["paper_iid_mlae"]) == pytest.approx(means[int(r["chart_type"])], abs=0.0002), r["chart_type"]


def test_the_agreement_file_is_the_level_wise_correlation_the_data_file_gives():
    """Pearson and Spearman of gestalt's seed-mean delta_mlae against the paper's level minus IID
    MLAE over every cell with a paper value, and of the guess that reads no data."""
    import numpy as np

    columns, got = _agreement_file()
    assert columns[:8] == ["chart_type", "cells", "pearson", "pearson_low", "pearson_high", "spearman",
                           "baseline_pearson", "baseline_spearman"]
    cells = _level_cells()
    assert sorted(got) == sorted(cells) == [1, 2, 3, 4, 5]
    for t, c in cells.items():
        row = got[t]
        x, y, guess = (np.array(c[k]) for k in ("x", "y", "guess"))
        assert int(row["cells"]) == len(x) and "bar_length" not in c["parameter"]
        assert float(row["pearson"]) == pytest.approx(pearsonr(x, y)[0], abs=0.02), t
        assert float(row["spearman"]) == pytest.approx(spearmanr(x, y)[0], abs=0.02), t
        assert float(row["baseline_pearson"]) == pytest.approx(pearsonr(x, guess)[0], abs=0.02), t
        assert float(row["baseline_spearman"]) == pytest.approx(spearmanr(x, guess)[0], abs=0.02), t
        assert float(row["pearson_low"]) <= float(row["pearson"]) <= float(row["pearson_high"]), t
        assert float(row["spearman_low"]) <= float(row["spearman"]) <= float(row["spearman_high"]), t


def _verdict(row: dict, stat: str) -> str:
    return "more than the guess" if float(row[f"baseline_{stat}"]) < float(row[f"{stat}_low"]) else "not shown"


def test_the_page_states_each_type_s_level_wise_agreement_and_its_verdict():
    """The verdict is read off the interval: more than the guess only when the guess lies below it;
    an untrained network's numbers are not read as agreement."""
    text = G.PAGE.read_text()
    _, got = _agreement_file()
    untrained = _untrained()
    assert "no bar-length panel" not in text and "answer one question" not in text
    for t, row in got.items():
        section = text.split(f"## Type {t} ")[1].split("\n## ")[0]
        if untrained[t]:
            assert row["pearson_verdict"] == row["spearman_verdict"] == "untrained"
            assert "more than the guess" not in section and "Pearson r" not in section
            continue
        for stat, name in (("pearson", "Pearson r"), ("spearman", "Spearman rho")):
            assert row[f"{stat}_verdict"] == _verdict(row, stat), (t, stat)
            assert (f"{name} {float(row[stat]):+.2f} [{float(row[stat + '_low']):+.2f}, "
                    f"{float(row[stat + '_high']):+.2f}] against the guess's {float(row['baseline_' + stat]):+.2f}: "
                    f"{_verdict(row, stat)}") in section, (t, stat)


def _untrained() -> dict[int, bool]:
    rows = csv.DictReader(G.RESULTS.open(newline=""))
    return {int(r["chart_type"]): sum(_nums(r["mlae_by_seed"])) / len(_nums(r["mlae_by_seed"])) > UNTRAINED
            for r in rows if r["parameter"] == "iid"}


def _largest_effects() -> dict[int, dict[str, tuple[float, list[float]]]]:
    """Per type and parameter with a paper curve: the paper's largest effect and gestalt's per seed."""
    out: dict[int, dict[str, dict]] = {}
    for r in csv.DictReader(G.RESULTS.open(newline="")):
        if r["parameter"] == "iid" or not r["paper_mlae"]:
            continue
        p = out.setdefault(int(r["chart_type"]), {}).setdefault(r["parameter"], {"paper": [], "delta": []})
        p["paper"].append(float(r["paper_mlae"]) - float(r["paper_iid_mlae"]))
        p["delta"].append(_nums(r["delta_by_seed"]))
    return {t: {name: (max(p["paper"]), [max(col) for col in zip(*p["delta"])]) for name, p in params.items()}
            for t, params in out.items()}


def test_the_page_counts_signs_by_one_rule_for_both_sides():
    """A parameter hurts when its largest effect, a point value, exceeds 0.1 on either side; the
    guess's count by the same rule stands beside gestalt's."""
    text = G.PAGE.read_text()
    untrained = _untrained()
    for t, table in _largest_effects().items():
        section = text.split(f"## Type {t} ")[1].split("\n## ")[0]
        for name, (paper, effects) in table.items():
            row = re.search(rf"^\| `{name}` \| ([^|]+) \| ([^|]+) \| ([^|]+) \| ([^|]+) \|", section, re.M)
            assert row, f"type {t}: no row for {name}"
            paper_cell, paper_verdict, effect, verdict = (c.strip() for c in row.groups())
            mean = sum(effects) / len(effects)
            assert float(paper_cell) == pytest.approx(paper, abs=0.006)
            assert effect.startswith(f"{mean:+.2f} [{min(effects):+.2f}, {max(effects):+.2f}]")
            assert paper_verdict == ("hurts" if paper > EFFECT else "not above 0.1")
            assert verdict == ("untrained" if untrained[t] else "hurts" if mean > EFFECT else "not above 0.1")
        if untrained[t]:
            assert "Sign agreement" not in section
            continue
        mine = sum((paper > EFFECT) == (sum(e) / len(e) > EFFECT) for paper, e in table.values())
        guess = sum((paper > EFFECT) == (name not in GUESS_ZERO) for name, (paper, _) in table.items())
        assert f"Sign agreement by that rule: gestalt {mine} of {len(table)}, the guess {guess} of {len(table)}" \
            in section


def test_one_rule_for_both_sides_leaves_the_guess_level_with_or_ahead_of_gestalt():
    """Types 1-3 read 7, 5 and 6 of 8 for gestalt's networks; the guess reads 8, 6 and 8."""
    table = _largest_effects()
    for t, (mine, guess) in {1: (7, 8), 2: (5, 6), 3: (6, 8)}.items():
        assert sum((p > EFFECT) == (sum(e) / len(e) > EFFECT) for p, e in table[t].values()) == mine
        assert sum((p > EFFECT) == (n not in GUESS_ZERO) for n, (p, _) in table[t].items()) == guess


def test_the_page_compares_gestalt_s_bar_length_error_with_the_paper_s_text():
    """The paper states its Fig. 5(i) in words: types 1 and 3 above 4.0, types 2 and 4 below 2.0."""
    paper_text = (MIRROR.parent / "papers" / "grape-bar-chart-generalization.txt").read_text()
    quoted = ("the MLAE values of types 1 and 3 are even larger than 4.0, whereas for types 2 and 4, the values "
              "are less than 2.0")
    assert quoted in paper_text
    text = G.PAGE.read_text()
    assert quoted in text
    section = text.split("## Bar length")[1].split("\n## ")[0]
    untrained = _untrained()
    both = {int(r["chart_type"]): _nums(r["mlae_by_seed"]) for r in csv.DictReader(G.RESULTS.open(newline=""))
            if r["parameter"] == "bar_length" and r["level"] == "both"}
    stated = {1: ("above", 4.0), 3: ("above", 4.0), 2: ("below", 2.0), 4: ("below", 2.0)}
    for t, mlae in both.items():
        row = re.search(rf"^\| {t} \| ([^|]+) \| ([^|]+) \| ([^|]+) \| ([^|]+) \| ([^|]+) \|", section, re.M)
        assert row, f"type {t}: no bar-length row"
        said, _, gestalt, _, matches = (c.strip() for c in row.groups())
        assert gestalt.startswith(f"{sum(mlae) / len(mlae):+.2f} [{min(mlae):+.2f}, {max(mlae):+.2f}]")
        if t not in stated:
            assert said == "not stated" and matches == ("untrained" if untrained[t] else "-")
            continue
        side, bound = stated[t]
        assert said == f"{side} {bound:.1f}"
        if untrained[t]:
            assert matches == "untrained"
        elif side == "above":
            assert matches == ("yes" if min(mlae) > bound else "no" if max(mlae) <= bound else "undecided")
        else:
            assert matches == ("yes" if max(mlae) < bound else "no" if min(mlae) >= bound else "undecided")


def test_the_page_and_figures_are_what_the_data_file_gives():
    assert G.main(["--check"]) == 0, "run: python benchmarks/grape_generalization.py --page"


def test_a_stale_page_or_figure_is_caught(tmp_path):
    rows = G.read()
    out = {"page": tmp_path / "page.md", "figures": tmp_path, "agreement": tmp_path / "agreement.csv"}
    assert G.write_page(rows, **out) == 0
    assert G.write_page(rows, check=True, **out) == 0
    changed = [dict(r) for r in rows]
    first = next(r for r in changed if r["parameter"] != "iid")
    first["mlae_max"] = f"{float(first['mlae_max']) + 0.5:.4f}"
    assert G.write_page(changed, check=True, **out) == 1
    page = out["page"]
    page.write_text(page.read_text().replace("Sign agreement ", "Sign agreement  ", 1))
    assert G.write_page(rows, check=True, **out) == 1
    G.write_page(rows, **out)
    figure = next(tmp_path.glob("grape-generalization-type*.svg"))
    figure.write_text(figure.read_text().replace("MLAE", "MLAF", 1))
    assert G.write_page(rows, check=True, **out) == 1


def test_a_stale_agreement_file_is_caught(tmp_path):
    """The agreement file is checked like the page: a changed number or a missing file is stale."""
    rows = G.read()
    out = {"page": tmp_path / "page.md", "figures": tmp_path, "agreement": tmp_path / "agreement.csv"}
    assert G.write_page(rows, **out) == 0
    assert out["agreement"].read_text() == G.AGREEMENT.read_text()
    assert G.write_page(rows, check=True, **out) == 0
    lines = out["agreement"].read_text().splitlines(keepends=True)
    fields = lines[1].split(",")
    fields[2] = f"{float(fields[2]) + 0.01:.4f}"
    out["agreement"].write_text(lines[0] + ",".join(fields) + "".join(lines[2:]))
    assert G.write_page(rows, check=True, **out) == 1
    out["agreement"].unlink()
    assert G.write_page(rows, check=True, **out) == 1
    assert G.write_page(rows, **out) == 0 and G.write_page(rows, check=True, **out) == 0


def test_grape_lightness_round_trip_has_no_gamma():
    """White darkened by dL* 10: L* 90 is Y = 0.763, which GRAPE writes as 0.763 * 255 truncated
    (194); a proper sRGB encoding of the same Y is 226. A zero shift moves a channel by at most one
    level (the truncation)."""
    import numpy as np

    from harness.stimuli.bars.colours import shift_lightness

    white = np.array([255, 255, 255], np.uint8)
    assert G.grape_round_trip(white, -10).tolist() == [194, 194, 194]
    assert shift_lightness(white, -10).tolist() == [226, 226, 226]
    colours = np.array([[240, 248, 255], [0, 0, 128], [255, 127, 80]], np.uint8)
    assert np.abs(G.grape_round_trip(colours, 0).astype(int) - colours).max() <= 1


def test_gestalt_darkens_the_background_less_than_grape_at_the_same_shift(sources):
    """The background pool darkened by dL* 25 moves further in GRAPE's round trip than in gestalt's."""
    grape, gestalt = G.pixel_shift(sources, "background_lightness", -25)
    assert grape > 1.5 * gestalt > 0


# The user study's perturbed conditions as the authors' generator settings (derived/user_study_conditions.csv):
# (GRAPE parameter, settings on bar types 1 and 3, settings on stacked types 2, 4 and 5)
STUDY_SETTINGS = {
    "Title position": ("title", {"TitlePosition": "left", "TitlePaddingLeft": 0.05}, None),
    "Stroke width": ("strokeWidth", {"lineThickness": 2, "fixBarGap": 2}, None),
    "Bar width": ("barWidth", {"barWidth": 5}, {"stackWidth": 27}),
    "Bkgd color": ("bgColorL", {"LABperturbation": True, "bgcolorL_perturbation": -25}, None),
    "Stroke color": ("strokeColorL", {"strokeLABperturbation": True, "strokecolorL_perturbation": 25}, None),
    "Bar color": ("barColorL", {"barLABperturbation": True, "barcolorL_perturbation": -15}, None),
    "Bar length": ("data", {"outdata": True, "values.valueRange": [1, 10, 93, 100]}, None),
    "dot position": ("markPosition", {"mark.bottomValue": 2}, {"mark.dotDeviation": 3}),
}
HARNESS_NAMES = {"title": "title_position", "strokeWidth": "stroke_width", "barWidth": "bar_width",
                 "bgColorL": "background_lightness", "strokeColorL": "stroke_lightness",
                 "barColorL": "bar_lightness", "data": "bar_length", "markPosition": "dot_position"}


MARGIN = 0.0  # the user study's rule, fixed in advance: a change hurts when its 95% interval lies above 0
MARGINS = (0.0, 0.1, 0.25, 0.5)


def _study_expected(margin: float = MARGIN) -> dict[int, dict[str, dict]]:
    """Per type and condition: people's, ResNet-152's and gestalt's verdicts at ``margin``, recomputed
    from the digitised figure, the released level table and the data file."""
    import json

    with (MIRROR / "grape" / "derived" / "perturbation_levels.csv").open(newline="") as f:
        levels = list(csv.DictReader(f))
    with (MIRROR / "grape" / G.USER_STUDY).open(newline="") as f:
        digitised = {(int(r["inferred_cm_type"]), r["condition"], r["agent"]): r for r in csv.DictReader(f)}
    rows = list(csv.DictReader(G.RESULTS.open(newline="")))

    def change(t, condition, agent):
        c, s = digitised[(t, condition, agent)], digitised[(t, "Standard", agent)]
        half = sum(((float(r["ci95_high"]) - float(r["ci95_low"])) / 2) ** 2 for r in (c, s)) ** 0.5
        delta = float(c["mlae_mean"]) - float(s["mlae_mean"])
        return delta, "hurts" if delta - half > margin else "not shown"

    out: dict[int, dict[str, dict]] = {}
    for t in sorted({int(r["chart_type"]) for r in rows}):
        for condition, (grape, bar, stacked) in STUDY_SETTINGS.items():
            settings = bar if t in (1, 3) or stacked is None else stacked
            (testdata,) = [lv["testdata"] for lv in levels if int(lv["cm_type"]) == t and lv["parameter"] == grape
                           and json.loads(lv["changed_settings"]) == settings]
            (row,) = [r for r in rows if int(r["chart_type"]) == t and r["testdata"] == testdata
                      and r["parameter"] == HARNESS_NAMES[grape]]
            lows = _nums(row["delta_low_by_seed"])
            out.setdefault(t, {})[condition] = {
                "human": change(t, condition, "human"), "resnet": change(t, condition, "cnn_resnet152"),
                "gestalt": "hurts" if all(lo > margin for lo in lows) else
                f"not shown on {row['n_ood']} charts" if all(lo <= margin for lo in lows) else "undecided",
                "delta": _nums(row["delta_by_seed"])}
    return out


def test_the_page_sets_people_beside_the_networks_on_the_user_study_conditions():
    text = G.PAGE.read_text().split("## People and networks on the user-study conditions")[1]
    untrained = _untrained()
    for t, conditions in _study_expected().items():
        section = text.split(f"### Type {t} ")[1].split("\n### ")[0]
        assert untrained[t] == ("has not learnt this type" in section)
        for condition, e in conditions.items():
            row = re.search(rf"^\| {condition} \| [^|]+ \| ([^|]+) \| ([^|]+) \| ([^|]+) \| ([^|]+) \| ([^|]+) \| "
                            r"([^|]+) \|", section, re.M)
            assert row, f"type {t}: no row for {condition}"
            human, human_verdict, resnet, resnet_verdict, gestalt, verdict = (c.strip() for c in row.groups())
            assert float(human.split(" ± ")[0]) == pytest.approx(e["human"][0], abs=0.006)
            assert float(resnet.split(" ± ")[0]) == pytest.approx(e["resnet"][0], abs=0.006)
            assert (human_verdict, resnet_verdict) == (e["human"][1], e["resnet"][1]), (t, condition)
            assert gestalt.startswith(f"{sum(e['delta']) / len(e['delta']):+.2f}")
            assert verdict == ("untrained" if untrained[t] else e["gestalt"]), (t, condition)
        ignored = [c for c, e in conditions.items() if e["human"][1] == "not shown"]
        resnet_only = [c for c in ignored if conditions[c]["resnet"][1] == "hurts"]
        assert f"Hurt ResNet-152 but not shown to hurt people: {len(resnet_only)} of 8" in section
        if not untrained[t]:
            mine = [c for c in ignored if conditions[c]["gestalt"] == "hurts"]
            assert f"Hurt gestalt's network but not shown to hurt people: {len(mine)} of 8" in section


def test_the_page_shows_how_the_user_study_verdicts_move_with_the_margin():
    text = G.PAGE.read_text().split("## People and networks on the user-study conditions")[1]
    assert "absence of effect" not in text.replace("not an absence of effect", "")
    untrained = _untrained()
    for margin in MARGINS:
        row = re.search(rf"^\| {margin:g} \| (.+) \|$", text, re.M)
        assert row, f"no row for margin {margin}"
        cells = [c.strip() for c in row.group(1).split("|")]
        for t, conditions in _study_expected(margin).items():
            people = sum(e["human"][1] == "hurts" for e in conditions.values())
            resnet = sum(e["resnet"][1] == "hurts" and e["human"][1] == "not shown" for e in conditions.values())
            mine = sum(e["gestalt"] == "hurts" and e["human"][1] == "not shown" for e in conditions.values())
            assert cells[t - 1] == f"{people} / {resnet} / {'untrained' if untrained[t] else mine}", (margin, t)


def test_type_1_on_the_paper_headline_at_the_fixed_margin():
    """At the margin fixed in advance (0), ResNet-152 is hurt by seven conditions people are not
    shown to be hurt by; gestalt's adjacent-bars network by six of them, all but the title's
    position, whose change is below 0 on every seed; people are hurt only by bar lengths outside
    the trained range."""
    conditions = _study_expected()[1]
    resnet_only = {c for c, e in conditions.items() if e["resnet"][1] == "hurts" and e["human"][1] == "not shown"}
    assert len(resnet_only) == 7
    assert {c for c in resnet_only if conditions[c]["gestalt"] != "hurts"} == {"Title position"}
    assert max(conditions["Title position"]["delta"]) < 0
    assert {c for c, e in conditions.items() if e["human"][1] == "hurts"} == {"Bar length"}


def test_an_unknown_user_study_condition_is_named_with_its_line(tmp_path):
    path = tmp_path / "study.csv"
    path.write_text((MIRROR / "grape" / G.USER_STUDY).read_text().replace(",Bar width,", ",Bar height,", 1))
    with pytest.raises(SystemExit, match=r"study.csv:\d+: unknown user-study condition 'Bar height'"):
        G.user_study(path)
