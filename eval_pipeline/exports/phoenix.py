"""Evaluations as Arize Phoenix span annotations: the export files and the write-back rows.

Phoenix keeps evaluations as span annotations, each keyed by (annotation name, span id,
identifier) and carrying ``label``, ``score``, ``explanation`` and ``metadata``; logging the
same key again updates it. (``px.Client().log_evaluations`` and trace evaluations are gone
from current Phoenix.) So every row here names a span: a clip's evaluation goes on the span
its tool call came from, a trajectory-level result (sequence optimality, the trajectory
score) on the trace's root span. Only trajectories whose source carried those ids
(OpenInference / Phoenix span exports, the Phoenix source) can go back; the others are
counted, never given made-up ids.

Two shapes, for two uses:

- :func:`phoenix_evaluations`, the ``phoenix_evaluations/<eval>.parquet`` files: the averages
  over the judges (``averaged_scores``), one per clip and evaluation kind and eval name,
  indexed by ``context.span_id``, ready for ``log_span_annotations_dataframe``. A kind no
  judge could score is there with the label ``not scored``, no score and the errors as its
  explanation.
- :func:`span_annotations`, what the Phoenix write-back sends (and the export's
  ``span_annotations.parquet``): every judge's own rows, with the judge as the annotation's
  ``identifier`` (so two judges' annotations of one span and name live side by side and a
  rerun updates them) and in its ``metadata``, plus the pipeline's trajectory score. A failed
  judgment is written as the label ``failed`` with its error and no score: Phoenix shows the
  failure, never a made-up number.
"""

from __future__ import annotations

import csv
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from statistics import fmean
from typing import Any, Literal

import pandas as pd
from pydantic import BaseModel

from eval_pipeline.exports.common import TrajectoryInfo, records, trajectory_info
from eval_pipeline.exports.tables import value_counts
from eval_pipeline.rubrics import (
    EVAL_CATEGORY_ASSESSMENT,
    EVAL_KIND_CLIP,
    EVAL_QUERY_TO_THOUGHT,
    EVAL_SEQUENCE_OPTIMALITY,
    EVAL_THOUGHT_TO_TOOL,
    EVAL_TRAJECTORY_ASSESSMENT,
    REACT_EVALUATIONS,
)

PHOENIX_DIR = "phoenix_evaluations"
SPAN_INDEX = "context.span_id"
EVAL_COLUMNS = ["label", "score", "explanation"]
NOT_SCORED = "not scored"
TRAJECTORY_SCORE = "trajectory_score"
TRACE_LEVEL = (EVAL_SEQUENCE_OPTIMALITY, TRAJECTORY_SCORE, EVAL_CATEGORY_ASSESSMENT,
               EVAL_TRAJECTORY_ASSESSMENT)
"""Results about a whole trajectory: they go on the trace's root span (a category
assessment too: it covers every clip of its category)."""


class PhoenixEval(BaseModel):
    """One eval name's file, as the manifest lists it."""

    eval_name: str
    file_stem: str
    target: Literal["span", "root_span"]
    """``root_span``: a trace-level result, on the trace's root span."""
    index: str
    rows: int
    left_out_no_id: int
    left_out_same_span: int


# The framework's eval names for the ReAct kinds; the rubric and the trajectory score are
# this project's own.
EVAL_NAMES: dict[str, str] = {
    EVAL_KIND_CLIP: "Clip Rubric (mean over metrics)",
    EVAL_THOUGHT_TO_TOOL: "Tool Calling Eval (Thought-to-Tool)",
    EVAL_QUERY_TO_THOUGHT: "Query Interpretation Eval (Query-to-Thought)",
    EVAL_SEQUENCE_OPTIMALITY: "Sequence Optimality Eval",
    TRAJECTORY_SCORE: "Trajectory Score (overall_trajectory_score)",
}


def _not_scored(errors: object) -> dict[str, object]:
    listed = json.loads(errors) if isinstance(errors, str) and errors else []
    return {"label": NOT_SCORED, "score": None,
            "explanation": "no judge could score this: " + "; ".join(map(str, listed))}


class _FirstPerKey:
    """One ordered stream of candidate rows: the first row per key is kept (Phoenix keeps
    one annotation per key; logging it again updates it), a row without a key is counted,
    a later row on a kept key is counted. Only the keys are held, so a run's streams can
    be fed batch by batch."""

    def __init__(self) -> None:
        self.kept: set[Any] = set()
        self.no_id = 0
        self.same = 0

    def take(self, key: Any, missing: bool = False) -> bool:
        if missing:
            self.no_id += 1
            return False
        if key in self.kept:
            self.same += 1
            return False
        self.kept.add(key)
        return True


