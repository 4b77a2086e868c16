"""The vendors' batch interfaces on the local stand-in (:mod:`tests.fake_vendor_server`).

- OpenAI: ``POST .../files`` (multipart, purpose ``batch``), ``POST .../batches``,
  ``GET .../batches/<id>``, ``GET .../files/<id>/content``.
- Anthropic: ``POST /v1/messages/batches``, ``GET /v1/messages/batches/<id>`` and ``.../results``.
- Gemini: ``POST /v1beta/models/<model>:batchGenerateContent``, ``GET /v1beta/batches/<id>``.

Every payload is built from the pinned SDK's own types (``openai.types.Batch``/``FileObject``/
``ChatCompletion``, ``anthropic.types.messages.MessageBatch``/``MessageBatchIndividualResponse``) or,
for Gemini, whose SDK types describe the parsed form, passed through google-genai's own response
converter before it is sent; submissions are checked against the SDKs' request parameter types.
Each item of a batch is answered as the synchronous endpoint would answer it. A batch reports
itself running for ``polls_running`` status requests, then ended. The first ``fail_first`` items
of each batch submitted error, with the vendor's error for an overloaded or failing server. A Gemini
inline batch whose request body is over the documented 20 MB is refused with a 400, as the vendor does.
"""

from __future__ import annotations

import email.parser
import email.policy
import json
import re
import time
from typing import Any

from pydantic import TypeAdapter

from tests.fake_vendor_server import VENDORS, FakeVendorServer

GOOGLE_BATCH = re.compile(r"^/v1beta/models/(?P<model>[^/:]+):batchGenerateContent$")
GOOGLE_INLINE_BYTES = 20_000_000  # ai.google.dev/gemini-api/docs/batch-mode: inline requests "under 20MB"


