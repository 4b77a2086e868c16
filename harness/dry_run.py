"""What a dry run prints: the plan with each task's trials, what is cached and what an API model's
calls would cost, then what stands before the recipe can run."""

from __future__ import annotations

from typing import Any

from .models.api_costs import Budget
from .models.base import fingerprint_hash
from .money import api_extractor, output_budget, spent_so_far
from .planning import Planned
from .preflight import left_out_lines
from .recipes import Recipe
from .stimuli.base import StimulusSet
from .trials.records import RecordStore
from .trials.runner import count_cached, trial_keys


def describe_plan(recipe: Recipe, planned: list[Planned], stimsets: dict[str, StimulusSet]) -> str:
    lines = [f"recipe {recipe.name} (sha256 {recipe.sha256[:12]}), seed {recipe.seed}, "
             f"{recipe.runtime.processes} process(es), output {recipe.out_dir}"]
    from .models.api import APIModel
    from .models.api_costs import Job, estimate_line, expected_output_tokens

    total_calls = total_cached = total_pending = 0
    for p in planned:
        lines.append(f"model {p.model.id} [{p.model.ref} weights={p.model.weights}]"
                     + (" NOT READY (listed below)" if p.missing else ""))
        if p.fit is not None:
            lines.append(f"  {p.fit.line()}")
        if p.unbuilt:
            lines.append(f"  {p.unbuilt}")
        api = p.adapter if isinstance(p.adapter, APIModel) else None
        jobs = []  # an API model's calls to run per task
        extracting: dict[str, tuple[Any, list]] = {}  # the same, of each API answer extractor
        for task, readout in p.tasks:
            s = stimsets[task.task_id]
            if s.unavailable:
                lines.append(f"  {task.task_id}: unavailable (listed below)")
                continue
            # a readout may multiply repetitions (every montage permutation x n_reps)
            n_reps = p.readouts[task.task_id].n_reps
            trials = len(s.test) * n_reps
            calls = trials if "generate" in p.adapter.capabilities else 0
            total_calls += calls
            lines.append(f"  {task.task_id}: readout {readout}, {len(s.test)} test x {n_reps} rep(s)"
                         f" = {trials} trials, probe-train {len(s.train)}"
                         + (f", {calls} generate calls" if calls else ""))
            if s.note:
                lines.append(f"    note: {s.note}")
            if p.missing and api is None:  # its fingerprint (and cached trials) is known once it resolves;
                continue  # an API model's needs no key, so its calls, tokens and cost are estimated
            keys = trial_keys(task.task_id, s, p.model.id, p.readouts[task.task_id],
                              fingerprint_hash(p.adapter.fingerprint))
            store = RecordStore(recipe.out_dir / p.model.id / "records" / f"{task.task_id}.jsonl")
            cached = count_cached(store, keys)
            total_cached, total_pending = total_cached + cached, total_pending + len(keys) - cached
            lines.append(f"    trials cached {cached}, to run {len(keys) - cached}")
            options = p.readouts[task.task_id].options
            answer_budget = output_budget(api, options) if api else int(options.get("max_new_tokens", 40))
            if api is not None and s.test:
                answered = [r for r in store.read() if keys.get(r["trial_id"]) == r.get("cache_key")] \
                    if store.path.exists() else []
                jobs.append(Job(len(keys) - cached, s.test[0].image.size, s.prompt.text if s.prompt else "",
                                answer_budget, expected_output_tokens(answered, [x.ground_truth for x in s.test],
                                                                      api.expected_thinking(answer_budget))))
            extractor = api_extractor(p.readouts[task.task_id])
            if extractor is not None and s.test:  # one text-only call per trial, the answer in its prompt
                from .readouts.extract import EXTRACTOR_SETTINGS, extraction_prompt

                meta = s.test[0].meta
                prompt = extraction_prompt(str(meta.get("question", "")), "x" * 4 * answer_budget,
                                           meta.get("options") or ())
                settings = options.get("extractor_settings") or EXTRACTOR_SETTINGS
                budget = int(extractor.options.get("max_tokens") or settings.get("max_new_tokens", 40))
                extracting.setdefault(extractor.spec.id, (extractor, []))[1].append(
                    Job(len(keys) - cached, None, prompt, budget,
                        expected_output_tokens([], [s.test[0].ground_truth], extractor.expected_thinking(budget))))
        if api is not None and jobs:
            if api.options.get("batch"):
                lines.append(f"  batch mode: each task's pending calls go to the {api.provider} batch "
                             f"interface as one batch (answers within 24 h), at batch prices")
            lines.append(estimate_line(api.provider, api.capability_model, jobs, batch=bool(api.options.get("batch"))))
        for extractor, ex_jobs in extracting.values():
            lines.append(f"  answer extractor {extractor.spec.id} ({extractor.provider}/{extractor.capability_model}),"
                         f" one call per trial, each answer at its output budget:")
            lines.append(estimate_line(extractor.provider, extractor.capability_model, ex_jobs))
    lines.append(f"total generate/API calls if nothing is cached: {total_calls}")
    lines.append(f"total trials cached {total_cached}, to run {total_pending}")
    if recipe.budget_usd is not None:  # what a run would start from, read from the same records
        lines.append(Budget(recipe.budget_usd, spent_so_far(recipe, planned, stimsets)).line())
    return "\n".join(lines)


def missing_block(planned: list[Planned], stimsets: dict[str, StimulusSet]) -> list[str]:
    """What a dry run lists after the plan: every model that cannot run yet (those a run leaves
    out apart), and the tasks a run reports unavailable (their data not here), each reason once."""
    lines = []
    missing = [p.missing for p in planned if p.missing and not p.not_ready]
    if missing:
        lines += [f"missing before this recipe can run ({len(missing)}):", *(f"  {m}" for m in missing)]
    lines += left_out_lines([p for p in planned if p.not_ready])
    unavailable = {t: s.unavailable for t, s in stimsets.items() if s.unavailable}
    if unavailable:
        lines += ["tasks a run reports unavailable (it goes on without them):",
                  *(f"  {t}: {why}" for t, why in unavailable.items())]
    return lines

