"""Docs that cannot drift: the README is a landing page every other page is found from, every
link resolves, every command it and the docs show is run by a test, its code runs, its batteries are the
registry's, and the pages that list tasks or published scores are generated or recomputed.

``python -m tests.test_docs`` rewrites docs/tasks.md from the task registry."""

import re
import subprocess
import sys
import types
import typing
from pathlib import Path

import pytest

from tests.conftest import MIRROR, REPO

README = REPO / "README.md"
PAGES = [README, REPO / "benchmarks" / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def links(page: Path) -> list[str]:
    return [t.split("#")[0] for t in LINK.findall(page.read_text()) if not re.match(r"\w+://|#|mailto:", t)]


def test_readme_is_a_landing_page():
    lines = README.read_text().splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines; move detail to docs/"
    headings = [line for line in lines if line.startswith("## ")]
    for wanted in ("## Batteries", "## Setup", "## Test", "## First run", "## Documentation"):
        assert wanted in headings, wanted


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_link_resolves(page):
    missing = [t for t in links(page) if not (page.parent / t).exists()]
    assert missing == [], f"{page.relative_to(REPO)} links to missing files: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_file_and_test_a_page_names_exists(page):
    """``harness/...py``, ``tests/...py`` and ``tests/x.py::test_name`` named in a page exist (but
    for the files the page itself writes, as docs/adding.md's example)."""
    text = page.read_text()
    created = set(re.findall(r"^ *# (\S+?)(?::|$)", text, re.MULTILINE))  # a file the page writes
    missing = [f for f in re.findall(r"\b((?:harness|tests|benchmarks|recipes|examples)/[\w/.-]+\.(?:py|yaml|json))\b",
                                     text) if not (REPO / f).exists() and f not in created]
    for path, name in re.findall(r"\b(tests/[\w/]+\.py)::(\w+)", text):
        if (REPO / path).exists() and not re.search(rf"^def {name}\(", (REPO / path).read_text(), re.MULTILINE):
            missing.append(f"{path}::{name}")
    assert missing == [], f"{page.relative_to(REPO)} names what does not exist: {missing}"


def test_every_docs_page_is_found_from_the_readme():
    seen, todo = set(), [README]
    while todo:
        page = todo.pop()
        for target in links(page):
            path = (page.parent / target).resolve()
            if path.suffix == ".md" and path.exists() and path not in seen:
                seen.add(path)
                todo.append(path)
    unreachable = [p.relative_to(REPO) for p in PAGES[1:] if p.resolve() not in seen]
    assert unreachable == []


def test_the_readme_batteries_are_the_registry_s():
    from harness.stimuli.registry import BATTERIES

    section = README.read_text().split("## Batteries", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([\w-]+)` \|", section, re.MULTILINE)
    assert sorted(rows) == sorted(BATTERIES)


# -- every command the README shows is run by a test ----------------------------------------------
# (a pattern of the command line) -> (the test file that runs it, what that file must contain)
# Each command a page shows -> (the file that runs it, fragments that file must still hold). Commands
# that need GPUs or API keys (the design card's full.yaml) are run by the tests in the form this
# machine allows: the same entry point, flags and mounts, on the quick recipe or as a dry run.
RUN_BY = {
    r"bash docker/install\.sh dev": (".ci/run", ["bash docker/install.sh dev"]),
    r"\.venv/bin/python -m pytest -q -ra": (".ci/run", [".venv/bin/python -m pytest -q -ra"]),
    r"\.venv/bin/python -m pytest -q -s tests/reliability(/test_kill_resume\.py)?$":
        (".ci/run", [".venv/bin/python -m pytest -q -ra"]),
    r"^gestalt recipe recipes/published-cnns\.yaml$": ("tests/test_cue_conflict.py", ['"recipes/published-cnns.yaml"']),
    r"^gestalt recipe recipes/texture-vs-shape\.yaml$": ("tests/test_docs.py", ['"texture-vs-shape.yaml"']),
    r"^gestalt recipe recipes/bars-quick\.yaml --task_options\.ratio\.chart\.grape_type1\.authors_test=\S+$":
        ("tests/test_bars_battery.py", ['"recipes/bars-quick.yaml"', "authors_test="]),
    r"export GESTALT_MIRROR=": ("tests/conftest.py", ["GESTALT_MIRROR"]),
    r"(\.venv/bin/)?gestalt recipe recipes/quick\.yaml$": ("tests/conftest.py", ['"recipes/quick.yaml"']),
    r"(\.venv/bin/)?gestalt recipe recipes/quick\.yaml --output_dir=\S+$":
        ("tests/conftest.py", ['"recipes/quick.yaml"', "--output_dir="]),
    r"(\.venv/bin/)?gestalt recipe recipes/quick\.yaml --dry-run --seed=\d+$":
        ("tests/test_end_to_end.py", ['"--dry-run", "--seed=3"']),
    r"(\.venv/bin/)?gestalt recipe recipes/quick\.yaml --runtime\.processes=2$":
        ("tests/test_end_to_end.py", ["def test_two_processes_give_the_same_records_as_one", "processes=n"]),
    r"(\.venv/bin/)?gestalt report --out report$": ("tests/test_reports.py", ["build_report("]),
    r"^gestalt recipe full\.yaml --dry-run$": ("tests/test_cli_guesses.py", ['"recipe", "full.yaml", "--dry-run"']),
    r"^gestalt ui( --verbose)?$": ("tests/test_mlflow_presentation.py", ["def test_ui_is_quiet_unless_verbose"]),
    r"^bash docker/build\.sh( --recipe recipes/quick\.yaml --tag \S+)?$":
        (".ci/run", ["bash docker/build.sh --recipe recipes/quick.yaml"]),
    r"^bash docker/build\.sh --hub \S+$": (".ci/run", ['--hub "$(cat "$hub/url")"']),
    r"^(docker|podman) run .*-v \"\$PWD:/workspace\" .*gestalt recipe full\.yaml":
        ("tests/test_image.py", ['"-v", f"{workspace}:/workspace"', 'run_image("recipe", "quick.yaml"']),
    r"gestalt recipe full\.yaml --runtime\.processes=8 --runtime\.device=cuda":
        ("tests/test_end_to_end.py", ["def test_two_processes_give_the_same_records_as_one", "processes=n"]),
    r"accelerate launch --multi_gpu --num_machines 2 --machine_rank R --main_process_ip HOST":
        ("tests/test_two_machines.py", ['"--num_machines", "2"', '"--machine_rank"', '"--main_process_ip"']),
    r"--num_processes 16 -m harness\.cli recipe full\.yaml": ("tests/test_two_machines.py", ['"--num_processes"']),
    r"gestalt recipe full\.yaml --shard=\$SLURM_ARRAY_TASK_ID/4": ("tests/test_shards.py", ["--shard="]),
    r"gestalt report --experiment=gestalt --out=report": ("tests/test_shards.py", ['"report"', "--experiment="]),
    r"^gestalt models fetch recipes/full\.yaml$": (
        "tests/test_full_rehearsal.py", ['"models", "fetch"', "HF_ENDPOINT="]),
    r"^gestalt recipe recipes/full\.yaml$": (
        "tests/test_full_rehearsal.py", ['"recipe", "recipes/full.yaml"', 'HF_HUB_OFFLINE="1"']),
}
COMMAND = re.compile(r"(export |bash |\.venv/|gestalt |accelerate |docker |podman |--\w)")


def commands(page: Path) -> list[str]:
    """The shell commands in a page's unlabelled or shell code blocks, continuation lines joined."""
    out = []
    for lang, body in FENCE.findall(page.read_text()):
        if lang not in ("", "bash", "sh", "shell", "console"):
            continue
        joined = ""
        for line in body.splitlines():
            part = line.split("  #", 1)[0].strip()
            joined += part.rstrip("\\").strip() + " " if part.endswith("\\") else part
            if part.endswith("\\"):
                continue
            command, joined = " ".join(joined.split()), ""
            command = re.sub(r"^(\w+=\S+ )+", "", command)  # the variables set for it alone
            if command and COMMAND.match(command):
                out.append(command)
    return out


def test_every_readme_command_is_run_by_a_test():
    assert len(commands(README)) >= 8


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_command_a_page_shows_is_run_by_a_test(page):
    for command in commands(page):
        matched = [p for p in RUN_BY if re.search(p, command)]
        assert matched, f"{page.name} shows {command!r}, which no test is known to run: add it to RUN_BY"
        for pattern in matched:
            path, fragments = RUN_BY[pattern]
            text = (REPO / path).read_text()
            absent = [f for f in fragments if f not in text]
            assert absent == [], f"{path} no longer runs {command!r} (missing {absent})"


def test_the_readme_python_runs_as_shown(tmp_path):
    """The README's own-model example, run as a file in an empty folder, as a user would."""
    [code] = [body for lang, body in FENCE.findall(README.read_text()) if lang == "python"]
    (tmp_path / "own_model.py").write_text(code)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "GESTALT_MIRROR": str(MIRROR.resolve()),
           "HF_HUB_OFFLINE": "1", "MPLBACKEND": "Agg", "GESTALT_CACHE": str(tmp_path / "memo"),
           "PYTHONPATH": str(REPO)}
    res = subprocess.run([sys.executable, "own_model.py"], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    row = re.search(r"mean-colour\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)", res.stdout)
    assert row, res.stdout
    value, low, high, floor, ceiling = map(float, row.groups())
    assert low <= value <= high and floor == pytest.approx(1 / 3, abs=1e-3) and ceiling == 0.863
    stated = re.search(r"B (\d\.\d{3}) \[(\d\.\d{3}), (\d\.\d{3})\]", README.read_text())
    assert stated and [float(x) for x in stated.groups()] == [round(value, 3), round(low, 3), round(high, 3)]


# -- docs/tasks.md, generated from the registry ----------------------------------------------------

def type_name(t) -> str:
    """An option's type as a reader writes it: ``int | None``, ``'split' | 'all'``, ``tuple[int, ...]``."""
    origin, args = typing.get_origin(t), typing.get_args(t)
    if origin is typing.Annotated:
        return type_name(args[0])
    if origin is typing.Literal:
        return " | ".join(repr(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_name(a) for a in args)
    if origin is not None:
        return f"{origin.__name__}[{', '.join('...' if a is Ellipsis else type_name(a) for a in args)}]"
    return "None" if t is type(None) else getattr(t, "__name__", str(t))


def tasks_page() -> str:
    from harness.stimuli.registry import BATTERIES, TASKS

    out = ["# Batteries and tasks", "",
           "Generated from the task registry (`harness/stimuli/registry.py`) and each builder's typed",
           "options by `python -m tests.test_docs`; `tests/test_docs.py` fails when it is out of date.",
           "A recipe sets a task's options under `task_options: {TASK_ID: {...}}`",
           "([running.md](running.md)); `TASK:VARIANT` runs a named variant.", ""]
    for battery, task_ids in BATTERIES.items():
        out += [f"## `{battery}`", "", "| task | what | scoring | readouts (capability: readout) | variants |",
                "| --- | --- | --- | --- | --- |"]
        for task_id in task_ids:
            spec = TASKS[task_id]
            readouts = ", ".join(f"{k}: `{v}`" for k, v in spec.readouts.items())
            variants = ", ".join(f"`{name}`" for name in spec.variants) or "-"
            out.append(f"| `{task_id}` | {spec.description} | `{spec.scoring}` | {readouts} | {variants} |")
        out.append("")
    out += ["## Task options", ""]
    for task_id, spec in TASKS.items():
        fields = spec.options_model().model_fields
        if not fields:
            out.append(f"- `{task_id}`: none")
            continue
        opts = []
        for name, field in fields.items():
            default = spec.defaults.get(name, field.default)
            about = f" ({field.description})" if field.description else ""
            opts.append(f"`{name}`: {type_name(field.annotation)} = `{default!r}`{about}")
        out.append(f"- `{task_id}`: " + "; ".join(opts))
    return "\n".join(out) + "\n"


def test_the_tasks_page_is_generated_from_the_registry():
    page = REPO / "docs" / "tasks.md"
    assert page.exists() and page.read_text() == tasks_page(), "run: .venv/bin/python -m tests.test_docs"


# -- score tables shown in the docs, recomputed -----------------------------------------------------

def shown_rows(block: str) -> dict[tuple[str, str, str], str]:
    """(model, task, score) -> "value [lo, hi] floor ceiling nulls" of a summary table's rows."""
    rows = [line.split() for line in block.strip().splitlines()
            if line.strip() and not line.startswith(("model ", "---")) and len(line.split()) >= 7]
    return {(r[0], r[1], r[2]): " ".join(r[3:]) for r in rows}


def rescore(shown, recipe_path: Path, tmp_path: Path, monkeypatch) -> None:
    """Score the shown models on the shown tasks as the recipe does; every shown cell must match."""
    import yaml

    import harness

    recipe = yaml.safe_load(recipe_path.read_text())
    models = [m for m in recipe["models"] if m["id"] in {model for model, _, _ in shown}]
    assert len(models) == len({model for model, _, _ in shown})
    monkeypatch.setenv("GESTALT_MIRROR", str(MIRROR))
    scores, _ = harness.evaluate(
        models=models, tasks=sorted({task for _, task, _ in shown}), seed=recipe.get("seed", 0),
        bootstrap=recipe.get("bootstrap", {}), output_dir=str(tmp_path / "out"),
        runtime={"progress": False, "device": "cpu"}, tracking={"enabled": False})

    def cell(x):
        return "-" if x is None or x != x else f"{x:.3f}"

    for (model, task, name), row in shown.items():
        s = scores[(scores.model == model) & (scores.task == task) & (scores.name == name)].iloc[0]
        ci = f" [{cell(s.ci_low)}, {cell(s.ci_high)}]" if s.ci_low is not None and s.ci_low == s.ci_low else ""
        assert row == (f"{cell(s.value)}{ci} {cell(s.floor)} {cell(s.ceiling)} "
                       f"{s.nulls}/{s.n + s.nulls}"), (model, task, name)


def test_the_published_networks_table_is_what_the_recipe_scores(tmp_path, monkeypatch):
    text = (REPO / "docs" / "models.md").read_text()
    table = text.split("`GESTALT_MIRROR=../shared/sources gestalt recipe recipes/published-cnns.yaml`", 1)[1]
    shown = shown_rows(table.split("```", 2)[1])
    assert len(shown) == 15 and {name for _, _, name in shown} == {"accuracy", "B", "kappa"}
    rescore(shown, REPO / "recipes" / "published-cnns.yaml", tmp_path, monkeypatch)


@pytest.mark.slow
def test_the_quick_recipe_excerpts_are_what_it_prints(quick_run):
    """The README's excerpts of recipes/quick.yaml (its score rows and its rank groups) and the
    longer one docs/methods.md reads are what the README's command prints."""
    done = quick_run.first
    printed = shown_rows(done.stdout.split("human references:")[0])

    first_run = README.read_text().split("## First run", 1)[1].split("\n## ", 1)[0]
    groups = next(body for lang, body in FENCE.findall(first_run) if body.startswith("rank groups"))
    answer = done.stdout[done.stdout.index("rank groups per task"):].splitlines()
    shown_lines = groups.strip().splitlines()
    assert len(shown_lines) >= 5
    at = 0
    for line in shown_lines:  # every shown line is printed, in the same order
        assert line in answer[at:], line
        at = answer.index(line, at) + 1

    shown = {}
    for text, section in ((README.read_text(), "## First run"), ((REPO / "docs" / "methods.md").read_text(), "## ")):
        body = text.split(section, 1)[1]
        excerpt = next(b for lang, b in FENCE.findall(body) if b.startswith("model "))
        rows = shown_rows(excerpt.split("human references:")[0])
        assert len(rows) >= 5
        shown.update(rows)
    assert {key: printed.get(key) for key in shown} == shown


@pytest.mark.slow
def test_the_texture_vs_shape_excerpt_is_what_its_recipe_prints(tmp_path):
    """`gestalt recipe recipes/texture-vs-shape.yaml` from a fresh folder (three encoders' forward
    passes on the CPU: minutes) prints every line of the README's excerpt, in its order."""
    import os

    env = dict(os.environ, HF_HUB_OFFLINE="1", GESTALT_MIRROR=str(MIRROR),
               MLFLOW_TRACKING_URI=f"sqlite:///{tmp_path}/mlflow.db")
    recipe = REPO / "recipes" / "texture-vs-shape.yaml"
    done = subprocess.run([sys.executable, "-m", "harness.cli", "recipe", str(recipe),
                           f"--output_dir={tmp_path / 'out'}"], cwd=tmp_path, capture_output=True, text=True,
                          env=env, timeout=3600)
    assert done.returncode == 0, done.stderr[-3000:]
    first_run = README.read_text().split("## First run", 1)[1].split("\n## ", 1)[0]
    excerpt = next(body for lang, body in FENCE.findall(first_run) if "shape_bias" in body)
    shown, printed = excerpt.strip().splitlines(), done.stdout.splitlines()
    assert len(shown) >= 7
    at = 0
    for line in shown:
        assert line in printed[at:], line
        at = printed.index(line, at) + 1


@pytest.mark.slow
def test_the_published_networks_figure_is_the_report_s(tmp_path, monkeypatch):
    """docs/figures/published-cnns-accuracy-vs-kappa.png is, byte for byte, the report's
    accuracy_vs_kappa.png after the recipe the README names: a change to the scores, the
    figure's drawing or the recipe that moves a pixel fails here until the figure is redrawn."""
    from harness.recipes import load_recipe
    from harness.reports.report import build_report
    from harness.run import run_recipe

    monkeypatch.setenv("GESTALT_MIRROR", str(MIRROR))
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    recipe = load_recipe(REPO / "recipes" / "published-cnns.yaml", {
        "output_dir": str(tmp_path / "out"), "tracking.uri": uri, "runtime.progress": False})
    run_recipe(recipe, echo=lambda *_: None)
    drawn = build_report(uri, recipe.tracking.experiment, tmp_path / "report")["accuracy_vs_kappa.png"]
    assert drawn.read_bytes() == (REPO / "docs" / "figures" / "published-cnns-accuracy-vs-kappa.png").read_bytes(), (
        "docs/figures/published-cnns-accuracy-vs-kappa.png is stale: run `gestalt recipe "
        "recipes/published-cnns.yaml`, then `gestalt report --out report`, and copy "
        "report/accuracy_vs_kappa.png over it")


if __name__ == "__main__":
    (REPO / "docs" / "tasks.md").write_text(tasks_page())
    print("wrote docs/tasks.md")


def test_readme_says_which_ceilings_are_people_agreeing_with_each_other():
    """"How well people agree with each other on the same trials" is true of the silhouettes'
    ceilings, not of the mark colours' B: that one is a cited THINGS test-retest figure, shown
    beside the task's own split-half."""
    text = " ".join(README.read_text().split())
    (sentence,) = [s for s in re.split(r"(?<=\.)\s+", text) if "the **ceiling**" in s]
    assert "silhouette" in sentence and "test-retest" in sentence and "THINGS" in sentence
    assert "0.863" in sentence and "0.718" in sentence


def test_counting_like_people_names_the_cited_band_and_gestalt_s_capacity():
    """The 6-12 band is the literature's; where accuracy crosses 50% is gestalt's definition of the
    capacity. Every page that says a model counts like people says both."""
    for page in PAGES:
        text = " ".join(page.read_text().split())
        for sentence in re.split(r"(?<=[.;])\s+", text):
            if "a model counts like people" in sentence:
                assert "cited" in sentence and "gestalt's" in sentence, (page.name, sentence)
