"""The terminal's answer read without the docs: a legend under the rank groups names each shown
score in words and says what the bar spans; a censored value is marked in the score table as in
the runs table and the report; every surface formats a score by the one rounding rule."""

from dataclasses import replace

from harness.reports.terminal import BatteryResult, answer_lines, summary_table
from harness.scores.tasks import Bootstrap, family_of
from tests import test_answer_surfaces as A
from tests import test_reports as T

BOOT = Bootstrap(n_boot=200)


def results() -> list[BatteryResult]:
    """Two models on the synthetic battery; resnet-a's capacity censored below the tested range."""
    return [BatteryResult(model, "run", scores=A.censored_below(level)) for model, level in
            (("resnet-a", 0.2), ("vit-b", 0.6))]


def legend(lines: list[str]) -> list[str]:
    return lines[lines.index("legend:") + 1:]


def test_a_legend_under_the_rank_groups_names_every_shown_score():
    lines = answer_lines(results(), BOOT)
    assert "legend:" in lines and lines.index("legend:") > lines.index(
        next(ln for ln in lines if ln.startswith(T.SERIES)))  # under the groups
    terms: dict[str, str] = {}
    name = ""
    for ln in legend(lines):  # a name two families use (B) has a line per meaning: 'B (silhouette)'
        name = name if ln.startswith("   ") else ln.split()[0]  # an indented line continues the one above
        terms[name] = f"{terms.get(name, '')} {ln.strip()}"
    shown = {row.split()[2] for row in summary_table(results()).splitlines()[2:] if row.startswith(("resnet", "vit"))}
    assert {"B", "kappa", "capacity", "capacity_in_band", "accuracy"} <= shown
    assert shown <= set(terms), shown - set(terms)  # every score the table shows, in words
    assert "modal" in terms["B"] and "6-12" in terms["capacity_in_band"]
    assert "acc" in terms["accuracy"]  # its name in the runs table
    bar = terms["bar"]
    assert "floor" in bar and "human ceiling" in bar and "1" in bar
    assert "censored" in terms


def test_a_censored_value_is_marked_in_the_score_table():
    rows = [row for row in summary_table(results()).splitlines() if " capacity " in row]
    marked = [row for row in rows if row.startswith("resnet-a")]
    assert len(marked) == 1 and "1.0 [1.0, 1.0] censored below" in marked[0]
    assert not any("censored" in row for row in rows if row.startswith("vit-b"))


def test_the_runs_table_answer_uses_the_shared_rounding_rule():
    from harness.reports.summary import answer_text
    from harness.scores.ranking import number, value_interval

    scores = A.censored_below(0.6)[T.SIL]
    lead = family_of(T.SIL).lead_score(scores)
    assert lead is not None and answer_text(T.SIL, scores, "a") == f"{value_interval(lead)} a"
    no_interval = [replace(s, ci_low=None, ci_high=None) if s is lead else s for s in scores]
    assert answer_text(T.SIL, no_interval, "") == number(lead.value)
    series = A.censored_below(0.6)[T.SERIES]  # not ranked: its verdict, as the terminal prints it
    capacity, in_band = (next(s for s in series if s.name == n) for n in ("capacity", "capacity_in_band"))
    assert answer_text(T.SERIES, series, "") == (f"capacity {value_interval(capacity, 1)}; "
                                                  f"capacity_in_band {number(in_band.value, 0)}")
    censored = A.censored_below(0.2)[T.SERIES]
    assert answer_text(T.SERIES, censored, "").startswith("capacity 1.0 [1.0, 1.0] censored below; ")


def test_series_counting_is_not_ranked_but_judged_against_peoples_band():
    """People's capacity is a band, not an order: the terminal names why the task is not ranked
    and shows each model's capacity and whether it lies in the band, with no group letters."""
    lines = answer_lines(results(), BOOT)
    start = next(i for i, ln in enumerate(lines) if ln.startswith(T.SERIES))
    assert lines[start].startswith(f"{T.SERIES}: not ranked: ") and "6-12" in lines[start]
    assert "who counts best" in lines[start]
    block = lines[start + 1:start + 3]
    assert block[0].split()[:3] == ["-", "resnet-a", "capacity"] and "censored below" in block[0]
    assert block[1].split()[:3] == ["-", "vit-b", "capacity"] and "capacity_in_band " in block[1]
    assert not any(ln.lstrip().startswith("groups:") for ln in lines[start:start + 4])
    for ranked in (T.SIL, T.MARK):  # the other tasks are ranked as before
        head = next(i for i, ln in enumerate(lines) if ln.startswith(f"{ranked}  "))
        assert lines[head + 1].split()[0] in {"a", "b", "ab"}


def test_the_legend_says_what_each_task_s_intervals_resample():
    """The resampling unit is read where the interval is: one legend row per task naming, in the
    scores' own words, what its headline intervals redraw and which scores each unit belongs to."""
    redraws = "binomial redraws of the trials within each k at the level's accuracy, percentile interval"

    def method(s):
        unit = redraws if s.name == "capacity" else "percentile bootstrap over stimuli, 1000 draws"
        return replace(s, method=f"mean; {unit}; floor: best constant answer")

    given = [replace(r, scores={t: [method(s) for s in sc] for t, sc in r.scores.items()}) for r in results()]
    rows = legend(answer_lines(given, BOOT))
    at = next(i for i, ln in enumerate(rows) if ln.split()[:2] == ["95%", "CI"])
    units = {ln.replace("95% CI", "").split(":")[0].strip(): ln.split(": ", 1)[1] for ln in rows[at:]}
    assert set(units) == {"silhouette", "mark_color", "series_count"}
    assert units["silhouette"] == "over stimuli (accuracy, B, kappa, kappa_pairwise)"
    assert units["series_count"].endswith("redraws of the trials within each k (capacity)")
