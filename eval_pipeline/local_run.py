"""Running the whole asset graph locally: split inputs, execute batch runs, export tables.

The CLI's engine, usable from scripts and benchmarks. It is not a second code path: it
registers the batches as dynamic partitions of the same Definitions the UI loads and executes
the same jobs in-process, recording into the Dagster instance under DAGSTER_HOME, so runs,
metadata and lineage show up in ``dagster dev``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import hashlib
import itertools
import json
import multiprocessing
import os
import re
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import pandas as pd
from upath import UPath

from eval_pipeline import progress
from eval_pipeline.allocator import keep_freed_memory
from eval_pipeline.atomic import StoreBusyError, atomic_file, exclusive_store, write_atomic
from eval_pipeline.exports.run import EVALUATED_FIELDS, evaluated_lines, export_run
from eval_pipeline.exports.run_figures import FIGURE_COLUMNS, RunFigures
from eval_pipeline.exports.tables import Part, Parts, asset_parts
from eval_pipeline.ingest import ReadOptions
from eval_pipeline.judges.config import JudgeConfig
from eval_pipeline.preprocess import PreprocessConfig
from eval_pipeline.splitting import (
    DROP_SUFFIXES,
    MANIFEST_SUFFIX,
    BatchManifest,
    MissingBatchError,
    find_batch,
    partition_key_for,
    split_batch_folder,
    split_drop,
    unique_bases,
)
from eval_pipeline.store import (
    Store,
    StoreLocationError,
    project_root,
    record_store,
    resolve_store,
)

DAGSTER_HOME_DIRNAME = ".dagster_home"
_SKIP_DIRS = {"batches", "assets", "output", DAGSTER_HOME_DIRNAME, "__pycache__"}


class PipelineInputError(Exception):
    """A problem the user can fix (missing input, a failed batch); reported in one line."""


def collect_inputs(path: Path, exclude: Path | None = None) -> list[Path]:
    """Input files under ``path``; never the pipeline's own output folder or hidden files."""
    if not path.exists():
        raise PipelineInputError(f"input not found: {path}")
    if path.is_file():
        return [path]
    skip = exclude.resolve() if exclude is not None else None
    found = sorted(
        p for p in path.rglob("*")
        if p.is_file() and p.suffix.lower() in DROP_SUFFIXES
        and not any(part in _SKIP_DIRS or part.startswith(".")
                    for part in p.relative_to(path).parts[:-1])
        and not p.name.startswith(".")
        and not (skip is not None and p.resolve().is_relative_to(skip))
    )
    if not found:
        suffixes = ", ".join(sorted(DROP_SUFFIXES))
        raise PipelineInputError(f"no input files ({suffixes}) under {path}")
    return found


def default_dagster_home() -> Path:
    """Inside the project when run from it (git-ignored), else in the user's home."""
    project = project_root()
    if project is not None:
        return project / DAGSTER_HOME_DIRNAME
    return Path.home() / ".eval_pipeline" / "dagster_home"


# The instance settings the CLI writes into a new DAGSTER_HOME: the template shipped with the
# package (commented, for users to edit). Files an earlier version of the CLI wrote are
# brought up to date; any other file is the user's and stays as it is.
INSTANCE_TEMPLATE = Path(__file__).with_name("dagster.yaml")
_EARLIER_INSTANCE_YAMLS = (
    "telemetry:\n  enabled: false\n",
    "telemetry:\n  enabled: false\npython_logs:\n  python_log_level: INFO\n",
)


_EARLIER_TEMPLATE_SHA256 = frozenset({
    # the commented template before the event log storage (#12.4)
    "051b4da90158783efd7fa490b9702fcd47610a29f1f586194fc5285a3f8e0a7e",
    # the event log storage without its folder (it used $DAGSTER_HOME, #12.4c)
    "486fb98a484cea21bfe98a36e842015ffaaf8a0d9b94bf5d246a3e873fec09e9",
})
_EVENT_LOG_CLASS = "  class: FastSqliteEventLogStorage\n"
_EVENT_LOG_FOLDER = re.compile(re.escape(_EVENT_LOG_CLASS) + r"  config:\n    base_dir: .*\n")


def instance_yaml(home: Path) -> str:
    """The template with the event log's folder written in, absolute: the storage finds
    the instance's history through it wherever the instance is opened from (another
    DAGSTER_HOME, ``DagsterInstance.from_config``), not through ``$DAGSTER_HOME``."""
    folder = json.dumps(str(home.resolve() / "history" / "runs"))  # a YAML quoted string
    return INSTANCE_TEMPLATE.read_text("utf-8").replace(
        _EVENT_LOG_CLASS, f"{_EVENT_LOG_CLASS}  config:\n    base_dir: {folder}\n", 1)


def _written_by_cli(text: str) -> bool:
    """A file this or an earlier CLI wrote (for any folder), not one a user edited."""
    plain = _EVENT_LOG_FOLDER.sub(_EVENT_LOG_CLASS, text, count=1)
    digest = hashlib.sha256(plain.encode("utf-8")).hexdigest()
    current = hashlib.sha256(INSTANCE_TEMPLATE.read_bytes()).hexdigest()
    return (plain in _EARLIER_INSTANCE_YAMLS
            or digest in _EARLIER_TEMPLATE_SHA256 or digest == current)


def hide_beta_warnings() -> None:
    """Dagster marks single-run backfill policies "beta": a notice for the project's
    developers, not for someone evaluating trajectories (the CLI shows it with --verbose)."""
    from dagster import BetaWarning

    warnings.filterwarnings("ignore", category=BetaWarning)


