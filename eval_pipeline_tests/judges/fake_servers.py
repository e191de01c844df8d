"""Fake OpenAI-compatible and Anthropic HTTP servers on 127.0.0.1, driven by a script.

The real SDKs talk to these over real sockets, so every retry, timeout and parsing path in
the judges is exercised exactly as against a provider. Each request pops the next scripted
action (default: a valid answer built from the schema the request carried, or in JSON and
text modes from the schema stated in the prompt) and is recorded, so tests can count calls
and inspect what was sent.

They answer the way real servers do, not the way the judges would like: an answer may put
prose around its JSON or fence it (``style``), write numbers as strings (``strings``),
spell metric names its own way (``metric_names``), or carry a score beside a ReAct label
that disagrees with it (``scores``). A server may lack structured output altogether:
``structured="json_object_only"`` answers a ``json_schema`` request the way
llama-cpp-python does (HTTP 500, "Input should be 'text' or 'json_object'"),
``structured="none"`` ignores the response format, and ``tools=False`` answers a forced
tool call with text, as a model whose chat template has no tool calling does.

Faults at the transport level, beyond HTTP errors: ``MALFORMED`` answers 200 with a body
that is not JSON, ``CUT`` sends the headers and half the body of a valid answer (its
``content-length`` promises all of it) and closes the connection, ``sleep`` holds the answer
past a client's timeout, ``RESET`` resets the connection. ``faults=FaultMix(...)`` draws a
fault for each request not scripted, from a seeded generator, so a run at scale sees the
same mix every time; ``injected`` counts what was drawn. ``score_of`` and ``label_of`` make
each answer depend on the prompt, so a test can tell a score the server sent from any other.

``latency_s`` makes every request take that long (as a provider's generation does), and
``mean_in_flight`` is the time-weighted mean number of requests in flight between the first
request's arrival and the last one's answer: what a scheduler's concurrency looks like from
the provider's side.
"""

from __future__ import annotations

import contextlib
import json
import random
import re
import socket
import struct
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

Kind = Literal["openai", "anthropic"]
Structured = Literal["full", "json_object_only", "none"]
Style = Literal["json", "prose", "fenced", "label_line", "bare_label"]

# What llama-cpp-python's OpenAI-compatible server answers to response_format json_schema.
LLAMA_CPP_PYTHON_REFUSAL = (
    "[{'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), "
    "'msg': \"Input should be 'text' or 'json_object'\", 'input': 'json_schema', "
    "'ctx': {'expected': \"'text' or 'json_object'\"}}]")


@dataclass
class Act:
    """One scripted reaction to a request."""

    kind: Literal["ok", "text", "data", "status", "sleep", "reset", "malformed",
                  "cut", "tool_calls", "refusal"] = "ok"
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
    # How the answer is written when it is text (JSON modes, plain text, no tool calling):
    # json alone, prose around it, a fenced block, or the seed's EXPLANATION/LABEL lines.
    style: Style = "json"
    strings: bool = False  # scores as numeric strings ("0.8")
    metric_names: Literal["exact", "title", "upper"] = "exact"  # "Code Correctness"
    cut_off: bool = False  # the answer stopped at max_tokens (finish/stop reason says so)
    # kind "tool_calls": the calls a model under test makes, (name, arguments) each; two or
    # more are parallel calls in one assistant message (see ``tool_calls``)
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


OK = Act()


def text(content: str) -> Act:
    return Act(kind="text", text=content)


def cut_off(content: str) -> Act:
    """A text answer the server stopped at ``max_tokens`` (a small model rambling)."""
    return Act(kind="text", text=content, cut_off=True)


def scores(values: dict[str, Any] | None = None, drop_metric: bool = False) -> Act:
    return Act(kind="ok", scores=values, drop_metric=drop_metric)


def label(value: str, score: float | None = None, style: Style = "json") -> Act:
    """Answer a ReAct prompt with this label; ``score`` adds a score beside it (a real
    model's habit), which need not agree with the label."""
    values = {"score": score} if score is not None else None
    return Act(kind="ok", label=value, scores=values, style=style)


def styled(style: Style, **options: Any) -> Act:
    """A valid answer written in this style (prose around the JSON, fenced, LABEL lines)."""
    return Act(kind="ok", style=style, **options)


def status(code: int, headers: dict[str, str] | None = None, echo_key: bool = False,
           message: str = "") -> Act:
    """An HTTP error; ``message`` is the error body's text (default "fake error <code>")."""
    return Act(kind="status", status=code, headers=headers or {}, echo_key=echo_key,
               text=message)


