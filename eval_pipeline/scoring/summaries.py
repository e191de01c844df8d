"""Per-trajectory summaries from the averaged rows, as the original tool computes them.

A trajectory with no scored clip has no overall score. The ReAct evaluations never enter
the original tool's ``evaluation_metadata`` figures or ``overall_trajectory_score``; they
get their own columns and a ``react_evaluations`` block. The category and trajectory
assessments neither: they get the ``category_assessments`` and
``final_trajectory_assessment`` blocks, blocks at the end of the text and the
``trajectory_assessment_score`` column (:mod:`eval_pipeline.scoring.assessments`).

The averaged rows are turned into plain records once (only the columns read, every row's
scores decoded in one ``json.loads``) and bucketed by trajectory in one pass;
per-trajectory pandas sub-frames (a group-by, a sort and a ``to_dict`` for each) cost
about 40 ms a trajectory before. The trajectory table's text and number columns pass
through to the summary table as they are, and the computed columns are built with their
types, so pandas converts and infers nothing it need not. The responses themselves are
cut and joined as Python strings: the clips' end offsets count characters, and finding
them in the UTF-8 bytes of Arrow strings (most responses are not ASCII) costs more than
decoding the texts.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from eval_pipeline.frame_columns import (
    TEXT_DTYPE,
    array_values,
    column_array,
    column_values,
    text_array,
)
from eval_pipeline.rubrics import (
    ASSESSMENT_KINDS,
    EVAL_KIND_CLIP,
    EVAL_QUERY_TO_THOUGHT,
    EVAL_SEQUENCE_OPTIMALITY,
    EVAL_THOUGHT_TO_TOOL,
    REACT_EVALUATIONS,
)
from eval_pipeline.scoring.assessments import (
    FINAL_KEY,
    assessment_blocks,
    assessment_metadata,
    element_text,
    model_info,
)
from eval_pipeline.scoring.averaging import (
    SCORES_TEXT,
    decode_json_objects,
    float_column,
    indented_scores,
    json_list,
    json_object,
    mean,
)
from eval_pipeline.scoring.react_breakdown import react_breakdown, tool_clips

SUMMARY_COLUMNS = [
    "trajectory_id", "batch", "task_id", "source_format", "source_file", "source_line",
    "task_description", "timestamp", "duration", "success", "final_result", "raw_response",
    "total_clips", "successful_evaluations", "success_rate", "overall_trajectory_score",
    "thought_to_tool_accuracy", "query_to_thought_accuracy", "sequence_optimality",
    "trajectory_assessment_score", "routing_passed", "routing_reason", "reward", "final_label",
    "labelled_clips",
    "evaluation_metadata", "full_response_with_evaluations",
]
_metadata_json = json.JSONEncoder(ensure_ascii=False, check_circular=False).encode
"""``json.dumps(meta, ensure_ascii=False)``, the same text: one encoder for every row (dumps
builds one per call with these options), without the cycle check's bookkeeping for each of
the 20 or so dicts of a trajectory's metadata (which holds no cycle: it is built here from
decoded JSON and numbers). The metadata JSON is a fifth of the summaries' time (#12.2)."""
_ROUTING_LISTS = ("expected_tools", "actual_tools", "missing", "unexpected",
                  "argument_failures")



def evaluation_metadata(clip_rows: Sequence[Mapping[str, Any]], model_names: Sequence[str]
                        ) -> dict[str, Any]:
    """The original tool's ``evaluation_metadata`` from one trajectory's averaged clips."""
    by_tool: dict[str, list[dict[str, float]]] = defaultdict(list)
    for row in clip_rows:
        if row["status"] == "ok":
            by_tool[row["tool_type"]].append(json_object(row["scores"]))
    tool_averages: dict[str, Any] = {}
    for tool_type, score_list in by_tool.items():
        metrics: dict[str, list[float]] = defaultdict(list)
        for scores in score_list:
            for metric, value in scores.items():
                metrics[metric].append(value)
        average_scores = {m: mean(v) for m, v in metrics.items()}
        tool_averages[tool_type] = {
            "average_scores": average_scores,
            "clip_count": len(score_list),
            "overall_average": mean(list(average_scores.values())) if average_scores
            else None,
        }
    weighted = [(t["overall_average"], t["clip_count"]) for t in tool_averages.values()
                if t["overall_average"] is not None]
    total_weight = sum(w for _, w in weighted)
    successful = sum(1 for row in clip_rows if row["status"] == "ok")
    total = len(clip_rows)
    return {
        "total_clips": total,
        "num_models": len(model_names),
        "model_names": list(model_names),
        "successful_evaluations": successful,
        "success_rate": successful / total if total else 0.0,
        "overall_trajectory_score": (sum(a * w for a, w in weighted) / total_weight
                                     if total_weight else None),
        "tool_averages": tool_averages,
    }


