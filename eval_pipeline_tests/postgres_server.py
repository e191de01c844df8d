"""A real PostgreSQL server for the tests: ``initdb`` + ``pg_ctl`` into a temporary folder,
listening on a free port of 127.0.0.1 only, password-protected, stopped by its process id.

Debian's ``postgresql`` package (installed by ``.ci/run``) puts the binaries in
``/usr/lib/postgresql/<version>/bin``, outside PATH. PostgreSQL refuses to run as root, so
under root (CI containers) the server runs as the ``postgres`` system user the package
creates, in a folder handed to that user.
"""

from __future__ import annotations

import glob
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

SERVER_USER = "postgres"
"""The system user the server runs as when the tests run as root."""


def find_binaries() -> Path | None:
    """The folder holding ``initdb`` and ``pg_ctl``, newest version first; None if absent."""
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin"),
                        key=lambda p: int(Path(p).parent.name)
                        if Path(p).parent.name.isdigit() else 0, reverse=True)
    for folder in candidates:
        if (Path(folder) / "initdb").is_file() and (Path(folder) / "pg_ctl").is_file():
            return Path(folder)
    initdb = shutil.which("initdb")
    if initdb and shutil.which("pg_ctl"):
        return Path(initdb).resolve().parent
    return None


def missing_reason() -> str | None:
    """Why a server cannot be started here, or None."""
    if find_binaries() is None:
        return ("PostgreSQL binaries (initdb, pg_ctl) not found: apt-get install postgresql "
                "(.ci/run does)")
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(SERVER_USER)
        except KeyError:
            return f"running as root and no {SERVER_USER!r} system user to run PostgreSQL as"
    try:
        import dagster_postgres  # noqa: F401
        import psycopg2  # noqa: F401  (dagster-postgres' driver)
    except ImportError:
        return "dagster-postgres is not installed (pip install -e '.[deploy]')"
    return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class PostgresServer:
    host: str
    port: int
    user: str
    password: str
    db: str
    pid: int

    def env(self) -> dict[str, str]:
        """The variables the shipped Postgres instance config reads."""
        return {"DAGSTER_PG_HOST": self.host, "DAGSTER_PG_PORT": str(self.port),
                "DAGSTER_PG_USER": self.user, "DAGSTER_PG_PASSWORD": self.password,
                "DAGSTER_PG_DB": self.db}

    def connect(self):
        import psycopg2

        return psycopg2.connect(host=self.host, port=self.port, user=self.user,
                                password=self.password, dbname=self.db)


def _as_server_user(command: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return command
    return ["runuser", "-u", SERVER_USER, "--", *command]


def _stop(pid: int, timeout: float = 30.0) -> None:
    """Fast shutdown (SIGINT to the postmaster), then SIGKILL if it lingers."""
    try:
        os.kill(pid, signal.SIGINT)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)


@contextmanager
def postgres_server(db: str = "dagster", user: str = "dagster") -> Iterator[PostgresServer]:
    """A fresh server with one database, for the length of the ``with`` block."""
    binaries = find_binaries()
    if binaries is None:
        raise RuntimeError(missing_reason() or "no PostgreSQL binaries")
    base = Path(tempfile.mkdtemp(prefix="eval_pipeline_pg_"))
    pid: int | None = None
    try:
        data, log, pwfile = base / "data", base / "server.log", base / "pwfile"
        password = secrets.token_urlsafe(16)
        pwfile.write_text(password + "\n", "utf-8")
        if os.geteuid() == 0:
            entry = pwd.getpwnam(SERVER_USER)
            for path in (base, pwfile):
                os.chown(path, entry.pw_uid, entry.pw_gid)
        pwfile.chmod(0o600)
        subprocess.run(_as_server_user([
            str(binaries / "initdb"), "-D", str(data), "-U", user, "--pwfile", str(pwfile),
            "--auth-host=scram-sha-256", "--auth-local=scram-sha-256", "-E", "UTF8",
            "--no-instructions"]), check=True, capture_output=True, text=True)
        pwfile.unlink()
        port = free_port()
        options = f"-p {port} -k {base} -c listen_addresses=127.0.0.1 -c fsync=off"
        started = subprocess.run(_as_server_user([
            str(binaries / "pg_ctl"), "-D", str(data), "-l", str(log), "-o", options,
            "-w", "-t", "60", "start"]), capture_output=True, text=True)
        if started.returncode != 0:
            raise RuntimeError(f"pg_ctl start failed: {started.stderr.strip()}\n"
                               f"{log.read_text('utf-8', 'replace')[-2000:]}")
        pid = int((data / "postmaster.pid").read_text("utf-8").splitlines()[0])
        server = PostgresServer("127.0.0.1", port, user, password, "postgres", pid)
        conn = server.connect()
        try:
            conn.autocommit = True  # CREATE DATABASE refuses to run in a transaction
            with conn.cursor() as cur:
                cur.execute(f'CREATE DATABASE "{db}"')
        finally:
            conn.close()
        yield PostgresServer("127.0.0.1", port, user, password, db, pid)
    finally:
        if pid is not None:
            _stop(pid)
        shutil.rmtree(base, ignore_errors=True)