def tool_calls(*calls: str | tuple[str, dict[str, Any]], text: str = "") -> Act:
    """A model's tool-calling answer (a routing suite's model under test): one call per
    item, a tool name or ``(name, arguments)``; two or more come back as parallel calls in
    one assistant message, as OpenAI's ``tool_calls`` list and Anthropic's ``tool_use``
    blocks carry them. ``text`` is prose the model writes beside its calls (Anthropic's
    models usually do). A model that calls no tool is ``text(...)``."""
    return Act(kind="tool_calls", text=text,
               calls=[(c, {}) if isinstance(c, str) else (c[0], dict(c[1])) for c in calls])


def refusal(message: str) -> Act:
    """The model declines: OpenAI's ``message.refusal`` (no content), Anthropic's
    ``stop_reason: refusal`` with the text it wrote."""
    return Act(kind="refusal", text=message)


def sleep(seconds: float) -> Act:
    return Act(kind="sleep", seconds=seconds)


RESET = Act(kind="reset")
# 200 with a body that is not JSON (a proxy's error page, a garbled reply)
MALFORMED = Act(kind="malformed")
# 200, half of a valid answer's body, then the connection closes (content-length says more)
CUT = Act(kind="cut")


@dataclass
class FaultMix:
    """Seeded random faults: each request not scripted fails with probability ``rate``,
    the fault drawn uniformly from ``kinds``.

    Kinds: ``429`` (no Retry-After), ``429_retry_after`` (Retry-After ``retry_after``
    seconds), ``500``, ``400`` (not retried: the row fails), ``timeout`` (the answer held
    ``sleep_s``, past the client's timeout), ``malformed``, ``cut``. ``echo_key`` makes
    the HTTP errors echo the key the request carried, as a provider's "Incorrect API key
    provided: ..." does.
    """

    rate: float = 0.2
    seed: int = 0
    kinds: tuple[str, ...] = ("429", "429_retry_after", "500", "timeout", "malformed", "cut")
    retry_after: str = "0.05"
    sleep_s: float = 2.0
    echo_key: bool = False
    _random: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._random = random.Random(self.seed)

    def draw(self) -> tuple[str, Act] | None:
        """The next request's fault and its act, or None for a normal answer (call with
        the server's lock held: the generator is shared)."""
        if self._random.random() >= self.rate:
            return None
        kind = self._random.choice(self.kinds)
        acts = {
            "429": status(429, echo_key=self.echo_key),
            "429_retry_after": status(429, {"retry-after": self.retry_after},
                                      echo_key=self.echo_key),
            "500": status(500, echo_key=self.echo_key),
            "400": status(400, echo_key=self.echo_key),
            "timeout": sleep(self.sleep_s),
            "malformed": MALFORMED,
            "cut": CUT,
        }
        return kind, acts[kind]


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    at: float


_EXAMPLE = re.compile(r"Return your response as JSON:\s*(\{.*?\})\s*(?:\n\n|$)", re.DOTALL)
_PROMPT_SCHEMA = "It must follow this JSON schema:\n"


def _user_prompt(body: dict[str, Any]) -> str:
    user = next(m["content"] for m in body["messages"] if m["role"] == "user")
    return user.split("\n\nYour previous reply could not be used")[0]


def _schema_of(kind: Kind, body: dict[str, Any]) -> dict[str, Any] | None:
    """The schema the request carried: enforced (tools, json_schema) or stated in the
    prompt (json_object and text modes)."""
    if body.get("tools"):
        tool = body["tools"][0]
        return tool["input_schema"] if kind == "anthropic" else tool["function"]["parameters"]
    fmt = body.get("response_format") or {}
    if fmt.get("type") == "json_schema":
        return fmt["json_schema"]["schema"]
    # the judge states the schema at the very end, after any repair note
    user = next(m["content"] for m in body["messages"] if m["role"] == "user")
    if _PROMPT_SCHEMA in user:
        stated = user.split(_PROMPT_SCHEMA, 1)[1]
        return json.JSONDecoder().raw_decode(stated)[0]
    return None


def _example_of(body: dict[str, Any]) -> dict[str, Any] | None:
    match = _EXAMPLE.search(_user_prompt(body))
    return json.loads(match.group(1)) if match else None


def _metrics_of(kind: Kind, body: dict[str, Any]) -> list[str]:
    schema = _schema_of(kind, body)
    if schema is not None:
        return list((schema["properties"].get("scores") or {}).get("properties") or [])
    example = _example_of(body)
    return list(example.get("scores") or []) if example else ["score"]