def ensure_dagster_home() -> Path:
    home = Path(os.environ.get("DAGSTER_HOME") or default_dagster_home()).resolve()
    home.mkdir(parents=True, exist_ok=True)
    config = home / "dagster.yaml"
    wanted = instance_yaml(home)
    if not config.exists() or (config.read_text("utf-8") != wanted
                               and _written_by_cli(config.read_text("utf-8"))):
        config.write_text(wanted, "utf-8")
    os.environ["DAGSTER_HOME"] = str(home)
    return home


def split_inputs(inputs: Sequence[Path], batches_dir: Path, split_size: int,
                 read: ReadOptions) -> tuple[list[BatchManifest], list[str]]:
    """The batches of every input, and the keys of earlier batches of the same drops that
    this split no longer makes (a drop that shrank, or a new split size)."""
    manifests: list[BatchManifest] = []
    before: set[str] = set()
    bases = unique_bases(list(inputs))
    for drop in inputs:
        before |= {m.name.split(".")[0]
                   for m in (batches_dir / bases[drop]).glob(f"*{MANIFEST_SUFFIX}")}
        for manifest in split_drop(drop, batches_dir, split_size, read.format_for(drop),
                                   base=bases[drop]):
            if any(m.partition_key == manifest.partition_key for m in manifests):
                raise PipelineInputError(
                    f"two inputs map to batch {manifest.partition_key!r}: rename one of the "
                    f"files named {drop.name!r}")
            manifests.append(manifest)
    return manifests, sorted(before - {m.partition_key for m in manifests})


def write_evaluated(summaries: pd.DataFrame, path: Path) -> int:
    """The original tool's output records: the input fields plus the evaluations, of one
    table in memory (the CLI's export writes them batch by batch: ``export_run``)."""
    ordered = summaries.sort_values(["batch", "source_line"]) if len(summaries) else summaries
    data = evaluated_lines(ordered)

    def write(fh: BinaryIO) -> None:
        fh.write(data)

    write_atomic(path, write)
    return len(ordered)


@dataclass(frozen=True)
class PipelineResult:
    figures: RunFigures
    """This run's figures (what the CLI prints), added up as its exports were written batch
    by batch; the exports themselves are files in the output folder (no whole-run table is
    held, #12.3)."""
    batches: list[str]
    """This run's batch partitions, in order."""
    store: Store
    pending: list[str] = field(default_factory=list)
    """``--no-wait``: one line per batch-mode judge whose provider batch is still out."""
    per_batch: list[Path] = field(default_factory=list)
    """``--batch-folder``: the ``<batch>_eva.jsonl`` files written."""


@dataclass(frozen=True)
class BatchRunSpec:
    """Everything a worker process needs to rebuild the same Definitions (picklable)."""

    judges: tuple[JudgeConfig, ...]
    pipeline: dict[str, object]
    assets_dir: str
    log_level: str

    def definitions(self):
        from eval_pipeline.defs.pipeline.definitions import build_definitions
        from eval_pipeline.defs.pipeline.settings import PipelineSettings

        return build_definitions(self.judges, pipeline=PipelineSettings(**self.pipeline),
                                 assets_dir=self.assets_dir)

    @property
    def run_config(self) -> dict:
        return {"loggers": {"console": {"config": {"log_level": self.log_level}}}}


def check_judge_keys(judges: Sequence[JudgeConfig]) -> None:
    """Fail before any work when a judge's key variable is not set (the key itself is never
    read here beyond checking it is there)."""
    from eval_pipeline.judges.presets import resolve_endpoint

    for judge in judges:
        if judge.provider == "heuristic" or not resolve_endpoint(judge).requires_key:
            continue
        key_env = judge.key_env()  # api_key_env, or the preset's usual variable
        if not key_env or not os.environ.get(key_env):
            variable = key_env or "<api_key_env in the judges file>"
            raise PipelineInputError(
                f"judge {judge.name!r} needs its API key in the environment variable "
                f"{variable}; set it, or remove the judge from the judges file")


def _execute(job, instance, run_config: dict, batches: Sequence[str] = (),
             asset_selection: Sequence[Any] | None = None) -> str | None:
    """Run one job in-process over a range of batches (none: an unpartitioned job); the
    first step failure's message, or None on success."""
    import dagster as dg

    from eval_pipeline.defs.pipeline.partitions import range_tags

    tags = {"eval_pipeline/source": "cli", **(range_tags(batches) if batches else {})}
    try:
        result = job.execute_in_process(instance=instance, run_config=run_config,
                                        raise_on_error=False, tags=tags,
                                        asset_selection=asset_selection)
    except dg.DagsterInvalidConfigError as exc:  # e.g. a resource's EnvVar is not set
        return f"invalid configuration: {' '.join(str(exc).split())[:500]}"
    return None if result.success else _first_failure(result)


def _run_batches_in_worker(spec: BatchRunSpec, runs: list[list[str]], plan: bool = True
                           ) -> tuple[str, str] | None:
    """A worker process: its own Definitions and instance handle, the same DAGSTER_HOME.
    Each element of ``runs`` is one Dagster run over those batches. ``plan``: announce the
    batches to the progress bar (the parent announces them all when it deals runs out)."""
    import dagster as dg

    job = _job(spec)
    shown = progress.current()  # in a worker process: the parent's, through a queue
    if plan:
        shown.batches(planned=sum(len(batches) for batches in runs))
    with dg.DagsterInstance.get() as instance, full_collections_between_runs():
        for batches in runs:
            label = batches[0] if len(batches) == 1 else f"{batches[0]}...{batches[-1]}"
            shown.note(f"evaluating {len(batches)} batch(es) {label}")
            error = _execute(job, instance, spec.run_config, batches)
            gc.collect()  # the run's cyclic garbage, once (see full_collections_between_runs)
            if error:
                return label, error
            shown.batches(done=len(batches))
    shown.close()
    return None


