"""build_agreement's fast paths (#12.4) give the tables the implementation before them gave.

The judgments are read from six columns' values and filtered in Python, the comparison with
humans reads the clip rubric rows from those rows and the trajectories' outcome columns from
their values, and the two tables are assembled from typed column arrays: each is held here
to a copy of the implementation before (``_reference_build_agreement``, as it was), through
``pd.testing.assert_frame_equal`` (values, dtypes, columns, row order) on one and three
judges, failed and skipped rows, no ``label`` column, clips with and without human labels
(None, NaN, floats), trajectories with and without outcome columns, no judgments, and
tables built from the shared corpora when they are present.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from eval_pipeline import ingest
from eval_pipeline.agreement import (
    auc,
    binary_agreement,
    outcome_of,
    passes,
    step_label_positive,
)
from eval_pipeline.agreement_report import (
    _LONG_COLUMNS,
    _OUTCOME_COLUMNS,
    AGREEMENT_COLUMNS,
    DEFAULT_DISAGREEMENT_THRESHOLD,
    DISAGREEMENT_COLUMNS,
    AgreementRow,
    DisagreementRow,
    _between_judges,
    _outcome_records,
    _rows_table,
    build_agreement,
    judge_scores,
)
from eval_pipeline.defs.pipeline.assets.agreement import OUTCOME_COLUMNS
from eval_pipeline.judges import make_judge
from eval_pipeline.judges.config import JudgeConfig
from eval_pipeline.judges.runner import run_judge
from eval_pipeline.preprocess import PreprocessConfig
from eval_pipeline.rubrics import EVAL_KIND_CLIP
from eval_pipeline.scoring.averaging import json_object, mean
from eval_pipeline.scoring.summaries import evaluation_metadata
from eval_pipeline.tool_registry import default_registry
from eval_pipeline_tests import parquet_io

NAN = math.nan

# --- The implementation before #12.4's fast paths, as it was (the reference; the comparison
# between judges, unchanged, is the module's own _between_judges). ------------------------


def _reference_judge_scores(judgments: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """Every ok judgment's scores in long form: one row per judge, clip, kind and metric."""
    rows: list[tuple[Any, ...]] = []
    for judge, table in judgments.items():
        if not len(table):
            continue
        ok = table[table["status"] == "ok"]
        labels = ok["label"].tolist() if "label" in ok.columns else [None] * len(ok)
        for tid, ci, kind, tool, scores, label in zip(
                ok["trajectory_id"], ok["clip_index"], ok["evaluation_kind"], ok["tool_type"],
                ok["scores"], labels, strict=True):
            for metric, value in json_object(scores).items():
                rows.append((judge, tid, int(ci), kind, tool, metric, float(value), label))
    return pd.DataFrame(rows, columns=_LONG_COLUMNS)


