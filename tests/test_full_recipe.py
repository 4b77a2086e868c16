"""recipes/full.yaml, the paper's roster: strict schema, pinned hub revisions, family labels, a plan.

Hub weights are not cached offline, so the recipe is checked up to ``plan`` (adapter classes and
readouts), not loaded.
"""

import re

import pytest

from harness.models.api import PROVIDERS, split_name
from harness.recipes import load_recipe
from harness.run import plan
from harness.stimuli.registry import expand
from tests.conftest import REPO

FULL = REPO / "recipes" / "full.yaml"
FAMILIES = {"supervised", "self-supervised", "contrastive-vl", "open-vlm", "api"}
ENCODER_SOURCES = {"timm", "hf", "open_clip"}


def is_hub(entry) -> bool:
    return entry.source in ("hf", "hf-vlm") or (entry.source == "timm" and entry.weights == "hub")


def pinning_problems(recipe) -> list[str]:
    """Hub models without an exact commit: their weights could change under the same name."""
    return [f"{m.id}: hub model without revision" for m in recipe.models
            if is_hub(m) and m.revision is None]


@pytest.fixture(scope="module")
def recipe():
    return load_recipe(FULL)


def test_loads_strictly_at_the_papers_bootstrap(recipe):
    assert "extends" not in FULL.read_text()
    assert recipe.name == "full" and recipe.tasks == ["gestalt"]
    assert (recipe.bootstrap.n_boot, recipe.bootstrap.n_boot_kappa) == (1000, 2000)


def test_families_are_the_figures_labels_and_all_present(recipe):
    families = {m.family for m in recipe.models}
    assert families == FAMILIES, f"unexpected or missing families: {families ^ FAMILIES}"


def test_family_matches_source(recipe):
    for m in recipe.models:
        if m.family == "open-vlm":
            assert m.source == "hf-vlm", m.id
        elif m.family == "api":
            assert m.source == "api", m.id
        else:
            assert m.source in ENCODER_SOURCES, m.id


def test_every_hub_model_is_pinned(recipe):
    assert pinning_problems(recipe) == []


def test_an_unpinned_model_is_caught(tmp_path):
    text = FULL.read_text().replace(
        "tasks:\n", "  - id: extra\n    source: hf\n    name: org/extra\n    family: supervised\ntasks:\n", 1)
    path = tmp_path / "full.yaml"
    path.write_text(text)
    assert pinning_problems(load_recipe(path)) == ["extra: hub model without revision"]


def test_no_two_models_share_a_commit(recipe):
    pinned = [(m.name, m.revision) for m in recipe.models if m.revision]
    assert len({r for _, r in pinned}) == len(pinned), "two models share one commit hash"


def test_api_models_name_a_provider_and_an_output_budget_and_hold_no_key(recipe):
    api = [m for m in recipe.models if m.source == "api"]
    assert api
    for m in api:
        provider, model = split_name(m.name)
        assert provider in PROVIDERS and model, m.name
        assert int(m.generation["max_new_tokens"]) >= 40, m.id
        assert not any("key" in k for k in m.options), m.id
    assert not re.search(r"sk-[A-Za-z0-9]{8,}|AIza[0-9A-Za-z_-]{20,}", FULL.read_text())


def test_timm_hub_names_resolve_offline(recipe, monkeypatch):
    from harness.models.base import ModelSpec
    from harness.models.encoders import TimmEncoder

    # Names only: with HF_HUB_OFFLINE set, check() also (rightly) names hub weights absent from
    # the cache, which tests/test_cli_guesses.py covers; here the hub is taken as reachable.
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)

    for m in recipe.models:
        if m.source == "timm":
            TimmEncoder(ModelSpec(id=m.id, source=m.source, name=m.name, weights=m.weights,
                                  revision=m.revision)).check()


def test_plan_gives_every_model_a_readout_for_every_gestalt_task(recipe):
    planned = plan(recipe)
    tasks = expand(["gestalt"])
    assert [p.model.id for p in planned] == [m.id for m in recipe.models]
    for p in planned:
        assert [t.task_id for t, _ in p.tasks] == tasks
        capability = "embed" if p.model.source in ENCODER_SOURCES else "generate"
        assert all(readout == task.readouts[capability] for task, readout in p.tasks), p.model.id


def loader_kind(entry) -> str:
    """The code path a hub model loads through: timm, a transformers encoder, a contrastive tower
    (``get_image_features``: CLIP, SigLIP), or an open VLM's own processor and chat template."""
    if entry.source == "hf-vlm":
        return f"vlm {entry.name}"
    if entry.source == "hf":
        return "contrastive" if re.search(r"clip|siglip", entry.name, re.I) else "hf encoder"
    return entry.source


def test_loaders_recipe_is_one_full_entry_of_each_loader_kind(recipe):
    """recipes/loaders.yaml (what the image's rehearsal runs) holds full.yaml's own entries, so its
    pinned commits cannot drift from the roster's, and one of every loader kind full.yaml uses."""
    loaders = load_recipe(REPO / "recipes" / "loaders.yaml")
    full = {m.id: m for m in recipe.models}
    assert [m.id for m in loaders.models if m != full.get(m.id)] == []
    kinds = [loader_kind(m) for m in loaders.models]
    assert sorted(kinds) == sorted({loader_kind(m) for m in recipe.models if is_hub(m)})
    assert len(kinds) == 6 and loaders.tasks == recipe.tasks