EvalRow = tuple[str, dict[str, object]]
"""A kept evaluation: its span id (the file's index) and its label, score, explanation."""


class PhoenixEvaluations:
    """:func:`phoenix_evaluations` fed one batch at a time (#12.3).

    Each eval name's rows come from ``averaged_scores`` (every batch, in order) and, for the
    trajectory score, from ``trajectory_summaries`` after them. :meth:`add` returns a
    batch's kept rows per (eval name, source); the file of an eval name is the averaged
    rows of every batch, then the summaries' rows less :meth:`taken_earlier` (keys the
    averaged rows of the same name already hold: none in practice, as no judge writes
    a ``trajectory_score`` kind).
    """

    def __init__(self) -> None:
        self._averaged = {kind: _FirstPerKey() for kind in EVAL_NAMES}
        self._summaries = {kind: _FirstPerKey() for kind in EVAL_NAMES}

    def add(self, averaged: pd.DataFrame | None, summaries: pd.DataFrame | None,
            trajectories: pd.DataFrame | None, span_ids: Mapping[tuple[str, int], str]
            ) -> dict[tuple[str, str], list[EvalRow]]:
        """(eval name, ``averaged`` or ``summaries``) -> this batch's kept rows."""
        info = trajectory_info(trajectories)
        out: dict[tuple[str, str], list[EvalRow]] = {}
        for row in records(averaged):
            kind = str(row["evaluation_kind"])
            if kind not in self._averaged:
                continue
            tid, ci = str(row["trajectory_id"]), int(row["clip_index"])
            if kind == EVAL_SEQUENCE_OPTIMALITY:
                key = info[tid].root_span_id if tid in info else None
            else:
                key = span_ids.get((tid, ci))
            if row["status"] != "ok":
                values = _not_scored(row.get("errors"))
            elif kind == EVAL_KIND_CLIP:
                values = {"label": None, "score": row["mean_score"],
                          "explanation": row.get("summary") or None}
            else:
                values = {"label": row.get("label"),
                          "score": json.loads(row["scores"]).get(REACT_EVALUATIONS[kind].metric),
                          "explanation": row.get("reasoning") or None}
            if self._averaged[kind].take(key, missing=key is None):
                out.setdefault((kind, "averaged"), []).append((str(key), values))
        for summary in records(summaries, ["trajectory_id", "overall_trajectory_score",
                                           "successful_evaluations", "total_clips"]):
            tid = str(summary["trajectory_id"])
            score = summary["overall_trajectory_score"]
            values = ({"label": None, "score": float(score),
                       "explanation": f"clip-weighted mean of the tool averages over "
                                      f"{summary['successful_evaluations']} of "
                                      f"{summary['total_clips']} clips scored"}
                      if score is not None else
                      {"label": NOT_SCORED, "score": None,
                       "explanation": "no clip of this trajectory was scored by any judge"})
            key = info[tid].root_span_id if tid in info else None
            if self._summaries[TRAJECTORY_SCORE].take(key, missing=key is None):
                out.setdefault((TRAJECTORY_SCORE, "summaries"), []).append((str(key), values))
        return out

    def taken_earlier(self, kind: str) -> set[Any]:
        """Keys of the summaries' rows of ``kind`` that its averaged rows took first."""
        return self._summaries[kind].kept & self._averaged[kind].kept

    def entries(self) -> dict[str, PhoenixEval]:
        """Each eval name's manifest entry, once every batch was added."""
        out = {}
        for kind in EVAL_NAMES:
            first, then = self._averaged[kind], self._summaries[kind]
            earlier = len(self.taken_earlier(kind))
            out[kind] = PhoenixEval(
                eval_name=EVAL_NAMES[kind], file_stem=kind,
                target="root_span" if kind in TRACE_LEVEL else "span", index=SPAN_INDEX,
                rows=len(first.kept) + len(then.kept) - earlier,
                left_out_no_id=first.no_id + then.no_id,
                left_out_same_span=first.same + then.same + earlier)
        return out


def eval_frame(rows: Sequence[EvalRow]) -> pd.DataFrame:
    """Kept evaluations as the file holds them: indexed by span id, score a float."""
    frame = pd.DataFrame([values for _key, values in rows], columns=EVAL_COLUMNS,
                         index=pd.Index([key for key, _values in rows], name=SPAN_INDEX,
                                        dtype=object))
    frame["score"] = frame["score"].astype("float64")
    return frame