NO_AUTOMATIC_FULL_COLLECTIONS = 1_000_000
"""The collector's third threshold during the CLI's runs: no automatic full collection."""


@contextlib.contextmanager
def full_collections_between_runs() -> Iterator[None]:
    """Python's collector makes no full (oldest generation) collection of its own in the
    block; the caller collects once after each run instead.

    A run over a hundred batches keeps many objects alive (the run's tables in the table
    cache, with the nested steps as Python objects; Dagster's events), and each automatic
    full collection walks all of them: 20 to 25 in a one-process corpora run, 7 s of CPU
    under load, 0.3 s each, while the young collections (which go on as before) found
    nearly all of the garbage. One full collection per run keeps what a run leaves behind
    from piling up across runs (peak RSS of a one-process corpora run: 824 MiB without any,
    852 MiB measured before, #12.4). The thresholds are restored after the block."""
    thresholds = gc.get_threshold()
    gc.set_threshold(thresholds[0], thresholds[1], NO_AUTOMATIC_FULL_COLLECTIONS)
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)


_built: list[tuple[BatchRunSpec, Any]] = []
"""This process's batch job, built once for the runs a worker is dealt one by one."""


def _job(spec: BatchRunSpec) -> Any:
    if not _built or _built[0][0] != spec:
        _built[:] = [(spec, spec.definitions().resolve_job_def("evaluate_batch"))]
    return _built[0][1]


class QueueReporter(progress.Reporter):
    """A worker process's progress, sent to the parent, whose reporter shows it (bars on a
    terminal, lines, nothing under ``--quiet``), as if the runs were in the parent: with
    ``--workers`` the CLI shows the same thing as without. Judgment counts (one per row)
    are summed and sent at most every :data:`_FLUSH_S` seconds, and only when the parent
    counts them."""

    _FLUSH_S = 0.2

    def __init__(self, queue: Any, counts_judgments: bool) -> None:
        self._queue = queue
        self._counts = counts_judgments
        self._done = self._planned = 0
        self._sent = time.monotonic()

    def note(self, text: str) -> None:
        self._queue.put(("note", text))

    def batches(self, planned: int = 0, done: int = 0) -> None:
        self._flush()
        self._queue.put(("batches", planned, done))

    def judgment_callback(self) -> Callable[[int, int], None] | None:
        return self._judged if self._counts else None

    def _judged(self, done: int, planned: int) -> None:
        self._done += done
        self._planned += planned
        if planned or time.monotonic() - self._sent >= self._FLUSH_S:
            self._flush()

    def _flush(self) -> None:
        if self._done or self._planned:
            self._queue.put(("judgments", self._done, self._planned))
            self._done = self._planned = 0
        self._sent = time.monotonic()

    def close(self) -> None:
        self._flush()


def _start_worker(queue: Any, counts_judgments: bool) -> None:
    """A worker process's initializer: its progress goes to the parent's ``queue`` (set
    for the process's life, which :func:`progress.using`, a block, cannot span); its
    freed memory kept for the next batch (:mod:`eval_pipeline.allocator`)."""
    keep_freed_memory()
    progress._current = QueueReporter(queue, counts_judgments)


def _show_worker_progress(queue: Any, shown: progress.Reporter) -> None:
    """The parent's side of :class:`QueueReporter`, in a thread until a None arrives."""
    judged = shown.judgment_callback()
    while (message := queue.get()) is not None:
        kind, *values = message
        if kind == "note":
            shown.note(values[0])
        elif kind == "batches":
            shown.batches(planned=values[0], done=values[1])
        elif judged is not None:
            judged(values[0], values[1])


def run_pipeline(input_path: Path, output: Path, judges: Sequence[JudgeConfig],
                 split_size: int = 10, preprocess: PreprocessConfig | None = None,
                 read: ReadOptions | None = None, log_level: str = "WARNING",
                 workers: int | None = None, batches_per_run: int | None = None,
                 store: Path | None = None,
                 routing: Mapping[str, object] | None = None,
                 batch_folder: bool = False, wait: bool = True) -> PipelineResult:
    """Run every stage for every batch through Dagster and export the results.

    Batch files and asset Parquet go to the instance's store (``store``, else as
    :func:`eval_pipeline.store.resolve_store` finds it), where the UI's code location reads
    them; ``output`` only receives this run's exports. Batches are evaluated
    ``batches_per_run`` at a time (None: all in one run), each run a partition range of the
    batch job, so a run's fixed cost (run creation, event log) and its judge scheduler are
    shared by its batches. With ``workers > 1`` the runs are spread over that many processes
    recording into the same instance, each LLM judge's limits shared between them (see
    :func:`worker_judges`); None chooses (see :func:`auto_workers`: both cores for an
    offline judge on enough batches). ``routing`` sets the
    ``pipeline`` resource's routing modes (``routing_mode``, ``routing_argument_mode``) and
    any other of its settings passed along (``disagreement_threshold``).
    ``batch_folder``: ``input_path`` is a folder already split into batch files, each one
    batch named after its file (see :func:`split_batch_folder_inputs`). ``wait``: with a
    batch-mode judge, poll its provider batches and collect them (False: return once they
    are submitted, with ``pending`` saying so).
    """
    check_judge_keys(judges)
    keep_freed_memory()  # the stages of a one-process run run here
    where = _store(store)
    try:
        with exclusive_store(where.root):  # a second CLI run on the store is refused at once
            return _run_in_store(where, input_path, output, judges, split_size,
                                 preprocess or PreprocessConfig(), read or ReadOptions(),
                                 log_level, workers, batches_per_run, routing or {},
                                 batch_folder, wait)
    except StoreBusyError as exc:
        raise PipelineInputError(str(exc)) from None


