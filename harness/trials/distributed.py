"""Data parallelism with accelerate: shard with padding, gather on every process, drop padding.

With one process (or no torch.distributed environment) everything is local and accelerate is not
even imported. ``launch`` starts N worker processes of the same command with the torch.distributed
environment accelerate reads (gloo on CPU, NCCL on GPUs), on 127.0.0.1 only.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from ..errors import ProcessLost
from ..exit_status import SIGTERM_DEADLINE_S, Exit
from ..models.device import auto_device as _auto_device  # one answer for placement and fingerprints
from ..own_files import open_own


RESUME = "records so far are kept, run the recipe again to resume"  # how every stopped run ends its line


class Interrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM; its message is the one line the user sees (no traceback)."""

    def __init__(self, message: str, exit_code: int = Exit.INTERRUPTED):
        super().__init__(message)
        self.exit_code = exit_code


_deadline: threading.Timer | None = None


def _on_sigterm(signum: int, frame: Any) -> None:
    global _deadline
    if _deadline is None:
        _deadline = threading.Timer(SIGTERM_DEADLINE_S, _end_now)
        _deadline.daemon = True
        _deadline.start()
    raise Interrupted("terminated (SIGTERM)", exit_code=Exit.TERMINATED)


def _end_now() -> None:
    """The process ended with 143 where stopping outlasts the grace: a forward pass that is one
    long kernel, a model's code that catches the stop, a lost signal, a slow tracking server. The
    records so far are kept (a line cut short is repaired by the rerun), and the rerun continues an
    MLflow run left RUNNING, as after a kill."""
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        print(f"gestalt: terminated (SIGTERM): not stopped within {SIGTERM_DEADLINE_S:g} s, ended there; {RESUME}",
              file=sys.stderr, flush=True)
    os._exit(Exit.TERMINATED)


@contextlib.contextmanager
def interrupts_as_exceptions() -> Iterator[None]:
    """SIGTERM raises like Ctrl-C (SIGINT), so ``finally``/``with`` blocks close the MLflow run
    FAILED instead of the process vanishing with it RUNNING; the process ends at the latest
    ``SIGTERM_DEADLINE_S`` after it (:func:`_end_now`)."""
    try:
        previous = signal.signal(signal.SIGTERM, _on_sigterm)
    except ValueError:  # not the main thread: signals cannot be handled here
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def file_lock(path: str | Path) -> Iterator[None]:
    """An exclusive lock between processes on one machine, or on several sharing a file system
    whose locks hold across them (NFSv4, Lustre mounted with ``-o flock``): flock on a sidecar file.

    The kernel drops it when the holder dies, even by SIGKILL, so a killed run never leaves a
    folder locked."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with os.fdopen(open_own(path, os.O_RDWR | os.O_CREAT)) as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


class Dist:
    def __init__(self):
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self._state = None
        if self.world > 1:
            from accelerate import PartialState

            self._state = PartialState(cpu=os.environ.get("GESTALT_DEVICE", "") == "cpu")
            self.world = self._state.num_processes

    @property
    def rank(self) -> int:
        return self._state.process_index if self._state else 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def device(self) -> str:
        if self._state is not None:
            return str(self._state.device)
        want = os.environ.get("GESTALT_DEVICE", "auto")
        if want != "auto":
            return want
        return _auto_device()

    @contextlib.contextmanager
    def _collective(self, step: str) -> Iterator[None]:
        """A step every process must take together. torch.distributed raises RuntimeError
        (DistBackendError among them) when a peer is gone: gloo when its socket closes, NCCL when
        the communicator is aborted; that becomes one line naming this process and the step."""
        try:
            yield
        except RuntimeError as e:
            # gloo's message starts with its source file; keep what it says happened
            first = next(iter(str(e).strip().splitlines()), "")
            said = re.sub(r"^\[[^\]]*\]\s*", "", first).split(". ")[0].rstrip(".")
            raise ProcessLost(f"process {self.rank} of {self.world}: another process of this run stopped "
                              f"during {step}" + (f" ({said})" if said else "")) from e

    def barrier(self) -> None:
        if self._state:
            with self._collective("a barrier"):
                self._state.wait_for_everyone()

    def shard(self, n: int) -> list[tuple[int, bool]]:
        """This process's item indices with a padding flag (padding repeats the last index so every
        process runs the same number of collective steps)."""
        if not self._state:
            return [(i, False) for i in range(n)]
        with self._state.split_between_processes(list(range(n)), apply_padding=True) as mine:
            seen: set[int] = set()
            out = []
            for i in mine:
                out.append((i, i in seen))
                seen.add(i)
            return out

    def gather(self, items: list[Any]) -> list[Any]:
        if not self._state:
            return list(items)
        from accelerate.utils import gather_object

        with self._collective("a gather"):
            return gather_object(list(items))

    def map(self, fn: Callable[[Sequence[Any]], Sequence[Any]], items: Sequence[Any]) -> list[Any]:
        """fn over this process's shard, results gathered in the original order on every process."""
        mine = self.shard(len(items))
        out = fn([items[i] for i, _ in mine]) if mine else []
        tagged = self.gather([(i, pad, r) for (i, pad), r in zip(mine, out)])
        result: dict[int, Any] = {}
        for i, pad, r in tagged:
            if not pad:
                result.setdefault(i, r)
        return [result[i] for i in range(len(items))]

    def close(self, finished: bool = True) -> None:
        """End the process group: after a barrier when this process finished its work, so none
        leaves while another still needs it; at once when it failed, since the others may be in
        any step (a barrier could pair with another collective, or wait for a process that is
        gone). Those still waiting on this one then fail with :class:`ProcessLost`."""
        if self._state is not None:
            import torch.distributed as td

            if finished:
                self.barrier()
            if td.is_initialized():
                td.destroy_process_group()
            self._state = None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


