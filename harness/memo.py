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
    """``key -> JSON value`` in ``<cache_dir>/<table>.json``; ``save()`` merges and writes atomically."""

    def __init__(self, table: str, folder: Path | None = None):
        self.path = (folder or cache_dir()) / f"{table}.json"
        self._data: dict[str, Any] | None = None
        self._new: dict[str, Any] = {}
        self._said = False

    @property
    def data(self) -> dict[str, Any]:
        if self._data is None:
            self._data = self._read()
        return self._data

    def seal(self, key: str, value: Any) -> str:
        """The checksum stored with ``value`` under ``key`` in this table."""
        return hashlib.sha256(json.dumps([self.path.stem, key, value], sort_keys=True).encode()).hexdigest()

    def _read(self) -> dict[str, Any]:
        """The entries whose value matches its key's checksum. Entries of a memo written before
        checksums (a bare value) are computed again without a word; a checksum that does not
        match is said once."""
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict):
            return {}
        sealed = {k: e for k, e in data.items() if isinstance(e, list) and len(e) == 2}
        trusted = {k: v for k, (v, check) in sealed.items() if check == self.seal(k, v)}
        if len(trusted) < len(sealed) and not self._said:
            self._said = True
            logging.getLogger("harness").warning(
                "%s: %d entries do not match the key they describe (changed or swapped): not trusted, "
                "computed again", self.path, len(sealed) - len(trusted))
        return trusted

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
            merged = {k: [v, self.seal(k, v)] for k, v in {**self._read(), **self._new}.items()}
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.")
            with os.fdopen(fd, "w") as f:
                json.dump(merged, f, separators=(",", ":"))
            os.replace(tmp, self.path)
            self._new = {}
        except OSError:
            pass
