"""#8.12: report.md / report.html / plots/*.png from an output folder's tables."""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import pandas as pd
import pytest

from eval_pipeline.agreement_report import AgreementRow, DisagreementRow
from eval_pipeline.exports.report_document import (
    CONFUSION_PLOT,
    PLOTS_DIR,
    REPORT_HTML,
    REPORT_MD,
    SCATTER_PLOT,
    SCORE_PLOT,
    fmt,
    write_report,
)
from eval_pipeline.report import REPORT_COLUMNS

HOSTILE = "<script>alert(1)</script> a | b\nc"
"""A judge summary that would break the HTML and the Markdown row if it went in raw."""


def _report() -> pd.DataFrame:
    def row(batch: str, mean: float, t2t: float, routed: int) -> dict:
        return {c: None for c in REPORT_COLUMNS} | {
            "batch": batch, "trajectories": 3, "scored_trajectories": 3, "total_clips": 4,
            "successful_evaluations": 4, "clip_success_rate": 1.0, "mean_overall_score": mean,
            "thought_to_tool_accuracy": t2t, "combined_accuracy": t2t / 2,
            "routing_checked": routed, "routing_pass_rate": 0.5 if routed else None,
            "outcome_auc": 0.625, "outcome_labelled": 3, "step_labelled": 0,
            "tool_type_means": json.dumps({"browser_use": 0.4321}),
            "tool_usage": json.dumps({"web_search": {"calls": 7, "scored": 6,
                                                     "share_correct": 0.8333}})}
    return pd.DataFrame([row("b1", 0.6123, 0.7777, 2), row("ALL", 0.6123, 0.7777, 2)],
                        columns=REPORT_COLUMNS)


def _judgments(judge: str, scores: list[float], summary: str = "fine") -> pd.DataFrame:
    return pd.DataFrame([{
        "trajectory_id": f"t{i}", "clip_index": 0, "evaluation_kind": "clip_rubric",
        "tool_type": "browser_use" if i % 2 else "final", "status": "ok",
        "scores": json.dumps({"relevance": s, "accuracy": s}), "summary": summary,
        "reasoning": ""} for i, s in enumerate(scores)])


def _write(folder: Path, tables: dict[str, pd.DataFrame]) -> None:
    for name, table in tables.items():
        table.to_parquet(folder / f"{name}.parquet", index=False)


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    assert len(data) > 3000  # a drawn figure, not an empty canvas
    width, height = struct.unpack(">II", data[16:24])
    return width, height


@pytest.fixture
def full_run(tmp_path: Path) -> Path:
    agreement = pd.DataFrame([r.model_dump() for r in [
        AgreementRow(batch="b1", comparison="between_judges", evaluation_kind="clip_rubric",
                     metric="relevance", items=4, judges=2, krippendorff_alpha=0.4567,
                     mean_spread=0.1, max_spread=0.6, disagreements=1),
        AgreementRow(batch="b1", comparison="outcome", judge="a", items=4, judges=1,
                     accuracy=0.75, cohen_kappa=0.2345, true_positive=2, false_positive=1,
                     false_negative=0, true_negative=1, auc=0.8),
    ]])
    disagreements = pd.DataFrame([DisagreementRow(
        batch="b1", comparison="outcome", judge="a", trajectory_id="t0", task_id="task|x",
        clip_index=0, human_label=-1.0, judge_score=0.9).model_dump()])
    _write(tmp_path, {
        "evaluation_report": _report(), "judge_agreement": agreement,
        "judge_disagreements": disagreements,
        "judgments__a": _judgments("a", [0.9, 0.2, 0.5, 0.7], HOSTILE),
        "judgments__b": _judgments("b", [0.8, 0.3, 0.1, 0.6])})
    return tmp_path


