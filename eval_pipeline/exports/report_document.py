"""``report.md``, ``report.html`` and ``plots/*.png``: the run's report for a person.

Built only from the tables the CLI exports (``evaluation_report``, ``judge_agreement``,
``judge_disagreements``, ``judgments__<judge>``, ``routing_checks``), so
:func:`write_report` can regenerate it from an output folder without Dagster. The document
is a list of :class:`Section` of plain blocks, rendered twice (Markdown, HTML) so both say
the same; a section with no data is left out rather than shown empty.

Judge text (summaries, reasoning) and source text (task ids, prompts) are untrusted: in
HTML every string goes through :func:`html.escape`; in Markdown a table cell cannot close
its row (``|`` escaped, newlines folded) nor open raw HTML (``<``, ``>``, ``&`` escaped), and
a preformatted block's fence is longer than any backtick run inside it.
"""

from __future__ import annotations

import html
import json
import re
import shutil
from array import array
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import pandas as pd
import pyarrow.parquet as pq

from eval_pipeline.atomic import replace_folder, write_atomic
from eval_pipeline.exports.pieces import Pieces
from eval_pipeline.rubrics import EVAL_KIND_CLIP

REPORT_MD = "report.md"
REPORT_HTML = "report.html"
PLOTS_DIR = "plots"
COMPARE_MD = "compare.md"
SCORE_PLOT = "score_distribution.png"
SCATTER_PLOT = "judge_vs_judge.png"
CONFUSION_PLOT = "judge_vs_human.png"
REVIEW_ROWS = 20
"""Items listed for review: enough to start reading, small enough to read."""
TEXT_LIMIT = 200
"""Characters of a judge's text shown in a table cell."""
_JUDGMENT_COLUMNS = ["trajectory_id", "clip_index", "evaluation_kind", "tool_type", "status",
                     "scores", "summary", "reasoning"]
_REPEAT_COLUMNS = ["repeats_ok", "score_std", "straddles"]


# --- the document model ------------------------------------------------------------------


@dataclass(frozen=True)
class Table:
    headers: list[str]
    rows: list[list[Any]]


@dataclass(frozen=True)
class Text:
    text: str


@dataclass(frozen=True)
class Preformatted:
    text: str


@dataclass(frozen=True)
class Image:
    path: str
    """Relative to the document."""
    alt: str


@dataclass(frozen=True)
class Link:
    href: str
    text: str


Block = Table | Text | Preformatted | Image | Link


@dataclass
class Section:
    title: str
    blocks: list[Block] = field(default_factory=list)


def fmt(value: Any) -> str:
    """One cell: floats to 3 decimals, missing values as an en dash (never 0)."""
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def _clip(text: Any, limit: int = TEXT_LIMIT) -> str:
    s = "" if text is None or (isinstance(text, float) and pd.isna(text)) else str(text)
    return s if len(s) <= limit else s[: limit - 1] + "…"


# --- rendering ---------------------------------------------------------------------------


def md_cell(value: Any) -> str:
    """A Markdown table cell that cannot end its row or start raw HTML."""
    text = html.escape(fmt(value), quote=False)
    text = re.sub(r"\s*[\r\n]+\s*", " ", text)
    return text.replace("|", "\\|")


def _fence(text: str) -> str:
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


def render_markdown(sections: Sequence[Section], title: str | None = None) -> str:
    out: list[str] = [f"# {title}", ""] if title else []
    for section in sections:
        out += [f"## {section.title}", ""]
        for block in section.blocks:
            if isinstance(block, Table):
                out.append("| " + " | ".join(md_cell(h) for h in block.headers) + " |")
                out.append("|" + "---|" * len(block.headers))
                out += ["| " + " | ".join(md_cell(c) for c in row) + " |" for row in block.rows]
            elif isinstance(block, Text):
                out.append(block.text)
            elif isinstance(block, Preformatted):
                fence = _fence(block.text)
                out += [fence, block.text.rstrip("\n"), fence]
            elif isinstance(block, Image):
                out.append(f"![{md_cell(block.alt)}]({block.path})")
            else:
                out.append(f"[{md_cell(block.text)}]({block.href})")
            out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


