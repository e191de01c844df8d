"""The category and trajectory assessments after averaging: per trajectory (its
``evaluation_metadata`` blocks and the blocks embedded at the end of its text) and pooled
over trajectories (the report's columns).

The original tool lists "category assessments" among its evaluation metadata without
showing their layout; they are written here in the layout of its ``tool_averages``
(``average_scores``, ``clip_count``, ``overall_average``), with the judges' combined
summary and reasoning and how many judges succeeded beside them:

``category_assessments``: ``{category: {average_scores, overall_average, clip_count,
status, num_models, summary, reasoning[, errors]}}``, categories in the order of their
last clip (the order their assessments were made);
``final_trajectory_assessment``: ``{average_scores, overall_average, status, num_models,
summary, reasoning[, errors]}``.

An assessment no judge could make has ``status: failed``, empty ``average_scores``, no
``overall_average`` (null, never 0) and the judges' errors. Nothing here averages over
judges again: each averaged row already is the mean over the judges that succeeded.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from html import escape
from typing import Any

from eval_pipeline.rubrics import EVAL_CATEGORY_ASSESSMENT, EVAL_TRAJECTORY_ASSESSMENT
from eval_pipeline.scoring.averaging import indented_scores, json_list, json_object, mean

CATEGORY_KEY = "category_assessments"
FINAL_KEY = "final_trajectory_assessment"

__all__ = ["CATEGORY_KEY", "FINAL_KEY", "assessment_blocks", "assessment_metadata",
           "element_text", "model_info", "pooled_assessments"]


def _block(row: Mapping[str, Any]) -> dict[str, Any]:
    ok = row["status"] == "ok"
    scores = json_object(row["scores"]) if ok else {}
    block: dict[str, Any] = {
        "average_scores": scores,
        "overall_average": mean(list(scores.values())) if scores else None,
        "status": "ok" if ok else "failed",
        "num_models": int(row["n_judges_succeeded"]),
        "summary": row.get("summary") or "",
        "reasoning": row.get("reasoning") or "",
    }
    errors = json_list(row.get("errors"))
    if errors:
        block["errors"] = errors
    return block


def assessment_metadata(rows: Sequence[Mapping[str, Any]],
                        clip_counts: Mapping[str, int]) -> dict[str, Any]:
    """One trajectory's two blocks from its averaged assessment rows (in row order);
    ``clip_counts``: its clips per tool type. A block whose kind has no row is left out."""
    out: dict[str, Any] = {}
    categories: dict[str, Any] = {}
    for row in rows:
        if row["evaluation_kind"] == EVAL_CATEGORY_ASSESSMENT:
            category = str(row["tool_type"])
            block = _block(row)
            categories[category] = {
                "average_scores": block.pop("average_scores"),
                "overall_average": block.pop("overall_average"),
                "clip_count": int(clip_counts.get(category, 0)), **block}
        elif row["evaluation_kind"] == EVAL_TRAJECTORY_ASSESSMENT:
            out[FINAL_KEY] = _block(row)
    if categories:
        out = {CATEGORY_KEY: categories, **out}
    return out


def element_text(value: Any) -> str:
    """A judge's words (summary, reasoning, errors) as element text: ``<``, ``>`` and ``&``
    escaped, so a reply cannot close the block it sits in or add elements to the output.
    (Most texts hold none of the three: three scans instead of three copies.)"""
    text = value if type(value) is str else str(value)
    if "&" in text or "<" in text or ">" in text:
        return escape(text, quote=False)
    return text


_MODEL_INFO: dict[int, str] = {}


def model_info(n: int) -> str:
    """``<model_info>Averaged from n models</model_info>`` (one text per count, kept)."""
    text = _MODEL_INFO.get(n)
    if text is None:
        text = f"<model_info>Averaged from {n} model{'s' if n != 1 else ''}</model_info>\n"
        if len(_MODEL_INFO) < 64:
            _MODEL_INFO[n] = text
    return text


def _element(tag: str, row: Mapping[str, Any], attributes: str = "") -> str:
    if row["status"] != "ok":
        errors = "; ".join(json_list(row.get("errors")))
        return (f"\n<{tag}{attributes}>\n<error>No judge could make this assessment: "
                f"{element_text(errors)}</error>\n</{tag}>\n")
    scores = indented_scores(row)
    return (f"\n<{tag}{attributes}>\n<scores>\n{scores}\n</scores>\n"
            f"<summary>{element_text(row.get('summary') or '')}</summary>\n"
            f"<reasoning>{element_text(row.get('reasoning') or '')}</reasoning>\n"
            f"{model_info(int(row['n_judges_succeeded']))}</{tag}>\n")


def assessment_blocks(rows: Sequence[Mapping[str, Any]]) -> str:
    """The text appended after the response: a ``<category_assessment category="...">``
    block per category, then the ``<final_trajectory_assessment>`` block, each laid out
    like a ``<clip_evaluation>`` block (judge text escaped, so it cannot close the block)."""
    parts = [_element("category_assessment", r,
                      f' category="{escape(str(r["tool_type"]), quote=True)}"')
             for r in rows if r["evaluation_kind"] == EVAL_CATEGORY_ASSESSMENT]
    parts += [_element("final_trajectory_assessment", r)
              for r in rows if r["evaluation_kind"] == EVAL_TRAJECTORY_ASSESSMENT]
    return "".join(parts)


def pooled_assessments(metadata_texts: Iterable[str | Mapping[str, Any]]) -> dict[str, Any]:
    """The report's figures over many trajectories' ``evaluation_metadata`` (JSON, or that
    JSON decoded):

    - ``trajectory_assessment_mean``: mean of the final assessments' ``overall_average``
      over the trajectories that have one (None when none has);
    - ``trajectory_assessment_means``: JSON, per metric the mean over those trajectories,
      and ``assessed``, their number;
    - ``category_assessment_means``: JSON, per category (most assessed first) its metric
      means, ``overall`` (mean of the overall averages) and ``assessed`` (trajectories).
    """
    final_overall: list[float] = []
    final_metrics: dict[str, list[float]] = defaultdict(list)
    per_category: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for text in metadata_texts:
        meta = json.loads(text) if isinstance(text, str) else text
        final = meta.get(FINAL_KEY) or {}
        if final.get("overall_average") is not None:
            final_overall.append(float(final["overall_average"]))
            for metric, value in (final.get("average_scores") or {}).items():
                final_metrics[metric].append(float(value))
        for category, block in (meta.get(CATEGORY_KEY) or {}).items():
            if block.get("overall_average") is None:
                continue
            per_category[category]["overall"].append(float(block["overall_average"]))
            for metric, value in (block.get("average_scores") or {}).items():
                per_category[category][metric].append(float(value))
    ranked = sorted(per_category.items(), key=lambda kv: (-len(kv[1]["overall"]), kv[0]))
    return {
        "trajectory_assessment_mean": mean(final_overall) if final_overall else None,
        "trajectory_assessment_means": json.dumps(
            {**{m: mean(v) for m, v in final_metrics.items()},
             "assessed": len(final_overall)} if final_overall else {}),
        "category_assessment_means": json.dumps({
            category: {**{m: mean(v) for m, v in metrics.items() if m != "overall"},
                       "overall": mean(metrics["overall"]),
                       "assessed": len(metrics["overall"])}
            for category, metrics in ranked}),
    }
