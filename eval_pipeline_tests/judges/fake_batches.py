"""The batch APIs on the fake servers: OpenAI Files + Batches, Anthropic Message Batches.

Mounted on a :class:`FakeLLMServer` through its ``routes`` hook, so the real SDKs'
``files.create`` / ``batches.create`` / ``batches.retrieve`` / ``files.content`` and
``messages.batches.create`` / ``retrieve`` / ``results`` talk to it over real sockets. Each
line is answered by the server's own answer logic (the scripted acts, then a valid answer
built from the line's schema), so batch answers are as realistic as live ones: prose around
JSON, numbers as strings, a label with a score that disagrees. A scripted ``status(code)``
act makes that line fail with the provider's per-line error shape.

A batch is ``in_progress`` for ``delay_s`` after it is created, then its lines are answered
(at the first look after that). Controls: ``expire_next=k`` makes the next batch created
expire after answering only its first k lines (the rest: ``batch_expired`` on OpenAI,
``expired`` results on Anthropic); ``fail_next=(code, message)`` makes the next batch
created fail as a whole without answering a line (OpenAI: status ``failed`` with the
batch's ``errors``, no output or error file, as when its input is refused; Anthropic, whose
batches end but never fail: every line ``errored`` with that error); ``hold`` keeps every
batch in progress until :meth:`release`; ``cancel`` is the providers' cancel endpoint.
``created`` counts batches created, ``http`` the batch API's HTTP requests by route,
``lines`` the lines answered.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from eval_pipeline_tests.judges.fake_servers import FakeLLMServer, Recorded

_ANTHROPIC_ERROR = {400: "invalid_request_error", 401: "authentication_error",
                    404: "not_found_error", 429: "rate_limit_error", 500: "api_error",
                    529: "overloaded_error"}


@dataclass
class _Batch:
    id: str
    lines: list[dict[str, Any]]  # OpenAI: {custom_id, body}; Anthropic: {custom_id, params}
    created: float
    expire_after: int | None = None
    fail: tuple[str, str] | None = None  # (code, message): the batch failed as a whole
    cancelled: bool = False
    results: list[dict[str, Any]] | None = None  # per line, once processed
    metadata: dict[str, Any] = field(default_factory=dict)
    input_file_id: str = ""
    output_file_id: str | None = None
    error_file_id: str | None = None


def _iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).isoformat().replace("+00:00", "Z")


def _multipart_file(headers: dict[str, str], raw: bytes) -> bytes:
    """The ``file`` part of a multipart/form-data upload (what files.create sends)."""
    boundary = re.search(r'boundary="?([^";]+)"?', headers.get("content-type", ""))
    if boundary is None:
        raise ValueError("not multipart")
    for part in raw.split(b"--" + boundary.group(1).encode()):
        head, _, body = part.partition(b"\r\n\r\n")
        if b'name="file"' in head:
            return body.removesuffix(b"\r\n")
    raise ValueError("no file part")


class FakeBatches:
    def __init__(self, server: FakeLLMServer, delay_s: float = 0.3) -> None:
        self.server = server
        self.delay_s = delay_s
        self.expire_next: int | None = None
        self.fail_next: tuple[str, str] | None = None
        self.hold = False
        self.batches: dict[str, _Batch] = {}
        self.files: dict[str, bytes] = {}
        self.created = 0
        self.lines = 0
        self.http: Counter[str] = Counter()
        self._lock = threading.RLock()
        server.routes.append(self.route)

    # -- controls ------------------------------------------------------------------------
    def release(self) -> None:
        with self._lock:
            self.hold = False

    @property
    def requests(self) -> int:
        """HTTP requests to the batch API (uploads, creates, polls, downloads)."""
        return sum(self.http.values())

    # -- processing ----------------------------------------------------------------------
    def _ready(self, batch: _Batch) -> bool:
        return batch.cancelled or (not self.hold
                                   and time.monotonic() >= batch.created + self.delay_s)

    def _process(self, batch: _Batch) -> None:
        """Answer every line (once), with the live answer logic and scripted acts."""
        if batch.results is not None or not self._ready(batch):
            return
        results: list[dict[str, Any]] = []
        if batch.fail is not None:  # nothing answered, nothing paid
            batch.results = [{"custom_id": line["custom_id"], "kind": "failed"}
                             for line in batch.lines]
            return
        for index, line in enumerate(batch.lines):
            if batch.cancelled:
                results.append({"custom_id": line["custom_id"], "kind": "cancelled"})
                continue
            if batch.expire_after is not None and index >= batch.expire_after:
                results.append({"custom_id": line["custom_id"], "kind": "expired"})
                continue
            body = line["body"]
            path = "/v1/chat/completions" if self.server.kind == "openai" else "/v1/messages"
            act = self.server._next(Recorded(f"batch:{path}", {}, body, time.monotonic()))
            n = self.server.calls
            self.lines += 1
            if act.kind == "status":
                results.append({"custom_id": line["custom_id"], "kind": "error",
                                "status": act.status,
                                "message": act.text or f"fake error {act.status}"})
                continue
            results.append({"custom_id": line["custom_id"], "kind": "ok",
                            "answer": self.server._answer(act, body, n)})
        batch.results = results
        if self.server.kind == "openai":
            ok = [r for r in results if r["kind"] == "ok"]
            bad = [r for r in results if r["kind"] != "ok"]
            if ok:
                batch.output_file_id = self._store("\n".join(
                    json.dumps({"id": f"batch_req_{i}", "custom_id": r["custom_id"],
                                "response": {"status_code": 200, "request_id": f"req_{i}",
                                             "body": r["answer"]}, "error": None})
                    for i, r in enumerate(ok)).encode())
            if bad:
                batch.error_file_id = self._store("\n".join(
                    json.dumps(self._openai_error(i, r)) for i, r in enumerate(bad)).encode())

    @staticmethod
    def _openai_error(i: int, r: dict[str, Any]) -> dict[str, Any]:
        if r["kind"] == "error":
            return {"id": f"batch_req_e{i}", "custom_id": r["custom_id"],
                    "response": {"status_code": r["status"], "request_id": f"req_e{i}",
                                 "body": {"error": {"message": r["message"],
                                                    "type": "fake_error"}}},
                    "error": None}
        code = "batch_expired" if r["kind"] == "expired" else "batch_cancelled"
        return {"id": f"batch_req_e{i}", "custom_id": r["custom_id"], "response": None,
                "error": {"code": code, "message": f"This request was {r['kind']} before it "
                          "could be executed."}}

    def _store(self, data: bytes) -> str:
        file_id = f"file-{len(self.files) + 1}"
        self.files[file_id] = data
        return file_id

    # -- wire objects --------------------------------------------------------------------
    def _openai_object(self, batch: _Batch) -> dict[str, Any]:
        self._process(batch)
        done = batch.results is not None
        status = ("in_progress" if not done else "failed" if batch.fail is not None
                  else "cancelled" if batch.cancelled
                  else "expired" if batch.expire_after is not None else "completed")
        results = [r for r in batch.results or [] if r["kind"] != "failed"]
        errors = ({"object": "list", "data": [{"code": batch.fail[0], "message": batch.fail[1],
                                               "param": None, "line": None}]}
                  if done and batch.fail is not None else None)
        return {
            "id": batch.id, "object": "batch", "endpoint": "/v1/chat/completions",
            "errors": errors, "input_file_id": batch.input_file_id, "completion_window": "24h",
            "status": status, "output_file_id": batch.output_file_id,
            "error_file_id": batch.error_file_id, "created_at": int(batch.created),
            "metadata": batch.metadata,
            "request_counts": {"total": 0 if batch.fail is not None else len(batch.lines),
                               "completed": sum(r["kind"] == "ok" for r in results),
                               "failed": sum(r["kind"] != "ok" for r in results)},
        }

    def _anthropic_object(self, batch: _Batch) -> dict[str, Any]:
        self._process(batch)
        done = batch.results is not None
        results = batch.results or []
        counts = {"processing": 0 if done else len(batch.lines),
                  "succeeded": sum(r["kind"] == "ok" for r in results),
                  "errored": sum(r["kind"] in ("error", "failed") for r in results),
                  "canceled": sum(r["kind"] == "cancelled" for r in results),
                  "expired": sum(r["kind"] == "expired" for r in results)}
        created = time.time() - (time.monotonic() - batch.created)
        return {
            "id": batch.id, "type": "message_batch",
            "processing_status": "ended" if done else (
                "canceling" if batch.cancelled else "in_progress"),
            "request_counts": counts, "created_at": _iso(created),
            "expires_at": _iso(created + 86400), "ended_at": _iso(time.time()) if done else None,
            "archived_at": None, "cancel_initiated_at": None,
            "results_url": (f"{self.server.base_url}/v1/messages/batches/{batch.id}/results"
                            if done else None),
        }

    def _anthropic_results(self, batch: _Batch) -> bytes:
        out = []
        for r in batch.results or []:
            if r["kind"] == "ok":
                result: dict[str, Any] = {"type": "succeeded", "message": r["answer"]}
            elif r["kind"] == "error":
                result = {"type": "errored", "error": {"type": "error", "error": {
                    "type": _ANTHROPIC_ERROR.get(r["status"], "api_error"),
                    "message": r["message"]}}}
            elif r["kind"] == "failed":
                assert batch.fail is not None
                result = {"type": "errored", "error": {"type": "error", "error": {
                    "type": batch.fail[0], "message": batch.fail[1]}}}
            else:
                result = {"type": "canceled" if r["kind"] == "cancelled" else "expired"}
            out.append(json.dumps({"custom_id": r["custom_id"], "result": result}))
        return "\n".join(out).encode()

    # -- the route -----------------------------------------------------------------------
    def route(self, method: str, path: str, headers: dict[str, str], raw: bytes
              ) -> tuple[int, bytes, str] | None:
        path = path.split("?")[0]
        with self._lock:
            if self.server.kind == "openai":
                answer = self._openai_route(method, path, headers, raw)
            else:
                answer = self._anthropic_route(method, path, raw)
        if answer is None:
            return None
        code, payload = answer
        if isinstance(payload, bytes):
            return code, payload, "application/octet-stream"
        return code, json.dumps(payload).encode(), "application/json"

    def _new(self, lines: list[dict[str, Any]], **extra: Any) -> _Batch:
        self.created += 1
        prefix = "batch_" if self.server.kind == "openai" else "msgbatch_"
        batch = _Batch(id=f"{prefix}{self.created:04d}", lines=lines,
                       created=time.monotonic(), expire_after=self.expire_next,
                       fail=self.fail_next, **extra)
        self.expire_next = self.fail_next = None
        self.batches[batch.id] = batch
        return batch

    def _openai_route(self, method: str, path: str, headers: dict[str, str], raw: bytes
                      ) -> tuple[int, Any] | None:
        if method == "POST" and path == "/v1/files":
            self.http["files.create"] += 1
            data = _multipart_file(headers, raw)
            file_id = self._store(data)
            return 200, {"id": file_id, "object": "file", "bytes": len(data),
                         "created_at": int(time.time()), "filename": "batch.jsonl",
                         "purpose": "batch", "status": "processed"}
        if method == "POST" and path == "/v1/batches":
            self.http["batches.create"] += 1
            body = json.loads(raw)
            content = self.files[body["input_file_id"]].decode()
            lines = [{"custom_id": item["custom_id"], "body": item["body"]}
                     for item in map(json.loads, content.splitlines()) if item]
            batch = self._new(lines, metadata=body.get("metadata") or {},
                              input_file_id=body["input_file_id"])
            return 200, self._openai_object(batch)
        match = re.fullmatch(r"/v1/batches/([^/]+)(/cancel)?", path)
        if match and match.group(1) in self.batches:
            batch = self.batches[match.group(1)]
            if match.group(2):
                self.http["batches.cancel"] += 1
                batch.cancelled = batch.results is None or batch.cancelled
            else:
                self.http["batches.retrieve"] += 1
            return 200, self._openai_object(batch)
        match = re.fullmatch(r"/v1/files/([^/]+)/content", path)
        if method == "GET" and match and match.group(1) in self.files:
            self.http["files.content"] += 1
            return 200, self.files[match.group(1)]
        return None

    def _anthropic_route(self, method: str, path: str, raw: bytes) -> tuple[int, Any] | None:
        if method == "POST" and path == "/v1/messages/batches":
            self.http["messages.batches.create"] += 1
            body = json.loads(raw)
            batch = self._new([{"custom_id": r["custom_id"], "body": r["params"]}
                               for r in body["requests"]])
            return 200, self._anthropic_object(batch)
        match = re.fullmatch(r"/v1/messages/batches/([^/]+)(/cancel|/results)?", path)
        if match and match.group(1) in self.batches:
            batch = self.batches[match.group(1)]
            if match.group(2) == "/results":
                self.http["messages.batches.results"] += 1
                self._process(batch)
                return 200, self._anthropic_results(batch)
            if match.group(2) == "/cancel":
                self.http["messages.batches.cancel"] += 1
                batch.cancelled = batch.results is None or batch.cancelled
            else:
                self.http["messages.batches.retrieve"] += 1
            return 200, self._anthropic_object(batch)
        return None