def phoenix_evaluations(averaged: pd.DataFrame, summaries: pd.DataFrame,
                        trajectories: pd.DataFrame,
                        span_ids: Mapping[tuple[str, int], str]
                        ) -> dict[str, tuple[PhoenixEval, pd.DataFrame]]:
    """File stem -> (its manifest entry, its DataFrame indexed as Phoenix wants)."""
    builder = PhoenixEvaluations()
    rows = builder.add(averaged, summaries, trajectories, span_ids)
    entries = builder.entries()
    out: dict[str, tuple[PhoenixEval, pd.DataFrame]] = {}
    for kind in EVAL_NAMES:
        earlier = builder.taken_earlier(kind)
        kept = rows.get((kind, "averaged"), []) + [
            r for r in rows.get((kind, "summaries"), []) if r[0] not in earlier]
        out[kind] = (entries[kind], eval_frame(kept))
    return out


def write_phoenix(folder: Path, evals: Mapping[str, tuple[PhoenixEval, pd.DataFrame]],
                  annotations: tuple[pd.DataFrame, AnnotationCounts] | None = None
                  ) -> list[str]:
    """``<kind>.parquet`` and ``<kind>.csv`` per eval name, ``span_annotations.parquet``
    (what the write-back sends) and ``manifest.json`` into ``folder`` (which the caller
    swaps in whole); the names written."""
    written = []
    if annotations is not None:
        frame, counts = annotations
        frame.to_parquet(folder / f"{ANNOTATIONS_STEM}.parquet", index=False)
        (folder / f"{ANNOTATIONS_STEM}.json").write_text(
            counts.model_dump_json(indent=2) + "\n", "utf-8")
        written += [f"{ANNOTATIONS_STEM}.parquet", f"{ANNOTATIONS_STEM}.json"]
    for stem, (_, frame) in evals.items():
        frame.to_parquet(folder / f"{stem}.parquet", index=True)
        frame.to_csv(folder / f"{stem}.csv", index=True, quoting=csv.QUOTE_MINIMAL,
                     lineterminator="\n")
        written += [f"{stem}.parquet", f"{stem}.csv"]
    manifest = [entry.model_dump() for entry, _ in evals.values()]
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", "utf-8")
    return [*written, "manifest.json"]


ANNOTATIONS_STEM = "span_annotations"
ANNOTATION_COLUMNS = ["span_id", "name", "identifier", "annotator_kind", "label", "score",
                      "explanation", "metadata"]
FAILED = "failed"
SOURCE = "eval_pipeline"
"""``metadata.source`` of every annotation this project writes."""


def rubric_metric_name(metric: str) -> str:
    """The annotation name of one rubric metric (``Clip Rubric: reasoning_quality``)."""
    return f"Clip Rubric: {metric}"


def eval_name(kind: str) -> str:
    """The annotation name of an evaluation kind; a kind added later gets its own name."""
    return EVAL_NAMES.get(kind, kind.replace("_", " ").title())


def assessment_name(kind: str, category: str) -> str | None:
    """The annotation name of a category or trajectory assessment (None for other kinds):
    a trajectory's categories all land on its root span, so each category has its own
    name, or Phoenix would keep one of them."""
    if kind == EVAL_CATEGORY_ASSESSMENT:
        return f"Category Assessment: {category}"
    if kind == EVAL_TRAJECTORY_ASSESSMENT:
        return "Trajectory Assessment (mean over metrics)"
    return None


class AnnotationCounts(BaseModel):
    """What :func:`span_annotations` made of the tables, for metadata and the manifest."""

    rows: int = 0
    by_name: dict[str, int] = {}
    failed: int = 0
    """Failed judgments written as the label ``failed`` (no score)."""
    skipped: int = 0
    """Judgments never asked (budget): nothing to say, nothing written."""
    left_out_no_id: int = 0
    """Judgments and trajectory scores of trajectories whose source carried no span ids."""
    left_out_same_span: int = 0
    """A second clip on a span already annotated under the same name and judge."""
    spans: int = 0


def _span_for(kind: str, tid: str, clip_index: int, info: Mapping[str, TrajectoryInfo],
              spans: Mapping[tuple[str, int], str]) -> str | None:
    if tid not in info:
        return None
    if kind in TRACE_LEVEL:
        return info[tid].root_span_id
    return spans.get((tid, clip_index)) or info[tid].root_span_id


