"""recipes/chart6.yaml: the CHART-6 battery on the paper's models that run here.

Hub weights are not cached offline, so the recipe is checked up to ``plan`` and the readout it
configures (prompts, decoding), not loaded; the search recipes derived from it are planned too."""

import re

import pytest

from harness.readouts.chart6 import MAX_NEW_TOKENS, N_PRESENTATIONS, PAPER_MODELS, Chart6Readout, decoding_grid
from harness.recipes import load_recipe
from harness.run import plan, readout_options
from harness.stimuli.registry import BATTERIES, get_task
from tests.conftest import REPO

CHART6 = REPO / "recipes" / "chart6.yaml"
PINNED = {"llava-hf/llava-1.5-7b-hf": "b234b804b114d9e37bb655e11cbbb5f5e971b7a9",
          "llava-hf/llava-1.5-13b-hf": "5dda2880bda009266dda7c4baff660b95ca64540"}


@pytest.fixture(scope="module")
def recipe():
    return load_recipe(CHART6)


@pytest.fixture(scope="module")
def vlat(sources):
    return get_task("literacy.chart.vlat").build(sources)


def test_plans_the_battery_on_every_model(recipe):
    planned = plan(recipe)
    assert [p.model.id for p in planned] == [m.id for m in recipe.models]
    for p in planned:
        assert [t.task_id for t, _ in p.tasks] == BATTERIES["chart6"]
        assert {r for _, r in p.tasks} == {"chart6"}
    assert {m.family for m in recipe.models} == {"open-vlm", "api"}
    hub = {m.name: m.revision for m in recipe.models if m.source == "hf-vlm"}
    assert hub == PINNED
    assert any(m.source == "api" for m in recipe.models)


def test_each_model_gets_the_papers_protocol(recipe, vlat):
    task = get_task("literacy.chart.vlat")
    for spec in (p.model for p in plan(recipe)):
        readout = Chart6Readout(vlat, **readout_options(recipe, spec, task))
        paper = PAPER_MODELS[spec.options["generation"]["paper_model"]]
        assert (readout.n_reps, readout.options["max_new_tokens"]) == (N_PRESENTATIONS, MAX_NEW_TOKENS) == (10, 270)
        # Table 2 decoding, sampled (not greedy)
        assert (readout.options["temperature"], readout.options["top_p"]) == (paper.temperature, paper.top_p)
        prompt = readout.item_prompt(vlat.test[0])
        if spec.source == "hf-vlm":
            # the chat template writes "USER: <image>\n ... ASSISTANT:"; the prompt must not repeat it
            assert paper.checkpoint == spec.name
            assert "USER" not in prompt and "ASSISTANT" not in prompt
            assert prompt.startswith("The first part of this study")
        else:
            assert prompt.startswith(paper.prefix) and prompt.endswith(paper.suffix)


def test_left_out_paper_models_are_explained():
    text = CHART6.read_text()
    comments = "\n".join(line for line in text.splitlines() if line.lstrip().startswith("#"))
    used = set(re.findall(r"paper_model: ([^,}]+)", text))
    assert used <= set(PAPER_MODELS)
    for name in set(PAPER_MODELS) - {u.strip() for u in used if u.strip() != "GPT-4V"}:
        family = re.split(r"-\d", name)[0]  # "Blip2-FlanT5-4B" and "-11B" are explained together
        assert family in comments, f"{name} is neither in the recipe nor explained in its comments"


def test_search_cells_plan_and_carry_their_setting(recipe):
    from harness.run_search import EXPERIMENT_SUFFIX, SEARCH_TASK, cell_recipe

    task = get_task(SEARCH_TASK)
    dirs = set()
    for setting in decoding_grid():
        cell = cell_recipe(recipe, setting)
        assert cell.tasks == [SEARCH_TASK] and cell.tracking.experiment == "chart6" + EXPERIMENT_SUFFIX
        for p in plan(cell):
            opts = readout_options(cell, p.model, task)
            assert (opts["temperature"], opts["top_p"], opts["greedy"]) == (
                setting["temperature"], setting["top_p"], False)
            assert opts["paper_model"] == p.model.options["generation"]["paper_model"]
        dirs.add(cell.out_dir)
    assert len(dirs) == len(decoding_grid()) == 9
    assert recipe.tasks == ["chart6"]  # the base recipe is left as it was
