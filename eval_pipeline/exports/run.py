"""A run's exports streamed from the store one batch at a time (#12.3).

The CLI exports what its run evaluated into ``--output``: one Parquet per asset, the
report table, ``evaluated.jsonl``, the judge detail files, ``clip_scores.csv``, the Phoenix
files, ``react_metrics.txt`` and the report document. It used to concatenate every batch
of every asset into whole-run DataFrames first, so its peak memory grew about 21 MiB per
MB of drop. :func:`export_run` reads each batch's tables once, in the run's order, and
feeds them to the per-batch builders of each export (the same code the whole-table
functions run, see :mod:`eval_pipeline.exports`); what it keeps across batches is counts,
keys, a few numbers per trajectory and clip, and files on disk:

- each asset's Parquet is written batch by batch (:class:`~.tables.ConcatWriter`) under the
  schema the concatenated table would have had;
- an export whose rows come judge by judge (``clip_scores.csv``, the span annotations) or
  in another order than the batches' is spooled per judge or source into a temporary
  folder in ``--output`` and joined at the end; ``evaluated.jsonl`` is a second pass in
  the order the previous code sorted it (batch name, then source line);
- the report's per-batch rows and its ALL row come from the summaries' report columns,
  with each trajectory's ``evaluation_metadata`` kept compressed and decoded again for each
  figure of the ALL row, never all at once.

Every file is complete or absent: written beside its target and renamed (``atomic``), a
folder filled beside its target and swapped in. The outputs equal the previous code's, bit
for bit (``eval_pipeline_tests/exports/test_streamed_exports.py``).
"""

from __future__ import annotations

import csv
import io
import json
import shutil
import zlib
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from eval_pipeline.atomic import (
    atomic_file,
    new_folder,
    replace_folder,
    temporary_beside,
    write_atomic,
)
from eval_pipeline.exports.clip_scores import (
    CLIP_SCORE_COLUMNS,
    CLIP_SCORES_FILE,
    clip_score_rows,
    clip_scores_csv,
)
from eval_pipeline.exports.common import clip_span_ids, records, trajectory_info
from eval_pipeline.exports.evaluated import evaluated_record
from eval_pipeline.exports.judge_details import JUDGE_DETAILS_DIR, JudgeDetails, judge_detail_text
from eval_pipeline.exports.phoenix import (
    ANNOTATIONS_STEM,
    EVAL_NAMES,
    PHOENIX_DIR,
    SPAN_INDEX,
    SUMMARIES_STREAM,
    PhoenixEvaluations,
    SpanAnnotations,
    annotation_frame,
    eval_frame,
)
from eval_pipeline.exports.pieces import Pieces
from eval_pipeline.exports.react_metrics import REACT_METRICS_FILE, react_metrics_text
from eval_pipeline.exports.report_document import ReportBuilder, write_report_files
from eval_pipeline.exports.run_figures import FIGURE_COLUMNS, JUDGMENTS_PREFIX, RunFigures
from eval_pipeline.exports.tables import (
    ConcatWriter,
    Part,
    Parts,
    Spool,
    StorePath,
    as_concatenated,
    asset_parts,
    like_concatenated,
    read_part,
    to_frame,
)
from eval_pipeline.frame_columns import select_columns
from eval_pipeline.report import REPORT_COLUMNS, REPORT_INPUT_COLUMNS, report_row

EVALUATED_FILE = "evaluated.jsonl"
EVALUATED_FIELDS = ["timestamp", "task_id", "task_description", "duration", "success",
                    "final_result", "raw_response"]
"""The input fields of an ``evaluated.jsonl`` record (then the evaluations)."""
REPORT_TABLE = "evaluation_report"
SUMMARIES = "trajectory_summaries"
TRAJECTORIES = "preprocessed_trajectories"
_TRAJECTORY_COLUMNS = ["trajectory_id", "batch", "task_id", "extra", "task_description",
                       "beta_threshold", "format_corrected"]
"""What the exports read of the trajectories (``steps`` too, for a batch with span ids)."""
_SUMMARY_COLUMNS = list(dict.fromkeys(["trajectory_id", "batch", "successful_evaluations",
                                       "total_clips", *REPORT_INPUT_COLUMNS]))
"""What the first pass reads of the summaries (not the responses: ``evaluated.jsonl``'s
pass reads those)."""
_EVALUATED_COLUMNS = ["batch", "source_line", *EVALUATED_FIELDS,
                      "full_response_with_evaluations", "evaluation_metadata"]


