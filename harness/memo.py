"""A small on-disk memo of values that are slow to compute and fully named by their key, so a
rerun with nothing to do costs nothing (the stimulus hashes of ``harness.stimuli.hashcache``,
the timm metadata an encoder's check and fingerprint read).

One JSON file per table under ``$GESTALT_CACHE`` (default ``~/.cache/gestalt/memo``). Every key
names everything its value depends on, so a table is never stale, only incomplete; a memo that
cannot be read or written is ignored (the value is computed as if it were absent).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def cache_dir() -> Path:
    return Path(os.environ.get("GESTALT_CACHE") or Path.home() / ".cache" / "gestalt" / "memo")


class Memo:
    """``key -> JSON value`` in ``<cache_dir>/<table>.json``; ``save()`` merges and writes atomically."""

    def __init__(self, table: str, folder: Path | None = None):
        self.path = (folder or cache_dir()) / f"{table}.json"
        self._data: dict[str, Any] | None = None
        self._new: dict[str, Any] = {}

    @property
    def data(self) -> dict[str, Any]:
        if self._data is None:
            self._data = self._read()
        return self._data

    def _read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def get(self, key: str, default: Any = None) -> Any:
        return self.data.get(key, default)

    def __contains__(self, key: str) -> bool:
        return key in self.data

    def set(self, key: str, value: Any) -> None:
        self.data[key] = value
        self._new[key] = value

    def save(self) -> None:
        """Write the values set since the last save, merged with what another process wrote."""
        if not self._new:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            merged = {**self._read(), **self._new}
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.")
            with os.fdopen(fd, "w") as f:
                json.dump(merged, f, separators=(",", ":"))
            os.replace(tmp, self.path)
            self._new = {}
        except OSError:
            pass
