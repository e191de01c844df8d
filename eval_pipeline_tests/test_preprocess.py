import pytest

from eval_pipeline.formats.xml_tags import parse_xml_response
from eval_pipeline.models import Trajectory
from eval_pipeline.preprocess import (
    PreprocessConfig,
    find_consecutive_duplicates,
    preprocess_one,
    repair_tags,
    summarize,
)
from eval_pipeline.tool_registry import default_registry
from eval_pipeline_tests.tagscan_modes import scan_mode  # noqa: F401

pytestmark = pytest.mark.usefixtures("scan_mode")  # the C repair and the Python walk

TOOLS = ["microsandbox", "deepsearch", "browser_use", "search_tool"]


def _traj(text: str) -> Trajectory:
    reg = default_registry()
    return Trajectory(trajectory_id="t", batch="b", source_file="f.jsonl", source_line=1,
                      source_format="xml_tags", task_id="t1", task_description="d",
                      raw_response=text, steps=parse_xml_response(text, reg))


def _reparse(text: str):
    return parse_xml_response(text, default_registry())


def _call(i: int, query: str = "q") -> str:
    return (f"<think>step {i}</think><deepsearch><quick_research>{{\"question\": \"{query}{i}\"}}"
            f"</quick_research></deepsearch><result>r{i}</result>")


def test_repair_closes_unclosed_answer_and_records_it():
    repaired = repair_tags("<think>a</think><answer>\\boxed{4}", TOOLS)
    assert repaired.text == "<think>a</think><answer>\\boxed{4}</answer>"
    assert repaired.fixes == ["closed <answer> at end of response"]


def test_repair_closes_think_before_next_block_and_drops_stray_closer():
    repaired = repair_tags("<think>plan<microsandbox>x</microsandbox></result><answer>y</answer>",
                           TOOLS)
    assert "<think>plan</think><microsandbox>" in repaired.text
    assert "</result>" not in repaired.text
    assert any("stray </result>" in f for f in repaired.fixes)
    assert any("closed <think> before </" in f or "closed <think>" in f for f in repaired.fixes)


def test_repair_treats_tool_output_as_opaque():
    # Real tool output quotes tags; they must not be "repaired".
    text = ("<deepsearch><quick_research>{}</quick_research></deepsearch>"
            "<result>Use <tool_param><tool_id>x</tool_id></tool_param> to retry</result>"
            "<answer>done</answer>")
    repaired = repair_tags(text, TOOLS)
    assert repaired.text == text
    assert repaired.fixes == []


def test_valid_response_is_untouched():
    text = _call(1) + "<answer>ok</answer>"
    assert repair_tags(text, TOOLS).fixes == []


def test_beta_threshold_removes_runaway_loops_and_flag_mode_keeps_them():
    text = "".join(_call(i) for i in range(16)) + "<answer>x</answer>"
    removed = preprocess_one(_traj(text), PreprocessConfig(beta_threshold=15), default_registry())
    assert not removed.kept and removed.removal_reason == "frequency"
    assert removed.tool_call_count == 16
    flagged = preprocess_one(_traj(text), PreprocessConfig(frequency_filter="flag"),
                             default_registry())
    assert flagged.kept and flagged.flags[0].startswith("frequency: 16 tool calls")
    at_limit = "".join(_call(i) for i in range(15))
    assert preprocess_one(_traj(at_limit), PreprocessConfig(), default_registry()).kept


def test_consecutive_identical_calls_are_duplicates_but_separated_ones_are_not():
    same = ("<deepsearch><quick_research>{\"question\": \"a\"}</quick_research></deepsearch>"
            "<result>1</result>")
    other = ("<browser_use><browser_search_google>{\"query\": \"b\"}</browser_search_google>"
             "</browser_use><result>2</result>")
    reg = default_registry()
    assert find_consecutive_duplicates(parse_xml_response(same + same, reg))
    assert not find_consecutive_duplicates(parse_xml_response(same + other + same, reg))
    outcome = preprocess_one(_traj(same + same), PreprocessConfig(), reg)
    assert outcome.removal_reason == "duplicates" and outcome.has_duplicates


def test_repair_reparses_steps_and_reports_metadata():
    outcome = preprocess_one(_traj(_call(1) + "<answer>forty-two"), PreprocessConfig(),
                             default_registry(), _reparse)
    assert outcome.kept and outcome.format_corrected
    assert outcome.trajectory.raw_response.endswith("</answer>")
    assert outcome.tag_analysis == {"answer": 1, "deepsearch": 1, "quick_research": 1,
                                    "result": 1, "think": 1}
    assert [s.kind for s in outcome.trajectory.steps][-1] == "answer"


def test_statistics_add_up():
    reg = default_registry()
    outcomes = [
        preprocess_one(_traj(_call(1)), PreprocessConfig(), reg),
        preprocess_one(_traj("".join(_call(i) for i in range(20))), PreprocessConfig(), reg),
        preprocess_one(_traj(_call(1) + _call(1)), PreprocessConfig(), reg),
        preprocess_one(_traj(_call(1) + "<answer>x"), PreprocessConfig(), reg, _reparse),
    ]
    stats = summarize(outcomes)
    assert (stats.total, stats.valid, stats.removed_frequency, stats.removed_duplicates,
            stats.format_issues_fixed) == (4, 2, 1, 1, 1)
    assert stats.success_rate == 0.5
    assert "Removed (duplicates): 1" in stats.render()