@dataclass(frozen=True)
class RunExports:
    """What the export did: the run's figures (the CLI's summary) and, for
    ``--batch-folder``, the ``<batch>_eva.jsonl`` files."""

    figures: RunFigures
    per_batch: list[Path] = field(default_factory=list)


def export_run(store: StorePath, output: Path, partitions: Sequence[str],
               assets: Sequence[Sequence[str]], per_batch_evaluated: bool = False
               ) -> RunExports:
    """Every export of the run's ``partitions`` of ``assets`` (key paths of per-batch
    assets; the ones with no file among them are not exported) into ``output``, reading
    the store's asset folder ``store`` (a ``Path``, or a ``UPath`` for an fsspec URL) one
    batch at a time.
    ``per_batch_evaluated``: also ``<batch>_eva.jsonl`` per batch (``--batch-folder``)."""
    tables: dict[str, Parts] = {}
    for path in sorted(tuple(p) for p in assets):
        parts = asset_parts(store, path, partitions)
        if parts:
            tables["__".join(path)] = Parts(parts)
    output.mkdir(parents=True, exist_ok=True)
    work = temporary_beside(output / "export")
    work.mkdir()
    try:
        export = _Export(tables, output, work, len(partitions))
        export.first_pass(partitions)
        export.finish()
        per_batch = export.evaluated(per_batch_evaluated)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return RunExports(export.figures, per_batch)


class _Metas(Sequence[Mapping[str, Any]]):
    """Trajectories' ``evaluation_metadata``, kept compressed per batch and decoded one
    batch at a time each time they are read (the ALL row reads them four times)."""

    def __init__(self, blobs: Sequence[tuple[bytes, int]]) -> None:
        self._blobs = list(blobs)
        self._len = sum(n for _blob, n in self._blobs)

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[Mapping[str, Any]]:
        for blob, _n in self._blobs:
            for text in json.loads(zlib.decompress(blob)):
                yield json.loads(text)

    def __getitem__(self, index: Any) -> Any:  # Sequence's contract; not used by the report
        items = list(self)
        return items[index]


def _pack(texts: Sequence[str]) -> tuple[bytes, int]:
    return zlib.compress(json.dumps(list(texts)).encode("utf-8"), 6), len(texts)