class FakeBatchServer(FakeVendorServer):
    def __init__(self, *args, polls_running: int = 1, fail_first: int = 0, drop_downloads: int = 0, **kwargs):
        super().__init__(*args, **kwargs)
        self.drop_downloads = drop_downloads  # results downloads whose connection closes unanswered
        self.polls_running = polls_running
        self.fail_first = fail_first
        self.files: dict[str, bytes] = {}
        self.batches: dict[str, dict[str, Any]] = {}  # id -> {vendor, model, items, polls, ...}
        self.submissions: list[tuple[str, str, int]] = []  # (vendor, batch id, requests)
        self.polls: list[str] = []  # batch ids asked for

    # -- routing -------------------------------------------------------------------------------
    def _handle(self, h) -> None:
        path = h.path.partition("?")[0]
        if path.endswith("/files") or path.endswith("/batches") or GOOGLE_BATCH.match(path):
            raw = h.rfile.read(int(h.headers.get("content-length") or 0))
            vendor = ("google" if path.startswith("/v1beta/") else
                      "anthropic" if path == "/v1/messages/batches" else "openai")
            ok, sent = self._auth_ok(vendor, h.headers)
            if not ok:
                return self._send(h, 401, {"error": {"message": f"Incorrect API key provided: {sent}"}})
            if vendor == "google" and len(raw) > GOOGLE_INLINE_BYTES:
                return self._send(h, 400, {"error": {"code": 400, "status": "INVALID_ARGUMENT", "message": (
                    f"Request payload size exceeds the limit: {GOOGLE_INLINE_BYTES} bytes.")}})
            try:
                return self._submit(h, vendor, path, raw)
            except (KeyError, ValueError, TypeError) as e:
                return self._send(h, 400, {"error": {"message": f"bad request: {e!r}"}})
        return super()._handle(h)

    def _model_check(self, h) -> None:
        path = h.path.partition("?")[0]
        m = re.match(r"^.*/(?:batches/(?P<batch>[^/]+)(?P<results>/results)?|files/(?P<file>[^/]+)/content)$", path)
        if m is None:
            return super()._model_check(h)
        vendor = ("google" if path.startswith("/v1beta/") else "anthropic" if "x-api-key" in h.headers
                  else "openai")
        ok, sent = self._auth_ok(vendor, h.headers)
        if not ok:
            return self._send(h, 401, {"error": {"message": f"Incorrect API key provided: {sent}"}})
        if (m.group("file") or m.group("results")) and self.drop_downloads:
            with self._lock:
                self.drop_downloads -= 1
            h.close_connection = True  # no status line: the client sees the connection drop
            return None
        if m.group("file"):
            return self._send_raw(h, 200, self.files[m.group("file")])
        batch_id = m.group("batch") if vendor != "google" else f"batches/{m.group('batch')}"
        batch = self.batches.get(batch_id)
        if batch is None:
            return self._send(h, 404, {"error": {"message": f"no batch {batch_id}"}})
        if m.group("results"):
            return self._send_raw(h, 200, self._anthropic_results(batch))
        with self._lock:
            self.polls.append(batch_id)
            batch["polls"] += 1
        return self._send(h, 200, self._status(batch))

    # -- submission ----------------------------------------------------------------------------
    def _submit(self, h, vendor: str, path: str, raw: bytes) -> None:
        now = int(time.time())
        if vendor == "openai" and path.endswith("/files"):
            from openai.types import FileObject

            form = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
                f"content-type: {h.headers['content-type']}\r\n\r\n".encode() + raw)
            parts = {p.get_param("name", header="content-disposition"): p.get_payload(decode=True)
                     for p in form.iter_parts()}
            if parts.get("purpose") != b"batch":
                raise ValueError("purpose must be batch")
            file_id = f"file-{len(self.files)}"
            self.files[file_id] = parts["file"]
            return self._send(h, 200, FileObject(id=file_id, bytes=len(parts["file"]), created_at=now,
                                                 filename="batch.jsonl", object="file", purpose="batch",
                                                 status="processed").model_dump(mode="json"))
        if vendor == "openai":
            from openai.types.batch_create_params import BatchCreateParams

            body = json.loads(raw)
            TypeAdapter(BatchCreateParams).validate_python(body)
            lines = [json.loads(x) for x in self.files[body["input_file_id"]].decode().splitlines() if x.strip()]
            if any(x["url"] != body["endpoint"] or x["method"] != "POST" for x in lines):
                raise ValueError("each line must POST to the batch's endpoint")
            items = [(x["custom_id"], x["body"]) for x in lines]
            model = lines[0]["body"]["model"]
        elif vendor == "anthropic":
            from anthropic.types.messages.batch_create_params import Request

            requests = json.loads(raw)["requests"]
            # (validated, not used: pydantic reads the SDK's Iterable fields lazily)
            TypeAdapter(list[Request]).validate_python(requests)
            items = [(r["custom_id"], r["params"]) for r in requests]
            model = items[0][1]["model"]
        else:
            batch = json.loads(raw)["batch"]
            items = [(r["metadata"]["key"], r["request"]) for r in batch["inputConfig"]["requests"]["requests"]]
            model = GOOGLE_BATCH.match(path).group("model")
        for _, body in items:
            VENDORS[vendor][0](body)  # each request as the synchronous endpoint checks it
        batch_id = {"openai": "batch_", "anthropic": "msgbatch_", "google": "batches/"}[vendor] + str(len(self.batches))
        batch = {"id": batch_id, "vendor": vendor, "model": model, "items": items, "polls": 0, "created_at": now,
                 "failing": {cid for cid, _ in items[:self.fail_first]},
                 "metadata": json.loads(raw).get("metadata"), "input_file_id": json.loads(raw).get("input_file_id")}
        with self._lock:
            self.batches[batch_id] = batch
            self.submissions.append((vendor, batch_id, len(items)))
        return self._send(h, 200, self._status(batch))

    # -- answers -------------------------------------------------------------------------------
    def _answer(self, vendor: str, model: str, body: dict) -> dict:
        _, prompt, _ = VENDORS[vendor][0](body)
        text = self.answer(prompt)
        return VENDORS[vendor][1](model, text, len((prompt or "").split()) + 100, len(text.split()))

    def _status(self, batch: dict) -> dict:
        ended = batch["polls"] > self.polls_running
        ok = [cid for cid, _ in batch["items"] if cid not in batch["failing"]]
        return {"openai": self._openai_batch, "anthropic": self._anthropic_batch,
                "google": self._google_batch}[batch["vendor"]](batch, ended, len(ok))

    def _openai_batch(self, batch: dict, ended: bool, n_ok: int) -> dict:
        from openai.types import Batch
        from openai.types.chat import ChatCompletion

        out = err = None
        if ended and "output_file_id" not in batch:
            lines, errors = [], []
            for i, (cid, body) in enumerate(batch["items"]):
                if cid in batch["failing"]:
                    errors.append({"id": f"batch_req_{i}", "custom_id": cid, "error": None, "response": {
                        "status_code": 500, "request_id": f"req_{i}",
                        "body": {"error": {"message": "The server had an error", "type": "server_error"}}}})
                else:
                    reply = ChatCompletion.model_validate({**self._answer("openai", batch["model"], body),
                                                           "created": batch["created_at"]})
                    lines.append({"id": f"batch_req_{i}", "custom_id": cid, "error": None, "response": {
                        "status_code": 200, "request_id": f"req_{i}", "body": reply.model_dump(mode="json")}})
            for key, rows in (("output_file_id", lines), ("error_file_id", errors)):
                if rows:
                    file_id = f"file-{len(self.files)}"
                    self.files[file_id] = "".join(json.dumps(r) + "\n" for r in rows).encode()
                    batch[key] = file_id
        if ended:
            out, err = batch.get("output_file_id"), batch.get("error_file_id")
        n = len(batch["items"])
        return Batch(id=batch["id"], completion_window="24h", created_at=batch["created_at"],
                     endpoint="/v1/chat/completions", input_file_id=batch["input_file_id"], object="batch",
                     status="completed" if ended else "in_progress", output_file_id=out, error_file_id=err,
                     metadata=batch["metadata"],
                     request_counts={"completed": n_ok if ended else 0, "failed": n - n_ok if ended else 0,
                                     "total": n}).model_dump(mode="json", exclude_none=True)

    def _anthropic_batch(self, batch: dict, ended: bool, n_ok: int) -> dict:
        from anthropic.types.messages import MessageBatch

        n = len(batch["items"])
        return MessageBatch(
            id=batch["id"], type="message_batch", created_at=batch["created_at"],
            expires_at=batch["created_at"] + 86400, processing_status="ended" if ended else "in_progress",
            ended_at=batch["created_at"] if ended else None,
            request_counts={"processing": 0 if ended else n, "succeeded": n_ok if ended else 0,
                            "errored": n - n_ok if ended else 0, "canceled": 0, "expired": 0},
            results_url=f"{self.url}/v1/messages/batches/{batch['id']}/results" if ended else None,
        ).model_dump(mode="json")

    def _anthropic_results(self, batch: dict) -> bytes:
        from anthropic.types.messages import MessageBatchIndividualResponse

        lines = []
        for cid, body in batch["items"]:
            result = ({"type": "errored", "error": {"type": "error", "error": {
                "type": "overloaded_error", "message": "Overloaded"}}} if cid in batch["failing"] else
                      {"type": "succeeded", "message": self._answer("anthropic", batch["model"], body)})
            line = MessageBatchIndividualResponse.model_validate({"custom_id": cid, "result": result})
            lines.append(line.model_dump_json(exclude_none=True) + "\n")
        return "".join(lines).encode()

    def _google_batch(self, batch: dict, ended: bool, n_ok: int) -> dict:
        from google.genai import types
        from google.genai.batches import _BatchJob_from_mldev

        metadata: dict[str, Any] = {
            "@type": "type.googleapis.com/google.ai.generativelanguage.v1main.GenerateContentBatch",
            "model": f"models/{batch['model']}", "name": batch["id"],
            "state": "BATCH_STATE_SUCCEEDED" if ended else "BATCH_STATE_RUNNING"}
        if ended:
            metadata["output"] = {"inlinedResponses": {"inlinedResponses": [
                {"error": {"code": 14, "message": "The service is currently unavailable."}, "metadata": {"key": cid}}
                if cid in batch["failing"] else
                {"response": self._answer("google", batch["model"], body), "metadata": {"key": cid}}
                for cid, body in batch["items"]]}}
        payload = {"name": batch["id"], "metadata": metadata, "done": ended}
        # what google-genai makes of it: a finished job with one answer (or error) per request
        job = types.BatchJob._from_response(response=_BatchJob_from_mldev(json.loads(json.dumps(payload))), kwargs={})
        assert job.name == batch["id"] and job.state is not None
        if ended:
            assert job.dest is not None and len(job.dest.inlined_responses or []) == len(batch["items"])
        return payload
