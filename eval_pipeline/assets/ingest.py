"""Batch ingestion: raw trajectories (+ quarantine), preprocessing (+ report), clips."""


from collections.abc import Iterator

import dagster as dg
import pandas as pd

from eval_pipeline import ingest
from eval_pipeline.assets.metadata import counts, preview
from eval_pipeline.partitions import batches_partitions_def
from eval_pipeline.settings import PipelineSettings
from eval_pipeline.splitting import find_batch
from eval_pipeline.versions import source_version

INGEST_GROUP = "ingest"
RAW_VERSION = source_version("eval_pipeline.formats", "eval_pipeline.tool_registry",
                             "eval_pipeline.models", "eval_pipeline.ingest",
                             data_files=("rubrics/tools.yaml",))
PREPROCESS_VERSION = source_version("eval_pipeline.preprocess", "eval_pipeline.ingest")
CLIPS_VERSION = source_version("eval_pipeline.clips")


def selected(context: dg.AssetExecutionContext, outputs: list[dg.Output],
             checks: list[dg.AssetCheckResult]) -> Iterator[dg.Output | dg.AssetCheckResult]:
    """Both tables come from one parse; emit only what this run selected (subsetting)."""
    yield from (o for o in outputs if o.output_name in context.op_execution_context
                .selected_output_names)
    chosen = context.selected_asset_check_keys
    yield from (c for c in checks if dg.AssetCheckKey(c.asset_key, c.check_name) in chosen)


@dg.multi_asset(
    outs={
        "raw_trajectories": dg.AssetOut(
            description="One row per input record that parsed, in canonical form.",
            kinds={"pandas", "parquet"}, code_version=RAW_VERSION, is_required=False,
        ),
        "quarantine": dg.AssetOut(
            description="Records that did not parse, with file, line, reason and an excerpt.",
            kinds={"pandas", "parquet"}, code_version=RAW_VERSION, is_required=False,
        ),
    },
    partitions_def=batches_partitions_def,
    group_name=INGEST_GROUP,
    can_subset=True,
    check_specs=[
        dg.AssetCheckSpec("every_record_accounted", asset="raw_trajectories",
                          description="parsed + quarantined == non-blank records in the batch"),
        dg.AssetCheckSpec("unique_trajectory_ids", asset="raw_trajectories"),
    ],
)
def raw_trajectories(
    context: dg.AssetExecutionContext, pipeline: PipelineSettings
) -> Iterator[dg.Output | dg.AssetCheckResult]:
    """Parse one batch file with the format detected for it (or the configured one)."""
    path, manifest = find_batch(pipeline.batches_path, context.partition_key)
    raw, quarantined = ingest.read_batch(path, manifest, context.partition_key,
                                         pipeline.read_options())
    expected = len(manifest.lines) if manifest.lines is not None else len(raw) + len(quarantined)
    accounted = len(raw) + len(quarantined)
    outputs = [dg.Output(raw, output_name="raw_trajectories", metadata={
        "records_read": expected,
        "parsed": len(raw),
        "quarantined": len(quarantined),
        "drop_file": manifest.drop_file,
        "batch_fingerprint": manifest.fingerprint,
        "formats": counts(raw["source_format"]) if len(raw) else dg.MetadataValue.json({}),
        "preview": preview(raw, ["task_id", "source_format", "source_line", "success",
                                 "task_description"]),
    }), dg.Output(quarantined, output_name="quarantine", metadata={
        "quarantined": len(quarantined),
        "reasons": counts(quarantined["reason"]) if len(quarantined)
        else dg.MetadataValue.json({}),
        "preview": preview(quarantined, ["source_file", "source_line", "reason", "error"]),
    })]
    dupes = int(raw["trajectory_id"].duplicated().sum())
    checks = [
        dg.AssetCheckResult(
            asset_key="raw_trajectories", check_name="every_record_accounted",
            passed=accounted == expected,
            metadata={"records_read": expected, "parsed": len(raw),
                      "quarantined": len(quarantined)},
        ),
        dg.AssetCheckResult(asset_key="raw_trajectories", check_name="unique_trajectory_ids",
                            passed=dupes == 0, metadata={"duplicates": dupes}),
    ]
    yield from selected(context, outputs, checks)