def labels_of(kind: Kind, body: dict[str, Any]) -> list[str]:
    """The allowed labels of a ReAct request, positive first; [] for a rubric request.

    From the schema's ``label`` enum, or without one from the prompt's example (which
    shows the positive label) and its ``EXACTLY "a" or "b"`` instruction.
    """
    schema = _schema_of(kind, body)
    if schema is not None:
        return list((schema["properties"].get("label") or {}).get("enum") or [])
    example = _example_of(body)
    if not example or "label" not in example:
        return []
    pair = re.search(r'\(EXACTLY "([^"]+)" or "([^"]+)"\)', _user_prompt(body))
    return [pair.group(1), pair.group(2)] if pair else [example["label"]]


def _metric_name(name: str, how: str) -> str:
    if how == "title":
        return name.replace("_", " ").title()
    return name.upper() if how == "upper" else name


def _write(payload: dict[str, Any], style: Style) -> str:
    """The answer as a model would write it in text."""
    body = json.dumps(payload, indent=2 if style != "json" else None)
    if style == "prose":
        return f"Here is my evaluation of the clip.\n{body}\nLet me know if you need more."
    if style == "fenced":
        return f"Sure! Evaluation below.\n\n```json\n{body}\n```\n"
    if style == "label_line":
        return (f"EXPLANATION: {payload.get('explanation') or payload.get('reasoning')}\n\n"
                f"LABEL: \"{payload.get('label')}\"")
    if style == "bare_label":
        return str(payload.get("label"))
    return body


class _Server(ThreadingHTTPServer):
    # The default listen backlog (5) refuses connections when a client opens hundreds at once.
    request_queue_size = 1024
    daemon_threads = True


