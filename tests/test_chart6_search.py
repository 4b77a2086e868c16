"""The CHART-6 decoding search offline, through the real recipe path: a tiny random LLaVA and an
OpenAI-compatible local server answer VLAT in every cell of a sub-grid (temperature 0.5 / 1.0 at
top-p 1.0, top-p 0.5 at temperature 1.0).

The server's skill depends on the sampling setting it receives, so the winner is known by design:
at temperature 0.5 it misses one item; at (1.0, 1.0) it misses every other item; at top-p 0.5 it
answers only the first 10 items (all correctly) and gives no valid answer to the rest, so it wins
on valid-only accuracy but loses on accuracy with invalid counted wrong.
"""

import json

import mlflow
import pytest
import yaml

from tests.conftest import MIRROR, REPO
from tests.fake_vendor_server import FakeVendorServer
from tests.tiny_vlms import build_llava

TEMPERATURES, TOP_PS = (0.5, 1.0), (0.5, 1.0)
N_ANSWERED = 10  # items the server answers at top-p 0.5


def design(index: int, setting: tuple[float, float]) -> str:
    """'right', 'wrong' or 'invalid' for item ``index`` of VLAT under (temperature, top_p)."""
    if setting == (0.5, 1.0):
        return "wrong" if index == 0 else "right"
    if setting == (1.0, 1.0):
        return "right" if index % 2 == 0 else "wrong"
    return "right" if index < N_ANSWERED else "invalid"


@pytest.fixture(scope="module")
def vlat(sources):
    from harness.stimuli.registry import get_task

    return get_task("literacy.chart.vlat").build(sources)


def test_grid_is_the_papers_cross():
    from harness.readouts.chart6 import decoding_grid

    grid = decoding_grid()
    assert len(grid) == 9 and {"temperature": 1.0, "top_p": 1.0} in grid
    assert all(g["temperature"] == 1.0 or g["top_p"] == 1.0 for g in grid)
    assert decoding_grid(TEMPERATURES, TOP_PS) == [
        {"temperature": 0.5, "top_p": 1.0}, {"temperature": 1.0, "top_p": 1.0},
        {"temperature": 1.0, "top_p": 0.5}]


