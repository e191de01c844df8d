"""Trajectory summaries per batch and the evaluation report over every batch."""


import json
from collections.abc import Sequence

import dagster as dg
import pandas as pd

from eval_pipeline.defs.pipeline.assets.changes import (
    RAW_KEY,
    prefetched,
    report_changes,
    summary_changes,
)
from eval_pipeline.defs.pipeline.assets.metadata import per_batch_output, preview
from eval_pipeline.defs.pipeline.io_manager import FROM_INDEX, INDEXER
from eval_pipeline.defs.pipeline.partition_index import IndexedPartitions
from eval_pipeline.defs.pipeline.partitions import batches_backfill_policy, batches_partitions_def
from eval_pipeline.defs.pipeline.report_index import REPORT_INDEXER_REF, report_from_index
from eval_pipeline.exports.report_document import report_metadata_markdown
from eval_pipeline.judges.config import JudgeConfig
from eval_pipeline.judges.presets import effective_model
from eval_pipeline.report import (
    REACT_ACCURACY_COLUMNS,
    REPORT_MEAN_KEY,
    batch_row,
    report_markdown,
)
from eval_pipeline.scoring import summarize_trajectories
from eval_pipeline.scoring.summaries import TRAJECTORY_COLUMNS
from eval_pipeline.versions import source_version

SUMMARY_GROUP = "summaries"
SUMMARIES_KEY = dg.AssetKey("trajectory_summaries")


def model_names(configs: Sequence[JudgeConfig]) -> list[str]:
    return [f"{c.provider}_{effective_model(c)}" for c in configs]


def build_summary_assets(configs: Sequence[JudgeConfig]) -> list[dg.AssetsDefinition]:
    names = model_names(configs)

    @dg.asset(
        partitions_def=batches_partitions_def,
        backfill_policy=batches_backfill_policy,
        group_name=SUMMARY_GROUP,
        kinds={"pandas", "parquet"},
        code_version=source_version("eval_pipeline.scoring.summaries", "eval_pipeline.report",
                                    "eval_pipeline.scoring.assessments"),
        # Each batch's report row and figures, kept in an index by the IO manager (#12.5).
        metadata={INDEXER: REPORT_INDEXER_REF},
        # Only what the summaries read of the trajectories: not their nested steps (#12.4).
        ins={"preprocessed_trajectories": dg.AssetIn(metadata={"columns": TRAJECTORY_COLUMNS})},
    )
    def trajectory_summaries(
        context: dg.AssetExecutionContext,
        preprocessed_trajectories: dict[str, pd.DataFrame], clips: dict[str, pd.DataFrame],
        averaged_scores: dict[str, pd.DataFrame], routing_checks: dict[str, pd.DataFrame],
    ) -> dg.Output:
        """The original tool's evaluation_metadata and the response with embedded evaluations,
        plus the ReAct accuracies and the routing check of each trajectory."""
        tables = {b: summarize_trajectories(preprocessed_trajectories[b], clips[b],
                                            averaged_scores[b], names, routing_checks[b])
                  for b in context.partition_keys}
        with prefetched(context.instance, [SUMMARIES_KEY, RAW_KEY], context.partition_keys,
                        context.run_id):
            metadata = {b: summary_metadata(table, names)
                        | summary_changes(context.instance, b, table, configs)
                        for b, table in tables.items()}
        return per_batch_output(context, tables, metadata)

    @dg.asset(
        ins={"trajectory_summaries": dg.AssetIn(
            metadata={"allow_missing_partitions": True, FROM_INDEX: REPORT_INDEXER_REF})},
        group_name=SUMMARY_GROUP,
        kinds={"pandas", "parquet"},
        code_version=source_version("eval_pipeline.report", "eval_pipeline.scoring.assessments"),
    )
    def evaluation_report(context: dg.AssetExecutionContext,
                          trajectory_summaries: IndexedPartitions
                          ) -> dg.Output[pd.DataFrame]:
        """One row per batch and one for all batches, with the change since the last report.

        Reads the summaries' index (each batch's report row and figures, kept as the
        batches are written), not the batches' tables."""
        previous = context.instance.get_latest_materialization_event(context.asset_key)
        last_mean = None
        if previous is not None and previous.asset_materialization is not None:
            value = previous.asset_materialization.metadata.get(REPORT_MEAN_KEY)
            last_mean = getattr(value, "value", None)
        report = report_from_index(trajectory_summaries)
        overall = report[report["batch"] == "ALL"]
        mean = overall["mean_overall_score"].iloc[0] if len(overall) else None
        metadata = {
            **{column: dg.MetadataValue.float(round(float(overall[column].iloc[0]), 4))
               if len(overall) and pd.notna(overall[column].iloc[0])
               else dg.MetadataValue.null() for column in REACT_ACCURACY_COLUMNS},
            "batches": int((report["batch"] != "ALL").sum()),
            "trajectories": int(overall["trajectories"].iloc[0]) if len(overall) else 0,
            REPORT_MEAN_KEY: dg.MetadataValue.float(float(mean))
            if mean is not None and pd.notna(mean) else dg.MetadataValue.null(),
            "report": dg.MetadataValue.md(
                "\n\n".join(part for part in (report_markdown(report, last_mean),
                                              report_metadata_markdown(report)) if part)),
            **report_changes(context.instance, report, configs),
        }
        if last_mean is not None and mean is not None and pd.notna(mean):
            metadata["delta_vs_last_report"] = dg.MetadataValue.float(
                round(float(mean) - float(last_mean), 4))
        return dg.Output(report, metadata=metadata)

    return [trajectory_summaries, evaluation_report]


def summary_metadata(table: pd.DataFrame, names: list[str]) -> dict[str, object]:
    scored = table["overall_trajectory_score"].dropna()
    # The batch's ReAct accuracies, pooled as in evaluation_report (None: nobody scored).
    react = batch_row("batch", table)
    return {
        "trajectories": len(table),
        "scored": len(scored),
        "mean_overall_score": dg.MetadataValue.float(round(float(scored.mean()), 4))
        if len(scored) else dg.MetadataValue.null(),
        **{column: dg.MetadataValue.float(round(float(react[column]), 4))
           if react is not None and pd.notna(react[column]) else dg.MetadataValue.null()
           for column in REACT_ACCURACY_COLUMNS},
        "trajectory_assessment_mean": dg.MetadataValue.float(
            round(float(react["trajectory_assessment_mean"]), 4))
        if react is not None and pd.notna(react["trajectory_assessment_mean"])
        else dg.MetadataValue.null(),
        "category_assessment_means": dg.MetadataValue.json(
            json.loads(react["category_assessment_means"]) if react is not None else {}),
        "routing_passed": int(table["routing_passed"].fillna(False).astype(bool).sum()),
        "routing_checked": int(table["routing_passed"].notna().sum()),
        "judges": dg.MetadataValue.json(names),
        "preview": preview(table, ["task_id", "total_clips", "successful_evaluations",
                                   "overall_trajectory_score", "thought_to_tool_accuracy",
                                   "query_to_thought_accuracy", "sequence_optimality",
                                   "success"]),
    }