def react_label_text(row: Mapping[str, Any]) -> str:
    """How one averaged ReAct row reads in the embedded text: the label and the agreement."""
    if row["status"] != "ok":
        return "not scored"
    n = int(row["n_judges_succeeded"])
    label = row.get("label")
    if isinstance(label, str) and label and n == 1:
        return label  # one judge: its label, no counts to read
    counts = json_object(row.get("label_counts"))
    if not isinstance(label, str) or not label:
        return "split (" + ", ".join(f"{k} {v}" for k, v in counts.items()) + ")"
    return f"{label} ({counts.get(label, 0)} of {n} judges)"


_REACT_ORDER = {k: i for i, k in enumerate(REACT_EVALUATIONS)}


def react_checks_line(react_rows: Sequence[Mapping[str, Any]]) -> str:
    """``<react_checks>thought_to_tool: correct; query_to_thought: correct</react_checks>``."""
    if not react_rows:
        return ""
    parts = [f"{r['evaluation_kind']}: {react_label_text(r)}"
             for r in sorted(react_rows,
                             key=lambda r: _REACT_ORDER.get(r["evaluation_kind"], 99))]
    return f"<react_checks>{'; '.join(parts)}</react_checks>\n" if parts else ""


def _errors_text(row: Mapping[str, Any]) -> str:
    return element_text("; ".join(json_list(row["errors"])))


def _model_info(row: Mapping[str, Any]) -> str:
    return model_info(int(row["n_judges_succeeded"]))


def clip_evaluation_block(row: Mapping[str, Any] | None,
                          react_rows: Sequence[Mapping[str, Any]] = ()) -> str:
    """The ``<clip_evaluation>`` block embedded after a clip (multi-model layout).

    The clip's ReAct labels, if any, go in a ``<react_checks>`` line inside the block.
    """
    react = react_checks_line(react_rows)
    if row is None:
        return f"\n<clip_evaluation>\n{react}</clip_evaluation>\n"
    if row["status"] != "ok":
        return ("\n<clip_evaluation>\n<error>No judge could score this clip: "
                + _errors_text(row) + "</error>\n" + react + "</clip_evaluation>\n")
    scores = indented_scores(row)
    return (
        f"\n<clip_evaluation>\n<scores>\n{scores}\n</scores>\n"
        f"<summary>{element_text(row['summary'])}</summary>\n"
        f"<reasoning>{element_text(row['reasoning'])}</reasoning>\n"
        f"{_model_info(row)}{react}</clip_evaluation>\n"
    )


def trajectory_evaluation_block(row: Mapping[str, Any]) -> str:
    """The ``<trajectory_evaluation>`` block appended at the end: sequence optimality."""
    if row["status"] != "ok":
        return ("\n<trajectory_evaluation>\n<sequence_optimality>not scored"
                "</sequence_optimality>\n<error>" + _errors_text(row)
                + "</error>\n</trajectory_evaluation>\n")
    score = json_object(row["scores"]).get(EVAL_SEQUENCE_OPTIMALITY)
    return (
        "\n<trajectory_evaluation>\n"
        f"<sequence_optimality>{react_label_text(row)}</sequence_optimality>\n"
        f"<score>{score}</score>\n"
        f"<summary>{element_text(row['summary'])}</summary>\n"
        f"<reasoning>{element_text(row['reasoning'])}</reasoning>\n"
        f"{_model_info(row)}</trajectory_evaluation>\n"
    )