def _run_in_store(where: Store, input_path: Path, output: Path,
                  judges: Sequence[JudgeConfig], split_size: int,
                  preprocess: PreprocessConfig, read: ReadOptions, log_level: str,
                  workers: int | None, batches_per_run: int | None,
                  routing: Mapping[str, object], batch_folder: bool = False,
                  wait: bool = True) -> PipelineResult:
    import dagster as dg

    from eval_pipeline.defs.pipeline.partitions import BATCHES_PARTITION, batch_ranges

    inputs = collect_inputs(input_path, exclude=output)
    output.mkdir(parents=True, exist_ok=True)
    manifests, dropped = (
        split_batch_folder_inputs(input_path, inputs, where.batches, read) if batch_folder
        else split_inputs(inputs, where.batches, split_size, read))
    record_store(ensure_dagster_home(), where)
    spec = BatchRunSpec(
        judges=tuple(judges),
        pipeline={"batches_dir": str(where.batches), "incoming_dir": str(where.incoming),
                  "split_size": split_size, **read.model_dump(), **preprocess.model_dump(),
                  **routing},
        assets_dir=where.assets,
        log_level=log_level,
    )
    keys = [m.partition_key for m in manifests]
    forget_batches(dropped)  # their batch files are gone: not partitions to rerun daily
    with dg.DagsterInstance.get() as instance:
        known = set(instance.get_dynamic_partitions(BATCHES_PARTITION))
        instance.add_dynamic_partitions(BATCHES_PARTITION, [k for k in keys if k not in known])
        ordered = instance.get_dynamic_partitions(BATCHES_PARTITION)
    sizes = batch_sizes(where.batches, keys)
    if workers is None:
        workers = auto_workers(judges, sum(sizes.values()), os.cpu_count())
    workers = min(workers, max_workers_for(judges))
    if batches_per_run is None:  # the batches in flight in all workers within the cap
        runs = plan_runs(batch_ranges(keys, ordered), sizes, workers,
                         RUN_BATCH_BYTES // workers)
    else:
        runs = batch_ranges(keys, ordered, batches_per_run)
    workers = min(workers, len(runs))
    if workers <= 1:
        failures = [_run_batches_in_worker(spec, runs)]
    else:
        heaviest = sorted(runs, key=lambda run: -sum(_weight(sizes, k) for k in run))
        failures = _run_in_workers(
            dataclasses.replace(spec, judges=worker_judges(judges, workers)), heaviest,
            workers)
    for failure in failures:
        if failure:
            raise PipelineInputError(f"batch {failure[0]} failed: {failure[1]}")
    defs = spec.definitions()
    pending = collect_batches(spec, defs, runs, keys, wait)
    if pending:
        return PipelineResult(RunFigures(batches=len(keys)), keys, where, pending)
    with dg.DagsterInstance.get() as instance:
        error = _execute(defs.resolve_job_def("evaluation_report_job"), instance,
                         spec.run_config)
    if error:
        raise PipelineInputError(f"evaluation report failed: {error}")
    per_batch = [key.path for key in defs.resolve_asset_graph().get_all_asset_keys()
                 if key != dg.AssetKey("evaluation_report")]
    exported = export_run(UPath(where.assets), output, keys, sorted(per_batch),
                          per_batch_evaluated=batch_folder)
    return PipelineResult(exported.figures, keys, where, per_batch=exported.per_batch)


def _store(store: Path | None) -> Store:
    try:
        return resolve_store(store)
    except StoreLocationError as exc:
        raise PipelineInputError(str(exc)) from None


RUN_BATCH_BYTES = 16 * 2**20
"""Without ``--batches-per-run``, a run holds batches up to about this many bytes of batch
files: a run's steps hold every one of its batches' tables at once, so an unbounded run made
the CLI's memory grow with the drop (#12.3). Measured (``bench_pipeline.py --sections
cli-memory``): the CLI's peak RSS is about 50 times the batch bytes of its largest run (757
MiB on a 10 MB drop, 2,448 on 50 MB, 3,725 on 100 MB with a 64 MB cap), so 16 MB keeps it
near one GB whatever the drop; a run costs a few seconds of Dagster set-up, small beside
16 MB of batches."""


def batch_sizes(batches_dir: Path, keys: Sequence[str]) -> dict[str, int]:
    """The batch files' sizes in bytes (those found), the folders listed once (a glob of
    every drop folder per batch was 11 s of a profiled corpora CLI run at load 5)."""
    from eval_pipeline.defs.pipeline.batch_files import locate_batches

    try:
        return {key: path.stat().st_size
                for key, (path, _m) in locate_batches(batches_dir, keys).items()}
    except (MissingBatchError, OSError):
        pass  # some are gone: look each up, leaving those out
    sizes = {}
    for key in keys:
        try:
            path, _manifest = find_batch(batches_dir, key)
            sizes[key] = path.stat().st_size
        except (MissingBatchError, OSError):
            continue
    return sizes


BATCH_WEIGHT_BYTES = 64 * 2**10
"""What a batch costs a run beside its records (its tables written and read, its events and
metadata for each of the 11 per-batch assets: about 60 ms of CPU on the corpora), in bytes
of batch file whose stages cost the same (about 0.9 s of CPU per MB): run planning
balances the runs on bytes plus this per batch (#12.4)."""


RUNS_PER_WORKER = 2
"""With several workers, at least this many runs per worker, dealt out as workers free up:
how long a run takes is only roughly known beforehand, and a worker left with the last
long run keeps the others idle; more runs cost more of each run's fixed set-up."""
TAIL_SHARES = (0.5, 0.25)
"""With several workers, the last two rounds of runs (one run per worker each) weigh half
and a quarter of the others: the runs are dealt out heaviest first, so the light ones come
last and fill in whichever worker frees up first (see :func:`plan_runs`)."""


def _weight(sizes: Mapping[str, int], key: str) -> int:
    return sizes.get(key, 0) + BATCH_WEIGHT_BYTES


def plan_runs(segments: Sequence[Sequence[str]], sizes: Mapping[str, int], workers: int,
              limit: int) -> list[list[str]]:
    """The runs for batch files of ``sizes`` (bytes by key): each a stretch of one of the
    ``segments`` (contiguous batches, see ``batch_ranges``) holding at most ``limit`` bytes
    (a larger batch alone), as few as that allows (one worker), or with several workers in
    rounds of one run per worker (a multiple of ``workers`` runs where a few more runs make
    one): rounds of about equal weight (:data:`BATCH_WEIGHT_BYTES`), then a round of half
    and one of a quarter of that weight (:data:`TAIL_SHARES`), so the workers finish
    together.

    Cutting by count on the mean batch size left the corpora's first run of four with 11.6
    of its 17 MB (the cap was 8 MB): one worker did two thirds of the work. Runs of equal
    weight still took 10.7 to 16.2 s on the corpora (a batch's cost is only roughly its
    bytes), so the worker that drew the slower runs ran some 4 s alone at the end; runs
    dealt out heaviest first with a light last round leave at most about a light run's time
    (#12.4)."""
    keys = [k for segment in segments for k in segment]
    if not keys:
        return []
    workers = max(1, workers)
    count = max(1, -(-sum(sizes.get(k, 0) for k in keys) // max(1, limit)))
    count = -(-count // workers) * workers
    if workers > 1:
        count = max(count, RUNS_PER_WORKER * workers)
    total = sum(_weight(sizes, k) for k in keys)
    if workers > 1:
        rounds = count // workers
        # the tail replaces the last full round where the count was not set by the byte cap
        full = rounds - 1 if count == RUNS_PER_WORKER * workers else rounds
        shares = [1.0] * (workers * full) + [s for s in TAIL_SHARES for _ in range(workers)]
        return _cut_shares(segments, sizes, limit, shares)
    runs = _cut(segments, sizes, limit, total / count)
    for more in range(count + 1, count + 4 * workers):  # the cap's cuts may add odd runs
        if len(runs) % workers == 0:
            break
        runs = _cut(segments, sizes, limit, total / more)
    return runs


def _cut_shares(segments: Sequence[Sequence[str]], sizes: Mapping[str, int], limit: int,
                shares: Sequence[float]) -> list[list[str]]:
    """The batches in order cut into runs of about ``shares`` of their whole weight, one
    after the other: each batch goes to the share its weight's middle falls in. A run also
    ends where a segment ends, and a share over ``limit`` bytes is cut into runs of about
    equal weight within it, so the shares are kept in order whatever the cap cuts."""
    weights = {k: _weight(sizes, k) for segment in segments for k in segment}
    scale = sum(weights.values()) / sum(shares)
    bounds = list(itertools.accumulate(share * scale for share in shares))
    pieces: list[tuple[int, list[str]]] = []  # (segment, batches) of one share
    done = 0.0
    slot = 0
    for number, segment in enumerate(segments):
        current: list[str] = []
        for key in segment:
            middle = done + weights[key] / 2
            place = next((i for i in range(slot, len(bounds)) if middle < bounds[i]),
                         len(bounds) - 1)
            if current and place != slot:
                pieces.append((number, current))
                current = []
            current.append(key)
            slot, done = place, done + weights[key]
        if current:
            pieces.append((number, current))
    runs: list[tuple[int, list[str]]] = []
    for number, piece in pieces:
        over = -(-sum(sizes.get(k, 0) for k in piece) // max(1, limit))
        if over <= 1:
            runs.append((number, piece))
            continue
        target = sum(weights[k] for k in piece) / over
        runs.extend((number, run) for run in _cut([piece], sizes, limit, target))
    # A scrap the cap left of a share (its set-up would cost more than it balances) goes
    # with the next run, within the cap.
    small = min(shares) * scale / 2
    merged: list[tuple[int, list[str]]] = []
    for number, run in reversed(runs):
        if merged and merged[-1][0] == number and sum(weights[k] for k in run) < small \
                and sum(sizes.get(k, 0) for k in [*run, *merged[-1][1]]) <= limit:
            merged[-1] = (number, [*run, *merged[-1][1]])
        else:
            merged.append((number, run))
    return [run for _number, run in reversed(merged)]


def _cut(segments: Sequence[Sequence[str]], sizes: Mapping[str, int], limit: int,
         target: float) -> list[list[str]]:
    """Each segment cut into runs of about ``target`` weight and at most ``limit`` bytes."""
    runs: list[list[str]] = []
    for segment in segments:
        current: list[str] = []
        weight = size = 0
        for key in segment:
            grown = weight + _weight(sizes, key)
            if current and (size + sizes.get(key, 0) > limit
                            or grown - target > target - weight):  # nearer the target
                runs.append(current)
                current, weight, size, grown = [], 0, 0, _weight(sizes, key)
            current.append(key)
            weight, size = grown, size + sizes.get(key, 0)
        if current:
            runs.append(current)
    return runs


AUTO_WORKERS_MIN_BYTES = 8 * 2**20
"""Below this many bytes of batch files one process does the runs: a worker process costs
about 1 s of CPU to start (importing Dagster, pandas and the stages, building the
Definitions) and two workers about 8 s more CPU than one process on the corpora, while an
offline run costs about 2.5 s of CPU per MB of batch files: on 8 MB two workers should
save some 5 s of the runs' 20 (estimated from the corpora, 17 MB, 41.7 s -> 23.9 s,
docs/performance.md, Orchestration; not measured at 8 MB)."""
AUTO_WORKERS_MAX = 2
"""The most processes chosen by default: measured on two cores, and each worker's SQLite
writes wait for the others' (more would mostly wait)."""


def auto_workers(judges: Sequence[JudgeConfig], batch_bytes: int, cores: int | None) -> int:
    """How many processes run the batches when the user did not say: up to
    :data:`AUTO_WORKERS_MAX` (and the cores) when every judge is offline (the heuristic:
    the runs are CPU-bound, and nobody's rate limit is involved) and the batch files hold
    at least :data:`AUTO_WORKERS_MIN_BYTES`; else one. With an LLM judge the runs wait on
    the provider, whose limits one process's scheduler already fills."""
    if not judges or any(j.provider != "heuristic" for j in judges):
        return 1
    if batch_bytes < AUTO_WORKERS_MIN_BYTES:
        return 1
    return max(1, min(AUTO_WORKERS_MAX, cores or 1))


def max_workers_for(judges: Sequence[JudgeConfig]) -> int:
    """At most one worker per unit of the smallest LLM judge's ``concurrency``: each worker
    gets a share of at least one call at a time (:func:`worker_judges`)."""
    limits = [j.concurrency for j in judges if j.provider != "heuristic"]
    return min(limits) if limits else 2**31


def worker_judges(judges: Sequence[JudgeConfig], workers: int) -> tuple[JudgeConfig, ...]:
    """Each worker's share of each LLM judge's limits (concurrency, requests and tokens per
    minute, budget): the workers together never exceed what the user set for the provider,
    as one process would not. The heuristic judge is left as it is (no provider). None of
    these settings shapes an answer, so code versions and caches are the same."""
    if workers <= 1:
        return tuple(judges)
    shared = []
    for judge in judges:
        if judge.provider == "heuristic":
            shared.append(judge)
            continue
        shared.append(judge.model_copy(update={
            "concurrency": max(1, judge.concurrency // workers),
            **{name: value / workers for name in
               ("requests_per_minute", "tokens_per_minute", "budget_usd")
               if (value := getattr(judge, name)) is not None}}))
    return tuple(shared)


def _run_in_workers(spec: BatchRunSpec, runs: list[list[str]], workers: int
                    ) -> list[tuple[str, str] | None]:
    """The runs in ``workers`` spawned processes, each taking the next run as it finishes
    one (the heaviest first: a run's time is not known beforehand, within a factor of two
    for runs of the same bytes and batches on the corpora, so a fixed share per worker left
    one waiting on the other), their progress shown here. After a failure no further run
    starts."""
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    shown = progress.current()
    counts = shown.judgment_callback() is not None
    shown.batches(planned=sum(len(run) for run in runs))
    relay = threading.Thread(target=_show_worker_progress, args=(queue, shown), daemon=True)
    relay.start()
    failures: list[tuple[str, str] | None] = []
    try:
        with ProcessPoolExecutor(max_workers=workers, mp_context=context,
                                 initializer=_start_worker, initargs=(queue, counts)) as pool:
            pending = [pool.submit(_run_batches_in_worker, spec, [run], False) for run in runs]
            for future in as_completed(pending):
                if future.cancelled():  # not started after an earlier run failed
                    continue
                failures.append(future.result())
                if failures[-1]:
                    for other in pending:
                        other.cancel()
    finally:
        queue.put(None)
        relay.join()
    return failures


def forget_batches(keys: Sequence[str]) -> list[str]:
    """Unregister batch partitions from the instance; the keys that were not registered."""
    import dagster as dg

    from eval_pipeline.defs.pipeline.partitions import BATCHES_PARTITION

    with dg.DagsterInstance.get() as instance:
        known = set(instance.get_dynamic_partitions(BATCHES_PARTITION))
        for key in keys:
            if key in known:
                instance.delete_dynamic_partition(BATCHES_PARTITION, key)
    return [key for key in keys if key not in known]


def _first_failure(result) -> str:
    for event in result.all_events:
        if event.is_step_failure and event.step_failure_data.error is not None:
            return event.step_failure_data.error.message.strip()
    return "unknown failure (see the run in the Dagster UI)"


# -- the original tool's CLI modes: --batch-folder and --preprocess-only -------------------

BATCH_FOLDER_GROUP_SUFFIX = ".batch_folder"
"""Batch files of a ``--batch-folder`` input live in ``batches/<folder>.batch_folder/``:
the dot keeps the group apart from every drop's folder (drop bases have no dots)."""
INGEST_ASSETS = (("raw_trajectories",), ("quarantine",), ("preprocessed_trajectories",),
                 ("preprocess_report",))
"""What ``--preprocess-only`` materializes: parsing and the original's preprocessing."""
PREPROCESSING_NOTE = "Format issues detected and corrected"
"""The original tool's ``preprocessing_notes`` on a record whose tags it repaired."""


def split_batch_folder_inputs(folder: Path, inputs: Sequence[Path], batches_dir: Path,
                              read: ReadOptions) -> tuple[list[BatchManifest], list[str]]:
    """``--batch-folder``: every file of an already-split folder (the original's
    ``predemo02/demo0201.jsonl`` ...) is one batch named after the file, not split again;
    and the keys this folder made before that it no longer makes.

    A key that another drop's batches already use in the store is refused: the instance
    would not know which batch file the partition means.
    """
    if not folder.is_dir():
        raise PipelineInputError(f"--batch-folder needs a folder of batch files, got {folder}")
    group = partition_key_for(folder.resolve().name) + BATCH_FOLDER_GROUP_SUFFIX
    keys = unique_bases(list(inputs))
    for drop, key in keys.items():
        elsewhere = sorted(m for m in batches_dir.glob(f"*/{key}.*{MANIFEST_SUFFIX}")
                           if m.parent.name != group and not m.parent.name.startswith("."))
        if elsewhere:
            raise PipelineInputError(
                f"batch {key!r} (from {drop.name}) already exists in the store as "
                f"{elsewhere[0].parent / elsewhere[0].name.removesuffix(MANIFEST_SUFFIX)}; "
                "use another --store for this folder")
    before = {m.name.split(".")[0] for m in (batches_dir / group).glob(f"*{MANIFEST_SUFFIX}")}
    manifests = split_batch_folder(inputs, batches_dir, group, keys, read.format_for)
    return manifests, sorted(before - {m.partition_key for m in manifests})


def preprocessed_record(row: Mapping[Any, Any]) -> dict[str, object]:
    """One line of the original's preprocessed JSONL: the input fields with the repaired
    ``raw_response``, ``preprocessing_notes`` when tags were repaired, and
    ``preprocessing_metadata`` (its four keys first, then ours: fixes, flags, notes)."""
    record: dict[str, object] = {
        k: (None if isinstance(v, float) and pd.isna(v) else v)
        for k in EVALUATED_FIELDS for v in [row.get(k)]}
    if bool(row.get("format_corrected")):
        record["preprocessing_notes"] = PREPROCESSING_NOTE
    record["preprocessing_metadata"] = json.loads(str(row["preprocessing_metadata"]))
    return record


def write_preprocessed(kept: pd.DataFrame, path: Path) -> int:
    """Kept trajectories in input order (batch, then line), one JSON record a line."""
    ordered = kept.sort_values(["batch", "source_line"]) if len(kept) else kept

    def write(fh: BinaryIO) -> None:
        for row in ordered.to_dict("records"):
            line = json.dumps(preprocessed_record(row), ensure_ascii=False)
            fh.write((line + "\n").encode("utf-8"))

    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, write)
    return len(ordered)


def write_preprocessed_parts(kept: Parts | None, parts: Sequence[Part], path: Path) -> int:
    """:func:`write_preprocessed` of these batches of the kept trajectories, one batch at a
    time (in batch name order, each sorted by line: the order of the whole table sorted)."""
    columns = ["batch", "source_line", *EVALUATED_FIELDS, "format_corrected",
               "preprocessing_metadata"]
    written = 0
    with atomic_file(path) as fh:
        for part in sorted(parts, key=lambda p: p.key):
            assert kept is not None  # parts of it
            frame = kept.read(part, columns)
            for row in frame.sort_values(["batch", "source_line"]).to_dict("records"):
                line = json.dumps(preprocessed_record(row), ensure_ascii=False)
                fh.write((line + "\n").encode("utf-8"))
                written += 1
    return written


@dataclass(frozen=True)
class PreprocessResult:
    figures: RunFigures
    """The ingest assets' figures (the statistics the CLI prints), added up batch by
    batch; the tables themselves are files in the output folder."""
    batches: list[str]
    written: list[Path]
    """The preprocessed JSONL file(s)."""
    store: Store


def run_preprocess_only(input_path: Path, output: Path, split_size: int = 10,
                        preprocess: PreprocessConfig | None = None,
                        read: ReadOptions | None = None, log_level: str = "WARNING",
                        store: Path | None = None, batch_folder: bool = False
                        ) -> PreprocessResult:
    """``--preprocess-only``: materialize only the ingest assets (parse, quarantine,
    preprocess, report) of every batch, in one Dagster run of the batch job, and write the
    kept trajectories as the original's preprocessed JSONL.

    ``output`` ending in ``.jsonl`` is that one file (the original's ``--output
    data/preprocessed.jsonl``); otherwise a folder receiving ``<drop>_preprocessed.jsonl``
    per input (the original's ``demo02.jsonl`` -> ``demo02_preprocessed.jsonl``) and one
    Parquet per ingest asset. The batches stay in the store, so a later full run on the
    same input re-materializes only what comes after preprocessing.
    """
    where = _store(store)
    preprocess, read = preprocess or PreprocessConfig(), read or ReadOptions()
    one_file = output.suffix.lower() == ".jsonl"
    try:
        with exclusive_store(where.root):
            return _preprocess_in_store(where, input_path, output, one_file, split_size,
                                        preprocess, read, log_level, batch_folder)
    except StoreBusyError as exc:
        raise PipelineInputError(str(exc)) from None


def _preprocess_in_store(where: Store, input_path: Path, output: Path, one_file: bool,
                         split_size: int, preprocess: PreprocessConfig, read: ReadOptions,
                         log_level: str, batch_folder: bool) -> PreprocessResult:
    import dagster as dg

    from eval_pipeline.defs.pipeline.partitions import (
        BATCHES_PARTITION,
        batch_ranges,
        range_tags,
    )
    from eval_pipeline.judges.config import DEFAULT_JUDGES

    inputs = collect_inputs(input_path, exclude=output)  # the output file too
    if batch_folder:
        manifests, dropped = split_batch_folder_inputs(input_path, inputs, where.batches, read)
        names = {m.partition_key: m.partition_key for m in manifests}
    else:
        manifests, dropped = split_inputs(inputs, where.batches, split_size, read)
        bases = {str(d.resolve()): b for d, b in unique_bases(list(inputs)).items()}
        names = {m.partition_key: bases[m.drop_file] for m in manifests}
    record_store(ensure_dagster_home(), where)
    spec = BatchRunSpec(
        judges=tuple(DEFAULT_JUDGES),  # not materialized: the selection stops at preprocessing
        pipeline={"batches_dir": str(where.batches), "incoming_dir": str(where.incoming),
                  "split_size": split_size, **read.model_dump(), **preprocess.model_dump()},
        assets_dir=where.assets, log_level=log_level)
    keys = [m.partition_key for m in manifests]
    forget_batches(dropped)
    job = spec.definitions().resolve_job_def("evaluate_batch")
    shown = progress.current()
    with dg.DagsterInstance.get() as instance:
        known = set(instance.get_dynamic_partitions(BATCHES_PARTITION))
        instance.add_dynamic_partitions(BATCHES_PARTITION, [k for k in keys if k not in known])
        ordered = instance.get_dynamic_partitions(BATCHES_PARTITION)
        runs = batch_ranges(keys, ordered, None)
        shown.batches(planned=len(keys))
        for batches in runs:
            shown.note(f"preprocessing {len(batches)} batch(es) {batches[0]}...{batches[-1]}")
            result = job.execute_in_process(
                instance=instance, run_config=spec.run_config, raise_on_error=False,
                asset_selection=[dg.AssetKey(list(path)) for path in INGEST_ASSETS],
                tags={"eval_pipeline/source": "cli", **range_tags(batches)})
            if not result.success:
                raise PipelineInputError(f"preprocessing {batches[0]}...{batches[-1]} "
                                         f"failed: {_first_failure(result)}")
            shown.batches(done=len(batches))
    # Read and written batch by batch, as the run's exports (#12.3).
    base = UPath(where.assets)
    tables = {"__".join(path): Parts(parts) for path in INGEST_ASSETS
              if (parts := asset_parts(base, path, keys))}
    figures = RunFigures(batches=len(keys), tables=list(tables))
    for name, table in tables.items():
        for part in table.parts:
            figures.rows[name] += part.rows
            if part.rows and name in FIGURE_COLUMNS:
                figures.add(name, table.read(part, FIGURE_COLUMNS[name], exact=True))
    kept = tables.get("preprocessed_trajectories")
    written: list[Path] = []
    if one_file:
        write_preprocessed_parts(kept, kept.parts if kept else [], output)
        written.append(output)
    else:
        output.mkdir(parents=True, exist_ok=True)
        for name, table in tables.items():
            table.write(output / f"{name}.parquet")
        for drop in dict.fromkeys(names[k] for k in keys):
            mine = {k for k in keys if names[k] == drop}
            path = output / f"{drop}_preprocessed.jsonl"
            write_preprocessed_parts(kept, [p for p in kept.parts if p.key in mine]
                                     if kept else [], path)
            written.append(path)
    return PreprocessResult(figures, keys, written, where)



# -- routing eval suites (#13.2) ------------------------------------------------------------

def run_routing_suites(suites: Sequence[Path], model: JudgeConfig, mode: str = "superset",
                       argument_mode: str = "exact", store: Path | None = None,
                       log_level: str = "WARNING") -> pd.DataFrame:
    """``eval-pipeline suite``: materialize ``routing_suite_results`` for these suite files
    and this model under test, in-process, recording into the instance under DAGSTER_HOME
    (the UI shows the run and its report); the table it wrote to the store."""
    import dagster as dg

    from eval_pipeline.defs.pipeline.assets.routing_suite import RoutingSuiteSettings
    from eval_pipeline.defs.pipeline.definitions import build_definitions
    from eval_pipeline.judges.config import DEFAULT_JUDGES

    check_judge_keys([model])
    where = _store(store)
    record_store(ensure_dagster_home(), where)
    settings = RoutingSuiteSettings(suites=[str(Path(p).resolve()) for p in suites],
                                    routing_mode=mode, argument_mode=argument_mode)
    defs = build_definitions(DEFAULT_JUDGES, assets_dir=where.assets,
                             model_under_test=model, routing_suites=settings)
    run_config = {"loggers": {"console": {"config": {"log_level": log_level}}}}
    with dg.DagsterInstance.get() as instance:
        error = _execute(defs.resolve_job_def("routing_suite_job"), instance, run_config)
    if error:
        raise PipelineInputError(f"routing suites failed: {error}")
    from upath import UPath

    from eval_pipeline.defs.pipeline.io_manager import read_parquet

    return read_parquet(UPath(where.assets) / "routing_suite_results.parquet")


# -- batch-mode judges (#18): wait for the provider's batches, or leave them ---------------

def collect_batches(spec: BatchRunSpec, defs: Any, runs: Sequence[Sequence[str]],
                    keys: Sequence[str], wait: bool) -> list[str]:
    """After the runs, while a batch-mode judge's provider batch is out on these batches:
    poll it (one progress line per look) and, once it has ended, run the judge and
    everything downstream of it again over the same batches, which collects the answers
    and submits the next wave or materializes. ``wait=False``: return a line per pending
    judge instead. The same thing the UI's batch_results_sensor does, in the foreground."""
    if not any(j.mode == "batch" for j in spec.judges):
        return []
    import dagster as dg

    from eval_pipeline.judges.batch.waiting import pending_jobs, wait_for_batches

    shown = progress.current()
    report = dg.AssetKey("evaluation_report")
    batch_keys = [dg.AssetKey(["judgments", j.name]) for j in spec.judges if j.mode == "batch"]
    selection = sorted(dg.AssetSelection.assets(*batch_keys).downstream().resolve(
        defs.resolve_asset_graph()) - {report}, key=lambda k: k.to_user_string())
    job = defs.resolve_job_def("evaluate_batch")
    while jobs := pending_jobs(spec.judges, keys):
        if not wait:
            return [f"judge {j.judge!r}: wave {j.waves} submitted, provider batch "
                    f"{', '.join(j.in_flight) or '(none in flight)'} ({j.lines} requests)"
                    for j in jobs]
        wait_for_batches(spec.judges, keys, shown.note)
        shown.note("collecting provider batches: "
                   + ", ".join(f"{j.judge} wave {j.waves}" for j in jobs))
        with dg.DagsterInstance.get() as instance:
            for batches in runs:
                error = _execute(job, instance, spec.run_config, batches, selection)
                if error:
                    raise PipelineInputError(f"collecting the batch judges' results for "
                                             f"{batches[0]}...{batches[-1]} failed: {error}")
    return []
