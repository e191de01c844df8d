"""A throwaway ``dagster dev`` for the browser test, and the headless Chromium that drives it.

The server runs on a copy of the project (so the test can edit a rubric without touching
the checkout), with its own DAGSTER_HOME and store, on a free 127.0.0.1 port, in its own
process group: ``dagster dev`` leaves its webserver, daemon and code servers running after a
signal to its own process alone, so it is stopped through its process group, by id.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CHROMIUM_ENV = "EVAL_PIPELINE_CHROMIUM"
"""Path of a Chromium binary, if not where Debian's ``chromium`` package puts it."""
CHROMIUM_CANDIDATES = ("/usr/lib/chromium/chromium", "/usr/bin/chromium",
                       "/usr/bin/chromium-browser")
# The flags that work as root on a loaded CI machine: without the background-networking
# ones Chromium's own requests crowd out the page's and connections are refused.
CHROMIUM_ARGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage")


def chromium_path() -> str | None:
    """Debian's Chromium binary (``apt-get install chromium``), or $EVAL_PIPELINE_CHROMIUM.
    Playwright's own browser download cannot be used: it is not reachable here."""
    chosen = os.environ.get(CHROMIUM_ENV)
    if chosen:
        return chosen if Path(chosen).is_file() else None
    return next((c for c in CHROMIUM_CANDIDATES if Path(c).is_file()), None)


def missing_browser() -> list[str]:
    """What the browser test needs and this machine lacks (empty: it can run)."""
    missing = []
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing.append("the playwright Python package (pip install -e '.[dev]')")
    if chromium_path() is None:
        missing.append("Chromium (apt-get install chromium, or set "
                       f"{CHROMIUM_ENV} to a Chromium binary)")
    return missing


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def copy_project(source: Path, target: Path) -> Path:
    """The package, pyproject.toml, workspace.yaml and the routing suites (data/suites, the
    location's default): what ``dagster dev -w`` loads. Not the rest of data/ (the test
    brings its own store), not caches."""
    target.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(source / "eval_pipeline", target / "eval_pipeline", ignore=ignore)
    for name in ("pyproject.toml", "workspace.yaml"):
        shutil.copy2(source / name, target / name)
    if (source / "data" / "suites").is_dir():
        shutil.copytree(source / "data" / "suites", target / "data" / "suites", ignore=ignore)
    return target


@dataclass
class DagsterDev:
    """A running ``dagster dev``: its URL, process and log."""

    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def graphql(self, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        """Dagster's GraphQL endpoint: the test uses it only to wait, never to act."""
        body = json.dumps({"query": query, "variables": variables or {}}).encode()
        request = urllib.request.Request(f"{self.url}/graphql", data=body,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as response:
            answer = json.load(response)
        if answer.get("errors"):
            raise AssertionError(f"GraphQL errors: {answer['errors']}")
        return answer["data"]

    def runs(self, tags: dict[str, str] | None = None) -> list[dict[str, Any]]:
        query = """query Runs($filter: RunsFilter) { runsOrError(filter: $filter) {
            ... on Runs { results { runId status tags { key value } } } } }"""
        flt = {"tags": [{"key": k, "value": v} for k, v in (tags or {}).items()]}
        return self.graphql(query, {"filter": flt})["runsOrError"]["results"]

    def location_updated(self) -> float:
        """When the code location was last (re)loaded, as the Deployment page shows."""
        query = """{ locationStatusesOrError { ... on WorkspaceLocationStatusEntries {
            entries { name loadStatus updateTimestamp } } } }"""
        entries = self.graphql(query)["locationStatusesOrError"]["entries"]
        return max(e["updateTimestamp"] for e in entries if e["loadStatus"] == "LOADED")

    def log_tail(self, chars: int = 4000) -> str:
        return self.log.read_text("utf-8", errors="replace")[-chars:]


def wait_for(what: str, check: Callable[[], Any], timeout: float, every: float = 2.0,
             server: DagsterDev | None = None) -> Any:
    """Poll ``check`` until it returns something truthy; fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            tail = f"\n--- dagster dev log ---\n{server.log_tail()}" if server else ""
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}{tail}")
        time.sleep(every)


def wait_for_run(server: DagsterDev, run_id: str, timeout: float) -> None:
    """Until the run ends; it must succeed."""
    def finished() -> str | None:
        query = """query Run($id: ID!) { runOrError(runId: $id) { ... on Run { status } } }"""
        status = server.graphql(query, {"id": run_id})["runOrError"]["status"]
        return status if status in ("SUCCESS", "FAILURE", "CANCELED") else None

    status = wait_for(f"run {run_id} to finish", finished, timeout, server=server)
    assert status == "SUCCESS", f"run {run_id} ended {status}\n{server.log_tail()}"


@contextmanager
def dagster_dev(project: Path, home: Path, store: Path, log: Path,
                startup_timeout: float = 240) -> Iterator[DagsterDev]:
    """``dagster dev -w workspace.yaml`` in ``project`` (its package first on the path),
    instance in ``home``, files in ``store``; stopped by its process group id."""
    from eval_pipeline.defs.pipeline.definitions import JUDGES_FILE_ENV
    from eval_pipeline.store import STORE_ENV

    home.mkdir(parents=True, exist_ok=True)
    shutil.copy2(project / "eval_pipeline" / "dagster.yaml", home / "dagster.yaml")
    port = free_port()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("DAGSTER_", "EVAL_PIPELINE_"))}
    env.update({"DAGSTER_HOME": str(home), STORE_ENV: str(store),
                "PYTHONPATH": os.pathsep.join([str(project), env.get("PYTHONPATH", "")])})
    env.pop(JUDGES_FILE_ENV, None)  # the offline heuristic judge
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "dagster", "dev", "-w", "workspace.yaml",
             "-h", "127.0.0.1", "-p", str(port)],
            cwd=project, env=env, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True)
    server = DagsterDev(url=f"http://127.0.0.1:{port}", process=process, log=log)
    try:
        def up() -> bool:
            if process.poll() is not None:
                raise AssertionError(f"dagster dev exited {process.returncode}\n"
                                     f"{server.log_tail()}")
            try:
                return bool(server.location_updated())
            except (urllib.error.URLError, OSError, AssertionError, ValueError, KeyError):
                return False

        wait_for("the webserver and the code location", up, startup_timeout, server=server)
        yield server
    finally:
        stop_process_group(process)


def stop_process_group(process: subprocess.Popen[bytes], grace: float = 30) -> None:
    """SIGINT to the whole group (dagster dev's clean shutdown), SIGKILL to whatever is
    left after ``grace`` seconds; the group is gone when this returns."""
    group = process.pid  # start_new_session: the group id is the leader's pid
    for sig, wait in ((signal.SIGINT, grace), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(group, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            process.poll()
            try:
                os.killpg(group, 0)
            except ProcessLookupError:
                break
            time.sleep(0.5)
    process.wait(timeout=10)