def test_report_sections_carry_the_tables_figures(full_run):
    written = write_report(full_run)
    assert {REPORT_MD, REPORT_HTML, f"{PLOTS_DIR}/{SCORE_PLOT}", f"{PLOTS_DIR}/{SCATTER_PLOT}",
            f"{PLOTS_DIR}/{CONFUSION_PLOT}"} <= set(written)
    md = (full_run / REPORT_MD).read_text("utf-8")
    report = pd.read_parquet(full_run / "evaluation_report.parquet")
    overall = report[report["batch"] == "ALL"].iloc[0]
    for title in ["Metrics", "ReAct metrics", "Routing", "Score distribution",
                  "Judges against each other", "Judges against the human labels"]:
        assert f"\n## {title}\n" in md, title
    assert "## Comparison" not in md  # no compare was run
    metrics = md.split("## Metrics")[1].split("\n## ")[0]
    assert f"| ALL | 3 | 3 | 4 | 4 | 1.000 | {fmt(overall['mean_overall_score'])} |" in metrics
    assert "| browser_use | 0.432 |" in metrics
    react = md.split("## ReAct metrics")[1].split("\n## ")[0]
    assert fmt(overall["thought_to_tool_accuracy"]) in react
    assert "| web_search | 7 | 6 | 0.833 |" in react
    assert "| b1 | 2 | 0.500 |" in md.split("## Routing")[1]
    agreement = pd.read_parquet(full_run / "judge_agreement.parquet")
    alpha = agreement["krippendorff_alpha"].dropna().iloc[0]
    assert fmt(alpha) in md.split("## Judges against each other")[1].split("\n## ")[0]
    human = md.split("## Judges against the human labels")[1]
    assert "| b1 | outcome | a | 4 | 0.750 | 0.234 | 2 | 1 | 0 | 1 | 0.800 |" in human
    # judge a's clip scores per tool type: t1, t3 browser_use (0.2, 0.7), t0, t2 final
    dist = md.split("## Score distribution")[1].split("\n## ")[0]
    assert "| a | browser_use | 2 | 0.450 | 0.200 | 0.700 |" in dist
    for name in (SCORE_PLOT, SCATTER_PLOT, CONFUSION_PLOT):
        assert f"({PLOTS_DIR}/{name})" in md
        width, height = _png_size(full_run / PLOTS_DIR / name)
        assert width >= 200 and height >= 200
    html_text = (full_run / REPORT_HTML).read_text("utf-8")
    assert f'<img src="{PLOTS_DIR}/{SCATTER_PLOT}"' in html_text
    assert "<td>ALL</td>" in html_text and f"<td>{fmt(alpha)}</td>" in html_text


def test_judge_text_cannot_break_the_html_or_a_markdown_row(full_run):
    write_report(full_run)
    html_text = (full_run / REPORT_HTML).read_text("utf-8")
    assert "<script>" not in html_text
    assert "&lt;script&gt;alert(1)&lt;/script&gt; a | b" in html_text
    md = (full_run / REPORT_MD).read_text("utf-8")
    assert "<script>" not in md
    rows = [line for line in md.splitlines() if "alert(1)" in line]
    assert rows  # the lowest clips and the review list show judge a's summary
    for line in rows:
        header = md.splitlines()[md.splitlines().index(line) - 1]
        while not header.startswith("|---"):
            header = md.splitlines()[md.splitlines().index(header) - 1]
        cells = len(re.findall(r"(?<!\\)\|", line))
        assert cells == header.count("|"), line
    assert "task\\|x" in md  # source text in a cell is escaped too


def test_sections_without_data_are_left_out(tmp_path):
    report = _report().assign(routing_checked=0, routing_pass_rate=None, outcome_labelled=0,
                              outcome_auc=None, thought_to_tool_accuracy=None,
                              combined_accuracy=None)
    _write(tmp_path, {"evaluation_report": report,
                      "judgments__a": _judgments("a", [0.9, 0.2])})
    written = write_report(tmp_path)
    md = (tmp_path / REPORT_MD).read_text("utf-8")
    assert "## Metrics" in md and "## Score distribution" in md
    for title in ["ReAct metrics", "Routing", "Judges against each other",
                  "Judges against the human labels", "Comparison"]:
        assert f"## {title}" not in md, title
    assert written == [REPORT_MD, REPORT_HTML, f"{PLOTS_DIR}/{SCORE_PLOT}"]
    assert sorted(p.name for p in (tmp_path / PLOTS_DIR).iterdir()) == [SCORE_PLOT]
    (tmp_path / "judgments__a.parquet").unlink()
    write_report(tmp_path)  # no judgments left: no plot, and the old ones are gone
    assert not (tmp_path / PLOTS_DIR).exists()
    assert "## Score distribution" not in (tmp_path / REPORT_MD).read_text("utf-8")


