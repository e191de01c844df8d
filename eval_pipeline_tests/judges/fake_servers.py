"""Fake OpenAI-compatible and Anthropic HTTP servers on 127.0.0.1, driven by a script.

The real SDKs talk to these over real sockets, so every retry, timeout and parsing path in
the judges is exercised exactly as against a provider. Each request pops the next scripted
action (default: a valid answer built from the schema the request carried) and is recorded,
so tests can count calls and inspect what was sent.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import struct
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

Kind = Literal["openai", "anthropic"]


@dataclass
class Act:
    """One scripted reaction to a request."""

    kind: Literal["ok", "text", "data", "status", "sleep", "reset"] = "ok"
    text: str = ""
    data: dict[str, Any] | None = None
    scores: dict[str, Any] | None = None
    drop_metric: bool = False
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: dict[str, Any] | None = None
    seconds: float = 0.0
    echo_key: bool = False
    label: str | None = None  # ReAct prompts: answer this label (default: the positive one)


OK = Act()


def text(content: str) -> Act:
    return Act(kind="text", text=content)


def scores(values: dict[str, Any] | None = None, drop_metric: bool = False) -> Act:
    return Act(kind="ok", scores=values, drop_metric=drop_metric)


def label(value: str) -> Act:
    """Answer a ReAct prompt with this label (and the score that goes with it)."""
    return Act(kind="ok", label=value)


def status(code: int, headers: dict[str, str] | None = None, echo_key: bool = False) -> Act:
    return Act(kind="status", status=code, headers=headers or {}, echo_key=echo_key)


def sleep(seconds: float) -> Act:
    return Act(kind="sleep", seconds=seconds)


RESET = Act(kind="reset")


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    at: float


_EXAMPLE = re.compile(r"Return your response as JSON:\s*(\{.*\})\s*$", re.DOTALL)


def _schema_of(kind: Kind, body: dict[str, Any]) -> dict[str, Any] | None:
    if kind == "anthropic":
        return body["tools"][0]["input_schema"]
    fmt = body.get("response_format") or {}
    if fmt.get("type") == "json_schema":
        return fmt["json_schema"]["schema"]
    return None


def _example_of(body: dict[str, Any]) -> dict[str, Any] | None:
    user = next(m["content"] for m in body["messages"] if m["role"] == "user")
    match = _EXAMPLE.search(user.split("\n\nYour previous reply could not be used")[0])
    return json.loads(match.group(1)) if match else None


def _metrics_of(kind: Kind, body: dict[str, Any]) -> list[str]:
    schema = _schema_of(kind, body)
    if schema is not None:
        return list(schema["properties"]["scores"]["properties"])
    example = _example_of(body)
    return list(example["scores"]) if example else ["score"]


def labels_of(kind: Kind, body: dict[str, Any]) -> list[str]:
    """The allowed labels of a ReAct request, positive first; [] for a rubric request.

    From the schema's ``label`` enum, or in JSON mode from the prompt's example (which
    shows the positive label) and its ``EXACTLY "a" or "b"`` instruction.
    """
    schema = _schema_of(kind, body)
    if schema is not None:
        return list((schema["properties"].get("label") or {}).get("enum") or [])
    example = _example_of(body)
    if not example or "label" not in example:
        return []
    user = next(m["content"] for m in body["messages"] if m["role"] == "user")
    pair = re.search(r'\(EXACTLY "([^"]+)" or "([^"]+)"\)', user)
    return [pair.group(1), pair.group(2)] if pair else [example["label"]]


class FakeLLMServer:
    def __init__(self, kind: Kind, tokens_in: int = 1000, tokens_out: int = 200,
                 score: float = 0.8) -> None:
        self.kind = kind
        self.tokens_in = tokens_in
        self.tokens_out = tokens_out
        self.score = score
        self.script: deque[Act] = deque()
        self.requests: list[Recorded] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)

    # -- lifecycle -------------------------------------------------------------------
    def start(self) -> FakeLLMServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        suffix = "/v1" if self.kind == "openai" else ""
        return f"http://{host}:{port}{suffix}"

    @property
    def calls(self) -> int:
        with self._lock:
            return len(self.requests)

    def push(self, *acts: Act) -> None:
        with self._lock:
            self.script.extend(acts)

    # -- responses -------------------------------------------------------------------
    def _next(self, recorded: Recorded) -> Act:
        with self._lock:
            self.requests.append(recorded)
            return self.script.popleft() if self.script else OK

    def _answer(self, act: Act, body: dict[str, Any], n: int) -> dict[str, Any]:
        metrics = _metrics_of(self.kind, body)
        labels = labels_of(self.kind, body)
        chosen = act.label or (labels[0] if labels else None)
        # A ReAct answer scores 1.0 for the positive label, 0.0 for the other.
        values = dict.fromkeys(metrics, self.score if not labels
                               else float(chosen == labels[0]))
        if act.scores:
            values.update(act.scores)
        if act.drop_metric:
            values.pop(metrics[0])
        payload = act.data if act.data is not None else {
            "scores": values, "summary": f"clip summary {n}", "reasoning": "looks right"}
        if act.data is None and labels:
            payload["label"] = chosen
        if self.kind == "anthropic":
            content: list[dict[str, Any]] = (
                [{"type": "text", "text": act.text}] if act.kind == "text" else
                [{"type": "tool_use", "id": f"toolu_{n}", "name": body["tools"][0]["name"],
                  "input": payload}])
            return {"id": f"msg_{n}", "type": "message", "role": "assistant",
                    "model": body["model"], "content": content,
                    "stop_reason": "end_turn" if act.kind == "text" else "tool_use",
                    "stop_sequence": None,
                    "usage": {"input_tokens": self.tokens_in, "output_tokens": self.tokens_out}}
        message = act.text if act.kind == "text" else json.dumps(payload)
        return {"id": f"chatcmpl-{n}", "object": "chat.completion", "created": 0,
                "model": body["model"],
                "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                             "message": {"role": "assistant", "content": message,
                                         "refusal": None}}],
                "usage": {"prompt_tokens": self.tokens_in,
                          "completion_tokens": self.tokens_out,
                          "total_tokens": self.tokens_in + self.tokens_out}}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                headers = {k.lower(): v for k, v in self.headers.items()}
                act = server._next(Recorded(self.path, headers, body, time.monotonic()))
                n = server.calls
                with server._lock:
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                try:
                    self._act(act, body, headers, n)
                finally:
                    with server._lock:
                        server.in_flight -= 1

            def _act(self, act: Act, body: dict[str, Any], headers: dict[str, str],
                     n: int) -> None:
                if act.kind == "reset":
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                               struct.pack("ii", 1, 0))
                    self.close_connection = True
                    self.connection.close()
                    return
                if act.kind == "sleep":
                    time.sleep(act.seconds)
                if act.kind == "status":
                    key = headers.get("authorization", "").removeprefix("Bearer ") or \
                        headers.get("x-api-key", "")
                    message = (f"Incorrect API key provided: {key}" if act.echo_key
                               else f"fake error {act.status}")
                    payload: dict[str, Any] = {"error": {"message": message,
                                                         "type": "fake_error"}}
                    if server.kind == "anthropic":
                        payload = {"type": "error", "error": {"type": "fake_error",
                                                              "message": message}}
                    self._send(act.status, payload, act.headers)
                    return
                self._send(200, server._answer(act, body, n), {})

            def _send(self, code: int, payload: dict[str, Any], headers: dict[str, str]
                      ) -> None:
                data = json.dumps(payload).encode()
                try:
                    self.send_response(code)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    for k, v in headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test)

            def handle(self) -> None:
                with contextlib.suppress(OSError, ValueError):
                    super().handle()

        return Handler