_CSS = ("body{font-family:sans-serif;max-width:1100px;margin:2em auto;padding:0 1em}"
        "table{border-collapse:collapse;margin:1em 0;font-size:0.9em}"
        "td,th{border:1px solid #ccc;padding:3px 6px;text-align:left;vertical-align:top}"
        "pre{background:#f6f6f6;padding:1em;overflow-x:auto}img{max-width:100%}")


def render_html(sections: Sequence[Section], title: str) -> str:
    e = html.escape
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           f"<title>{e(title)}</title><style>{_CSS}</style></head><body>", f"<h1>{e(title)}</h1>"]
    for section in sections:
        out.append(f"<h2>{e(section.title)}</h2>")
        for block in section.blocks:
            if isinstance(block, Table):
                out.append("<table><thead><tr>" + "".join(f"<th>{e(h)}</th>"
                                                          for h in block.headers)
                           + "</tr></thead><tbody>")
                out += ["<tr>" + "".join(f"<td>{e(fmt(c))}</td>" for c in row) + "</tr>"
                        for row in block.rows]
                out.append("</tbody></table>")
            elif isinstance(block, Text):
                out.append(f"<p>{e(block.text)}</p>")
            elif isinstance(block, Preformatted):
                out.append(f"<pre>{e(block.text)}</pre>")
            elif isinstance(block, Image):
                out.append(f'<p><img src="{e(block.path)}" alt="{e(block.alt)}"></p>')
            else:
                out.append(f'<p><a href="{e(block.href)}">{e(block.text)}</a></p>')
    out.append("</body></html>")
    return "\n".join(out) + "\n"


# --- sections from tables ----------------------------------------------------------------

_METRIC_COLUMNS = ["batch", "trajectories", "scored_trajectories", "total_clips",
                   "successful_evaluations", "clip_success_rate", "mean_overall_score",
                   "agent_success_rate"]
_REACT_COLUMNS = ["batch", "thought_to_tool_accuracy", "query_to_thought_accuracy",
                  "sequence_optimality_accuracy", "combined_accuracy"]


def _records(table: pd.DataFrame | None) -> list[dict[str, Any]]:
    if table is None or not len(table):
        return []
    return [{str(k): (None if isinstance(v, float) and pd.isna(v) else v)
             for k, v in r.items()} for r in table.to_dict("records")]


def _int(value: Any) -> int | None:
    """A count read back from a column with gaps (Parquet makes it float)."""
    return None if value is None else int(value)


_COUNTS = {"items", "judges", "disagreements", "true_positive", "false_positive",
           "false_negative", "true_negative", "outcome_labelled", "step_labelled",
           "routing_checked", "trajectories", "scored_trajectories", "total_clips",
           "successful_evaluations"}


def _cells(row: Mapping[str, Any], cols: Sequence[str]) -> list[Any]:
    return [_int(row.get(c)) if c in _COUNTS else row.get(c) for c in cols]


def _json(value: Any) -> dict[str, Any]:
    return json.loads(value) if isinstance(value, str) and value else {}


def metrics_section(report: pd.DataFrame | None) -> Section | None:
    """The original tool's figures per batch and for all batches, and the tool-type means."""
    rows = _records(report)
    if not rows:
        return None
    cols = [c for c in _METRIC_COLUMNS if c in rows[0]]
    section = Section("Metrics", [Table(cols, [_cells(r, cols) for r in rows])])
    overall = next((r for r in rows if r["batch"] == "ALL"), None)
    means = _json(overall.get("tool_type_means")) if overall else {}
    if means:
        section.blocks += [Text("Mean score per tool type (all batches):"),
                           Table(["tool type", "mean score"],
                                 [[t, float(v)] for t, v in means.items()])]
    return section


def react_section(report: pd.DataFrame | None) -> Section | None:
    """The ReAct accuracies per batch and the tool usage breakdown, when any was scored."""
    rows = _records(report)
    cols = [c for c in _REACT_COLUMNS if rows and c in rows[0]]
    scored = [r for r in rows if any(r.get(c) is not None for c in cols[1:])]
    if not scored:
        return None
    section = Section("ReAct metrics", [Table(cols, [_cells(r, cols) for r in rows])])
    overall = next((r for r in rows if r["batch"] == "ALL"), None)
    usage = _json(overall.get("tool_usage")) if overall else {}
    if usage:
        section.blocks += [Text("Tool usage (all batches):"),
                           Table(["tool", "calls", "judged", "share correct"],
                                 [[t, u.get("calls"), u.get("scored"), u.get("share_correct")]
                                  for t, u in usage.items()])]
    return section


