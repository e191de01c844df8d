import asyncio
import json

from eval_pipeline.clips import segment
from eval_pipeline.formats.xml_tags import parse_xml_response
from eval_pipeline.judges.base import ClipTask, ClipView
from eval_pipeline.judges.config import JudgeConfig
from eval_pipeline.judges.heuristic import HeuristicJudge
from eval_pipeline.judges.requests import build_request
from eval_pipeline.judges.runner import run_judge
from eval_pipeline.rubrics import NO_FINAL_ANSWER
from eval_pipeline.tool_registry import default_registry

SEED_EXAMPLE = """<think>I need to implement a sorting algorithm.</think>
<microsandbox>
<microsandbox_execute>
print(sorted([3, 1, 2]))
</microsandbox_execute>
</microsandbox>
<result>
[1, 2, 3]
</result>
<think>The sorting works correctly. Now I'll provide the final answer.</think>
<answer>I've successfully implemented a bubble sort algorithm...</answer>"""


def test_seed_example_gives_a_tool_clip_and_a_final_clip():
    clips = segment(SEED_EXAMPLE, parse_xml_response(SEED_EXAMPLE, default_registry()))
    assert [c.tool_type for c in clips] == ["microsandbox", "final"]
    first, final = clips
    assert first.start == 0 and first.content.endswith("</result>")
    assert first.content.startswith("<think>I need to implement")
    assert first.tool_name == "microsandbox_execute"
    assert "print(sorted" in first.action_input and first.result == "[1, 2, 3]"
    assert final.start == first.end and final.end == len(SEED_EXAMPLE)
    assert final.content.strip().startswith("<think>The sorting works")
    assert final.has_answer and final.answer.startswith("I've successfully")
    # Clips tile the response: nothing lost, nothing counted twice.
    assert "".join(c.content for c in clips) == SEED_EXAMPLE


def test_call_without_result_ends_at_the_call_and_next_call_starts_a_new_clip():
    text = ("<deepsearch><quick_research>{}</quick_research></deepsearch>"
            "<browser_use><browser_search_google>{}</browser_search_google></browser_use>"
            "<result>r</result>")
    clips = segment(text, parse_xml_response(text, default_registry()))
    assert [c.tool_type for c in clips] == ["deepsearch", "browser_use", "final"]
    assert clips[0].result == "" and clips[1].result == "r"
    assert clips[0].end == text.index("<browser_use>")


def test_no_tags_is_a_single_final_clip_and_empty_text_has_no_clip():
    clips = segment("just text", parse_xml_response("just text", default_registry()))
    assert len(clips) == 1 and clips[0].tool_type == "final" and not clips[0].has_answer
    assert segment("", []) == []


def test_a_run_stopped_after_a_tool_result_still_gets_its_final_clip():
    """#8.5: a run cut off at its step limit closes with an empty final clip, judged on task
    completion (the original tool made none, so such a run had no final score at all)."""


    stopped = ("<think>search first</think><deepsearch><quick_research>{}</quick_research>"
               "</deepsearch><result>r</result>")
    clips = segment(stopped, parse_xml_response(stopped, default_registry()))
    assert [c.tool_type for c in clips] == ["deepsearch", "final"]
    final = clips[-1]
    assert (final.start, final.end, final.content, final.has_answer) == (
        len(stopped), len(stopped), "", False)
    assert "".join(c.content for c in clips) == stopped

    def task(clip, i):
        return ClipTask(trajectory_id="t", clip_index=i, tool_type=clip.tool_type,
                        task_description="find r",
                        clip=ClipView(content=clip.content, has_answer=clip.has_answer,
                                      answer=clip.answer))
    request = build_request(task(final, 1), "searched")
    assert NO_FINAL_ANSWER in request.user_prompt  # said in our words, not an empty block
    rows = asyncio.run(run_judge(HeuristicJudge(JudgeConfig(name="h")),
                                 [task(c, i) for i, c in enumerate(clips)],
                                 evaluations=["clip_rubric"]))
    closing = [r for r in rows if r.tool_type == "final"]
    assert len(closing) == 1 and closing[0].status == "ok"
    answered = segment(SEED_EXAMPLE, parse_xml_response(SEED_EXAMPLE, default_registry()))
    answered_rows = asyncio.run(run_judge(HeuristicJudge(JudgeConfig(name="h")),
                                          [task(c, i) for i, c in enumerate(answered)],
                                          evaluations=["clip_rubric"]))
    def completion(r):
        return json.loads(r.scores)["task_completion"]
    assert completion(closing[0]) < completion(answered_rows[-1])
