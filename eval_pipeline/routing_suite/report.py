"""The suite's report, printed as the routing evals document prints it.

```
================================================================================
AGENT EVALUATION RESULTS
================================================================================

Suite: routing_evals (4 cases)
Model: gpt (openai, gpt-4.1-mini)
Mode: superset (arguments: exact)

PASS  Knowledge base search
  Prompt:    What are people saying about Python type hints?
  Expected:  ['search_knowledge_base']
  Actual:    ['search_knowledge_base']
  Reason:    Correct tools called: ['search_knowledge_base']

--------------------------------------------------------------------------------
Results: 1/1 passed
================================================================================
```

The document's block per case and its closing ``Results: k/n passed`` line are kept as they
are (the case blocks are the routing checks' own, :func:`eval_pipeline.routing.
report_case_lines`). What the document's runner never meets is added around them: a case
whose model call failed is an ``ERROR`` block with the error instead of a reason, and a
line after the results counts those cases apart (they are among the n, not among the
passed, and not FAILs).
"""

from __future__ import annotations

from collections.abc import Sequence

from eval_pipeline.routing import TRAJECTORY_MODES, one_line, report_case_lines
from eval_pipeline.routing_suite.run import CaseOutcome, SuiteRun

BAR = "=" * 80


def _error_lines(o: CaseOutcome) -> list[str]:
    lines = [f"ERROR  {o.case.name}", f"  Prompt:    {one_line(o.case.prompt)}",
             f"  Expected:  {o.expected_tools}", f"  Actual:    {o.actual_tools}",
             f"  Error:     {one_line(o.error or '', 300)}", ""]
    return lines


def render_suite_report(run: SuiteRun) -> str:
    """One suite against one model, in the document's format."""
    lines = [BAR, "AGENT EVALUATION RESULTS", BAR, "",
             f"Suite: {run.suite} ({len(run.outcomes)} cases)",
             f"Model: {run.model_name} ({run.provider}, {run.model})"]
    modes = sorted({(o.result.match_mode, o.result.argument_mode) for o in run.outcomes
                    if o.result is not None} or {(run.match_mode, run.argument_mode)})
    lines += ["Mode: " + ", ".join(f"{m} (arguments: {a})" for m, a in modes), ""]
    for o in run.outcomes:
        if o.result is None:
            lines += _error_lines(o)
            continue
        block = report_case_lines(o.result)
        if o.stopped_at_max_turns:
            block.insert(-1, f"  Note:      stopped after {o.turns} model turns "
                             "(max_turns) while the model was still calling tools")
        lines += block
    lines += ["-" * 80, f"Results: {run.passed}/{len(run.outcomes)} passed"]
    if run.errors:
        lines.append(f"Errors: {run.errors} (the model call failed: no verdict)")
    lines.append(BAR)
    return "\n".join(lines)


def mode_summary(run: SuiteRun) -> str:
    """Pass counts under every trajectory mode (each case with its own argument mode), so
    a stricter or looser reading of the same run is one line, not a rerun."""
    judged = sum(o.result is not None for o in run.outcomes)
    return "By mode: " + ", ".join(f"{m} {run.passed_in_mode(m)}/{judged}"
                                   for m in TRAJECTORY_MODES)


def render_reports(runs: Sequence[SuiteRun]) -> str:
    return "\n\n".join(render_suite_report(r) for r in runs)
