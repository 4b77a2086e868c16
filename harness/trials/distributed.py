"""Data parallelism with accelerate: shard with padding, gather on every process, drop padding.

With one process (or no torch.distributed environment) everything is local and accelerate is not
even imported. ``launch`` starts N worker processes of the same command with the torch.distributed
environment accelerate reads (gloo on CPU, NCCL on GPUs), on 127.0.0.1 only.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from typing import Any
from collections.abc import Callable, Sequence


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
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"

    def barrier(self) -> None:
        if self._state:
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

    def close(self) -> None:
        if self._state is not None:
            import torch.distributed as td

            self.barrier()
            if td.is_initialized():
                td.destroy_process_group()
            self._state = None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(n: int, argv: list[str], device: str = "cpu") -> int:
    """Run ``python -m harness.cli <argv>`` in n processes; returns the first non-zero exit code."""
    port = _free_port()
    procs = []
    for rank in range(n):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                   LOCAL_RANK=str(rank), WORLD_SIZE=str(n), GESTALT_DEVICE=device,
                   OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
        procs.append(subprocess.Popen([sys.executable, "-m", "harness.cli", *argv], env=env))
    codes = [p.wait() for p in procs]
    return next((c for c in codes if c), 0)