class FakeLLMServer:
    def __init__(self, kind: Kind, tokens_in: int = 1000, tokens_out: int = 200,
                 score: float = 0.8, *, structured: Structured = "full",
                 tools: bool = True, latency_s: float = 0.0,
                 faults: FaultMix | None = None,
                 score_of: Callable[[str], float] | None = None,
                 label_of: Callable[[str, list[str]], str] | None = None) -> None:
        """``score_of(user prompt)`` gives every rubric score of an answer (default
        ``score``); ``label_of(user prompt, labels)`` a ReAct answer's label (default the
        positive one)."""
        self.kind = kind
        self.faults = faults
        self.injected: Counter[str] = Counter()  # faults drawn from ``faults``, by kind
        self.score_of = score_of
        self.label_of = label_of
        self.latency_s = latency_s
        self.structured = structured
        self.tools = tools
        self.refused = 0  # json_schema requests refused (structured="json_object_only")
        self.tokens_in = tokens_in
        self.tokens_out = tokens_out
        self.score = score
        self.script: deque[Act] = deque()
        self.requests: list[Recorded] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.connections = 0  # TCP connections accepted: more than the client's concurrency
        # means it closed kept-alive connections and opened new ones
        self._busy_area = 0.0  # integral of in_flight over time
        self._first_at: float | None = None
        self._changed_at = 0.0
        self._lock = threading.Lock()
        # Extra endpoints (e.g. fake_batches.FakeBatches): each route gets (method, path,
        # headers, body bytes) and answers (status, body bytes, content type) or None.
        self.routes: list[Callable[[str, str, dict[str, str], bytes],
                                   tuple[int, bytes, str] | None]] = []
        self._httpd = _Server(("127.0.0.1", 0), self._handler())
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

    @property
    def mean_in_flight(self) -> float:
        """Time-weighted mean of requests in flight from the first arrival to the last
        answer (0 before any request)."""
        with self._lock:
            if self._first_at is None or self._changed_at <= self._first_at:
                return 0.0
            return self._busy_area / (self._changed_at - self._first_at)

    def _track(self, delta: int) -> None:
        """Count a request in (+1) or out (-1); call with the lock held."""
        now = time.monotonic()
        if self._first_at is None:
            self._first_at = self._changed_at = now
        self._busy_area += self.in_flight * (now - self._changed_at)
        self._changed_at = now
        self.in_flight += delta
        self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def push(self, *acts: Act) -> None:
        with self._lock:
            self.script.extend(acts)

    # -- responses -------------------------------------------------------------------
    def _next(self, recorded: Recorded) -> Act:
        with self._lock:
            self.requests.append(recorded)
            if self.script:
                return self.script.popleft()
            drawn = self.faults.draw() if self.faults is not None else None
            if drawn is None:
                return OK
            self.injected[drawn[0]] += 1
            return drawn[1]

    def refuses(self, body: dict[str, Any]) -> bool:
        """A json_object-only server refuses json_schema, as llama-cpp-python does."""
        fmt = body.get("response_format") or {}
        return self.structured == "json_object_only" and fmt.get("type") == "json_schema"

    def _payload(self, act: Act, body: dict[str, Any], n: int) -> dict[str, Any]:
        if act.data is not None:
            return act.data
        labels = labels_of(self.kind, body)
        if labels:
            # The seed's ReAct answer: an explanation and a label; a score only if scripted.
            chosen = act.label or (self.label_of(_user_prompt(body), labels)
                                   if self.label_of else labels[0])
            payload: dict[str, Any] = {"explanation": f"EXPLANATION: looks right {n}",
                                       "label": chosen}
            if act.scores:
                payload["scores"] = dict(act.scores)
        else:
            score = self.score_of(_user_prompt(body)) if self.score_of else self.score
            values: dict[str, Any] = dict.fromkeys(_metrics_of(self.kind, body), score)
            if act.scores:
                values.update(act.scores)
            if act.drop_metric:
                values.pop(next(iter(values)))
            payload = {"scores": values, "summary": f"clip summary {n}",
                       "reasoning": "looks right"}
        if isinstance(payload.get("scores"), dict):
            payload["scores"] = {
                _metric_name(k, act.metric_names): str(v) if act.strings else v
                for k, v in payload["scores"].items()}
        return payload

    def _tool_calls_answer(self, act: Act, body: dict[str, Any], n: int) -> dict[str, Any]:
        """The scripted calls in the provider's shape (ids unique per answer), whatever
        tools the request offered: a real model may call a tool it was not given."""
        usage_in, usage_out = self.tokens_in, self.tokens_out
        refused = act.kind == "refusal"
        if self.kind == "anthropic" and refused:
            return {"id": f"msg_{n}", "type": "message", "role": "assistant",
                    "model": body["model"], "content": [{"type": "text", "text": act.text}],
                    "stop_reason": "refusal", "stop_sequence": None,
                    "usage": {"input_tokens": usage_in, "output_tokens": usage_out}}
        if refused:
            return {"id": f"chatcmpl-{n}", "object": "chat.completion", "created": 0,
                    "model": body["model"],
                    "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                                 "message": {"role": "assistant", "content": None,
                                             "refusal": act.text}}],
                    "usage": {"prompt_tokens": usage_in, "completion_tokens": usage_out,
                              "total_tokens": usage_in + usage_out}}
        if self.kind == "anthropic":
            blocks: list[dict[str, Any]] = [{"type": "text", "text": act.text}] if act.text \
                else []
            blocks += [{"type": "tool_use", "id": f"toolu_{n}_{i}", "name": name,
                        "input": arguments} for i, (name, arguments) in enumerate(act.calls)]
            return {"id": f"msg_{n}", "type": "message", "role": "assistant",
                    "model": body["model"], "content": blocks, "stop_reason": "tool_use",
                    "stop_sequence": None,
                    "usage": {"input_tokens": usage_in, "output_tokens": usage_out}}
        message = {"role": "assistant", "content": act.text or None, "refusal": None,
                   "tool_calls": [{"id": f"call_{n}_{i}", "type": "function",
                                   "function": {"name": name,
                                                "arguments": json.dumps(arguments)}}
                                  for i, (name, arguments) in enumerate(act.calls)]}
        return {"id": f"chatcmpl-{n}", "object": "chat.completion", "created": 0,
                "model": body["model"],
                "choices": [{"index": 0, "finish_reason": "tool_calls", "logprobs": None,
                             "message": message}],
                "usage": {"prompt_tokens": usage_in, "completion_tokens": usage_out,
                          "total_tokens": usage_in + usage_out}}

    def _answer(self, act: Act, body: dict[str, Any], n: int) -> dict[str, Any]:
        if act.kind in ("tool_calls", "refusal"):
            return self._tool_calls_answer(act, body, n)
        payload = self._payload(act, body, n)
        # A server without structured output chats: prose around the JSON by default.
        style = "prose" if self.structured == "none" and act.style == "json" else act.style
        as_text = act.text if act.kind == "text" else _write(payload, style)
        # A forced tool call comes back as a call only from a server with tool calling.
        call = bool(body.get("tools")) and self.tools and act.kind != "text"
        if self.kind == "anthropic":
            content: list[dict[str, Any]] = (
                [{"type": "tool_use", "id": f"toolu_{n}", "name": body["tools"][0]["name"],
                  "input": payload}] if call else [{"type": "text", "text": as_text}])
            return {"id": f"msg_{n}", "type": "message", "role": "assistant",
                    "model": body["model"], "content": content,
                    "stop_reason": ("max_tokens" if act.cut_off
                                    else "tool_use" if call else "end_turn"),
                    "stop_sequence": None,
                    "usage": {"input_tokens": self.tokens_in, "output_tokens": self.tokens_out}}
        message: dict[str, Any] = {"role": "assistant", "content": as_text, "refusal": None}
        if call:
            message["content"] = None
            message["tool_calls"] = [{
                "id": f"call_{n}", "type": "function",
                "function": {"name": body["tools"][0]["function"]["name"],
                             "arguments": json.dumps(payload)}}]
        return {"id": f"chatcmpl-{n}", "object": "chat.completion", "created": 0,
                "model": body["model"],
                "choices": [{"index": 0, "finish_reason": ("length" if act.cut_off else
                                                           "tool_calls" if call else "stop"),
                             "logprobs": None, "message": message}],
                "usage": {"prompt_tokens": self.tokens_in,
                          "completion_tokens": self.tokens_out,
                          "total_tokens": self.tokens_in + self.tokens_out}}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            # Keep-alive, as every provider: the SDKs' connection pools reuse connections,
            # and a connection per request would bill both the judge and the bare client of
            # the benches a TCP handshake (and this server a thread) on every call.
            protocol_version = "HTTP/1.1"
            # TCP_NODELAY: the headers and the body go out as two writes, and with Nagle's
            # algorithm the body waited for the client's delayed ACK, 40 ms on Linux. At
            # full concurrency that hid behind the other requests; with the concurrency
            # cut to 1 by 429s it made every request take 40 ms.
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _routed(self, method: str, raw: bytes) -> bool:
                """Answer from an extra route, if one takes this request."""
                headers = {k.lower(): v for k, v in self.headers.items()}
                for route in server.routes:
                    answer = route(method, self.path, headers, raw)
                    if answer is not None:
                        code, data, content_type = answer
                        self.send_response(code)
                        self.send_header("content-type", content_type)
                        self.send_header("content-length", str(len(data)))
                        self.end_headers()
                        self.wfile.write(data)
                        return True
                return False

            def do_GET(self) -> None:
                if not self._routed("GET", b""):
                    self._send(404, {"error": {"message": f"no route {self.path}",
                                               "type": "not_found"}}, {})

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length)
                if server.routes and self._routed("POST", raw):
                    return
                body = json.loads(raw or b"{}")
                headers = {k.lower(): v for k, v in self.headers.items()}
                act = server._next(Recorded(self.path, headers, body, time.monotonic()))
                n = server.calls
                with server._lock:
                    server._track(+1)
                try:
                    if server.latency_s:
                        time.sleep(server.latency_s)
                    self._act(act, body, headers, n)
                finally:
                    with server._lock:
                        server._track(-1)

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
                if server.refuses(body):
                    with server._lock:
                        server.refused += 1
                    self._send(500, {"error": {"message": LLAMA_CPP_PYTHON_REFUSAL,
                                               "type": "internal_server_error"}}, {})
                    return
                if act.kind == "malformed":
                    self._send_bytes(200, b'{"id": "x", "choices": [ <html>502 Bad Gateway',
                                     {})
                    return
                if act.kind == "cut":
                    data = json.dumps(server._answer(act, body, n)).encode()
                    self._send_bytes(200, data[:len(data) // 2], {}, length=len(data))
                    self.close_connection = True
                    with contextlib.suppress(OSError):
                        self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if act.kind == "status":
                    key = headers.get("authorization", "").removeprefix("Bearer ") or \
                        headers.get("x-api-key", "")
                    message = (f"Incorrect API key provided: {key}" if act.echo_key
                               else act.text or f"fake error {act.status}")
                    payload: dict[str, Any] = {"error": {"message": message,
                                                         "type": "fake_error"}}
                    if server.kind == "anthropic":
                        payload = {"type": "error", "error": {"type": "fake_error",
                                                              "message": message}}
                    self._send(act.status, payload, act.headers)
                    return
                self._send(200, server._answer(act, body, n), {})

            def _send(self, code: int, payload: dict[str, Any], headers: dict[str, str]
                      ) -> bool:
                return self._send_bytes(code, json.dumps(payload).encode(), headers)

            def _send_bytes(self, code: int, data: bytes, headers: dict[str, str],
                            length: int | None = None) -> bool:
                """Whether the whole answer was written (False: the client had gone)."""
                try:
                    self.send_response(code)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data) if length is None
                                                           else length))
                    for k, v in headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    return False  # the client gave up (a timeout test)
                return True

            def handle(self) -> None:
                with server._lock:
                    server.connections += 1
                with contextlib.suppress(OSError, ValueError):
                    super().handle()

        return Handler