def routing_section(report: pd.DataFrame | None, routing_text: str | None) -> Section | None:
    """Pass rates of the expected-tool checks, and the eval-suite report when it is given."""
    rows = [r for r in _records(report) if (r.get("routing_checked") or 0) > 0]
    if not rows:
        return None
    section = Section("Routing", [Table(["batch", "cases checked", "pass rate"],
                                        [[r["batch"], _int(r["routing_checked"]),
                                          r["routing_pass_rate"]] for r in rows])])
    if routing_text:
        section.blocks.append(Preformatted(routing_text))
    return section


def agreement_section(agreement: pd.DataFrame | None, scatter: str | None) -> Section | None:
    """Do the judges agree with each other? (two or more judges)."""
    rows = [r for r in _records(agreement) if r.get("comparison") == "between_judges"]
    if not rows:
        return None
    cols = ["batch", "evaluation_kind", "metric", "items", "judges", "krippendorff_alpha",
            "fleiss_kappa", "mean_spread", "max_spread", "disagreements"]
    section = Section("Judges against each other",
                      [Table(cols, [_cells(r, cols) for r in rows])])
    if scatter:
        section.blocks.append(Image(scatter, "judge-vs-judge clip scores"))
    return section


def review_rows(disagreements: pd.DataFrame | None) -> list[dict[str, Any]]:
    """The disagreements with a human label (a judge's decision is not the human's)."""
    return [r for r in _records(disagreements)
            if r.get("comparison") in ("step_label", "outcome")]


def human_section(report: pd.DataFrame | None, agreement: pd.DataFrame | None,
                  review: Sequence[Mapping[str, Any]], review_total: int,
                  judge_text: Mapping[tuple[str, str, int], str],
                  confusion: str | None) -> Section | None:
    """Does each judge agree with the labels the source carries? ``review``: the first
    of the ``review_total`` items where a judge's decision is not the human's
    (:func:`review_rows`), at least :data:`REVIEW_ROWS` of them when there are."""
    labelled = [r for r in _records(report)
                if (r.get("outcome_labelled") or 0) + (r.get("step_labelled") or 0) > 0]
    per_judge = [r for r in _records(agreement)
                 if r.get("comparison") in ("step_label", "outcome")]
    if not labelled and not per_judge:
        return None
    section = Section("Judges against the human labels")
    if labelled:
        cols = ["batch", "outcome_auc", "outcome_labelled", "step_label_auc", "step_labelled"]
        section.blocks += [Text("AUC of the averaged scores against the labels (0.5 is chance):"),
                           Table(cols, [_cells(r, cols) for r in labelled])]
    if per_judge:
        cols = ["batch", "comparison", "judge", "items", "accuracy", "cohen_kappa",
                "true_positive", "false_positive", "false_negative", "true_negative", "auc"]
        section.blocks += [Text("Per judge (a score of 0.5 or more is the judge's good):"),
                           Table(cols, [_cells(r, cols) for r in per_judge])]
    if confusion:
        section.blocks.append(Image(confusion, "judge-vs-human confusion matrices"))
    if review_total:
        section.blocks += [
            Text(f"Items where a judge's decision is not the human's "
                 f"({review_total}; the first {min(review_total, REVIEW_ROWS)}):"),
            Table(["comparison", "judge", "trajectory", "task", "clip", "human label",
                   "judge score", "judge's summary"],
                  [[r["comparison"], r.get("judge"), r["trajectory_id"], r.get("task_id"),
                    r.get("clip_index"), r.get("human_label"), r.get("judge_score"),
                    _clip(judge_text.get(_text_key(r), ""))
                    if r.get("clip_index") is not None else ""]
                   for r in review[:REVIEW_ROWS]])]
    return section


def _text_key(row: Mapping[str, Any]) -> tuple[str, str, int]:
    return (str(row.get("judge")), str(row["trajectory_id"]), int(row["clip_index"]))


