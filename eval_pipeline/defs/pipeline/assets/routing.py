"""Deterministic routing checks per batch: expected tools against the tools called."""

import dagster as dg
import pandas as pd

from eval_pipeline.defs.pipeline.assets.metadata import per_batch_output, preview
from eval_pipeline.defs.pipeline.partitions import (
    batches_backfill_policy,
    batches_partitions_def,
    described,
)
from eval_pipeline.defs.pipeline.settings import PipelineSettings
from eval_pipeline.routing import TRAJECTORY_MODES, RoutingResult, render_report, routing_table
from eval_pipeline.versions import source_version


@dg.asset(
    partitions_def=batches_partitions_def,
    backfill_policy=batches_backfill_policy,
    group_name="judging",
    kinds={"pandas", "parquet"},
    code_version=source_version("eval_pipeline.routing", __name__),
)
def routing_checks(context: dg.AssetExecutionContext, pipeline: PipelineSettings,
                   preprocessed_trajectories: dict[str, pd.DataFrame]) -> dg.Output:
    """Pass/fail per trajectory that carries expected tools (no LLM): were they called?"""
    tables: dict[str, pd.DataFrame] = {}
    metadata: dict[str, dict[str, object]] = {}
    for batch in context.partition_keys:
        table, results = routing_table(preprocessed_trajectories[batch], pipeline.routing_mode,
                                       pipeline.routing_argument_mode)
        tables[batch] = table
        metadata[batch] = _routing_metadata(table, results, pipeline.routing_mode,
                                            pipeline.routing_argument_mode)
    return per_batch_output(context, tables, metadata)


def _routing_metadata(table: pd.DataFrame, results: list[RoutingResult],
                      mode: str, argument_mode: str) -> dict[str, object]:
    """Counts per mode too, so switching modes is a look at the metadata, not a rerun."""
    passed = int(table["passed"].sum()) if len(table) else 0
    args = table[table["arguments_checked"] > 0] if len(table) else table
    bfcl = (table["bfcl_passed"].dropna() if len(table) else pd.Series()).astype(bool)
    return {
        "checked": len(table),
        "passed": passed,
        "pass_rate": dg.MetadataValue.float(round(passed / len(table), 4)) if len(table)
        else dg.MetadataValue.null(),
        "arguments_checked": len(args),
        "arguments_passed": int(args["arguments_passed"].fillna(False).astype(bool).sum())
        if len(args) else 0,
        "mode": mode,
        "argument_mode": argument_mode,
        **{f"passed_{m}": int(table[f"{m}_passed"].sum()) if len(table) else 0
           for m in TRAJECTORY_MODES},
        "mean_partial_credit": dg.MetadataValue.float(round(float(
            table["partial_credit"].mean()), 4)) if len(table) else dg.MetadataValue.null(),
        "bfcl_checked": len(bfcl),
        "bfcl_passed": int(bfcl.sum()),
        "report": dg.MetadataValue.md(f"```\n{render_report(results)}\n```") if results
        else dg.MetadataValue.md("_no trajectory in this batch carries expected tools_"),
        "preview": preview(table, ["task_id", "match_mode", "passed", "partial_credit",
                                   "expected_tools", "actual_tools", "reason"]),
    }


(routing_checks,) = described([routing_checks])  # its page says how partitions come to be
