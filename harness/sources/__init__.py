"""Stage 1: pinned public releases, fetched by URL + sha256 or read from a verified mirror."""

from .releases import RELEASES, Release
from .store import DataError, Sources

__all__ = ["RELEASES", "Release", "DataError", "Sources"]