@dg.multi_asset(
    outs={
        "preprocessed_trajectories": dg.AssetOut(
            description="Kept trajectories with preprocessing_metadata (tool_call_count, "
            "has_duplicates, format_corrected, tag_analysis).",
            kinds={"pandas", "parquet"}, code_version=PREPROCESS_VERSION, is_required=False,
        ),
        "preprocess_report": dg.AssetOut(
            description="Every removed trajectory with its reason (frequency, duplicates).",
            kinds={"pandas", "parquet"}, code_version=PREPROCESS_VERSION, is_required=False,
        ),
    },
    ins={"raw_trajectories": dg.AssetIn()},
    partitions_def=batches_partitions_def,
    group_name=INGEST_GROUP,
    can_subset=True,
    check_specs=[
        dg.AssetCheckSpec("kept_plus_removed_equals_parsed", asset="preprocessed_trajectories"),
    ],
)
def preprocessed_trajectories(
    context: dg.AssetExecutionContext, pipeline: PipelineSettings, raw_trajectories: pd.DataFrame
) -> Iterator[dg.Output | dg.AssetCheckResult]:
    """Beta threshold, consecutive duplicate calls and tag repair, as the original tool."""
    kept, removed, stats = ingest.preprocess_batch(
        raw_trajectories, pipeline.preprocess_config(), pipeline.read_options().registry()
    )
    context.log.info("\n" + stats.render())
    outputs = [dg.Output(kept, output_name="preprocessed_trajectories", metadata={
        "total": stats.total,
        "valid": stats.valid,
        "removed_frequency": stats.removed_frequency,
        "removed_duplicates": stats.removed_duplicates,
        "flagged_frequency": stats.flagged_frequency,
        "flagged_duplicates": stats.flagged_duplicates,
        "format_issues_fixed": stats.format_issues_fixed,
        "success_rate": dg.MetadataValue.float(round(stats.success_rate, 4)),
        "beta_threshold": pipeline.beta_threshold,
        "statistics": dg.MetadataValue.md(f"```\n{stats.render()}\n```"),
        "preview": preview(kept, ["task_id", "tool_call_count", "format_corrected",
                                  "preprocessing_flags"]),
    }), dg.Output(removed, output_name="preprocess_report", metadata={
        "removed": len(removed),
        "reasons": counts(removed["reason"]) if len(removed) else dg.MetadataValue.json({}),
        "preview": preview(removed, ["task_id", "source_line", "reason", "detail"]),
    })]
    check = dg.AssetCheckResult(
        asset_key="preprocessed_trajectories", check_name="kept_plus_removed_equals_parsed",
        passed=len(kept) + len(removed) == len(raw_trajectories),
        metadata={"kept": len(kept), "removed": len(removed), "parsed": len(raw_trajectories)},
    )
    yield from selected(context, outputs, [check])


@dg.asset(
    partitions_def=batches_partitions_def,
    group_name=INGEST_GROUP,
    kinds={"pandas", "parquet"},
    code_version=CLIPS_VERSION,
)
def clips(preprocessed_trajectories: pd.DataFrame) -> dg.Output[pd.DataFrame]:
    """One clip per tool call with its result, plus the final clip, with char offsets."""
    table = ingest.clips_table(preprocessed_trajectories)
    return dg.Output(table, metadata={
        "clips": len(table),
        "trajectories": int(table["trajectory_id"].nunique()) if len(table) else 0,
        "tool_types": counts(table["tool_type"]) if len(table) else dg.MetadataValue.json({}),
        "preview": preview(table, ["task_id", "clip_index", "tool_type", "tool_name",
                                   "action_input"]),
    })
