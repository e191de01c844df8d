"""The full-run canary (#10.4): a key in the environment, a provider whose errors echo it,
and the key is found nowhere a run leaves text.

A CLI run and then a UI run (``dagster job execute`` on the code location, as the UI
launches it, so its steps run in their own processes and write compute logs) judge against
a fake server that fails about a third of the requests with an error body quoting the
Authorization / x-api-key header it received. The canary is not key-shaped (no ``sk-``),
so only redaction by value can hide it. Searched: every file under DAGSTER_HOME (event log
and run SQLite, tables decoded and compressed blobs inflated; compute logs; the judge
cache), the store, the output folder, the CLI's stdout/stderr and log records, the UI
run's output, and what the UI shows through Dagster's GraphQL API: every run's events
(Dagster's own RUN_EVENTS_QUERY), run configs and tags, every asset materialization's
metadata, and the resources page.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import sqlite3
import subprocess
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import pandas as pd
import pyarrow.parquet as pq
import pytest
from dagster_graphql.client.query import METADATA_ENTRY_FRAGMENT, RUN_EVENTS_QUERY
from dagster_graphql.test.utils import define_out_of_process_context, execute_dagster_graphql

from eval_pipeline.cli import main
from eval_pipeline.defs.pipeline.partitions import BATCHES_PARTITION
from eval_pipeline_tests.judges import fake_servers as fs

CANARY = "CanaryZq7Xv93kLmP0wRtYb4"
KEY_ENV = "CANARY_JUDGE_KEY"

ASSETS_QUERY = METADATA_ENTRY_FRAGMENT + """
query {
  assetsOrError {
    ... on AssetConnection {
      nodes {
        key { path }
        assetMaterializations(limit: 1000) {
          runId partition
          metadataEntries { ...metadataEntryFragment }
        }
      }
    }
  }
}
"""

RUNS_QUERY = """
query {
  runsOrError {
    ... on Runs { results { runId status jobName runConfigYaml tags { key value } } }
  }
}
"""

RESOURCES_QUERY = """
query($selector: RepositorySelector!) {
  allTopLevelResourceDetailsOrError(repositorySelector: $selector) {
    ... on ResourceDetailsList {
      results { name configuredValues { key value type } }
    }
  }
}
"""


def _inflate(blob: bytes) -> bytes:
    """A zlib-compressed blob's content (b"" if it is not one)."""
    try:
        return zlib.decompress(blob)
    except zlib.error:
        return b""


def _sqlite_texts(path: Path) -> Iterator[str]:
    """Every value of every table, compressed blobs (Dagster's snapshots) inflated."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        tables = [r[0] for r in db.execute("select name from sqlite_master where type='table'")]
        for table in tables:
            for row in db.execute(f'select * from "{table}"'):
                for value in row:
                    if isinstance(value, bytes):
                        yield value.decode("utf-8", "replace")
                        yield _inflate(value).decode("utf-8", "replace")
                    elif value is not None:
                        yield str(value)


def _file_texts(path: Path) -> Iterator[str]:
    """A file's raw bytes and, where the bytes may hide text, its decoded content."""
    raw = path.read_bytes()
    yield raw.decode("utf-8", "replace")
    if raw.startswith(b"SQLite format 3"):
        yield from _sqlite_texts(path)
    elif raw.startswith(b"PAR1"):
        yield json.dumps(pq.read_table(path).to_pylist(), default=str)
    elif raw.startswith(b"\x1f\x8b"):
        yield gzip.decompress(raw).decode("utf-8", "replace")


def files_holding(root: Path, secret: str) -> list[Path]:
    searched = [p for p in root.rglob("*") if p.is_file()]
    assert searched, f"nothing to search under {root}"
    return [p for p in searched if any(secret in text for text in _file_texts(p))]


