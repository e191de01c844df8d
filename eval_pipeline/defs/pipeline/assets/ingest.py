"""Batch ingestion: raw trajectories (+ quarantine), preprocessing (+ report), clips."""


from collections.abc import Iterator

import dagster as dg
import pandas as pd

from eval_pipeline import contracts, ingest
from eval_pipeline.defs.pipeline.assets.changes import prefetch
from eval_pipeline.defs.pipeline.assets.metadata import counts, per_batch_output, preview
from eval_pipeline.defs.pipeline.batch_files import locate_batches
from eval_pipeline.defs.pipeline.io_manager import Frames
from eval_pipeline.defs.pipeline.partitions import (
    batches_backfill_policy,
    batches_partitions_def,
    described,
)
from eval_pipeline.defs.pipeline.settings import PipelineSettings
from eval_pipeline.exports.common import with_span_ids
from eval_pipeline.preprocess import PreprocessStats
from eval_pipeline.score_changes import combined_hash, content_hash
from eval_pipeline.splitting import MissingBatchError
from eval_pipeline.steps_column import with_arrow_steps
from eval_pipeline.versions import source_version

INGEST_GROUP = "ingest"
RAW_VERSION = source_version("eval_pipeline.formats", "eval_pipeline.tool_registry",
                             "eval_pipeline.models", "eval_pipeline.ingest",
                             data_files=("rubrics/tools.yaml",))
PREPROCESS_VERSION = source_version("eval_pipeline.preprocess", "eval_pipeline.ingest")
CLIPS_VERSION = source_version("eval_pipeline.clips")


def selected(context: dg.AssetExecutionContext,
             outputs: dict[str, tuple[Frames, dict[str, dict[str, object]]]],
             checks: list[dg.AssetCheckResult], data_versions: dict[str, str] | None = None
             ) -> Iterator[dg.Output | dg.AssetCheckResult]:
    """Both tables come from one parse; emit only what this run selected (subsetting).

    ``data_versions`` (batch -> content hash): the outputs' data version, so re-ingesting
    identical bytes leaves everything downstream fresh. Dagster records one data version
    per output and run, so a run over several batches records a hash over all of theirs.
    """
    chosen_outputs = context.op_execution_context.selected_output_names
    version = (None if not data_versions else
               next(iter(data_versions.values())) if len(data_versions) == 1
               else combined_hash(data_versions))
    for name, (frames, metadata) in outputs.items():
        if name in chosen_outputs:
            out = per_batch_output(context, frames, metadata, output=name)
            yield (out if version is None else dg.Output(
                out.value, output_name=out.output_name, metadata=out.metadata,
                data_version=dg.DataVersion(version)))
    chosen = context.selected_asset_check_keys
    yield from (c for c in checks if c.asset_key is not None and c.check_name is not None
                and dg.AssetCheckKey(c.asset_key, c.check_name) in chosen)