def test_comparison_only_when_compare_ran(full_run, tmp_path):
    write_report(full_run)
    assert "## Comparison" not in (full_run / REPORT_MD).read_text("utf-8")
    (full_run / "compare.md").write_text("# B vs A\n\n| metric | change |\n|---|---|\n"
                                         "| overall_trajectory_score | +0.125 |\n", "utf-8")
    write_report(full_run)
    md = (full_run / REPORT_MD).read_text("utf-8")
    assert "## Comparison" in md and "(compare.md)" in md and "+0.125" in md
    assert '<a href="compare.md">' in (full_run / REPORT_HTML).read_text("utf-8")


def test_asset_metadata_sections_stay_small():
    from eval_pipeline.exports.report_document import METADATA_LIMIT, report_metadata_markdown

    text = report_metadata_markdown(_report())
    assert "## ReAct metrics" in text and "| web_search | 7 | 6 | 0.833 |" in text
    assert "## Routing" in text and "## Judges against the human labels" in text
    many = pd.concat([_report()] * 400, ignore_index=True)
    cut = report_metadata_markdown(many)
    assert len(cut) <= METADATA_LIMIT + 100 and "report.md" in cut.splitlines()[-1]


@pytest.mark.slow
def test_cli_run_writes_the_report(project_root, tmp_path, monkeypatch, capsys):
    import dagster as dg

    from eval_pipeline.cli import main

    home = tmp_path / "home"
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    out = tmp_path / "out"
    assert main(["run", str(project_root / "data"), "--output", str(out),
                 "--store", str(tmp_path / "store")]) == 0
    capsys.readouterr()
    md = (out / REPORT_MD).read_text("utf-8")
    report = pd.read_parquet(out / "evaluation_report.parquet")
    overall = report[report["batch"] == "ALL"].iloc[0]
    assert f"| ALL | {overall['trajectories']} |" in md
    assert fmt(float(overall["mean_overall_score"])) in md.split("## ReAct")[0]
    react = md.split("## ReAct metrics")[1].split("\n## ")[0]
    assert fmt(float(overall["thought_to_tool_accuracy"])) in react
    judgments = pd.read_parquet(out / "judgments__heuristic.parquet")
    assert f"| heuristic | {judgments['tool_type'].iloc[0]} |" in md
    assert "## Comparison" not in md
    html_text = (out / REPORT_HTML).read_text("utf-8")
    assert f"<td>{fmt(float(overall['mean_overall_score']))}</td>" in html_text
    assert _png_size(out / PLOTS_DIR / SCORE_PLOT)[0] >= 200
    assert not (out / PLOTS_DIR / SCATTER_PLOT).exists()  # one judge: no pair to plot
    if int(overall["outcome_labelled"]):
        assert _png_size(out / PLOTS_DIR / CONFUSION_PLOT)[0] >= 200
    with dg.DagsterInstance.from_config(str(home)) as instance:
        event = instance.get_latest_materialization_event(dg.AssetKey("evaluation_report"))
        assert event is not None and event.asset_materialization is not None
        text = event.asset_materialization.metadata["report"].value
    assert "## ReAct metrics" in text and "Tool usage (all batches):" in text


def test_report_verb_regenerates_with_a_comparison(full_run, tmp_path, capsys):
    from eval_pipeline.cli import main

    elsewhere = tmp_path / "cmp"
    elsewhere.mkdir()
    (elsewhere / "compare.md").write_text("| sequence_optimality | -0.250 |\n", "utf-8")
    assert main(["report", str(full_run), "--compare", str(elsewhere)]) == 0
    assert str(full_run / REPORT_MD) in capsys.readouterr().out
    md = (full_run / REPORT_MD).read_text("utf-8")
    assert "## Comparison" in md and "-0.250" in md
    assert main(["report", str(tmp_path / "nothing")]) == 1