def test_decoding_search_offline(tmp_path, monkeypatch, vlat):
    from harness.models.base import fingerprint_hash
    from harness.models.registry import build_adapter
    from harness.readouts.chart6 import Chart6Readout
    from harness.recipes import load_recipe
    from harness.run import model_specs
    from harness.run_search import EXPERIMENT_SUFFIX, SEARCH_TASK, decoding_search, rank_rows
    from harness.trials.records import cache_key, validate

    monkeypatch.setenv("LOCAL_LLM_KEY", "sk-local")
    vlm = build_llava(tmp_path / "tiny-llava")
    api_generation = {"paper_model": "GPT-4V", "n_reps": 2, "max_new_tokens": 8}
    item_of = {Chart6Readout(vlat, **api_generation).item_prompt(s): (i, s) for i, s in enumerate(vlat.test)}
    server = FakeVendorServer(key="sk-local")

    def answer(prompt: str) -> str:
        i, s = item_of[prompt]
        body = server.requests[-1].body  # cells run one after another: every request shares a setting
        kind = design(i, (body["temperature"], body["top_p"]))
        wrong = next(o for o in s.meta["options"] if o != s.ground_truth)
        return {"right": s.ground_truth, "wrong": wrong, "invalid": "I cannot read this chart."}[kind]

    server.answer = answer
    recipe = {
        "name": "search", "tasks": ["chart6"],
        "models": [
            {"id": "tiny-llava", "source": "hf-vlm", "name": str(vlm), "family": "open-vlm",
             "batch_size": 64, "generation": {"n_reps": 1, "max_new_tokens": 4, "greedy": True}},
            {"id": "local-api", "source": "api", "name": "openai-compatible/local-1", "family": "api",
             "batch_size": 64, "generation": api_generation,
             "options": {"base_url": server.url + "/v1", "api_key_env": "LOCAL_LLM_KEY", "concurrency": 8}},
        ],
        "bootstrap": {"n_boot": 200},
        "runtime": {"progress": False, "device": "cpu"}, "data": {"mirror": str(MIRROR)},
        "tracking": {"uri": f"sqlite:///{tmp_path}/mlflow.db", "experiment": "chart6"},
        "output_dir": str(tmp_path / "out")}
    path = tmp_path / "search.yaml"
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    overrides = {"models.1.generation.n_reps": 1}  # command-line values reach every cell
    with server:
        rows = decoding_search(path, overrides, temperatures=TEMPERATURES, top_ps=TOP_PS, echo=lambda *_: None)

    cells = [(0.5, 1.0), (1.0, 1.0), (1.0, 0.5)]
    n = len(vlat.test)
    # every request carried its cell's sampling setting: 53 items x 1 presentation per cell
    sent = [(r.body["temperature"], r.body["top_p"]) for r in server.requests]
    assert sorted(set(sent)) == sorted(cells) and all(sent.count(c) == n for c in cells)

    assert len(rows) == 2 * len(cells)
    for model in ("tiny-llava", "local-api"):
        mine = [r for r in rows if r["model"] == model]
        assert sorted((r["temperature"], r["top_p"]) for r in mine) == sorted(cells)
        assert [r["accuracy_all"] for r in mine] == sorted((r["accuracy_all"] for r in mine), reverse=True)
        assert [r["best"] for r in mine] == [True, False, False]
        assert len({r["output_dir"] for r in mine}) == len(cells)

    api = {(r["temperature"], r["top_p"]): r for r in rows if r["model"] == "local-api"}
    for cell, row in api.items():
        kinds = [design(i, cell) for i in range(n)]
        assert row["accuracy_all"] == pytest.approx(kinds.count("right") / n)
        assert row["valid_rate"] == pytest.approx((n - kinds.count("invalid")) / n)
    best = next(r for r in rows if r["model"] == "local-api" and r["best"])
    assert (best["temperature"], best["top_p"]) == (0.5, 1.0)
    assert best["overrides"] == {"models.1.generation.temperature": 0.5, "models.1.generation.top_p": 1.0}
    again = rank_rows(rows, "accuracy_valid")
    assert len(again) == len(rows) and [r["model"] for r in again] == [r["model"] for r in rows]
    best_valid = next(r for r in again if r["model"] == "local-api" and r["best"])
    assert (best_valid["temperature"], best_valid["top_p"]) == (1.0, 0.5)
    assert best_valid["accuracy_valid"] == 1.0

    # the records of each cell carry its settings: their cache keys are recomputed from them
    specs = {s.id: s for s in model_specs(load_recipe(path, overrides))}
    keys_by_cell = {}
    answered: dict[str, bool] = {}
    for row in rows:
        spec = specs[row["model"]]
        fp = fingerprint_hash(build_adapter(spec).fingerprint)
        readout = Chart6Readout(vlat, **{**spec.options["generation"], "temperature": row["temperature"],
                                         "top_p": row["top_p"], "greedy": False})
        assert readout.options["temperature"] == row["temperature"] and readout.options["top_p"] == row["top_p"]
        file = tmp_path / row["output_dir"] / row["model"] / "records" / f"{SEARCH_TASK}.jsonl"
        recs = [validate(json.loads(x)) for x in file.read_text().splitlines()]
        assert len(recs) == n
        answered[row["model"]] = answered.get(row["model"], False) or any(
            r["parse_status"] == "ok" for r in recs)
        by_id = {s.stimulus_id: s for s in vlat.test}
        for rec in recs:
            assert rec["cache_key"] == cache_key(fp, by_id[rec["stimulus_id"]].sha256, vlat.prompt.hash,
                                                 readout.settings, rec["rep"])
        keys_by_cell[(row["model"], row["temperature"], row["top_p"])] = {r["cache_key"] for r in recs}
    for model in specs:
        sets = [keys_by_cell[(model, *c)] for c in cells]
        assert not (sets[0] & sets[1] or sets[0] & sets[2] or sets[1] & sets[2])

    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlflow.db")
    runs = mlflow.search_runs(experiment_names=["chart6" + EXPERIMENT_SUFFIX], output_format="list")
    assert len(runs) == 2 * len(cells)
    # a battery in which every trial is null (the random tiny VLM) ends FAILED, the others FINISHED
    assert all(r.info.status == ("FINISHED" if answered[r.info.run_name] else "FAILED") for r in runs)
    assert answered["local-api"]
    tagged = {(r.info.run_name, float(r.data.tags["gestalt.search.temperature"]),
               float(r.data.tags["gestalt.search.top_p"])) for r in runs}
    assert tagged == {(m, *c) for m in specs for c in cells}
    assert mlflow.get_experiment_by_name("chart6") is None  # the battery's own experiment is untouched


def test_search_rejects_unknown_metric(tmp_path):
    from harness.errors import GestaltError
    from harness.run_search import decoding_search, rank_rows

    with pytest.raises(GestaltError, match="accuracy_all"):
        decoding_search(tmp_path / "none.yaml", metric="accuracy")
    with pytest.raises(GestaltError, match="accuracy_valid"):
        rank_rows([], "valid_rate")
    with pytest.raises(GestaltError, match="runtime.processes: 1"):
        decoding_search(REPO / "recipes" / "chart6.yaml", {"runtime.processes": 2})


def test_format_table_names_each_winner():
    from harness.run_search import format_table, rank_rows

    def row(model, t, p, acc, cell):
        return {"model": model, "temperature": t, "top_p": p, "accuracy_all": acc, "accuracy_all_ci": [acc, acc],
                "accuracy_valid": float("nan"), "accuracy_valid_ci": None, "valid_rate": 0.5, "cell": cell,
                "overrides": {f"models.{model[-1]}.generation.temperature": t,
                              f"models.{model[-1]}.generation.top_p": p}}

    rows = rank_rows([row("m0", 1.0, 0.4, 0.2, 0), row("m0", 0.2, 1.0, 0.6, 1), row("m1", 1.0, 1.0, 0.3, 0)])
    text = format_table(rows)
    assert text.splitlines()[2].split()[:3] == ["m0", "0.2", "1"]
    assert "m0: --models.0.generation.temperature=0.2 --models.0.generation.top_p=1" in text
    assert "m1: --models.1.generation.temperature=1 --models.1.generation.top_p=1" in text