def run_check(asset: str, name: str, failures: dict[str, object], batches: int,
              **totals: int) -> dg.AssetCheckResult:
    """One result per check and run: passed when every batch passed; the failing ones named."""
    return dg.AssetCheckResult(
        asset_key=asset, check_name=name, passed=not failures,
        metadata={"batches": batches, **totals,
                  "failed_batches": dg.MetadataValue.json(failures)},
    )


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
    backfill_policy=batches_backfill_policy,
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
    """Parse each batch file with the format detected for it (or the configured one)."""
    raws: Frames = {}
    quarantines: Frames = {}
    raw_meta: dict[str, dict[str, object]] = {}
    quarantine_meta: dict[str, dict[str, object]] = {}
    unaccounted: dict[str, object] = {}
    duplicated: dict[str, object] = {}
    hashes: dict[str, str] = {}
    records_read = duplicates = 0
    try:  # one listing of the batch folders for the run, not one per batch (#12.4)
        located = locate_batches(pipeline.batches_path, context.partition_keys)
    except MissingBatchError as exc:  # a state to name, not a stack trace to read
        raise dg.Failure(description=str(exc), allow_retries=False) from None
    for batch in context.partition_keys:
        path, manifest = located[batch]
        raw, quarantined = ingest.read_batch(path, manifest, batch, pipeline.read_options())
        raw = with_arrow_steps(raw)  # the stages' contract (#12.1); a no-op once parse makes it
        hashes[batch] = content_hash(path)
        raws[batch], quarantines[batch] = raw, quarantined
        expected = (len(manifest.lines) if manifest.lines is not None
                    else len(raw) + len(quarantined))
        if len(raw) + len(quarantined) != expected:
            unaccounted[batch] = {"records_read": expected, "parsed": len(raw),
                                  "quarantined": len(quarantined)}
        dupes = int(raw["trajectory_id"].duplicated().sum())
        records_read += expected
        duplicates += dupes
        if dupes:
            duplicated[batch] = dupes
        raw_meta[batch] = {
            "records_read": expected,
            "parsed": len(raw),
            "quarantined": len(quarantined),
            "drop_file": manifest.drop_file,
            "batch_fingerprint": manifest.fingerprint,
            "content_hash": hashes[batch],
            "formats": counts(raw["source_format"]) if len(raw) else dg.MetadataValue.json({}),
            "preview": preview(raw, ["task_id", "source_format", "source_line", "success",
                                     "task_description"]),
        }
        quarantine_meta[batch] = {
            "quarantined": len(quarantined),
            "reasons": counts(quarantined["reason"]) if len(quarantined)
            else dg.MetadataValue.json({}),
            "preview": preview(quarantined, ["source_file", "source_line", "reason", "error"]),
        }
    n = len(context.partition_keys)
    checks = [
        run_check("raw_trajectories", "every_record_accounted", unaccounted, n,
                  records_read=records_read,
                  parsed=sum(len(r) for r in raws.values()),
                  quarantined=sum(len(q) for q in quarantines.values())),
        run_check("raw_trajectories", "unique_trajectory_ids", duplicated, n,
                  duplicates=duplicates),
    ]
    yield from selected(context, {"raw_trajectories": (raws, raw_meta),
                                  "quarantine": (quarantines, quarantine_meta)}, checks,
                        hashes)


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
    backfill_policy=batches_backfill_policy,
    group_name=INGEST_GROUP,
    can_subset=True,
    check_specs=[
        dg.AssetCheckSpec("kept_plus_removed_equals_parsed", asset="preprocessed_trajectories"),
        dg.AssetCheckSpec("every_record_accounted_end_to_end", asset="preprocessed_trajectories",
                          description="kept + removed + quarantined == records read, with "
                          "the counts raw_trajectories recorded for the batch"),
    ],
)
def preprocessed_trajectories(
    context: dg.AssetExecutionContext, pipeline: PipelineSettings,
    raw_trajectories: dict[str, pd.DataFrame],
) -> Iterator[dg.Output | dg.AssetCheckResult]:
    """Beta threshold, consecutive duplicate calls and tag repair, as the original tool."""
    kept_frames: Frames = {}
    removed_frames: Frames = {}
    kept_meta: dict[str, dict[str, object]] = {}
    removed_meta: dict[str, dict[str, object]] = {}
    unbalanced: dict[str, object] = {}
    not_accounted: dict[str, object] = {}
    config, registry = pipeline.preprocess_config(), pipeline.read_options().registry()
    totals: list[PreprocessStats] = []
    raw_key = dg.AssetKey("raw_trajectories")
    # What raw_trajectories recorded for each batch, in two queries for the run (#12.4).
    ingested_by_batch = prefetch(context.instance, [raw_key], context.partition_keys,
                                 context.run_id)
    for batch in context.partition_keys:
        raw = raw_trajectories[batch]
        kept, removed, stats = ingest.preprocess_batch(raw, config, registry)
        kept = with_arrow_steps(kept)  # as raw_trajectories: Arrow steps (#12.1)
        totals.append(stats)
        kept_frames[batch], removed_frames[batch] = kept, removed
        if len(kept) + len(removed) != len(raw):
            unbalanced[batch] = {"kept": len(kept), "removed": len(removed),
                                 "parsed": len(raw)}
        ingested = ingested_by_batch[(raw_key, batch)]
        read, quarantined = (recorded_count(ingested, "records_read"),
                             recorded_count(ingested, "quarantined"))
        if contracts.unaccounted(read, len(kept), len(removed), quarantined):
            not_accounted[batch] = {"records_read": read, "kept": len(kept),
                                    "removed": len(removed), "quarantined": quarantined}
        kept_meta[batch] = {
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
        }
        removed_meta[batch] = {
            "removed": len(removed),
            "reasons": counts(removed["reason"]) if len(removed) else dg.MetadataValue.json({}),
            "preview": preview(removed, ["task_id", "source_line", "reason", "detail"]),
        }
    # One log line per run: each batch's block is in its materialization's "statistics", and
    # a line per batch was one more event-log write each.
    context.log.info(f"{len(totals)} batch(es)\n" + PreprocessStats(**{
        field: sum(getattr(t, field) for t in totals) for field in PreprocessStats.model_fields
    }).render())
    check = run_check("preprocessed_trajectories", "kept_plus_removed_equals_parsed",
                      unbalanced, len(context.partition_keys),
                      kept=sum(len(k) for k in kept_frames.values()),
                      removed=sum(len(r) for r in removed_frames.values()),
                      parsed=sum(len(r) for r in raw_trajectories.values()))
    end_to_end = run_check("preprocessed_trajectories", "every_record_accounted_end_to_end",
                           not_accounted, len(context.partition_keys))
    yield from selected(context, {"preprocessed_trajectories": (kept_frames, kept_meta),
                                  "preprocess_report": (removed_frames, removed_meta)},
                        [check, end_to_end])


def recorded_count(mat: dg.AssetMaterialization | None, name: str) -> int:
    """A count raw_trajectories recorded for the batch; -1 when none was (never equal)."""
    value = mat.metadata.get(name) if mat is not None else None
    return int(value.value) if value is not None and isinstance(value.value, int) else -1


@dg.asset(
    partitions_def=batches_partitions_def,
    backfill_policy=batches_backfill_policy,
    group_name=INGEST_GROUP,
    kinds={"pandas", "parquet"},
    code_version=CLIPS_VERSION,
)
def clips(context: dg.AssetExecutionContext,
          preprocessed_trajectories: dict[str, pd.DataFrame]) -> dg.Output:
    """One clip per tool call with its result, plus the final clip, with char offsets (and,
    for span sources such as Phoenix, the trace_id and the span_id the clip is judged on)."""
    tables = {b: with_span_ids(ingest.clips_table(preprocessed_trajectories[b]),
                               preprocessed_trajectories[b]) for b in context.partition_keys}
    return per_batch_output(context, tables, {batch: {
        "clips": len(table),
        "trajectories": int(table["trajectory_id"].nunique()) if len(table) else 0,
        "tool_types": counts(table["tool_type"]) if len(table) else dg.MetadataValue.json({}),
        "preview": preview(table, ["task_id", "clip_index", "tool_type", "tool_name",
                                   "action_input"]),
    } for batch, table in tables.items()})


# The asset pages say how partitions come to be (see partitions.described).
raw_trajectories, preprocessed_trajectories, clips = described(
    [raw_trajectories, preprocessed_trajectories, clips])