def assessments_section(report: pd.DataFrame | None) -> Section | None:
    """The trajectory assessment's mean per batch and per metric, and one table per tool
    category of its assessment's metric means (all batches), when any was made."""
    rows = _records(report)
    assessed = [r for r in rows if r.get("trajectory_assessment_mean") is not None
                or _json(r.get("category_assessment_means"))]
    if not assessed:
        return None
    section = Section("Category and trajectory assessments")
    finals = [r for r in rows if r.get("trajectory_assessment_mean") is not None]
    if finals:
        metrics = [m for m in _json(finals[-1].get("trajectory_assessment_means"))
                   if m != "assessed"]
        section.blocks += [
            Text("Final trajectory assessment, means over the assessed trajectories:"),
            Table(["batch", "trajectories assessed", "mean", *metrics],
                  [[r["batch"], _int(_json(r.get("trajectory_assessment_means"))
                                     .get("assessed")), r["trajectory_assessment_mean"],
                    *[_json(r.get("trajectory_assessment_means")).get(m) for m in metrics]]
                   for r in finals])]
    overall = next((r for r in rows if r["batch"] == "ALL"), None)
    for category, figures in _json(overall.get("category_assessment_means")
                                   if overall else None).items():
        section.blocks += [
            Text(f"Category {category}: assessed in {_int(figures.get('assessed'))} "
                 f"trajectories (all batches), mean {fmt(figures.get('overall'))}"),
            Table(["metric", "mean"], [[m, v] for m, v in figures.items()
                                       if m not in ("overall", "assessed")])]
    return section


@dataclass
class _Stability:
    """One judge's repeat figures, added up batch by batch."""

    spreads: list[float] = field(default_factory=list)
    repeats: list[Any] = field(default_factory=list)
    has_repeats: bool = False
    straddling: int = 0
    has_straddles: bool = False


class StabilityFigures:
    """:func:`stability_section`'s figures over a run's batches, one at a time: each
    judge's spreads in row order, the most repeats, the judgments straddling."""

    def __init__(self) -> None:
        self._judges: dict[str, _Stability] = {}

    def add(self, judgments: Mapping[str, pd.DataFrame]) -> None:
        for judge, table in judgments.items():
            if not len(table) or "score_std" not in table.columns:
                continue
            figures = self._judges.setdefault(judge, _Stability())
            ok = table[table["status"] == "ok"]
            figures.spreads += [sum(std.values()) / len(std)
                                for std in map(_json, ok["score_std"]) if std]
            if "repeats_ok" in ok.columns:
                figures.has_repeats = True
                if len(ok):
                    figures.repeats.append(ok["repeats_ok"].max())
            if "straddles" in ok.columns:
                figures.has_straddles = True
                figures.straddling += int(ok["straddles"].sum())

    def rows(self) -> list[list[Any]]:
        rows = []
        for judge, figures in sorted(self._judges.items()):
            spreads = figures.spreads
            if not spreads:
                continue
            repeats = (int(pd.Series(figures.repeats, dtype="float64").max())
                       if figures.has_repeats and figures.repeats else None)
            straddling = figures.straddling if figures.has_straddles else None
            rows.append([judge, repeats, len(spreads), sum(spreads) / len(spreads),
                         straddling])
        return rows


def stability_section(judgments: Mapping[str, pd.DataFrame] | StabilityFigures
                      ) -> Section | None:
    """Each judge's mean per-clip spread across its repeats (``repeats: N``): per ok row
    with two or more answering repeats, the mean of its metrics' standard deviations,
    averaged over those rows (as the judgments asset's ``mean_per_clip_std``), and how
    many judgments straddle the pass threshold. Left out when no judge repeats."""
    figures = judgments if isinstance(judgments, StabilityFigures) else StabilityFigures()
    if not isinstance(judgments, StabilityFigures):
        figures.add(judgments)
    rows = figures.rows()
    if not rows:
        return None
    return Section("Judge stability across repeats", [
        Text("Per judge asking each judgment several times (repeats): the mean over its "
             "judgments of the per-metric standard deviation across the repeats that "
             "answered, and the judgments whose repeats fall on both sides of 0.5 (for a "
             "ReAct kind: disagreeing labels)."),
        Table(["judge", "repeats", "judgments with a spread", "mean per-clip spread",
               "straddling"], rows)])


SCORE_COLUMNS = ["judge", "trajectory_id", "clip_index", "tool_type", "score", "text"]
LOWEST_ROWS = 10
"""Lowest-scored clips listed with their judge's text."""