def _judgment_annotations(row: Mapping[str, object], meta: dict[str, object]
                          ) -> list[dict[str, object]]:
    """One judgment row as annotations: a failed row one ``failed`` label; a rubric row its
    mean and each metric; a ReAct row its label and score."""
    kind = str(row["evaluation_kind"])
    name = assessment_name(kind, str(row.get("tool_type") or ""))
    if name is not None:  # one annotation: the mean over the assessment's metrics
        if row["status"] != "ok":
            return [{"name": name, "label": FAILED, "score": None,
                     "explanation": str(row.get("error") or "the judgment failed")}]
        marks = {str(k): float(v) for k, v in json.loads(str(row["scores"] or "{}")).items()
                 if v is not None}
        return [{"name": name, "label": None, "score": fmean(marks.values()) if marks else None,
                 "explanation": str(row.get("summary") or row.get("reasoning") or "") or None,
                 "metadata": {**meta, "scores": marks}}]
    if row["status"] != "ok":
        return [{"name": eval_name(kind), "label": FAILED, "score": None,
                 "explanation": str(row.get("error") or "the judgment failed")}]
    scores = {str(k): float(v) for k, v in json.loads(str(row["scores"] or "{}")).items()
              if v is not None}
    if kind == EVAL_KIND_CLIP:
        summary = str(row.get("summary") or row.get("reasoning") or "") or None
        mean: dict[str, object] = {
            "name": eval_name(kind), "label": None,
            "score": fmean(scores.values()) if scores else None,
            "explanation": summary, "metadata": {**meta, "scores": scores}}
        per_metric: list[dict[str, object]] = [
            {"name": rubric_metric_name(m), "label": None, "score": v, "explanation": summary}
            for m, v in scores.items()]
        return [mean, *per_metric]
    metric = REACT_EVALUATIONS[kind].metric if kind in REACT_EVALUATIONS else None
    score = scores.get(metric) if metric else (fmean(scores.values()) if scores else None)
    return [{"name": eval_name(kind), "label": row.get("label"), "score": score,
             "explanation": str(row.get("reasoning") or row.get("summary") or "") or None,
             "metadata": {**meta, "scores": scores}}]


PENDING_ANNOTATOR = "\x00pending"
"""The trajectory scores' ``annotator_kind`` until every judge's provider is known (CODE
when all are the heuristic, else LLM): :meth:`SpanAnnotations.annotator_kind`."""
SUMMARIES_STREAM = ""
"""The stream of the trajectory scores, after every judge's (whose streams are their names)."""