def _graphql_answers(project_root: Path, instance: dg.DagsterInstance) -> dict[str, Any]:
    """What the UI reads: runs, their events, materialization metadata, resources."""
    answers: dict[str, Any] = {}
    with define_out_of_process_context(str(project_root / "workspace.yaml"), None,
                                       instance) as context:
        runs = execute_dagster_graphql(context, RUNS_QUERY).data
        answers["runs"] = runs
        for run in runs["runsOrError"]["results"]:
            events = execute_dagster_graphql(context, RUN_EVENTS_QUERY,
                                             {"runId": run["runId"], "limit": 100000}).data
            assert events["logsForRun"]["__typename"] == "EventConnection", events
            answers[f"events {run['runId']}"] = events
        answers["assets"] = execute_dagster_graphql(context, ASSETS_QUERY).data
        selector = {"repositoryLocationName": "eval_pipeline",
                    "repositoryName": "__repository__"}
        answers["resources"] = execute_dagster_graphql(context, RESOURCES_QUERY,
                                                       {"selector": selector}).data
    return answers


@pytest.mark.slow
def test_a_full_run_leaves_the_key_nowhere(project_root, tmp_path, monkeypatch, capsys,
                                          caplog):
    caplog.set_level(logging.DEBUG)
    home, store, out = tmp_path / "home", tmp_path / "store", tmp_path / "out"
    server = fs.FakeLLMServer("openai", faults=fs.FaultMix(
        rate=0.3, seed=4, kinds=("400", "500", "429", "429_retry_after"),
        echo_key=True)).start()
    try:
        judges = tmp_path / "judges.yaml"
        judges.write_text(
            "judges:\n  - name: gpt\n    provider: openai\n    model: gpt-4.1-mini\n"
            f"    base_url: {server.base_url}\n    api_key_env: {KEY_ENV}\n"
            "    concurrency: 4\n    max_retries: 1\n", "utf-8")
        for name, value in {KEY_ENV: CANARY, "DAGSTER_HOME": str(home),
                            "EVAL_PIPELINE_STORE": str(store),
                            "EVAL_PIPELINE_JUDGES": str(judges)}.items():
            monkeypatch.setenv(name, value)

        # The CLI: exit 0, or 3 if the breaker opened on three errors in a row.
        code = main(["run", str(project_root / "data" / "incoming"), "--output", str(out),
                     "--judges", str(judges), "--verbose"])
        printed = capsys.readouterr()
        assert code in (0, 3), printed.err
        cli_calls = server.calls

        # The UI: every batch again in one run; the failed judgments are asked again.
        with dg.DagsterInstance.get() as instance:
            keys = instance.get_dynamic_partitions(BATCHES_PARTITION)
        tags = {"dagster/asset_partition_range_start": keys[0],
                "dagster/asset_partition_range_end": keys[-1]}
        ui = subprocess.run(
            [sys.executable, "-m", "dagster", "job", "execute", "-m",
             "eval_pipeline.definitions", "-j", "evaluate_batch", "--tags", json.dumps(tags)],
            env={**os.environ, "PYTHONPATH": str(project_root)}, cwd=project_root,
            capture_output=True, text=True, timeout=900)
        assert ui.returncode == 0, ui.stderr[-3000:]
        assert server.calls > cli_calls, "the UI run asked the provider again"

        with dg.DagsterInstance.get() as instance:
            answers = _graphql_answers(project_root, instance)
    finally:
        server.stop()

    ui_text = json.dumps(answers)
    assert files_holding(home, CANARY) == []
    assert any((home / "storage").rglob("*.out")) or any((home / "storage").rglob("*.err")), \
        "the UI run's steps wrote compute logs"
    assert files_holding(store, CANARY) == []
    assert files_holding(out, CANARY) == []
    assert CANARY not in printed.out and CANARY not in printed.err
    assert CANARY not in caplog.text
    assert all(CANARY not in str(record.__dict__) for record in caplog.records)
    assert CANARY not in ui.stdout and CANARY not in ui.stderr
    assert CANARY not in ui_text

    # Not for want of a canary to find: it went to the provider, came back in error
    # bodies, and was scrubbed; the UI's answers hold the runs' events and metadata.
    assert all(CANARY in r.headers.get("authorization", "") for r in server.requests)
    assert server.injected["400"] + server.injected["500"] > 10, server.injected
    rows = pd.read_parquet(out / "judgments__gpt.parquet")
    assert rows["error"].str.contains("Incorrect API key provided: [REDACTED]",
                                      regex=False).any()
    assert "judgments" in ui_text and "LogMessageEvent" in ui_text