def _clip_score_rows(table: pd.DataFrame) -> Iterator[tuple[Any, int, Any, float, str]]:
    """A judge's rubric score per clip (the mean of its metrics) and its text:
    (trajectory id, clip index, tool type, score, text)."""
    if not len(table):
        return
    ok = table[(table["status"] == "ok") & (table["evaluation_kind"] == EVAL_KIND_CLIP)]
    for r in ok.to_dict("records"):
        values = [float(v) for v in _json(r["scores"]).values() if v is not None]
        if values:
            yield (r["trajectory_id"], int(r["clip_index"]), r["tool_type"],
                   sum(values) / len(values), r.get("summary") or r.get("reasoning") or "")


def clip_scores(judgments: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """Each judge's rubric score per clip (the mean of its metrics), with the judge's text."""
    rows = [(judge, *row) for judge, table in sorted(judgments.items())
            for row in _clip_score_rows(table)]
    return pd.DataFrame(rows, columns=SCORE_COLUMNS)


class ClipScores:
    """:func:`clip_scores` over a run's batches, one at a time, kept small (#12.3): per
    judge the clips' scores and tool types (and, for the judge-vs-judge plot, their
    trajectory and clip), the :data:`LOWEST_ROWS` lowest-scored clips with their text, and
    the texts of the clips asked for (:meth:`want_text`); not every clip's text."""

    def __init__(self, judges: Sequence[str]) -> None:
        self.judges = sorted(judges)
        self._pairs = len(self.judges) > 1
        self._tools: dict[str, list[Any]] = {j: [] for j in self.judges}
        self._scores: dict[str, array[float]] = {j: array("d") for j in self.judges}
        self._tids: dict[str, list[Any]] = {j: [] for j in self.judges}
        self._clips: dict[str, array[int]] = {j: array("q") for j in self.judges}
        self._interned: dict[Any, Any] = {}
        self._lowest: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
        self._wanted: set[tuple[str, str, int]] = set()
        self.texts: dict[tuple[str, str, int], str] = {}

    def want_text(self, keys: Iterable[tuple[str, str, int]]) -> None:
        """Keep the text of these (judge, trajectory id, clip index) when they come."""
        self._wanted |= set(keys)

    def _intern(self, value: Any) -> Any:
        return self._interned.setdefault(value, value)

    def add(self, judgments: Mapping[str, pd.DataFrame]) -> None:
        for judge, table in judgments.items():
            rank = self.judges.index(judge)  # the judges were named at the start
            for tid, clip, tool, score, text in _clip_score_rows(table):
                seq = len(self._scores[judge])
                self._tools[judge].append(self._intern(tool))
                self._scores[judge].append(score)
                if self._pairs:
                    self._tids[judge].append(self._intern(tid))
                    self._clips[judge].append(clip)
                key = (str(judge), str(tid), clip)
                if key in self._wanted:
                    self.texts[key] = str(text)
                # the order of sort_values(["score", "trajectory_id", "clip_index"]),
                # stable: NaN last, ties in row order (judges sorted, then their rows)
                missing = score != score
                order = (missing, 0.0 if missing else score, str(tid), clip, rank, seq)
                if len(self._lowest) < LOWEST_ROWS or order < self._lowest[-1][0]:
                    self._lowest.append((order, {
                        "judge": judge, "trajectory_id": tid, "clip_index": clip,
                        "tool_type": tool, "score": score, "text": text}))
                    self._lowest.sort(key=lambda item: item[0])
                    del self._lowest[LOWEST_ROWS:]

    def frame(self) -> pd.DataFrame:
        """The scores as :func:`clip_scores` has them, without the texts (and without
        trajectories and clips when there is one judge: no pair of judges to plot)."""
        judges = [j for j in self.judges for _ in range(len(self._scores[j]))]
        frame = pd.DataFrame({
            "judge": judges,
            "trajectory_id": [t for j in self.judges for t in self._tids[j]]
            if self._pairs else [None] * len(judges),
            "clip_index": [c for j in self.judges for c in self._clips[j]]
            if self._pairs else [0] * len(judges),
            "tool_type": [t for j in self.judges for t in self._tools[j]],
            "score": [x for j in self.judges for x in self._scores[j]],
        }, columns=SCORE_COLUMNS[:-1])
        if not len(frame):
            return pd.DataFrame([], columns=SCORE_COLUMNS)
        frame["score"] = frame["score"].astype("float64")
        return frame

    def lowest(self) -> list[dict[str, Any]]:
        return [row for _order, row in self._lowest]


def distribution_section(scores: pd.DataFrame, plot: str | None,
                         lowest: Sequence[Mapping[str, Any]] | None = None) -> Section | None:
    """Clip scores per judge and tool type, and the lowest-scored clips with the judge's
    summary (where a reader starts looking): ``lowest``, else the first
    :data:`LOWEST_ROWS` of ``scores`` (with its ``text``) by score."""
    if not len(scores):
        return None
    stats = (scores.groupby(["judge", "tool_type"], sort=True)["score"]
             .agg(["count", "mean", "min", "max"]).reset_index())
    section = Section("Score distribution", [Table(
        ["judge", "tool type", "clips", "mean", "min", "max"],
        [[r["judge"], r["tool_type"], int(r["count"]), float(r["mean"]), float(r["min"]),
          float(r["max"])] for r in stats.to_dict("records")])])
    if plot:
        section.blocks.append(Image(plot, "clip score distribution per judge and tool type"))
    shown: Sequence[Mapping[Any, Any]] = (
        lowest if lowest is not None
        else scores.sort_values(["score", "trajectory_id", "clip_index"]).head(
            LOWEST_ROWS).to_dict("records"))
    section.blocks += [Text("Lowest-scored clips:"), Table(
        ["judge", "trajectory", "clip", "tool type", "score", "judge's summary"],
        [[r["judge"], r["trajectory_id"], r["clip_index"], r["tool_type"], r["score"],
          _clip(r["text"])] for r in shown])]
    return section


def comparison_section(compare_md: Path | None, base: Path) -> Section | None:
    """The ``compare`` verb's tables, only when the user ran one (it is not this run's)."""
    if compare_md is None or not compare_md.is_file():
        return None
    try:
        href = compare_md.resolve().relative_to(base.resolve()).as_posix()
    except ValueError:
        href = compare_md.resolve().as_uri()
    return Section("Comparison", [Link(href, f"The comparison ({compare_md.name})"),
                                  Preformatted(compare_md.read_text("utf-8"))])


# --- plots and writing -------------------------------------------------------------------


def _plots(scores: pd.DataFrame, agreement: pd.DataFrame | None, folder: Path) -> list[str]:
    from eval_pipeline.exports.report_plots import (
        plot_confusion,
        plot_judge_scatter,
        plot_score_distribution,
    )

    drawn: list[str] = []
    if len(scores):
        groups: dict[tuple[str, str], list[float]] = defaultdict(list)
        for judge, tool, score in zip(scores["judge"], scores["tool_type"], scores["score"],
                                      strict=True):
            groups[(str(judge), str(tool))].append(float(score))
        if plot_score_distribution(groups, folder / SCORE_PLOT):
            drawn.append(SCORE_PLOT)
        judges = sorted(scores["judge"].unique())
        wide = scores.pivot_table(index=["trajectory_id", "clip_index"], columns="judge",
                                  values="score", aggfunc="first")
        pairs = {}
        for i, a in enumerate(judges):
            for b in judges[i + 1:]:
                both = wide[[a, b]].dropna()
                pairs[(str(a), str(b))] = (both[a].tolist(), both[b].tolist())
        if pairs and plot_judge_scatter(pairs, folder / SCATTER_PLOT):
            drawn.append(SCATTER_PLOT)
    matrices: dict[tuple[str, str], list[int]] = {}
    for r in _records(agreement):
        if r.get("comparison") in ("step_label", "outcome") and r.get("true_positive") is not None:
            m = matrices.setdefault((str(r["judge"]), str(r["comparison"])), [0, 0, 0, 0])
            for i, c in enumerate(("true_positive", "false_positive", "false_negative",
                                   "true_negative")):
                m[i] += int(r[c] or 0)
    if plot_confusion({k: (v[0], v[1], v[2], v[3]) for k, v in matrices.items()},
                      folder / CONFUSION_PLOT):
        drawn.append(CONFUSION_PLOT)
    return drawn


AGREEMENT_COMPARISONS = ("between_judges", "step_label", "outcome")
"""The judge_agreement rows the report shows (and the confusion plot counts)."""


@dataclass
class ReportData:
    """Everything the document is drawn from, small whatever the run's size (#12.3): the
    report table, the agreement rows it shows, the review items, the clip scores without
    their texts, the lowest-scored clips and the review items' texts."""

    report: pd.DataFrame | None
    agreement: pd.DataFrame | None
    review: list[dict[str, Any]]
    review_total: int
    judge_text: dict[tuple[str, str, int], str]
    scores: pd.DataFrame
    lowest: list[dict[str, Any]]
    stability: StabilityFigures
    routing_text: str | None


class ReportBuilder:
    """:class:`ReportData` from a run's batches, one at a time: :meth:`add` each batch's
    judgments (by judge name), judge_agreement and judge_disagreements, in the run's
    order and as the concatenated tables hold their values; :meth:`finish` with the
    report table and the routing report."""

    def __init__(self, judges: Sequence[str]) -> None:
        self.scores = ClipScores(judges)
        self.stability = StabilityFigures()
        self._agreement: Pieces[pd.DataFrame] = Pieces()
        self._review: list[dict[str, Any]] = []
        self._review_total = 0

    def add(self, judgments: Mapping[str, pd.DataFrame],
            agreement: pd.DataFrame | None = None,
            disagreements: pd.DataFrame | None = None) -> None:
        if agreement is not None and len(agreement) and "comparison" in agreement.columns:
            shown = agreement[agreement["comparison"].isin(AGREEMENT_COMPARISONS)]
            if len(shown):
                self._agreement.append(shown)
        review = review_rows(disagreements)
        self._review_total += len(review)
        wanted = review[:max(0, REVIEW_ROWS - len(self._review))]
        self._review += wanted
        self.scores.want_text(_text_key(r) for r in wanted if r.get("clip_index") is not None)
        self.scores.add(judgments)
        self.stability.add(judgments)

    def finish(self, report: pd.DataFrame | None, routing_text: str | None) -> ReportData:
        agreement = self._agreement.joined()
        return ReportData(report=report, agreement=agreement, review=self._review,
                          review_total=self._review_total, judge_text=self.scores.texts,
                          scores=self.scores.frame(), lowest=self.scores.lowest(),
                          stability=self.stability, routing_text=routing_text)


def report_data(tables: Mapping[str, pd.DataFrame], routing_text: str | None = None
                ) -> ReportData:
    """:class:`ReportData` from whole tables (an output folder's, or one run's)."""
    judgments = {n[len("judgments__"):]: t for n, t in tables.items()
                 if n.startswith("judgments__")}
    builder = ReportBuilder(list(judgments))
    builder.add(judgments, tables.get("judge_agreement"), tables.get("judge_disagreements"))
    return builder.finish(tables.get("evaluation_report"), routing_text)


def sections_of(data: ReportData, plots: Sequence[str] = (), compare_md: Path | None = None,
                base: Path = Path(".")) -> list[Section]:
    """Every section that has data, in reading order; ``plots`` are the PNG names drawn."""

    def img(name: str) -> str | None:
        return f"{PLOTS_DIR}/{name}" if name in plots else None

    report = data.report
    found = [metrics_section(report), react_section(report),
             assessments_section(report), routing_section(report, data.routing_text),
             distribution_section(data.scores, img(SCORE_PLOT), data.lowest),
             stability_section(data.stability),
             agreement_section(data.agreement, img(SCATTER_PLOT)),
             human_section(report, data.agreement, data.review, data.review_total,
                           data.judge_text, img(CONFUSION_PLOT)),
             comparison_section(compare_md, base)]
    return [s for s in found if s is not None]


def report_sections(tables: Mapping[str, pd.DataFrame], routing_text: str | None = None,
                    plots: Sequence[str] = (), compare_md: Path | None = None,
                    base: Path = Path(".")) -> list[Section]:
    """Every section that has data, in reading order; ``plots`` are the PNG names drawn."""
    return sections_of(report_data(tables, routing_text), plots, compare_md, base)


def routing_text_of(tables: Mapping[str, pd.DataFrame]) -> str | None:
    """The eval-suite report (as ``routing_report.txt``), rebuilt from the tables."""
    from eval_pipeline.routing import render_report, results_from_table

    routing = tables.get("routing_checks")
    if routing is None or not len(routing):
        return None
    kept = tables.get("preprocessed_trajectories")
    prompts = (dict(zip(kept["trajectory_id"], kept["task_description"], strict=True))
               if kept is not None and len(kept) and "task_description" in kept.columns
               else {})
    return render_report(results_from_table(routing, prompts))


def write_report_files(data: ReportData, output: Path, compare: Path | None = None
                       ) -> list[str]:
    """Write ``report.md``, ``report.html`` and ``plots/`` into ``output``; the names
    written. ``compare``: a ``compare.md`` (or the folder holding it) to include; by default
    the one in ``output`` when the ``compare`` verb wrote one there."""
    compare_md = compare / COMPARE_MD if compare is not None and compare.is_dir() else compare
    if compare_md is None and (output / COMPARE_MD).is_file():
        compare_md = output / COMPARE_MD
    drawn: list[str] = []
    replace_folder(output / PLOTS_DIR,
                   lambda folder: drawn.extend(_plots(data.scores, data.agreement, folder)))
    if not drawn:
        shutil.rmtree(output / PLOTS_DIR, ignore_errors=True)
    sections = sections_of(data, drawn, compare_md, output)
    title = f"Evaluation report: {output.resolve().name}"
    written = []
    for name, text in ((REPORT_MD, render_markdown(sections, title)),
                       (REPORT_HTML, render_html(sections, title))):
        encoded = text.encode("utf-8")

        def write(fh: BinaryIO, data: bytes = encoded) -> None:
            fh.write(data)

        write_atomic(output / name, write)
        written.append(name)
    return written + [f"{PLOTS_DIR}/{name}" for name in drawn]


def write_report_document(tables: Mapping[str, pd.DataFrame], output: Path,
                          compare: Path | None = None) -> list[str]:
    """:func:`write_report_files` from whole tables (see :func:`report_data`)."""
    return write_report_files(report_data(tables, routing_text_of(tables)), output, compare)


def load_report_tables(output_dir: Path) -> dict[str, pd.DataFrame]:
    """The exported tables the report reads, without the bulky text columns."""
    tables: dict[str, pd.DataFrame] = {}
    for name in ("evaluation_report", "judge_agreement", "judge_disagreements",
                 "routing_checks"):
        path = output_dir / f"{name}.parquet"
        if path.exists():
            tables[name] = pd.read_parquet(path)
    kept = output_dir / "preprocessed_trajectories.parquet"
    if kept.exists():
        tables["preprocessed_trajectories"] = pd.read_parquet(
            kept, columns=["trajectory_id", "task_description"])
    for path in sorted(output_dir.glob("judgments__*.parquet")):
        # The repeat columns only where the folder's run wrote them (since #8.11).
        present = set(pq.read_schema(path).names)
        tables[path.stem] = pd.read_parquet(path, columns=_JUDGMENT_COLUMNS + [
            c for c in _REPEAT_COLUMNS if c in present])
    return tables


def write_report(output_dir: Path, compare: Path | None = None) -> list[str]:
    """Regenerate the report from an output folder of an earlier run."""
    return write_report_document(load_report_tables(output_dir), output_dir, compare)


METADATA_LIMIT = 20_000
"""Characters of the asset's markdown metadata: the UI renders it in a side panel, and the
event log stores it with every materialization; the full document is ``report.md``."""


def report_metadata_markdown(report: pd.DataFrame) -> str:
    """The sections the ``evaluation_report`` asset can make from its own table (ReAct tool
    usage, routing, label AUCs; the agreement tables are not its inputs), for its markdown
    metadata beside :func:`~eval_pipeline.report.report_markdown`, cut at
    :data:`METADATA_LIMIT`."""
    found = [react_section(report), assessments_section(report),
             routing_section(report, None), human_section(report, None, [], 0, {}, None)]
    text = render_markdown([s for s in found if s is not None]) if any(found) else ""
    if len(text) > METADATA_LIMIT:
        cut = text.rfind("\n", 0, METADATA_LIMIT)
        text = text[:cut] + "\n\n_(cut here: the whole report is report.md in the output)_\n"
    return text