class SpanAnnotations:
    """:func:`span_annotations` fed one batch at a time (#12.3).

    The annotations are one stream per judge (its rows of every batch, in order), then the
    trajectory scores: :meth:`add` returns a batch's kept rows per stream (the judge's
    name, or :data:`SUMMARIES_STREAM`); the file is the streams in :attr:`streams` order.
    The trajectory scores carry :data:`PENDING_ANNOTATOR` until :meth:`annotator_kind`
    (which needs every batch's providers) replaces it.
    """

    def __init__(self, judges: Sequence[str]) -> None:
        self.judges = list(judges)
        self.streams = [*self.judges, SUMMARIES_STREAM]
        self.counts = AnnotationCounts()
        self._kept: dict[str, _FirstPerKey] = {s: _FirstPerKey() for s in self.streams}
        self._names: dict[str, Counter[str]] = {s: Counter() for s in self.streams}
        self._spans: set[str] = set()
        self._providers: set[str] = set()

    def _keep(self, stream: str, out: dict[str, list[dict[str, object]]], span: str,
              identifier: str, kind: str, values: dict[str, object]) -> None:
        name = str(values["name"])
        if not self._kept[stream].take((span, name, identifier)):
            return
        self._names[stream][name] += 1
        self._spans.add(span)
        out.setdefault(stream, []).append({
            "span_id": span, "identifier": identifier, "annotator_kind": kind,
            "label": values.get("label"), "name": values["name"], "score": values.get("score"),
            "explanation": values.get("explanation"), "metadata": values.get("metadata")})

    def add(self, judgments: Mapping[str, pd.DataFrame], summaries: pd.DataFrame | None,
            trajectories: pd.DataFrame | None, span_ids: Mapping[tuple[str, int], str]
            ) -> dict[str, list[dict[str, object]]]:
        """Stream -> this batch's kept annotations (``judgments`` by judge name)."""
        info = trajectory_info(trajectories)
        counts = self.counts
        out: dict[str, list[dict[str, object]]] = {}
        for judge, table in judgments.items():
            if "provider" in table.columns:
                self._providers |= {str(p) for p in table["provider"].dropna().unique()}
            for row in records(table, ["trajectory_id", "clip_index", "evaluation_kind",
                                       "tool_type", "provider", "model", "status", "scores",
                                       "label", "summary", "reasoning", "error", "prompt_hash",
                                       "template_version"]):
                if row["status"] == "skipped":
                    counts.skipped += 1
                    continue
                tid, clip = str(row["trajectory_id"]), int(row["clip_index"])
                span = _span_for(str(row["evaluation_kind"]), tid, clip, info, span_ids)
                if span is None:
                    counts.left_out_no_id += 1
                    continue
                counts.failed += row["status"] != "ok"
                meta: dict[str, object] = {
                    "source": SOURCE, "judge": judge, "provider": row.get("provider"),
                    "model": row.get("model"), "evaluation_kind": row["evaluation_kind"],
                    "tool_type": row.get("tool_type"), "trajectory_id": tid,
                    "clip_index": clip, "batch": info[tid].batch,
                    "trace_id": info[tid].trace_id,
                    "template_version": row.get("template_version"),
                    "prompt_hash": row.get("prompt_hash")}
                annotator = "CODE" if row.get("provider") == "heuristic" else "LLM"
                for values in _judgment_annotations(row, meta):
                    self._keep(judge, out, span, judge, annotator,
                               {**values, "metadata": values.get("metadata", meta)})
        for summary in records(summaries, ["trajectory_id", "overall_trajectory_score",
                                           "successful_evaluations", "total_clips"]):
            tid = str(summary["trajectory_id"])
            span = _span_for(TRAJECTORY_SCORE, tid, -1, info, span_ids)
            if span is None:
                counts.left_out_no_id += 1
                continue
            score = summary["overall_trajectory_score"]
            meta = {"source": SOURCE, "judges": sorted(self.judges), "trajectory_id": tid,
                    "batch": info[tid].batch, "trace_id": info[tid].trace_id,
                    "evaluation_kind": TRAJECTORY_SCORE}
            self._keep(SUMMARIES_STREAM, out, span, "", PENDING_ANNOTATOR, {
                "name": eval_name(TRAJECTORY_SCORE), "metadata": meta,
                **({"label": None, "score": float(score),
                    "explanation": f"clip-weighted mean of the tool averages over "
                                   f"{summary['successful_evaluations']} of "
                                   f"{summary['total_clips']} clips scored"}
                   if score is not None else
                   {"label": NOT_SCORED, "score": None,
                    "explanation": "no clip of this trajectory was scored by any judge"})})
        return out

    def annotator_kind(self) -> str:
        """The trajectory scores' annotator: CODE when every judgment came from the
        heuristic judge, else LLM (once every batch was added)."""
        return "CODE" if self._providers <= {"heuristic"} else "LLM"

    def finish(self) -> AnnotationCounts:
        """The counts, once every batch was added."""
        counts = self.counts
        counts.rows = sum(len(k.kept) for k in self._kept.values())
        counts.left_out_same_span = sum(k.same for k in self._kept.values())
        counts.spans = len(self._spans)
        names: Counter[str] = Counter()
        for stream in self.streams:  # first appearance in the file's order
            names.update(self._names[stream])
        counts.by_name = {str(k): int(v) for k, v in value_counts(names)}
        return counts


def annotation_frame(rows: Sequence[Mapping[str, object]]) -> pd.DataFrame:
    """Kept annotations in the columns ``log_span_annotations_dataframe`` reads
    (``metadata`` as JSON text, for Parquet)."""
    frame = pd.DataFrame(
        [{**v, "metadata": json.dumps(v["metadata"], sort_keys=True, default=str)}
         for v in rows], columns=ANNOTATION_COLUMNS)
    frame["score"] = frame["score"].astype("float64")
    return frame


def span_annotations(judgments: Mapping[str, pd.DataFrame], summaries: pd.DataFrame | None,
                     trajectories: pd.DataFrame | None,
                     span_ids: Mapping[tuple[str, int], str]
                     ) -> tuple[pd.DataFrame, AnnotationCounts]:
    """Every judge's judgments and the trajectory scores as Phoenix span annotations.

    ``judgments``: judge name -> its judgments table; ``span_ids`` as ``clip_span_ids``
    returns them. One row per (span, name, identifier), in the columns
    ``log_span_annotations_dataframe`` reads (``metadata`` as JSON text here, for Parquet).
    """
    builder = SpanAnnotations(list(judgments))
    streams = builder.add(judgments, summaries, trajectories, span_ids)
    kind = builder.annotator_kind()
    rows = [{**row, "annotator_kind": kind} if row["annotator_kind"] == PENDING_ANNOTATOR
            else row for stream in builder.streams for row in streams.get(stream, [])]
    return annotation_frame(rows), builder.finish()
