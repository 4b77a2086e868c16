"""A small on-disk memo of values that are slow to compute and fully named by their key, so a
rerun with nothing to do costs nothing (the stimulus hashes of ``harness.stimuli.hashcache``,
the timm metadata an encoder's check and fingerprint read).

One JSON file per table under ``$GESTALT_CACHE`` (default ``~/.cache/gestalt/memo``). Every key
names everything its value depends on, so a table is never stale, only incomplete; a memo that
cannot be read or written is ignored (the value is computed as if it were absent). Each entry
is stored with a checksum binding its value to its key (:meth:`Memo.seal`): an entry whose value
was changed or swapped with another key's is not trusted (computed again, and said once).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any


def cache_dir() -> Path:
    return Path(os.environ.get("GESTALT_CACHE") or Path.home() / ".cache" / "gestalt" / "memo")


class Memo:
    """``key -> JSON value`` in ``<cache_dir>/<table>.json``; ``save()`` merges and writes atomically.

    An entry's checksum is checked when it is read, not when the table is loaded: a rerun reads a
    few hundred entries of a table that may hold the hashes of every chart a user ever drew."""

    def __init__(self, table: str, folder: Path | None = None):
        self.path = (folder or cache_dir()) / f"{table}.json"
        self._stored: dict[str, list] | None = None
        self._new: dict[str, Any] = {}
        self._untrusted: set[str] = set()

    def seal(self, key: str, value: Any) -> str:
        """The checksum stored with ``value`` under ``key`` in this table."""
        return hashlib.sha256(json.dumps([self.path.stem, key, value], sort_keys=True).encode()).hexdigest()

    def _read(self) -> dict[str, list]:
        """The stored ``[value, checksum]`` entries. Entries of a memo written before checksums (a
        bare value) are left out: computed again without a word."""
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict):
            return {}
        return {k: e for k, e in data.items() if isinstance(e, list) and len(e) == 2}

    def get(self, key: str, default: Any = None) -> Any:
        """The value under ``key`` where its checksum matches; an entry whose value was changed or
        swapped with another key's is not trusted (``default``: computed again), and counted for
        ``save`` to say."""
        if key in self._new:
            return self._new[key]
        if self._stored is None:
            self._stored = self._read()
        entry = self._stored.get(key)
        if entry is None:
            return default
        value, check = entry
        if check != self.seal(key, value):
            self._untrusted.add(key)
            return default
        return value

    def set(self, key: str, value: Any) -> None:
        self._new[key] = value

    def save(self) -> None:
        """Write the values set since the last save, merged with what another process wrote; say
        once how many entries read were not trusted."""
        if self._untrusted:
            logging.getLogger("harness").warning(
                "%s: %d entries do not match the key they describe (changed or swapped): not trusted, "
                "computed again", self.path, len(self._untrusted))
            self._untrusted = set()
        if not self._new:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            merged = {**self._read(), **{k: [v, self.seal(k, v)] for k, v in self._new.items()}}
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.")
            with os.fdopen(fd, "w") as f:
                json.dump(merged, f, separators=(",", ":"))
            os.replace(tmp, self.path)
            if self._stored is not None:
                self._stored.update((k, merged[k]) for k in self._new)
            self._new = {}
        except OSError:
            pass
