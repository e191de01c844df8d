"""A real Arize Phoenix server for the slow tests, started from its own virtual environment.

The server (``arize-phoenix``, about 850 MB) is never installed into the project's
environment, whose pins its dependencies may fight: ``scripts/bootstrap.sh`` makes
``.venv-phoenix/`` beside ``.venv`` for it (``EVAL_PIPELINE_PHOENIX_SERVER`` may name another
``phoenix`` executable). It runs offline: telemetry off, no external resources (without them
it tries to download a WASM binary at start), a temporary working directory (its SQLite
database), free ports on 127.0.0.1, and it is stopped by its process id.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
SERVER_ENV = "EVAL_PIPELINE_PHOENIX_SERVER"
SERVER_VERSION = "20.26.1"


def server_executable() -> Path:
    named = os.environ.get(SERVER_ENV)
    return Path(named) if named else PROJECT_ROOT / ".venv-phoenix" / "bin" / "phoenix"


def missing_server() -> str | None:
    """Why the real-server tests cannot run here, or None."""
    exe = server_executable()
    if not exe.is_file():
        return (f"the Phoenix server is not installed at {exe} (bash scripts/bootstrap.sh "
                f"makes .venv-phoenix with arize-phoenix=={SERVER_VERSION}, or set "
                f"{SERVER_ENV})")
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PhoenixServer:
    """``phoenix serve`` as a subprocess; ``base_url`` once :meth:`start` returns."""

    def __init__(self, working_dir: Path) -> None:
        self.working_dir = working_dir
        self.port = free_port()
        self.grpc_port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.log = working_dir / "server.log"

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def otlp_endpoint(self) -> str:
        return f"{self.base_url}/v1/traces"

    def start(self, timeout_s: float = 180.0) -> PhoenixServer:
        self.working_dir.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("PHOENIX_")}
        env.update({
            "PHOENIX_WORKING_DIR": str(self.working_dir),
            "PHOENIX_HOST": "127.0.0.1",
            "PHOENIX_PORT": str(self.port),
            "PHOENIX_GRPC_PORT": str(self.grpc_port),
            "PHOENIX_TELEMETRY_ENABLED": "false",
            "PHOENIX_ALLOW_EXTERNAL_RESOURCES": "false",
        })
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [str(server_executable()), "serve"], env=env, stdout=log,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"phoenix serve exited with {self.process.returncode}: "
                                   f"{self.log.read_text('utf-8', 'replace')[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.base_url}/healthz", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                pass
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"phoenix serve not ready in {timeout_s} s: "
                           f"{self.log.read_text('utf-8', 'replace')[-2000:]}")

    def stop(self) -> None:
        """SIGTERM to its process id (it stops in about half a second), SIGKILL if not."""
        if self.process is None or self.process.poll() is not None:
            return
        os.kill(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)