class _Export:
    """The state of one run's export between its passes."""

    def __init__(self, tables: dict[str, Parts], output: Path, work: Path,
                 batches: int) -> None:
        self.tables = tables
        self.output = output
        self.work = work
        self.judges = [n[len(JUDGMENTS_PREFIX):] for n in tables if n.startswith(JUDGMENTS_PREFIX)]
        self.figures = RunFigures(batches=batches, tables=list(tables))
        if SUMMARIES in tables:
            self.figures.tables.append(REPORT_TABLE)
        self.by_key = {name: {p.key: p for p in parts.parts} for name, parts in tables.items()}
        self.phoenix = PhoenixEvaluations()
        self.annotations = SpanAnnotations(self.judges)
        self.report = ReportBuilder(self.judges)
        self.eval_spools = {(kind, source): Spool(work, f"eval.{kind}.{source}", index=True)
                            for kind in EVAL_NAMES for source in ("averaged", "summaries")}
        self.annotation_spools = {stream: Spool(work, f"annotations.{i}")
                                  for i, stream in enumerate(self.annotations.streams)}
        self.report_rows: Pieces[pd.DataFrame] = Pieces()
        self.report_metas: dict[str, list[tuple[bytes, int]]] = {}
        self.routing: Pieces[pd.DataFrame] = Pieces()
        self.prompts: dict[Any, Any] = {}

    # -- the first pass: every table of every batch, in the run's order ------------------

    def first_pass(self, partitions: Sequence[str]) -> None:
        with ExitStack() as stack:
            writers = {}
            for name, parts in self.tables.items():
                fh = stack.enter_context(atomic_file(self.output / f"{name}.parquet"))
                writers[name] = stack.enter_context(ConcatWriter(fh, parts.schema))
            details_dir = stack.enter_context(new_folder(self.output / JUDGE_DETAILS_DIR))
            details = JudgeDetails(self._judge_models())
            csv_parts = {judge: stack.enter_context((self.work / f"clip_scores.{i}.csv").open("wb"))
                         for i, judge in enumerate(self.judges)}
            for key in partitions:
                arrow: dict[str, pa.Table] = {}
                for name, by_key in self.by_key.items():
                    part = by_key.get(key)
                    if part is None:
                        continue
                    arrow[name] = read_part(part.path)
                    writers[name].add(arrow[name])
                self._batch(_Batch(arrow, self.tables), details, details_dir, csv_parts)
            for filename, content in details.rest().items():
                (details_dir / filename).write_text(judge_detail_text(content), "utf-8")

    def _judge_models(self) -> dict[str, tuple[str, str]]:
        """Each judge's (provider, model): its first row's, as over the whole table."""
        models = {}
        for judge in self.judges:
            parts = self.tables[JUDGMENTS_PREFIX + judge]
            if parts.nonempty:
                first = records(parts.read(parts.nonempty[0], ["provider", "model"]).head(1))
                models[judge] = (str(first[0]["provider"]), str(first[0]["model"]))
        return models

    def _batch(self, batch: _Batch, details: JudgeDetails, details_dir: Path,
               csv_parts: Mapping[str, BinaryIO]) -> None:
        for name in batch.names:
            self.figures.rows[name] += batch.rows(name)
            prefix = JUDGMENTS_PREFIX if name.startswith(JUDGMENTS_PREFIX) else name
            if prefix in FIGURE_COLUMNS and batch.rows(name):
                self.figures.add(name, batch.frame(name, FIGURE_COLUMNS[prefix], exact=True))
        trajectories = batch.frame(TRAJECTORIES)
        info = trajectory_info(trajectories)
        clips = batch.frame("clips")
        judgments = {j: batch.frame(JUDGMENTS_PREFIX + j) for j in self.judges
                     if JUDGMENTS_PREFIX + j in batch.names}
        averaged = batch.frame("averaged_scores")
        summaries = batch.frame(SUMMARIES, _SUMMARY_COLUMNS, exact=True)
        spans = clip_span_ids(clips, info, trajectories)

        for filename, content in details.add(judgments, clips, trajectories).items():
            (details_dir / filename).write_text(judge_detail_text(content), "utf-8")
        for judge, table in judgments.items():
            scores = clip_score_rows({judge: table}, clips, trajectories, spans)
            if len(scores):
                csv_parts[judge].write(clip_scores_csv(scores, header=False))
        for stream_key, kept in self.phoenix.add(averaged, summaries, trajectories,
                                                 spans).items():
            self.eval_spools[stream_key].add(eval_frame(kept))
        for stream, rows in self.annotations.add(judgments, summaries, trajectories,
                                                 spans).items():
            self.annotation_spools[stream].add(annotation_frame(rows))
        self.report.add(judgments, batch.frame("judge_agreement", exact=True),
                        batch.frame("judge_disagreements"))
        self._report_inputs(summaries)
        routing = batch.frame("routing_checks", exact=True)
        if len(routing):
            self.routing.append(routing)
            wanted = set(routing["trajectory_id"])
            if len(trajectories) and "task_description" in trajectories.columns:
                self.prompts.update({t: d for t, d in zip(
                    trajectories["trajectory_id"], trajectories["task_description"],
                    strict=True) if t in wanted})

    def _report_inputs(self, summaries: pd.DataFrame) -> None:
        """A batch's report columns, its metadata compressed: the report is built from
        them at the end, its rows in batch order as ``build_report`` sorts them."""
        if not len(summaries):
            return
        small = [c for c in REPORT_INPUT_COLUMNS
                 if c != "evaluation_metadata" and c in summaries.columns]
        batches = summaries["batch"]
        kept = batches.notna()  # as groupby drops them
        self.report_rows.append(summaries.loc[kept, [*small, "batch"]].reset_index(drop=True))
        for batch, frame in summaries.groupby("batch", sort=True):
            self.report_metas.setdefault(str(batch), []).append(
                _pack(frame["evaluation_metadata"].tolist()))

    # -- after the first pass: the files joined from their parts -------------------------

    def finish(self) -> None:
        self._clip_scores()
        replace_folder(self.output / PHOENIX_DIR, self._phoenix)
        report = self._report_table() if SUMMARIES in self.tables else None
        if report is not None:
            buffer = io.BytesIO()
            report.to_parquet(buffer, index=False)
            _write_bytes(self.output / f"{REPORT_TABLE}.parquet", buffer.getvalue())
            _write_bytes(self.output / REACT_METRICS_FILE,
                         react_metrics_text(report).encode("utf-8"))
            overall = report[report["batch"] == "ALL"]
            if len(overall):
                self.figures.report_overall = {str(k): v for k, v in
                                               overall.iloc[0].to_dict().items()}
        routing_text = self._routing_text()
        self.figures.routing_text = routing_text
        write_report_files(self.report.finish(report, routing_text), self.output)

    def _clip_scores(self) -> None:
        header = clip_scores_csv(pd.DataFrame([], columns=CLIP_SCORE_COLUMNS))

        def write(fh: BinaryIO) -> None:
            fh.write(header)
            for i, _judge in enumerate(self.judges):
                with (self.work / f"clip_scores.{i}.csv").open("rb") as part:
                    shutil.copyfileobj(part, fh)

        write_atomic(self.output / CLIP_SCORES_FILE, write)

    def _phoenix(self, folder: Path) -> None:
        """The folder ``write_phoenix`` fills, from the spooled parts."""
        annotator = self.annotations.annotator_kind()
        scores = {str(p.path) for p in self.annotation_spools[SUMMARIES_STREAM].parts}
        parts = [p for stream in self.annotations.streams
                 for p in self.annotation_spools[stream].parts]
        if not parts:
            empty = Spool(self.work, "annotations.empty")
            empty.add(annotation_frame([]))
            parts = empty.parts

        def pending(part: Part, table: pa.Table) -> pa.Table:
            if str(part.path) not in scores:
                return table
            index = table.schema.get_field_index("annotator_kind")
            return table.set_column(index, table.schema.field(index), pa.array(
                [annotator] * table.num_rows, type=table.schema.field(index).type))

        # Inside the folder swapped in whole (as write_phoenix's files): no fsync each.
        Parts(parts).write(folder / f"{ANNOTATIONS_STEM}.parquet", sync=False,
                           transform=pending)
        counts = self.annotations.finish()
        (folder / f"{ANNOTATIONS_STEM}.json").write_text(
            counts.model_dump_json(indent=2) + "\n", "utf-8")
        entries = self.phoenix.entries()
        for kind in EVAL_NAMES:
            earlier = self.phoenix.taken_earlier(kind)
            later = {str(p.path) for p in self.eval_spools[(kind, "summaries")].parts}
            kept = (self.eval_spools[(kind, "averaged")].parts
                    + self.eval_spools[(kind, "summaries")].parts)
            if not kept:
                empty = Spool(self.work, f"eval.{kind}.empty", index=True)
                empty.add(eval_frame([]))
                kept = empty.parts

            def taken(part: Part, table: pa.Table, earlier: set[Any] = earlier,
                      later: set[str] = later) -> pa.Table:
                if not earlier or str(part.path) not in later:
                    return table
                return table.filter(pc.invert(pc.is_in(
                    table.column(SPAN_INDEX), value_set=pa.array(sorted(earlier)))))

            Parts(kept).write(folder / f"{kind}.parquet", sync=False, transform=taken)
            with (folder / f"{kind}.csv").open("w", encoding="utf-8", newline="") as fh:
                for i, part in enumerate(kept):
                    chunk = to_frame(taken(part, read_part(part.path)))
                    chunk.to_csv(fh, index=True, header=i == 0, quoting=csv.QUOTE_MINIMAL,
                                 lineterminator="\n")
        manifest = [entries[kind].model_dump() for kind in EVAL_NAMES]
        (folder / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", "utf-8")

    def _report_table(self) -> pd.DataFrame:
        """``build_report`` over this run's summaries: a row per batch (in name order),
        then ALL over every batch's trajectories in that order."""
        rows = []
        kept = self.report_rows.joined()
        if kept is not None and len(kept):
            names = np.array([str(b) for b in kept["batch"]], dtype=object)
            order = np.argsort(names, kind="stable")  # batch by batch, rows as they came
            everything = kept.drop(columns="batch").take(order).reset_index(drop=True)
            names = names[order]
            starts = np.flatnonzero(np.r_[True, names[1:] != names[:-1]])
            ends = np.r_[starts[1:], len(names)]
            blobs: list[tuple[bytes, int]] = []
            for start, end in zip(starts, ends, strict=True):
                batch = str(names[start])
                packed = self.report_metas[batch]
                frame = everything.iloc[start:end].reset_index(drop=True)
                rows.append(report_row(batch, frame, list(_Metas(packed))))
                blobs += packed
            rows.append(report_row("ALL", everything, _Metas(blobs)))
        return pd.DataFrame(rows, columns=REPORT_COLUMNS)

    def _routing_text(self) -> str | None:
        if not self.routing:
            return None
        from eval_pipeline.routing import render_report, results_from_table

        routing = self.routing.joined()
        assert routing is not None  # not empty: checked above
        return render_report(results_from_table(routing, self.prompts))

    # -- the second pass: evaluated.jsonl in the order the previous code sorted it --------

    def evaluated(self, per_batch: bool) -> list[Path]:
        """``evaluated.jsonl``: the summaries sorted by batch, then source line (the
        batches in name order, each sorted on its own); with ``per_batch``, each batch's
        lines also as ``<batch>_eva.jsonl``."""
        summaries = self.tables.get(SUMMARIES)
        written: list[Path] = []
        with atomic_file(self.output / EVALUATED_FILE) as fh:
            for part in sorted(summaries.parts, key=lambda p: p.key) if summaries else []:
                frame = summaries.read(part, _EVALUATED_COLUMNS) if summaries else None
                if frame is None or not len(frame):
                    continue
                ordered = frame.sort_values(["batch", "source_line"])
                fh.write(evaluated_lines(ordered))
                if per_batch:
                    for batch, group in ordered.groupby("batch", sort=True):
                        path = self.output / f"{batch}_eva.jsonl"
                        _write_bytes(path, evaluated_lines(group))
                        written.append(path)
        return written


def _write_bytes(path: Path, data: bytes) -> None:
    def write(fh: BinaryIO) -> None:
        fh.write(data)

    write_atomic(path, write)


def evaluated_lines(ordered: pd.DataFrame) -> bytes:
    """The original tool's output records of these summary rows, in their order."""
    buffer = io.BytesIO()
    for row in ordered.to_dict("records"):
        plain = {str(k): (None if isinstance(v, float) and pd.isna(v) else v)
                 for k, v in row.items()}
        record = evaluated_record(plain, EVALUATED_FIELDS)
        buffer.write((json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8"))
    return buffer.getvalue()


_CONVERTED: dict[str, list[str]] = {
    "raw_trajectories": ["source_format"], "quarantine": ["reason"],
    "preprocess_report": ["reason"], TRAJECTORIES: _TRAJECTORY_COLUMNS,
    SUMMARIES: _SUMMARY_COLUMNS,
}
"""The columns the first pass converts to pandas of these tables (of the others, all):
never the texts no export of that pass reads (the responses, a trajectory's steps unless
it carries span ids)."""


class _Batch:
    """One batch's tables as read (Arrow), and each converted to a DataFrame once, with
    the values and dtypes the concatenated tables have."""

    def __init__(self, arrow: dict[str, pa.Table], tables: Mapping[str, Parts]) -> None:
        self._arrow = arrow
        self._tables = tables
        self._frames: dict[str, pd.DataFrame] = {}

    @property
    def names(self) -> list[str]:
        return list(self._arrow)

    def rows(self, name: str) -> int:
        return self._arrow[name].num_rows if name in self._arrow else 0

    def _converted(self, name: str) -> pd.DataFrame:
        if name in self._frames:
            return self._frames[name]
        table = self._arrow.get(name)
        if table is None:  # no file for this batch: the table's columns, no rows
            if name not in self._tables:
                return pd.DataFrame()
            table = self._tables[name].schema.empty_table()
        columns = _CONVERTED.get(name)
        if name == TRAJECTORIES and _has_span_ids(table):
            columns = [*_TRAJECTORY_COLUMNS, "steps"]  # for the clips' span ids
        if columns is not None:
            table = table.select([c for c in columns if c in table.column_names])
        frame = like_concatenated(to_frame(table), self._tables[name].dtypes)
        self._frames[name] = frame
        return frame

    def frame(self, name: str, columns: Sequence[str] | None = None,
              exact: bool = False) -> pd.DataFrame:
        """``name``'s DataFrame (only ``columns``; empty when the batch has no file for
        it); ``exact``: every column in the concatenation's dtype (for rows kept across
        batches), else only the values made equal (:func:`like_concatenated`)."""
        frame = self._converted(name)
        if columns is not None:
            frame = select_columns(frame, [c for c in columns if c in frame.columns])
        if exact and name in self._tables:
            frame = as_concatenated(frame, self._tables[name].dtypes)
        return frame


def _has_span_ids(trajectories: pa.Table) -> bool:
    """Whether any trajectory's ``extra`` names step span ids (read as text, not decoded)."""
    if "extra" not in trajectories.column_names:
        return False
    extra = trajectories.column("extra")
    if not (pa.types.is_string(extra.type) or pa.types.is_large_string(extra.type)):
        return False
    return bool(pc.any(pc.match_substring(extra, "step_span_ids")).as_py())
