"""Vendor batch interfaces: ``options: {batch: true}`` sends a battery's pending trials as one batch
at the vendor's batch price (``prices.csv``'s batch columns), waits for it, and answers each trial
from its result.

- ``openai``: the JSONL of requests uploaded (``POST /files``, purpose ``batch``), then
  ``POST /batches`` (endpoint ``/v1/chat/completions``, window 24 h), polled with
  ``GET /batches/<id>``; answers from ``GET /files/<output_file_id>/content`` and failures from the
  error file.
- ``anthropic``: Message Batches, ``POST /v1/messages/batches``, polled with
  ``GET /v1/messages/batches/<id>``; answers from its ``results_url`` (JSONL).
- ``google``: Gemini batch mode, ``POST /v1beta/models/<model>:batchGenerateContent`` with the
  requests inline, polled with ``GET /v1beta/batches/<id>``, whose output holds the answers. An
  inline batch must be under 20 MB: a larger set of requests goes as several batches, each cut by
  its serialized size; a request over the cap alone is not sent (a rejected request naming its trial).

Each request is exactly the one the synchronous call would send; its ``custom_id`` (Gemini: the
``metadata.key``) is the trial id, or where the vendor restricts the characters (Anthropic) a
digest of it. Before submitting, ``records/<task>.batch.json`` is written with the requests'
digests and the requests of each batch; each batch's id is added the moment the vendor returns it.
A rerun that finds the file polls those batches again and never submits another; one that finds a
submission without an id (the process ended while the vendor was answering it) stops, naming the
file, rather than risk paying twice. The file is removed once every answer is recorded.

A trial the batch did not answer (an errored, expired or cancelled item, the whole batch failing,
or a trial pending but not in the stored batch: the recipe changed after submission) is a failed
call (``null:api_error:<code>``) and a rerun sends it again, in a new batch; an item the vendor
rejected as a request (a 400) is final, as a synchronous one would be. Records answered
by a batch carry ``usage['batch']`` (and, where the readout keeps the model's extras, the batch id
in ``extras['batch']``) and are priced at batch rates.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import time
import urllib.parse
import uuid
from collections import defaultdict, deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx2
from PIL import Image

from ..own_files import write_own
from .api import APIModel
from .api_anthropic import ANTHROPIC_ERROR_STATUS
from .api_capabilities import RequestPlan
from .api_transport import VENDOR_SAID, Retryable, Terminal, refused_for_money
from .base import Generation, ModelError

log = logging.getLogger(__name__)

# ai.google.dev/gemini-api/docs/batch-mode: inline requests keep "the total request size under 20MB"
# (read as 20e6 bytes, the lower of its two readings); a larger battery goes as several batches.
GOOGLE_INLINE_BYTES = 20_000_000
POLL_S = 60.0  # between status requests (options.batch_poll_s); batches take minutes to hours
OPENAI_ENDED = {"completed", "failed", "expired", "cancelled"}
GOOGLE_ENDED = {"BATCH_STATE_SUCCEEDED", "BATCH_STATE_FAILED", "BATCH_STATE_CANCELLED", "BATCH_STATE_EXPIRED",
                "JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED", "JOB_STATE_EXPIRED"}
ANTHROPIC_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")  # anthropic.types.messages.batch_create_params
# An errored item's vendor error as the status a synchronous call would have got, so failed_call
# tells a rejected request (final) from a failure (sent again).
GOOGLE_ERRORS: dict[Any, str] = {3: "http_400", 5: "http_404", 7: "http_403", 8: "http_429", 13: "http_500",
                                  14: "http_503", 4: "timeout", 16: "http_401"}  # google.rpc.Code


def request_digest(body: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


class BatchJob:
    """One battery's batch for one API model: collects the requests, submits them once, waits for
    the batch to end and answers each request from its result."""

    def __init__(self, model: APIModel, state_path: Path, echo: Callable[[str], None] = log.info):
        self.model = model
        self.path = state_path
        self.echo = echo
        self.state: dict[str, Any] = json.loads(state_path.read_text()) if state_path.exists() else {}
        self._expected: deque[str] = deque()
        self._requests: dict[str, tuple[str, dict[str, Any]]] = {}  # custom id -> (digest, body)
        self._answers: dict[str, deque[Generation]] = defaultdict(deque)  # digest -> results

    @property
    def submitted(self) -> bool:
        """Whether a submission was started (the rerun of a killed process polls, never resubmits)."""
        return bool(self.state)

    # -- collecting --------------------------------------------------------------------------
    def expect(self, trial_ids: Sequence[str]) -> None:
        """The trials whose requests the readout builds next, in order."""
        self._expected.extend(trial_ids)

    def collector(self) -> Any:
        """The model as the readout sees it while the requests are gathered (duck-typed adapter)."""
        return _Collector(self)

    def _custom_id(self, trial: str) -> str:
        if self.model.provider != "anthropic" or ANTHROPIC_ID.match(trial):
            return trial
        return "t" + hashlib.sha256(trial.encode()).hexdigest()[:40]

    def _collect(self, images: Sequence[Image.Image | None], prompts: list[str],
                 settings: dict[str, Any]) -> list[Generation]:
        plan = self.model.plan(settings)
        for image, prompt in zip(images, prompts):
            _, _, body = self.model._request(image, prompt, plan)
            trial = self._expected.popleft() if self._expected else request_digest(body)
            self._requests[self._custom_id(trial)] = (request_digest(body), body)
        return [Generation(text=None, error="batch_pending: collected") for _ in images]

    # -- submitting --------------------------------------------------------------------------
    def _save(self) -> None:
        write_own(self.path, json.dumps(self.state, indent=1, sort_keys=True))

    def submit(self) -> None:
        """Send the collected requests as one batch, or for Gemini as several inline batches each under
        its 20 MB cap; the state file holds each batch's id before this returns."""
        if not self._requests:
            return
        m = self.model
        nonce = uuid.uuid4().hex
        parts, rejected = self._parts(f"gestalt-{nonce}-{len(self._requests)}")  # the longest name
        self.state = {"provider": m.provider, "model": m.model, "nonce": nonce, "rejected": rejected,
                      "submitted_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                      "requests": {cid: digest for cid, (digest, _) in self._requests.items()},
                      "batches": [{"id": None, "requests": part} for part in parts]}
        self._save()
        for why in rejected.values():
            self.echo(f"{m.spec.id}: not sent: {why.removeprefix('request: ')}")
        for i, batch in enumerate(self.state["batches"]):
            try:
                batch["id"] = {"openai": self._submit_openai, "anthropic": self._submit_anthropic,
                               "google": self._submit_google}[m.provider](self._name(i), batch["requests"])
            except (Terminal, Retryable) as e:
                answered = isinstance(e, Terminal) or e.code.startswith("http_")  # no batch exists
                if answered:
                    del self.state["batches"][i:]
                else:  # this one may exist; those after it were never sent
                    del self.state["batches"][i + 1:]
                if not self.state["batches"]:
                    self.path.unlink()
                else:  # the batches sent stay: the rerun polls them, the trials of the others are failed calls
                    self._save()
                what = "refused" if isinstance(e, Terminal) else "failed"
                raise ModelError(f"model {m.spec.id!r}: the batch submission was {what} ({e.code}: {e.detail}); "
                                 f"{self._unknown_hint(answered)}") from None
            self._save()
            self.echo(f"{m.spec.id}: submitted batch {batch['id']} ({len(batch['requests'])} requests, "
                      f"{m.provider} batch prices); its id is kept in {self.path}")

    def _parts(self, name: str) -> tuple[list[list[str]], dict[str, str]]:
        """The custom ids of each batch to submit, and the requests refused before sending (with
        their error): one batch, except Gemini's inline ones, cut where the next request would take
        the serialized body over the cap, and none holding a request that alone is over it."""
        if self.model.provider != "google":
            return [list(self._requests)], {}
        parts: list[list[str]] = [[]]
        rejected: dict[str, str] = {}
        empty = len(self._google_body(name, []))
        size = empty
        for cid, (_, body) in self._requests.items():
            item = len(json.dumps(self._google_item(cid, body)))
            if empty + item > GOOGLE_INLINE_BYTES:
                rejected[cid] = (f"request: the request for trial {cid} is {item / 1e6:.1f} MB, over Gemini's "
                                 f"{GOOGLE_INLINE_BYTES / 1e6:.0f} MB cap on an inline batch")
                continue
            if parts[-1] and size + len(", ") + item > GOOGLE_INLINE_BYTES:
                parts.append([])
                size = empty
            size += item + (len(", ") if parts[-1] else 0)
            parts[-1].append(cid)
        return [p for p in parts if p], rejected

    def _unknown_hint(self, answered: bool) -> str:
        if not self.path.exists():
            return "nothing was submitted; a rerun submits again"
        if answered:
            return (f"the batches submitted before it are kept in {self.path}: a rerun polls them, and the run "
                    f"after it sends the rest")
        return (f"whether the vendor created the batch is unknown, so {self.path} stays and a rerun "
                f"stops until it is resolved")

    def _json_post(self, url: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.model._send("POST", url, {"content-type": "application/json", **self.model._headers()},
                                json.dumps(body).encode())

    def _submit_openai(self, name: str, cids: list[str]) -> str:
        m = self.model
        nonce = self.state["nonce"]
        lines = "".join(json.dumps({"custom_id": cid, "method": "POST", "url": "/v1/chat/completions",
                                    "body": self._requests[cid][1]}) + "\n" for cid in cids)
        boundary = f"gestalt-{nonce}"
        form = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n"
                f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{nonce}.jsonl\"\r\n"
                f"Content-Type: application/jsonl\r\n\r\n{lines}\r\n--{boundary}--\r\n").encode()
        file = m._send("POST", f"{m.base_url}/files",
                       {"content-type": f"multipart/form-data; boundary={boundary}", **m._headers()}, form)
        batch = self._json_post(f"{m.base_url}/batches", {
            "input_file_id": file["id"], "endpoint": "/v1/chat/completions", "completion_window": "24h",
            "metadata": {"gestalt_batch": nonce}})
        return str(batch["id"])

    def _submit_anthropic(self, name: str, cids: list[str]) -> str:
        batch = self._json_post(f"{self.model.base_url}/v1/messages/batches", {"requests": [
            {"custom_id": cid, "params": self._requests[cid][1]} for cid in cids]})
        return str(batch["id"])

    @staticmethod
    def _google_item(cid: str, body: dict[str, Any]) -> dict[str, Any]:
        return {"request": body, "metadata": {"key": cid}}

    def _google_body(self, name: str, cids: list[str]) -> bytes:
        """The serialized batchGenerateContent body (measured against the inline cap as sent)."""
        return json.dumps({"batch": {"displayName": name, "inputConfig": {"requests": {"requests": [
            self._google_item(cid, self._requests[cid][1]) for cid in cids]}}}}).encode()

    def _submit_google(self, name: str, cids: list[str]) -> str:
        m = self.model
        model = urllib.parse.quote(m.model, safe=".-_")
        op = m._send("POST", f"{m.base_url}/v1beta/models/{model}:batchGenerateContent",
                     {"content-type": "application/json", **m._headers()}, self._google_body(name, cids))
        return str(op["name"])  # batches/<id>

    # -- waiting and answering ---------------------------------------------------------------
    def wait(self) -> None:
        """Poll each stored batch until it ends, then read every item's answer."""
        m = self.model
        if not self.state:  # nothing was collected, so nothing was sent
            return
        for i, batch in enumerate(self.state["batches"]):
            if not batch["id"]:
                raise ModelError(
                    f"model {m.spec.id!r}: {self.path} records a batch submission that ended before the vendor "
                    f"returned its id; look for it in the vendor's batch list (OpenAI metadata gestalt_batch "
                    f"{self.state['nonce']} / Gemini display name {self._name(i)}) and write its id as that "
                    f"batch's id in the file, or delete the file to submit again")
        for cid, why in self.state["rejected"].items():
            self._answers[self.state["requests"][cid]].append(Generation(text=None, error=why))
        for batch in self.state["batches"]:
            self._wait_one(batch["id"], batch["requests"])

    def _name(self, i: int) -> str:
        return f"gestalt-{self.state['nonce']}-{i}"

    def _wait_one(self, batch_id: str, cids: list[str]) -> None:
        m = self.model
        poll_s = float(m.options.get("batch_poll_s", POLL_S))
        status_url = {"openai": f"{m.base_url}/batches/{batch_id}",
                      "anthropic": f"{m.base_url}/v1/messages/batches/{batch_id}",
                      "google": f"{m.base_url}/v1beta/{batch_id}"}[m.provider]
        while True:
            try:
                batch = m._get(status_url)
            except (Terminal, Retryable) as e:
                raise ModelError(f"model {m.spec.id!r}: could not ask for batch {batch_id} ({e.code}: "
                                 f"{e.detail}); it stays at the vendor and a rerun polls it again") from None
            status = self._status(batch)
            if status is not None:
                break
            m._sleep(poll_s)
        self.echo(f"{m.spec.id}: batch {batch_id} ended ({status})")
        try:
            results = {"openai": self._results_openai, "anthropic": self._results_anthropic,
                       "google": self._results_google}[m.provider](batch)
        except (Terminal, Retryable) as e:
            raise ModelError(f"model {m.spec.id!r}: could not read the results of batch {batch_id} "
                             f"({e.code}: {e.detail}); a rerun reads them again") from None
        for cid in cids:
            gen = results.get(cid) or Generation(text=None, error=f"batch_{status}: no result for this request")
            gen.extras["batch"] = batch_id
            if gen.usage:  # billed at the batch rates (api_costs.cost_usd)
                gen.usage["batch"] = 1
            self._answers[self.state["requests"][cid]].append(gen)

    def _status(self, batch: dict[str, Any]) -> str | None:
        """The batch's final status, or None while it runs."""
        if self.model.provider == "openai":
            return batch["status"] if batch.get("status") in OPENAI_ENDED else None
        if self.model.provider == "anthropic":
            return "ended" if batch.get("processing_status") == "ended" else None
        state = (batch.get("metadata") or {}).get("state")
        return str(state).removeprefix("BATCH_STATE_").removeprefix("JOB_STATE_").lower() \
            if state in GOOGLE_ENDED else None

    def _text(self, url: str) -> str:
        """A results file (JSONL), with the retry policy of a generation."""
        m = self.model
        attempts = int(m.options["max_retries"]) + 1
        for attempt in range(attempts):
            try:
                resp = m._client().get(url, headers=m._headers())
            except httpx2.TransportError as e:  # refused, reset, timed out: the file stays at the vendor
                if attempt + 1 == attempts:
                    raise Retryable("connection", m._scrub(f"{type(e).__name__}: {e}")) from None
                m._sleep(m._backoff(attempt, None))
                continue
            if resp.status_code < 400:
                return resp.text
            if attempt + 1 == attempts or (resp.status_code < 500 and resp.status_code != 429):
                raise Terminal(f"http_{resp.status_code}", m._scrub(resp.text))
            m._sleep(m._backoff(attempt, None))
        raise AssertionError("unreachable")

    def _generation(self, payload: dict[str, Any]) -> Generation:
        try:
            # settings left out are the request's, set when the answer is handed to its trial
            return self.model.answer(payload, RequestPlan(max_tokens=0), time.perf_counter())
        except Retryable as e:
            return Generation(text=None, error=f"{e.code}: {e.detail}")

    def _results_openai(self, batch: dict[str, Any]) -> dict[str, Generation]:
        out: dict[str, Generation] = {}
        for key in ("output_file_id", "error_file_id"):
            if not batch.get(key):
                continue
            for line in self._text(f"{self.model.base_url}/files/{batch[key]}/content").splitlines():
                if not line.strip():
                    continue
                item = json.loads(line)
                response, error = item.get("response") or {}, item.get("error")
                code = response.get("status_code")
                if error is None and code == 200:
                    out[item["custom_id"]] = self._generation(response["body"])
                else:
                    detail = json.dumps(error or response.get("body"))
                    name = f"http_{code}" if isinstance(code, int) else f"batch_{(error or {}).get('code')}"
                    out[item["custom_id"]] = Generation(text=None, error=f"{name}: {self.model._scrub(detail)}")
        return out

    def _results_anthropic(self, batch: dict[str, Any]) -> dict[str, Generation]:
        url = batch.get("results_url") or f"{self.model.base_url}/v1/messages/batches/{batch['id']}/results"
        out: dict[str, Generation] = {}
        for line in self._text(url).splitlines():
            if not line.strip():
                continue
            item = json.loads(line)
            result = item["result"]
            if result["type"] == "succeeded":
                out[item["custom_id"]] = self._generation(result["message"])
            elif result["type"] == "errored":
                error = (result.get("error") or {}).get("error") or {}
                detail = self.model._scrub(json.dumps(error))
                money = refused_for_money("anthropic", {"error": error})
                out[item["custom_id"]] = Generation(text=None, error=(
                    f"quota: {money}{VENDOR_SAID}{detail}" if money is not None else
                    f"http_{ANTHROPIC_ERROR_STATUS.get(str(error.get('type')), 500)}: {detail}"))
            else:  # canceled, expired: never run
                out[item["custom_id"]] = Generation(text=None, error=f"batch_{result['type']}: not run")
        return out

    def _results_google(self, batch: dict[str, Any]) -> dict[str, Generation]:
        output = (batch.get("metadata") or {}).get("output") or batch.get("response") or {}
        out: dict[str, Generation] = {}
        for item in (output.get("inlinedResponses") or {}).get("inlinedResponses") or []:
            cid = (item.get("metadata") or {}).get("key")
            if cid is None:
                continue
            if item.get("response") is not None:
                out[cid] = self._generation(item["response"])
            else:
                error = item.get("error") or {}
                code = GOOGLE_ERRORS.get(error.get("code"), f"batch_error_{error.get('code')}")
                out[cid] = Generation(text=None, error=f"{code}: {self.model._scrub(json.dumps(error))}")
        return out

    def answerer(self) -> Any:
        """The model as the readout sees it while the batch's answers are recorded."""
        return _Answerer(self)

    def _answer(self, images: Sequence[Image.Image | None], prompts: list[str],
                settings: dict[str, Any]) -> list[Generation]:
        plan = self.model.plan(settings)
        out = []
        for image, prompt in zip(images, prompts):
            _, _, body = self.model._request(image, prompt, plan)
            answers = self._answers.get(request_digest(body))
            if answers:
                gen = answers.popleft()
                gen.settings_dropped = dict(plan.dropped)
                out.append(gen)
            else:  # not in the stored batch (the recipe changed since): the next run's batch sends it
                sent = ", ".join(b["id"] for b in self.state["batches"]) or "none"
                out.append(Generation(text=None, error=f"batch_missing: not in the batches sent ({sent})",
                                      settings_dropped=dict(plan.dropped)))
        return out

    def finish(self) -> None:
        """Every answer is recorded: the batch is done with."""
        self.path.unlink(missing_ok=True)


class _Stand:
    """The API model as a readout sees it, its ``generate_many`` taken by a batch job."""

    def __init__(self, job: BatchJob):
        self.job = job

    def __getattr__(self, name: str) -> Any:
        return getattr(self.job.model, name)

    def generate(self, image: Image.Image | None, prompt: str, settings: dict[str, Any]) -> Generation:
        return self.generate_many([image], [prompt], settings)[0]


class _Collector(_Stand):
    def generate_many(self, images, prompts, settings) -> list[Generation]:
        return self.job._collect(images, prompts, settings)


class _Answerer(_Stand):
    def generate_many(self, images, prompts, settings) -> list[Generation]:
        return self.job._answer(images, prompts, settings)


def batch_job(adapter: Any, records_path: Path, echo: Callable[[str], None]) -> BatchJob | None:
    """The battery's batch job where ``adapter`` is an API model with ``options.batch``, else None."""
    if not (isinstance(adapter, APIModel) and adapter.options.get("batch")):
        return None
    return BatchJob(adapter, records_path.with_suffix(".batch.json"), echo)
