"""Everything that can fail before a run, checked before any MLflow run exists: local weights
files, every task's stimuli and readout settings, every model's name, key and memory; which models
run and which are left out until fixed, each named with its fix."""

from __future__ import annotations

import sys
from pathlib import Path

from .models.base import ModelError, NotReady
from .models.device import cpu_heap_wanted
from .models.hub_cache import hub_unused, not_cached, read_cache_only
from .models.loader_options import OptionRefused
from .models.memory import adapter_fit
from .models.weights import check_checkpoint
from .planning import Planned, build_readouts, build_stimsets, plan
from .recipes import Recipe, RecipeError
from .sources import Sources
from .stimuli.base import StimulusSet
from .stimuli.hashcache import prime as prime_hashes
from .stimuli.registry import expand


WEIGHT_FILES = (".pt", ".pth", ".bin", ".safetensors", ".ckpt")


def check_weights(recipe: Recipe) -> None:
    """A ``weights`` value that names a file (a path or a weights suffix) must be a checkpoint
    now (its header read), not when the battery loads the model inside its MLflow run."""
    for i, m in enumerate(recipe.models):
        w = m.weights
        if w and not w.startswith("pypi:") and ("/" in w or w.endswith(WEIGHT_FILES)):
            where = f"{recipe.where('models', i, 'weights')}: models.{i}.weights"
            path = Path(w).expanduser()
            if not path.exists():
                raise RecipeError(f"{where}: {w}: no such file")
            try:
                check_checkpoint(path)
            except ModelError as e:
                raise RecipeError(f"{where}: {e}") from None


def refuse_option(recipe: Recipe, e: ModelError) -> None:
    """A setting of a model entry that its loader refuses or never reads is bad input at its
    recipe line (exit 2), not a model this machine lacks."""
    if isinstance(e, OptionRefused):
        place: tuple[str | int, ...] = ("models", next(i for i, m in enumerate(recipe.models) if m.id == e.model_id),
                                        *e.key)
        raise RecipeError(f"{recipe.where(*place)}: {'.'.join(map(str, place))}: {e.what}") from None


def preflight(recipe: Recipe, *, list_missing: bool = False, run_code: bool = True
              ) -> tuple[list[Planned], dict[str, StimulusSet], Sources]:
    """Everything that can fail before a run. Models that cannot be resolved (an API key not set,
    hub weights not in the cache when the hub is not used, weights too big for the device) are all
    named together, in one error; with ``list_missing`` (a dry run, and a run that leaves out what
    cannot run yet) they are marked ``missing`` instead, for the plan to show them all;
    ``not_ready`` where only a fix on this machine is missing. Without ``run_code`` (a dry run),
    no code the recipe names runs (:func:`plan`). Where the hub is not used (:func:`hub_unused`),
    the hub clients read the cache only from here on (until the run's :func:`hub_session` ends)."""
    cpu_heap_wanted()  # a typo in $GESTALT_CPU_HEAP stops the run here, not at its first trial
    check_weights(recipe)
    planned = plan(recipe, run_code=run_code)
    sources = Sources(root=recipe.data.root, mirror=recipe.data.mirror)
    stimsets = build_stimsets(recipe, sources, expand(recipe.tasks))
    prime_hashes(stimsets.values())  # a rerun reads them: no stimulus drawn or PNG-encoded again
    build_readouts(recipe, planned, stimsets)
    if no_hub := hub_unused(p.model for p in planned):
        read_cache_only()
    for p in planned:
        try:
            if no_hub and (absent := not_cached(p.adapter, no_hub)):
                raise NotReady(f"model {p.model.id!r}: {absent}")
            p.adapter.check()  # resolves the name (and offline weights) without loading them
        except ModelError as e:
            refuse_option(recipe, e)
            p.missing, p.not_ready = str(e), isinstance(e, NotReady)
            continue
        p.fit = adapter_fit(p.adapter)  # weights that cannot fit are left out before any model loads
        if p.fit is not None and (refused := p.fit.refusal(p.model.id)):
            p.missing, p.not_ready = refused, True  # on a device with more memory it runs
            continue
        for task_id, readout in p.readouts.items():  # settings the model cannot take:
            if dropped := readout.preflight(p.adapter):  # refused, or dropped and logged
                p.settings_dropped[task_id] = dropped
    missing = [p.missing for p in planned if p.missing]
    if missing and not list_missing:
        raise ModelError("; ".join(missing))
    return planned, stimsets, sources


def runnable(planned: list[Planned]) -> tuple[list[Planned], list[Planned]]:
    """The models a run runs, and those it leaves out: they cannot run here yet (no API key, hub
    weights not in the cache when the hub is not used, weights too big for the device), each
    named with its fix. A model missing for any other reason (a wrong
    entry) is bad input: then every missing model is named, in one error, and nothing runs."""
    if any(p.missing and not p.not_ready for p in planned):
        raise ModelError("; ".join(p.missing for p in planned if p.missing))
    return [p for p in planned if not p.missing], [p for p in planned if p.missing]


def left_out_lines(left: list[Planned]) -> list[str]:
    """What a run says before any work of the models it leaves out, and a dry run after the plan."""
    if not left:
        return []
    return [f"left out until fixed ({len(left)}; the rest run, then a rerun adds their batteries):",
            *(f"  {p.missing}" for p in left)]


def verify_api_models(planned: list[Planned]) -> list[Planned]:
    """Each API model's key and name, asked of its vendor with one request that generates nothing,
    before any battery, whatever ``--offline`` says (it is about source data): a model whose key
    is refused, whose vendor does not answer or does not know it is left out with that reason, as
    one without a key is, and the rest run. Returns those left out."""
    api = sys.modules.get("harness.models.api")  # loaded with any API adapter: else none to check
    if api is None:  # (and httpx2, asyncio not imported for nothing)
        return []
    refused = []
    for p in planned:
        if isinstance(p.adapter, api.APIModel):
            try:
                p.adapter.verify()
            except ModelError as e:
                p.missing, p.not_ready = str(e), True
                refused.append(p)
    return refused

