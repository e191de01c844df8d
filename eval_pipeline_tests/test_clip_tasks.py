"""``ingest.clip_tasks`` read column by column gives the judge tasks the groupby gave (#12.4).

The reference below is the code it replaced: trajectories in the order they first appear,
each one's clips sorted by ``clip_index`` and read with ``to_dict("records")``. Held to it
on the sample drops, every corpora file and clips tables shuffled so trajectories
interleave (the order and each clip's ``earlier_calls`` are what a regrouping would break).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from eval_pipeline import ingest
from eval_pipeline.ingest import _optional_str, _threshold
from eval_pipeline.judges.base import ClipTask, ClipView
from eval_pipeline.preprocess import PreprocessConfig
from eval_pipeline.tool_registry import default_registry
from eval_pipeline_tests.stage_digests import inputs


def reference_clip_tasks(clips: pd.DataFrame, preprocessed: pd.DataFrame) -> list[ClipTask]:
    tasks_by_tid = dict(zip(preprocessed["trajectory_id"], preprocessed["task_description"],
                            strict=True))
    limits = (dict(zip(preprocessed["trajectory_id"], preprocessed["beta_threshold"],
                       strict=True)) if "beta_threshold" in preprocessed.columns else {})
    tasks: list[ClipTask] = []
    for tid, group in clips.groupby("trajectory_id", sort=False):
        earlier: list[str] = []
        for clip in group.sort_values("clip_index").to_dict("records"):
            view = ClipView(
                content=clip["content"], thought=clip["thought"], tool_call=clip["tool_call"],
                tool_name=_optional_str(clip["tool_name"]), action_input=clip["action_input"],
                result=clip["result"], has_answer=bool(clip["has_answer"]),
                answer=clip["answer"], earlier_calls=list(earlier),
            )
            tasks.append(ClipTask(trajectory_id=str(tid), clip_index=int(clip["clip_index"]),
                                  tool_type=clip["tool_type"],
                                  task_description=tasks_by_tid.get(tid, ""), clip=view,
                                  beta_threshold=_threshold(limits.get(tid))))
            if clip["tool_call"]:
                earlier.append(f"{clip['tool_name']}:{' '.join(clip['action_input'].split())}")
    return tasks


def _tables(path: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    raw, _ = ingest.read_batch(path, None, path.stem)
    kept, _, _ = ingest.preprocess_batch(raw, PreprocessConfig(), default_registry())
    return ingest.clips_table(kept), kept


def _assert_same(clips: pd.DataFrame, kept: pd.DataFrame) -> None:
    got = ingest.clip_tasks(clips, kept)
    assert got == reference_clip_tasks(clips, kept)
    assert len(got) == len(clips)
    if len(clips) > 1:  # trajectories interleaved, clips out of order: the same tasks
        shuffled = clips.sample(frac=1.0, random_state=7).reset_index(drop=True)
        assert ingest.clip_tasks(shuffled, kept) == reference_clip_tasks(shuffled, kept)


@pytest.mark.parametrize("name", sorted(inputs(None)))
def test_sample_drops_give_the_reference_tasks(name: str) -> None:
    clips, kept = _tables(inputs(None)[name])
    assert len(clips)
    _assert_same(clips, kept)


def test_corpora_give_the_reference_tasks(corpora_dir: Path) -> None:
    found = {k: p for k, p in inputs(corpora_dir).items() if k.startswith("corpora/")}
    assert found
    with_earlier = 0
    for path in found.values():
        clips, kept = _tables(path)
        _assert_same(clips, kept)
        with_earlier += sum(bool(t.clip.earlier_calls) for t in ingest.clip_tasks(clips, kept))
    assert with_earlier > 1000  # the chains of earlier calls were compared, not only empties


def test_earlier_calls_follow_clip_order_not_row_order() -> None:
    clips = pd.DataFrame({
        "trajectory_id": ["b", "a", "b", "a", "a"],
        "clip_index": [1, 2, 0, 0, 1],
        "tool_type": ["final", "final", "search", "search", "code"],
        "content": ["c"] * 5, "thought": [""] * 5,
        "tool_call": ["", "", "<s>q</s>", "<s>x</s>", "<c>y</c>"],
        "tool_name": [None, None, "search", "search", "run"],
        "action_input": ["", "", "q  one", "x", "y\n two"],
        "result": [""] * 5, "has_answer": [True, True, False, False, False],
        "answer": ["done", "done", "", "", ""],
    })
    kept = pd.DataFrame({"trajectory_id": ["a", "b"], "task_description": ["A", "B"],
                         "beta_threshold": [15, 8]})
    tasks = ingest.clip_tasks(clips, kept)
    assert [(t.trajectory_id, t.clip_index) for t in tasks] == [
        ("b", 0), ("b", 1), ("a", 0), ("a", 1), ("a", 2)]
    assert [t.clip.earlier_calls for t in tasks] == [
        [], ["search:q one"], [], ["search:x"], ["search:x", "run:y two"]]
    assert [t.task_description for t in tasks] == ["B", "B", "A", "A", "A"]
    assert [t.beta_threshold for t in tasks] == [8, 8, 15, 15, 15]
    assert tasks == reference_clip_tasks(clips, kept)
