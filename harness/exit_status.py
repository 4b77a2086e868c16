"""`gestalt recipe`'s exit statuses, one meaning each, defined once here: `gestalt recipe --help`
prints this table and docs/clusters.md holds it as markdown (a test compares the two), so what a
scheduler is told to do with a status is what the code returns it for."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from enum import IntEnum


class Exit(IntEnum):
    DONE = 0
    RERUN_FIXES = 1
    BAD_INPUT = 2
    PARTLY_RAN = 3
    NOTHING_RAN = 4
    NEEDS_CHANGE = 5
    INTERRUPTED = 130  # Ctrl-C, as a shell reports SIGINT
    TERMINATED = 143  # SIGTERM, as a shell reports it


# After SIGTERM a scheduler waits this long before SIGKILL (SLURM's KillWait, Kubernetes'
# terminationGracePeriodSeconds: 30 s by default); a job it kills ends 137, which a rule that
# requeues 143 misses. A stopping run ends its process by then, with 143, whatever it waits on.
SIGTERM_DEADLINE_S = 20.0


@dataclass(frozen=True)
class Row:
    statuses: tuple[Exit, ...]
    meaning: str
    action: str

    @property
    def label(self) -> str:
        return " / ".join(str(int(s)) for s in self.statuses)


TABLE = (
    Row((Exit.DONE,), "every battery finished (or was already up to date)", "nothing"),
    Row((Exit.RERUN_FIXES,),
        "a failure a rerun can fix: a process of the run, the tracking server or a writable output "
        "folder was lost, calls failed for the vendor's own reasons (server errors, timeouts, rate "
        "limits), a local model's forward pass or training raised (a missing device, out of memory) "
        "or the API credit ran out; the records written so far are kept",
        "requeue it (once credit is added, where the line says so): the rerun continues the same "
        "MLflow runs and computes only the missing trials"),
    Row((Exit.BAD_INPUT,), "bad input: recipe, data file, model name, weights, option; nothing was started",
        "fix what the one line names"),
    Row((Exit.PARTLY_RAN,),
        "partly ran: at least one battery finished; the models that cannot run on this machine yet "
        "(no API key or one its vendor refused, a vendor that did not answer, hub weights not in the "
        "cache where the hub is not used, weights too big for the device) were left out, each named "
        "with its fix before any work and again in the last line (`gestalt: incomplete: ...`)",
        "do **not** requeue it as it is (it would end 3 again): apply the fixes (set the key, "
        "`gestalt models fetch`, a device with the memory named), then run it again: the rerun adds "
        "exactly the missing batteries to the same experiment"),
    Row((Exit.NOTHING_RAN,),
        "nothing could run here: every model was left out as for 3 (the last line names each with its "
        "fix, and the hub cache folder it looked in), so no battery ran",
        "do **not** requeue it as it is: give this machine what the models need (the keys, the hub "
        "cache: `HF_HOME`), or run it where they are"),
    Row((Exit.NEEDS_CHANGE,),
        "a failure a rerun cannot fix without a change: a battery's every answer was null (unparseable, "
        "or a model the vendor does not serve), its API key was refused during it, or the recipe's `budget_usd` "
        "was spent; its run is marked FAILED",
        "do **not** requeue it: change what the line names (the model or its answer rule, the key, the "
        "budget), then run it again"),
    Row((Exit.INTERRUPTED, Exit.TERMINATED),
        f"interrupted (Ctrl-C / SIGTERM, e.g. a scheduler's time limit; after SIGTERM the job ends within "
        f"{SIGTERM_DEADLINE_S:g} s); the records written so far are kept",
        "requeue it, as for 1 (a `cnn` training resumes after its last finished epoch)"),
)

# When a run ends with several of these at once, the first that applies is its status: a battery
# that needs a change must stop the requeueing even when another battery's failure would invite it,
# and any failure outranks models left out, which are said in the last line either way.
PRECEDENCE = (Exit.NEEDS_CHANGE, Exit.RERUN_FIXES, Exit.NOTHING_RAN, Exit.PARTLY_RAN, Exit.DONE)
PRECEDENCE_LINE = ("When several apply, the first of " + " > ".join(str(int(s)) for s in PRECEDENCE)
                   + " is the status; 2, 130 and 143 end the job at once.")


def recipe_exit(*, finished: int, left_out: int, rerun_fixes: int, needs_change: int) -> Exit:
    """The status of a recipe that ran its batteries to the end: counts of batteries finished (or
    up to date), models left out, and FAILED batteries a rerun fixes or that need a change."""
    applies = {Exit.NEEDS_CHANGE: needs_change > 0, Exit.RERUN_FIXES: rerun_fixes > 0,
               Exit.NOTHING_RAN: left_out > 0 and finished == 0, Exit.PARTLY_RAN: left_out > 0,
               Exit.DONE: True}
    return next(s for s in PRECEDENCE if applies[s])


def markdown() -> str:
    """The table as docs/clusters.md holds it, with the precedence below it."""
    lines = ["| status | meaning | what to do |", "| --- | --- | --- |"]
    lines += [f"| {r.label} | {r.meaning} | {r.action} |" for r in TABLE]
    return "\n".join([*lines, "", PRECEDENCE_LINE])


def help_text(width: int = 100) -> str:
    """The table for `gestalt recipe --help`: each status, what it means, what to do."""
    lines = ["exit statuses:"]
    for r in TABLE:
        text = f"{r.meaning}. To do: {r.action.replace('**', '')}."
        lines += textwrap.wrap(text, width, initial_indent=f"  {r.label:<9} ", subsequent_indent=" " * 12)
    return "\n".join([*lines, *textwrap.wrap(PRECEDENCE_LINE, width, initial_indent="  ",
                                             subsequent_indent="  ")])