STOP_GRACE_S = 5.0  # how long stopped workers get to stop by themselves before the launcher signals them


def _pass_on(procs: list[subprocess.Popen], sig: signal.Signals) -> None:
    """Stop the workers once, each marking its run FAILED and saying so in one line. Ctrl-C in a
    terminal (or a scheduler's signal) reaches every process of the group: they get a moment to
    stop by themselves, as a second signal would cut their own stopping short. Those still
    running after it (the launcher alone was signalled: ``kill``, a container's stop) get the
    launcher's signal."""
    deadline = time.monotonic() + STOP_GRACE_S
    for p in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.poll() is None:
            p.send_signal(sig)
    for p in procs:
        p.wait()


def launch(n: int, argv: list[str], device: str = "cpu") -> int:
    """Run ``python -m harness.cli <argv>`` in n processes; returns the first non-zero exit code,
    or, where a process was killed by a signal (the cause of its peers' failures), 128 + that
    signal's number, as a shell reports it, after one line naming the process and the signal.
    Interrupted (Ctrl-C, SIGTERM), it stops the workers (:func:`_pass_on`) and raises."""
    port = _free_port()
    procs = []
    for rank in range(n):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                   LOCAL_RANK=str(rank), WORLD_SIZE=str(n), GESTALT_DEVICE=device,
                   OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
        procs.append(subprocess.Popen([sys.executable, "-m", "harness.cli", *argv], env=env))
    try:
        with interrupts_as_exceptions():
            codes = [p.wait() for p in procs]
    except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM (interrupts_as_exceptions)
        terminated = isinstance(e, Interrupted) and e.exit_code == Exit.TERMINATED
        _pass_on(procs, signal.SIGTERM if terminated else signal.SIGINT)
        raise
    killed = [(rank, -code) for rank, code in enumerate(codes) if code < 0]
    for rank, signum in killed:
        try:
            name = signal.Signals(signum).name
        except ValueError:
            name = f"signal {signum}"
        why = " (the kernel's out-of-memory killer sends it)" if signum == signal.SIGKILL else ""
        print(f"gestalt: error: process {rank} of {n} was killed by {name}{why}; {RESUME}", file=sys.stderr)
    if killed:
        return 128 + killed[0][1]
    return next((c for c in codes if c), 0)