def _reference_against_humans(batch: str, long: pd.DataFrame, judges: list[str],
                              clips: pd.DataFrame, trajectories: pd.DataFrame
                              ) -> tuple[list[AgreementRow], list[DisagreementRow]]:
    human_step: dict[tuple[str, int], float] = {}
    if "human_label" in clips.columns:
        for tid, ci, label in zip(clips["trajectory_id"], clips["clip_index"],
                                  clips["human_label"], strict=True):
            if label is not None and not pd.isna(label):
                human_step[(tid, int(ci))] = float(label)
    outcomes: dict[str, bool] = {}
    task_ids: dict[str, str] = {}
    for record in trajectories.to_dict("records"):
        task_ids[record["trajectory_id"]] = str(record.get("task_id"))
        outcome = outcome_of(record)
        if outcome is not None:
            outcomes[record["trajectory_id"]] = outcome
    rubric = long[long["evaluation_kind"] == EVAL_KIND_CLIP]
    rows: list[AgreementRow] = []
    listed: list[DisagreementRow] = []
    for judge in judges:
        mine = rubric[rubric["judge"] == judge]
        clip_metrics: dict[tuple[str, int], dict[str, float]] = defaultdict(dict)
        tool_of: dict[tuple[str, int], str] = {}
        for tid, ci, tool, metric, score in zip(mine["trajectory_id"], mine["clip_index"],
                                                mine["tool_type"], mine["metric"],
                                                mine["score"], strict=True):
            clip_metrics[(tid, int(ci))][metric] = float(score)
            tool_of[(tid, int(ci))] = tool
        # The clip's score: the mean of the judge's rubric metrics, as averaged_scores has it.
        step_items = [(key, mean(list(m.values())), human_step[key])
                      for key, m in sorted(clip_metrics.items())
                      if key in human_step and step_label_positive(human_step[key]) is not None]
        per_traj: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for key, m in clip_metrics.items():
            per_traj[key[0]].append({"status": "ok", "tool_type": tool_of[key],
                                     "scores": m})
        traj_items = []
        for tid in sorted(per_traj):
            score = evaluation_metadata(per_traj[tid], [judge])["overall_trajectory_score"]
            if tid in outcomes and score is not None:
                traj_items.append((tid, float(score), outcomes[tid]))
        for comparison, items in (
                ("step_label", [(k, s, bool(step_label_positive(h)), h)
                                for k, s, h in step_items]),
                ("outcome", [((tid, None), s, good, 1.0 if good else -1.0)
                             for tid, s, good in traj_items])):
            if not items:
                continue
            binary = binary_agreement((good, passes(s)) for _, s, good, _ in items)
            ranked = auc((s, good) for _, s, good, _ in items)
            wrong = [(key, s, h) for key, s, good, h in items if passes(s) != good]
            rows.append(AgreementRow(
                batch=batch, comparison=comparison, judge=judge,
                evaluation_kind=EVAL_KIND_CLIP if comparison == "step_label" else None,
                items=binary.items, judges=1, disagreements=len(wrong),
                accuracy=binary.accuracy, cohen_kappa=binary.cohen_kappa,
                true_positive=binary.true_positive, false_positive=binary.false_positive,
                false_negative=binary.false_negative, true_negative=binary.true_negative,
                auc=ranked.auc, positives=ranked.positives, negatives=ranked.negatives))
            listed += [DisagreementRow(
                batch=batch, comparison=comparison, judge=judge, trajectory_id=str(tid),
                task_id=task_ids.get(str(tid)), clip_index=ci,
                evaluation_kind=EVAL_KIND_CLIP if comparison == "step_label" else None,
                human_label=h, judge_score=s) for (tid, ci), s, h in wrong]
    return rows, listed


