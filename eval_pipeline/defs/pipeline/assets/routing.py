"""Deterministic routing checks per batch: expected tools against the tools called."""

import dagster as dg
import pandas as pd

from eval_pipeline.defs.pipeline.assets.metadata import per_batch_output, preview
from eval_pipeline.defs.pipeline.partitions import batches_backfill_policy, batches_partitions_def
from eval_pipeline.defs.pipeline.settings import PipelineSettings
from eval_pipeline.routing import RoutingResult, render_report, routing_table
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
        table, results = routing_table(preprocessed_trajectories[batch], pipeline.routing_mode)
        tables[batch] = table
        metadata[batch] = _routing_metadata(table, results, pipeline.routing_mode)
    return per_batch_output(context, tables, metadata)


def _routing_metadata(table: pd.DataFrame, results: list[RoutingResult],
                      mode: str) -> dict[str, object]:
    passed = int(table["passed"].sum()) if len(table) else 0
    args = table[table["arguments_checked"] > 0] if len(table) else table
    return {
        "checked": len(table),
        "passed": passed,
        "pass_rate": dg.MetadataValue.float(round(passed / len(table), 4)) if len(table)
        else dg.MetadataValue.null(),
        "arguments_checked": len(args),
        "arguments_passed": int(args["arguments_passed"].fillna(False).astype(bool).sum())
        if len(args) else 0,
        "mode": mode,
        "report": dg.MetadataValue.md(f"```\n{render_report(results)}\n```") if results
        else dg.MetadataValue.md("_no trajectory in this batch carries expected tools_"),
        "preview": preview(table, ["task_id", "passed", "expected_tools", "actual_tools",
                                   "reason"]),
    }