def react_evaluations(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One trajectory's ReAct figures (the ``react_evaluations`` metadata block).

    thought_to_tool / query_to_thought: ``accuracy`` is the mean score over the clips some
    judge scored (each clip's score is already the judges' agreement), ``scored`` of
    ``total`` clips, and the majority labels counted. sequence_optimality: the averaged
    score and label of the trajectory's single row. A kind nobody scored has no accuracy.
    """
    per_kind: dict[str, list[Mapping[str, Any]]] = {EVAL_THOUGHT_TO_TOOL: [],
                                                   EVAL_QUERY_TO_THOUGHT: [],
                                                   EVAL_SEQUENCE_OPTIMALITY: []}
    for r in rows:
        kind_rows = per_kind.get(r["evaluation_kind"])
        if kind_rows is not None:
            kind_rows.append(r)
    block: dict[str, Any] = {}
    for kind in (EVAL_THOUGHT_TO_TOOL, EVAL_QUERY_TO_THOUGHT):
        kind_rows = per_kind[kind]
        ok_rows = [r for r in kind_rows if r["status"] == "ok"]
        scored = [json_object(r["scores"])[kind] for r in ok_rows]
        labels: dict[str, int] = defaultdict(int)
        for r in ok_rows:
            labels[react_label_text(r).split(" (")[0]] += 1
        block[kind] = {
            "accuracy": mean(scored) if scored else None,
            "scored": len(scored),
            "total": len(kind_rows),
            "labels": dict(sorted(labels.items())),
        }
    seq_ok = [r for r in per_kind[EVAL_SEQUENCE_OPTIMALITY] if r["status"] == "ok"]
    block[EVAL_SEQUENCE_OPTIMALITY] = {
        "score": json_object(seq_ok[0]["scores"])[EVAL_SEQUENCE_OPTIMALITY] if seq_ok
        else None,
        "label": seq_ok[0]["label"] if seq_ok and isinstance(seq_ok[0]["label"], str)
        else None,
        "scored": bool(seq_ok),
    }
    return block


def embed_evaluations(raw_response: str, clip_ends: Iterable[tuple[int, str]]) -> str:
    """Insert each block at its clip's end offset, in one join (not one copy per block).

    Blocks at the same offset come out last-given first, as inserting them back to front
    one by one placed them.
    """
    placed = sorted(enumerate(clip_ends), key=lambda item: (item[1][0], -item[0]))
    pieces: list[str] = []
    cursor = 0
    for _, (end, block) in placed:
        pieces += [raw_response[cursor:end], block]
        cursor = max(cursor, end)
    pieces.append(raw_response[cursor:])
    return "".join(pieces)


def routing_block(row: Mapping[str, Any]) -> dict[str, Any]:
    """The deterministic routing check of one trajectory, for evaluation_metadata."""
    block = {k: row[k] for k in ("passed", "reason", "arguments_checked")}
    block.update({k: _loads_list(row[k]) for k in _ROUTING_LISTS})
    args = row["arguments_passed"]
    block["arguments_passed"] = None if args is None or pd.isna(args) else bool(args)
    block["passed"] = bool(block["passed"])
    block["arguments_checked"] = int(block["arguments_checked"])
    for key in ("match_mode", "argument_mode"):  # since #13: the modes and partial credit
        if isinstance(row.get(key), str):
            block[key] = row[key]
    if row.get("partial_credit") is not None and not pd.isna(row["partial_credit"]):
        block["partial_credit"] = float(row["partial_credit"])
    return block


def _loads_list(value: Any) -> list[Any]:
    if isinstance(value, list):
        return value
    return json.loads(value) if isinstance(value, str) and value else []


def _records(table: pd.DataFrame | None, columns: Sequence[str] | None = None
             ) -> list[dict[str, Any]]:
    """Plain records, only of the columns used (a batch's steps and metadata are big)."""
    if table is None or not len(table):
        return []
    names = [c for c in table.columns if columns is None or c in columns]
    values = [column_values(table, c) for c in names]
    return [dict(zip(names, row, strict=True)) for row in zip(*values, strict=True)]


# The averaged columns the blocks, metadata and breakdowns read (not n_judges, judges,
# spread, disagreement).
_AVERAGED_USED = ("trajectory_id", "clip_index", "evaluation_kind", "tool_type", "status",
                  "scores", "mean_score", "n_judges_succeeded", "summary", "reasoning",
                  "errors", "label", "label_counts")


def _averaged_records(averaged: pd.DataFrame) -> list[dict[str, Any]]:
    """The averaged rows as records of the columns read, their scores and label counts
    decoded once (the blocks, metadata and breakdowns each read them; ``json_object``
    passes a decoded value through): every row's scores in one ``json.loads``, each
    distinct label-count text once (a handful of texts repeat over the rows)."""
    records = _records(averaged, _AVERAGED_USED)
    if not records:
        return records
    texts = [r["scores"] for r in records]
    distinct = list(dict.fromkeys(t for t in texts if type(t) is str))
    by_text = dict(zip(distinct, decode_json_objects(distinct), strict=True))
    for r, text in zip(records, texts, strict=True):
        # Rows with the same text share one dict: nothing here changes a row's scores.
        r["scores"] = by_text[text] if type(text) is str else json_object(text)
        r[SCORES_TEXT] = text
    if "label_counts" in averaged.columns:
        decoded: dict[str, dict[str, Any]] = {}
        for r in records:
            text = r["label_counts"]
            if isinstance(text, str):
                counts = decoded.get(text)
                if counts is None:
                    counts = decoded[text] = json_object(text)
                r["label_counts"] = counts
            else:
                r["label_counts"] = json_object(text)
    return records


def _clip_columns(clips: pd.DataFrame, tools: bool
                  ) -> tuple[dict[tuple[str, int], int], dict[tuple[str, int], Any],
                             dict[str, dict[int, str]]]:
    """Each clip's end offset, its source's step label (clips without one left out), keyed
    by (trajectory, clip), and with ``tools`` each trajectory's tool clips
    (:func:`tool_clips_by_trajectory`); the key columns read once for all three."""
    if not len(clips):
        return {}, {}, {}
    tids = column_values(clips, "trajectory_id")
    indexes = [int(ci) for ci in column_values(clips, "clip_index")]
    keys = list(zip(tids, indexes, strict=True))
    ends = ({key: int(end) for key, end in zip(keys, column_values(clips, "end"), strict=True)}
            if "end" in clips.columns else {})
    human: dict[tuple[str, int], Any] = {}
    if "human_label" in clips.columns:
        labels = dict(zip(keys, column_values(clips, "human_label"), strict=True))
        human = {key: label for key, label in labels.items()
                 if isinstance(label, str) or (label is not None and not pd.isna(label))}
    if not tools or "tool_type" not in clips.columns:
        return ends, human, {}
    names = (column_values(clips, "tool_name") if "tool_name" in clips.columns
             else [None] * len(tids))
    return ends, human, tool_clips(tids, indexes, column_values(clips, "tool_type"), names)


# The columns computed here; every other summary column comes from the trajectory table.
_COMPUTED = ("total_clips", "successful_evaluations", "success_rate",
             "overall_trajectory_score", "thought_to_tool_accuracy",
             "query_to_thought_accuracy", "sequence_optimality", "trajectory_assessment_score",
             "routing_passed", "routing_reason", "labelled_clips", "evaluation_metadata",
             "full_response_with_evaluations")
TRAJECTORY_COLUMNS = [c for c in SUMMARY_COLUMNS if c not in _COMPUTED]
"""The columns of the trajectories :func:`summarize_trajectories` reads (not their nested
steps, which a reader would otherwise convert to Python objects for nothing, #12.4)."""
_STR = TEXT_DTYPE
# Number columns whose Python values pandas infers back to the same type (not int32, a
# masked Int64 or uint8, which would come back as int64 or objects).
_AS_THEY_ARE = (np.dtype(np.int64), np.dtype(np.float64), np.dtype(np.bool_))


def _source_column(trajectories: pd.DataFrame, name: str) -> Any:
    """A summary column taken from the trajectory table as a plain-record table would hold
    it: pandas' own text columns and numpy number columns as they are (no round trip of
    long texts through Python strings, which cost as much as the rest; numbers would come
    back the same), others through Python values (pandas infers their type again, as
    before), a missing column as NaN."""
    if name not in trajectories.columns:
        return [np.nan] * len(trajectories)
    column = column_array(trajectories, name)
    if isinstance(column, np.ndarray) and column.dtype in _AS_THEY_ARE:
        return column  # what their Python values would give back
    if column.dtype == _STR and column.__arrow_array__().null_count < len(column):
        return column
    return array_values(column)  # Python scalars, as Series.tolist gives them


def summarize_trajectories(trajectories: pd.DataFrame, clips: pd.DataFrame,
                           averaged: pd.DataFrame, model_names: Sequence[str],
                           routing: pd.DataFrame | None = None) -> pd.DataFrame:
    """One summary row per trajectory: figures, metadata and the text with its evaluations."""
    if not len(trajectories):
        return pd.DataFrame([], columns=SUMMARY_COLUMNS)
    rubric_by_traj: dict[str, list[dict[str, Any]]] = defaultdict(list)
    react_by_traj: dict[str, list[dict[str, Any]]] = defaultdict(list)
    assessed_by_traj: dict[str, list[dict[str, Any]]] = defaultdict(list)
    has_react = False
    for r in _averaged_records(averaged):
        if r["evaluation_kind"] == EVAL_KIND_CLIP:
            rubric_by_traj[r["trajectory_id"]].append(r)
        elif r["evaluation_kind"] in REACT_EVALUATIONS:
            react_by_traj[r["trajectory_id"]].append(r)
            has_react = True
        elif r["evaluation_kind"] in ASSESSMENT_KINDS:
            assessed_by_traj[r["trajectory_id"]].append(r)
    routing_by_traj = {r["trajectory_id"]: r for r in _records(routing)}
    ends, human, tools_by_traj = _clip_columns(clips, has_react)
    out: dict[str, list[Any]] = {c: [] for c in _COMPUTED}
    responses = (column_values(trajectories, "raw_response")
                 if "raw_response" in trajectories.columns else [None] * len(trajectories))
    for tid, response in zip(column_values(trajectories, "trajectory_id"), responses,
                             strict=True):
        clip_rows = sorted(rubric_by_traj.get(tid, []), key=lambda r: r["clip_index"])
        meta = evaluation_metadata(clip_rows, model_names)
        react_rows = react_by_traj.get(tid, [])
        react_per_clip: dict[int, list[dict[str, Any]]] = defaultdict(list)
        for r in react_rows:
            if int(r["clip_index"]) >= 0:
                react_per_clip[int(r["clip_index"])].append(r)
        rubric_per_clip = {int(r["clip_index"]): r for r in clip_rows}
        blocks = [(ends[(tid, ci)], clip_evaluation_block(rubric_per_clip.get(ci),
                                                          react_per_clip.get(ci, [])))
                  for ci in sorted(set(rubric_per_clip) | set(react_per_clip))
                  if (tid, ci) in ends]
        full = embed_evaluations(response, blocks)
        react = react_evaluations(react_rows)
        if has_react:
            # Added after the original tool's keys, which stay exactly as they were.
            meta["react_evaluations"] = {
                **react, **react_breakdown(react_rows, tools_by_traj.get(tid, {}))}
        routed = routing_by_traj.get(tid)
        if routed is not None:
            meta["routing"] = routing_block(routed)
        seq_rows = [r for r in react_rows if r["evaluation_kind"] == EVAL_SEQUENCE_OPTIMALITY]
        if seq_rows:
            full += trajectory_evaluation_block(seq_rows[0])
        assessed = assessed_by_traj.get(tid, [])
        if assessed:  # after the original tool's keys and the ReAct block
            per_type: dict[str, int] = defaultdict(int)
            for r in clip_rows:
                per_type[str(r["tool_type"])] += 1
            meta.update(assessment_metadata(assessed, per_type))
            full += assessment_blocks(assessed)
        final_assessment = meta.get(FINAL_KEY) or {}
        out["total_clips"].append(meta["total_clips"])
        out["successful_evaluations"].append(meta["successful_evaluations"])
        out["success_rate"].append(meta["success_rate"])
        out["overall_trajectory_score"].append(meta["overall_trajectory_score"])
        out["thought_to_tool_accuracy"].append(react[EVAL_THOUGHT_TO_TOOL]["accuracy"])
        out["query_to_thought_accuracy"].append(react[EVAL_QUERY_TO_THOUGHT]["accuracy"])
        out["sequence_optimality"].append(react[EVAL_SEQUENCE_OPTIMALITY]["score"])
        out["trajectory_assessment_score"].append(final_assessment.get("overall_average"))
        out["routing_passed"].append(bool(routed["passed"]) if routed is not None else None)
        out["routing_reason"].append(routed["reason"] if routed is not None else None)
        # (clip, judges' mean score, the source's step label) for agreement figures.
        labelled = [
            [int(r["clip_index"]), r["mean_score"], human[(tid, int(r["clip_index"]))]]
            for r in clip_rows
            if r["status"] == "ok" and (tid, int(r["clip_index"])) in human
        ] if human else []
        out["labelled_clips"].append(json.dumps(labelled) if labelled else "[]")
        out["evaluation_metadata"].append(_metadata_json(meta))
        out["full_response_with_evaluations"].append(full)
    columns: dict[str, Any] = {c: out[c] if c in out else _source_column(trajectories, c)
                               for c in SUMMARY_COLUMNS}
    for name in ("labelled_clips", "evaluation_metadata", "full_response_with_evaluations"):
        # Texts, every one: the type pandas would infer, without inferring it (a third of
        # the table's construction for the long embedded responses).
        columns[name] = text_array(columns[name])
    for name in ("total_clips", "successful_evaluations"):
        columns[name] = np.array(columns[name], dtype=np.int64)
    for name in ("success_rate", "overall_trajectory_score", "thought_to_tool_accuracy",
                 "query_to_thought_accuracy", "sequence_optimality",
                 "trajectory_assessment_score"):
        columns[name] = float_column(columns[name])
    return pd.DataFrame(columns)  # built in SUMMARY_COLUMNS' order: no reindexing
