"""Hub weights on a machine that may not reach the hub.

Whether a run uses the hub is found once, before any model loads: not where ``HF_HUB_OFFLINE``
or ``--offline`` (``GESTALT_OFFLINE``) says so, nor where a short TCP connect to the endpoint
(``HF_ENDPOINT``, or the proxy that reaches it) fails. Without it, every hub model must be in the
local cache at its pinned revision: one that is not is left out with its reason, naming the cache
folder looked in (``HF_HOME`` / ``HF_HUB_CACHE`` as this process resolves them) and the commit
the cache holds instead, if any; and the hub clients (huggingface_hub, hence transformers and
timm) read the cache only, so no load retries a download for minutes.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import sys
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from ..sources.store import offline
from .base import ModelAdapter, ModelError, ModelSpec

PROBE_TIMEOUT_S = 3.0  # a hub answers a connect within a second; a dropped one is given up after this
OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
_COMMIT = re.compile(r"[0-9a-f]{40}")

# the probe's answer per endpoint while a hub_session lasts (one run): asked once, however many
# times preflight, a dry run and the battery loop want it
_answers: dict[str, str | None] | None = None


def _true(name: str) -> bool:
    return os.environ.get(name, "").strip().upper() in ("1", "ON", "YES", "TRUE")  # huggingface_hub's reading


def endpoint() -> str:
    """The hub the clients ask: ``HF_ENDPOINT`` as the process has it now, else huggingface.co."""
    return (os.environ.get("HF_ENDPOINT") or _constants().ENDPOINT).rstrip("/")


def unreachable(url: str, timeout: float = PROBE_TIMEOUT_S) -> str | None:
    """Why a TCP connection to ``url``'s host, or to the proxy its scheme goes through, does not
    open within ``timeout``; None where it opens. Nothing is sent over it."""
    parts = urllib.parse.urlsplit(url)
    host, via = parts.hostname or "", ""
    proxy = urllib.request.getproxies().get(parts.scheme)
    if proxy and not urllib.request.proxy_bypass(host):
        p = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        target = (p.hostname or "", p.port or (443 if p.scheme == "https" else 80))
        via = f" through the proxy {target[0]}:{target[1]}"
    else:
        target = (host, parts.port or (443 if parts.scheme == "https" else 80))
    try:
        socket.create_connection(target, timeout=timeout).close()
    except TimeoutError:
        return f"{url}{via}: no answer within {timeout:g} s"
    except OSError as e:
        return f"{url}{via}: {e.strerror or e}"
    return None


def needs_hub(spec: ModelSpec) -> bool:
    """Whether a model's weights come from the hub (its cache or a download)."""
    if spec.source in ("hf", "hf-vlm"):
        return not Path(spec.name).is_dir()
    return spec.source == "timm" and spec.weights == "hub"


def hub_unused(specs: Iterable[ModelSpec]) -> str | None:
    """Why hub weights come only from the local cache, as a clause; None where no model needs
    the hub or it answers. The connect is tried once per :func:`hub_session`."""
    if not any(needs_hub(s) for s in specs):
        return None
    for name in OFFLINE_VARIABLES:
        if _true(name):
            return f"{name}=1 is set"
    if offline():
        return "--offline (GESTALT_OFFLINE=1) is set"
    url = endpoint()
    if _answers is not None and url in _answers:
        return _answers[url]
    why = unreachable(url)
    reason = None if why is None else f"the hub did not answer ({why})"
    if _answers is not None:
        _answers[url] = reason
    return reason