def _reference_build_agreement(batch: str, judgments: Mapping[str, pd.DataFrame],
                               clips: pd.DataFrame, trajectories: pd.DataFrame,
                               disagreement_threshold: float = DEFAULT_DISAGREEMENT_THRESHOLD,
                               ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The ``judge_agreement`` and ``judge_disagreements`` tables of one batch.

    ``judgments``: each judge's judgments table; ``clips`` carries ``human_label``,
    ``trajectories`` the outcome columns. Failed judgments are left out, as everywhere.
    """
    long = _reference_judge_scores(judgments)
    judges = [name for name in judgments if name in set(long["judge"])]
    rows: list[AgreementRow] = []
    listed: list[DisagreementRow] = []
    if len(judges) >= 2:
        between, over = _between_judges(batch, long, judges, disagreement_threshold)
        rows += between
        listed += over
    human, wrong = _reference_against_humans(batch, long, judges, clips, trajectories)
    rows += human
    listed += wrong
    return (pd.DataFrame([r.model_dump() for r in rows], columns=AGREEMENT_COLUMNS),
            pd.DataFrame([r.model_dump() for r in listed], columns=DISAGREEMENT_COLUMNS))


# --- The fast paths against it. --------------------------------------------------------------


def _same(batch: str, judgments: Mapping[str, pd.DataFrame], clips: pd.DataFrame,
          trajectories: pd.DataFrame, threshold: float = DEFAULT_DISAGREEMENT_THRESHOLD,
          ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """build_agreement's tables, asserted to be the reference's (values, dtypes, order)."""
    got = build_agreement(batch, judgments, clips, trajectories, threshold)
    expected = _reference_build_agreement(batch, judgments, clips, trajectories, threshold)
    for table, reference in zip(got, expected, strict=True):
        pd.testing.assert_frame_equal(table, reference, check_exact=True)
    return got


_KINDS = [(EVAL_KIND_CLIP, ["x", "y"]), ("thought_to_tool", ["t2t"]),
          ("category_assessment", ["effect"])]


def _judgments(seed: int, statuses: tuple[str, ...] = ("ok", "ok", "ok", "failed", "skipped")
               ) -> pd.DataFrame:
    """A judge's judgments of six trajectories of up to four clips, with a category
    assessment per trajectory (clip -1, two tool types), failed and skipped rows, labels and
    the long texts a real table carries beside them."""
    rng = np.random.default_rng(seed)
    rows = []
    for t in range(6):
        for ci in range(int(rng.integers(1, 5))):
            tool = ["search", "final"][ci % 2]
            for kind, metrics in _KINDS[:2]:
                status = str(rng.choice(statuses))
                scores = {m: round(float(rng.random()), 2) for m in metrics}
                label = str(rng.choice(["correct", "incorrect"])) if kind != EVAL_KIND_CLIP \
                    else "rubric"
                rows.append(_row(f"t{t}", ci, kind, tool, status, scores, label))
        for tool in ("search", "final"):
            kind, metrics = _KINDS[2]
            rows.append(_row(f"t{t}", -1, kind, tool, "ok",
                             {m: round(float(rng.random()), 2) for m in metrics}, None))
    return pd.DataFrame(rows)


def _row(tid: str, ci: int, kind: str, tool: str, status: str, scores: dict[str, float],
         label: str | None) -> dict[str, Any]:
    return {"trajectory_id": tid, "clip_index": ci, "evaluation_kind": kind,
            "tool_type": tool, "status": status,
            "scores": json.dumps(scores) if status == "ok" else "{}",
            "label": label if status == "ok" else None,
            "prompt": "a long prompt " * 50, "raw_response": "a reply " * 40,
            "error": None if status == "ok" else "boom"}


def _clips(variant: str) -> pd.DataFrame:
    """Four clips of each of the six trajectories, with human labels as ``variant`` says."""
    tids = [f"t{t}" for t in range(6) for _ in range(4)]
    indexes = [ci for _ in range(6) for ci in range(4)]
    clips = pd.DataFrame({"trajectory_id": tids, "clip_index": indexes,
                          "content": ["a clip's text " * 30] * 24})
    cycle = [1.0, -1.0, None, 0.0, NAN, 0.5, -0.5, 1.0]
    labels = [cycle[i % len(cycle)] for i in range(24)]
    if variant == "object":  # None, NaN and floats, as Python objects
        clips["human_label"] = pd.Series(labels, dtype=object)
    elif variant == "float":
        clips["human_label"] = pd.Series(labels, dtype=float)
    elif variant == "masked":
        clips["human_label"] = pd.array([None if v is None or v != v else v for v in labels],
                                        dtype="Float64")
    elif variant == "none":
        clips["human_label"] = pd.Series([None] * 24, dtype=object)
    return clips  # "absent": no human_label column


def _trajectories(variant: str) -> pd.DataFrame:
    """The six trajectories' ids, task ids and outcome labels as ``variant`` has them."""
    tids = [f"t{t}" for t in range(6)]
    base = pd.DataFrame({"trajectory_id": tids, "task_id": [f"q{t}" for t in range(6)],
                         "steps": [[{"thought": "x" * 100}]] * 6})
    if variant == "full":
        return base.assign(final_label=pd.Series([1.0, -1.0, None, 0.0, None, 1.0],
                                                 dtype=object),
                           reward=[None, None, 1.0, 0.0, NAN, 0.3],
                           success=[None, None, None, True, False, None])
    if variant == "numpy scalars":  # object columns holding numpy values and pd.NA
        return base.assign(final_label=pd.Series([np.float64(1), pd.NA, None, np.int64(0),
                                                  np.float64(-1), None], dtype=object),
                           reward=pd.Series([None, np.float64(1.0), pd.NA, None, None,
                                             np.float64(0.2)], dtype=object),
                           success=pd.Series([np.bool_(True), None, pd.NA, np.bool_(False),
                                              None, True], dtype=object),
                           task_id=pd.Series([1, np.int64(2), pd.NA, None, "q4", 5.0],
                                             dtype=object))
    if variant == "nullable":
        return base.assign(final_label=pd.array([1, None, -1, 0, None, None], dtype="Int64"),
                           reward=pd.array([None, 1.0, None, None, 0.0, None],
                                           dtype="Float64"),
                           success=pd.array([None, None, None, True, None, False],
                                            dtype="boolean"),
                           task_id=pd.array(["q0", None, "q2", None, "q4", "q5"],
                                            dtype="string"))
    if variant == "success only":
        return base.assign(success=[True, False, True, False, True, False])
    if variant == "no outcome":
        return base
    if variant == "ids only":
        return base[["trajectory_id"]]
    if variant == "no rows":
        return pd.DataFrame()
    raise ValueError(variant)


_CLIPS = ["object", "float", "masked", "none", "absent"]
_TRAJECTORIES = ["full", "numpy scalars", "nullable", "success only", "no outcome",
                 "ids only", "no rows"]


def _without_label(table: pd.DataFrame) -> pd.DataFrame:
    return table.drop(columns=["label"])


def _missing_statuses(table: pd.DataFrame) -> pd.DataFrame:
    """Some statuses missing (None, ``pd.NA``, NaN in an object column): not ok."""
    status = table["status"].astype(object)
    for i, missing in zip(range(0, len(table), 4), itertools.cycle([None, pd.NA, NAN]),
                          strict=False):
        status.iloc[i] = missing
    return table.assign(status=status)


_JUDGES = {
    "one judge": lambda: {"a": _judgments(1)},
    "one judge, no label column": lambda: {"a": _without_label(_judgments(2))},
    "three judges": lambda: {"a": _judgments(1), "b": _judgments(3), "c": _judgments(4)},
    "three judges, one without labels": lambda: {
        "a": _judgments(5), "b": _without_label(_judgments(6)), "c": _judgments(7)},
    "a judge with nothing ok": lambda: {
        "a": _judgments(8, ("failed", "skipped")).query("evaluation_kind != "
                                                        "'category_assessment'"),
        "b": _judgments(9)},
    "missing statuses": lambda: {"a": _missing_statuses(_judgments(12)),
                                 "b": _judgments(13)},
    "two judges, one of no rows": lambda: {
        "a": pd.DataFrame(columns=["trajectory_id", "clip_index", "evaluation_kind",
                                   "status"]), "b": _judgments(10), "c": _judgments(11)},
}


@pytest.mark.parametrize("judges", list(_JUDGES))
def test_the_tables_are_the_reference_tables(judges: str) -> None:
    judgments = _JUDGES[judges]()
    for clips, trajectories in itertools.product(_CLIPS, _TRAJECTORIES):
        _same("b", judgments, _clips(clips), _trajectories(trajectories))
    for threshold in (0.0, 0.1, 0.9):
        _same("b", judgments, _clips("float"), _trajectories("full"), threshold)
    # As the assets read them: the text columns in pandas' text type, from Parquet.
    _same("b", {k: parquet_io.round_trip(v) for k, v in judgments.items()},
          parquet_io.round_trip(_clips("float")),
          parquet_io.round_trip(_trajectories("full"), OUTCOME_COLUMNS), 0.3)


def test_comparisons_happen_in_the_synthetic_batches() -> None:
    """The inputs above are not vacuous: figures between judges and against humans, and
    disagreements of both kinds, are among the tables compared."""
    agreement, listed = _same("b", _JUDGES["three judges"](), _clips("object"),
                              _trajectories("full"), 0.3)
    assert set(agreement["comparison"]) == {"between_judges", "step_label", "outcome"}
    assert set(listed["comparison"]) == {"between_judges", "step_label", "outcome"}


def test_no_judgments() -> None:
    empty = pd.DataFrame(columns=["trajectory_id", "clip_index", "evaluation_kind", "status"])
    for judgments in ({}, {"a": empty}, {"a": pd.DataFrame()}, {"a": empty, "b": empty}):
        for trajectories in _TRAJECTORIES:
            agreement, listed = _same("b", judgments, _clips("object"),
                                      _trajectories(trajectories))
            assert agreement.empty and listed.empty
    # The tables of no rows are copies: changing one leaves the next call's alone.
    agreement, listed = build_agreement("b", {}, _clips("absent"), _trajectories("no rows"))
    agreement["batch"] = pd.Series(dtype=object)
    listed.loc[0] = None
    _same("b", {}, _clips("absent"), _trajectories("no rows"))


def test_malformed_inputs_raise_as_before() -> None:
    """Trajectories with rows and no ids, judgments without a scores column."""
    for judgments, trajectories in (
            ({"a": _judgments(1)}, _trajectories("full").drop(columns=["trajectory_id"])),
            ({"a": _judgments(1)}, pd.DataFrame({"other": [1, 2]})),
            ({"a": _judgments(1).drop(columns=["scores"])}, _trajectories("full"))):
        with pytest.raises(KeyError):
            _reference_build_agreement("b", judgments, _clips("float"), trajectories)
        with pytest.raises(KeyError):
            build_agreement("b", judgments, _clips("float"), trajectories)


def test_judge_scores_is_the_reference_long_table() -> None:
    for judgments in [factory() for factory in _JUDGES.values()] + [{}]:
        pd.testing.assert_frame_equal(judge_scores(judgments),
                                      _reference_judge_scores(judgments), check_exact=True)


def _same_value(got: Any, expected: Any) -> bool:
    """One value and one type (NaN is NaN)."""
    if type(got) is not type(expected):
        return False
    return got == expected or (isinstance(got, float) and math.isnan(got)
                               and math.isnan(expected))


def test_outcome_records_are_to_dict_of_the_outcome_columns() -> None:
    assert _OUTCOME_COLUMNS == OUTCOME_COLUMNS  # what the asset loads is what is read
    for variant in _TRAJECTORIES:
        trajectories = _trajectories(variant)
        tables = [trajectories]
        if variant not in ("numpy scalars", "no rows"):  # mixed objects: no Parquet column
            tables.append(parquet_io.round_trip(trajectories))
        for table in tables:
            present = [c for c in OUTCOME_COLUMNS if c in table.columns]
            expected = table[present].to_dict("records")
            got = _outcome_records(table)
            assert len(got) == len(expected)
            for record, reference in zip(got, expected, strict=True):
                assert list(record) == list(reference)
                assert all(_same_value(record[k], reference[k]) for k in reference), (
                    variant, record, reference)


class _Row(AgreementRow):
    """A row with a bool column too (beside text, int and float ones): a kind the typed
    columns leave to the constructor."""
    flag: bool | None = None


_ROW_VALUES = [
    {"judge": judge, "true_positive": count, "auc": figure}
    for judge, count, figure in itertools.product(
        [None, "a"], [None, 3, -2, 2**63], [None, 0.5, NAN, 1])]


def test_rows_tables_are_the_constructors() -> None:
    """Every mix of None, text, ints (one beyond int64) and floats (one given as an int)
    over one, two and three rows, and the bool column."""
    columns = list(_Row.model_fields)
    empty = pd.DataFrame([], columns=columns)
    pd.testing.assert_frame_equal(_rows_table([], columns, empty),
                                  pd.DataFrame([], columns=columns))
    mixes = [list(mix) for n in (1, 2) for mix in itertools.product(_ROW_VALUES, repeat=n)]
    rng = np.random.default_rng(12)
    mixes += [[_ROW_VALUES[i] for i in rng.integers(0, len(_ROW_VALUES), 3)]
              for _ in range(50)]
    for mix in mixes:
        no_flags, a_flag = [None] * len(mix), [True] + [None] * (len(mix) - 1)
        for flags in ([no_flags, a_flag] if len(mix) == 1 else [no_flags]):
            rows = [_Row(batch="b", comparison="outcome", items=1, judges=1, flag=flag,
                         **values) for values, flag in zip(mix, flags, strict=True)]
            pd.testing.assert_frame_equal(
                _rows_table(rows, columns, empty),
                pd.DataFrame([r.model_dump() for r in rows], columns=columns),
                check_exact=True)


def _shifted(table: pd.DataFrame, by: float) -> pd.DataFrame:
    """A second judge that disagrees: every score moved by ``by`` within [0, 1]."""
    def move(text: str) -> str:
        scores = json.loads(text) if text else {}
        return json.dumps({k: min(1.0, max(0.0, v + by)) for k, v in scores.items()})
    return table.assign(scores=[move(s) for s in table["scores"]])


def _real_batches(corpora_dir: Path, project_root: Path) -> list[tuple[str, Path, int, int]]:
    """(name, file, first line, lines): labelled AgentProcessBench batches (step and outcome
    labels), two other corpora and the sample drop."""
    apb = corpora_dir / "agentprocessbench" / "hotpotqa.jsonl"
    return [("apb", apb, 0, 20), ("apb", apb, 20, 20), ("apb", apb, 40, 20),
            ("adp", corpora_dir / "agent_data_platform" / "trajectories-lite_2025-07-12.jsonl",
             0, 20),
            ("dataeva", corpora_dir / "dataeva" / "demo01.jsonl", 0, 20),
            ("sample", project_root / "data" / "incoming" / "sample_agent_runs.jsonl", 0, 30)]


def test_real_tables_from_the_corpora(corpora_dir: Path, project_root: Path,
                                      tmp_path: Path) -> None:
    """Batches of the shared corpora judged by the heuristic judge (and two disagreeing
    copies of it), as the assets read them from Parquet, whole and the outcome columns the
    asset loads: the same tables."""
    compared: dict[str, int] = defaultdict(int)
    for name, source, start, count in _real_batches(corpora_dir, project_root):
        lines = source.read_text("utf-8").splitlines()[start:start + count]
        path = tmp_path / f"{name}_{start}.jsonl"
        path.write_text("\n".join(lines) + "\n", "utf-8")
        raw, _ = ingest.read_batch(path, None, "b")
        kept, _, _ = ingest.preprocess_batch(raw, PreprocessConfig(), default_registry())
        clips = ingest.clips_table(kept)
        rows = asyncio.run(run_judge(make_judge(JudgeConfig(name="heuristic")),
                                     ingest.clip_tasks(clips, kept)))
        judged = parquet_io.round_trip(pd.DataFrame([r.model_dump() for r in rows]))
        clips = parquet_io.round_trip(clips)
        whole = parquet_io.round_trip(kept)
        loaded = parquet_io.round_trip(kept, OUTCOME_COLUMNS)
        # Between judges (pandas' groupby and pivot, unchanged) is the slow part: the
        # trajectories both ways for one judge only; two judges at the default threshold,
        # three at 0.3.
        for judges, trajectories, threshold in (
                ({"h": judged}, whole, DEFAULT_DISAGREEMENT_THRESHOLD),
                ({"h": judged}, loaded, DEFAULT_DISAGREEMENT_THRESHOLD),
                ({"h": judged, "s": _shifted(judged, 0.45)}, loaded,
                 DEFAULT_DISAGREEMENT_THRESHOLD),
                ({"h": judged, "s": _shifted(judged, -0.6), "t": _shifted(judged, 0.2)},
                 whole, 0.3)):
            agreement, listed = _same(f"{name}_{start}", judges, clips, trajectories,
                                      threshold)
            for comparison in agreement["comparison"]:
                compared[comparison] += 1
            compared["listed"] += len(listed)
    assert all(compared[c] for c in ("between_judges", "step_label", "outcome", "listed"))