def read_cache_only() -> None:
    """The hub clients read the local cache and ask the hub nothing, until the
    :func:`hub_session` ends (the adapters' own checks read the variable, the clients the constant)."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    _constants().HF_HUB_OFFLINE = True


@contextlib.contextmanager
def hub_session() -> Iterator[None]:
    """One run: the hub probed at most once, and ``HF_HUB_OFFLINE`` (the variable and the hub
    clients' constant) as it was before, afterwards."""
    global _answers
    before = os.environ.get("HF_HUB_OFFLINE")
    constant = _constants().HF_HUB_OFFLINE if "huggingface_hub.constants" in sys.modules else None
    _answers = {}
    try:
        yield
    finally:
        _answers = None
        if before is None:
            os.environ.pop("HF_HUB_OFFLINE", None)
        else:
            os.environ["HF_HUB_OFFLINE"] = before
        if "huggingface_hub.constants" in sys.modules:  # imported before or during the run
            _constants().HF_HUB_OFFLINE = (constant if constant is not None else
                                           any(_true(n) for n in OFFLINE_VARIABLES))


def _constants() -> Any:
    """huggingface_hub's settings, read when asked (HF_HOME, HF_HUB_CACHE as this process has them)."""
    from huggingface_hub import constants

    return constants


def hub_repo(spec: ModelSpec) -> str | None:
    """The hub repository a hub model's weights come from; None where timm fetches them by URL."""
    if spec.source in ("hf", "hf-vlm"):
        return spec.name
    if hub_id := spec.options.get("hf_hub_id"):
        return str(hub_id)
    import timm

    return getattr(timm.models.get_pretrained_cfg(spec.name), "hf_hub_id", None) or None


def cache_folder() -> Path:
    """The hub cache the clients read (``HF_HUB_CACHE``, else ``HF_HOME``/hub), read now."""
    return Path(_constants().HF_HUB_CACHE)


def _repo_folder(repo: str) -> Path:
    return cache_folder() / f"models--{repo.replace('/', '--')}"


def cached_commit(repo: str, revision: str | None) -> str | None:
    """The commit the cache holds for ``revision`` (a commit, or a branch the cache has a ref
    of; None: main); None where it holds none."""
    folder = _repo_folder(repo)
    rev = revision or "main"
    if not _COMMIT.fullmatch(rev):
        ref = folder / "refs" / rev
        rev = ref.read_text().strip() if ref.is_file() else ""
    return rev if rev and (folder / "snapshots" / rev).is_dir() else None


def cached_commits(repo: str) -> list[str]:
    snapshots = _repo_folder(repo) / "snapshots"
    return sorted(p.name for p in snapshots.iterdir() if p.is_dir()) if snapshots.is_dir() else []


def not_cached(adapter: ModelAdapter, reason: str) -> str | None:
    """Why a hub model cannot run from the local cache when the hub is not used (``reason``), as
    what follows its name; None where its weight files are there at its revision, or its weights
    do not come from the hub."""
    spec = adapter.spec
    if not needs_hub(spec) or (repo := hub_repo(spec)) is None:
        return None
    commit = cached_commit(repo, spec.revision)
    if commit is not None and adapter.weight_files():
        return None
    where = f"the local Hugging Face cache {cache_folder()}"
    pinned = f"@{spec.revision}" if spec.revision else ""
    if commit is not None:
        what = f"{repo}@{commit[:12]} is in {where} without its weight files (a fetch cut short)"
    elif others := cached_commits(repo):
        what = (f"{repo} is in {where} at the wrong commit: {', '.join(c[:12] for c in others)}, "
                f"not {'the pinned revision ' + str(spec.revision) if spec.revision else 'main'}")
    else:
        what = f"{repo}{pinned} is not in {where}"
    return (f"{what}, and no download: {reason} (run `gestalt models fetch` where the hub answers, "
            f"with the same HF_HOME)")


def fetch_all(adapters: list[ModelAdapter], echo: Callable[[str], None] = print) -> int:
    """Each model's weights fetched into the local caches, one line each, whatever the hub client
    raised; where the hub is not used, a hub model is looked for in the cache instead. Returns how
    many were not fetched."""
    failed = 0
    with hub_session():
        if no_hub := hub_unused(a.spec for a in adapters):
            read_cache_only()
        for adapter in adapters:
            try:
                if no_hub and (absent := not_cached(adapter, no_hub)):
                    raise ModelError(absent)
                echo(adapter.fetch())
            except Exception as e:  # noqa: BLE001 - one line for this model, then the next
                failed += 1
                echo(f"{adapter.spec.id}: not fetched: {one_line(e)}")
    return failed


def one_line(e: BaseException, limit: int = 400) -> str:
    """An exception's first line (a hub client's error runs to a paragraph), with its type where
    the message alone would not say what failed."""
    first = next((line.strip() for line in str(e).splitlines() if line.strip()), "")
    text = first if isinstance(e, ModelError) else f"{type(e).__name__}: {first}".rstrip(": ")
    return text if len(text) <= limit else text[: limit - 3] + "..."
