"""Phoenix in the graph: a sensor that turns new complete traces into batch partitions, and
an asset that writes each batch's evaluations back as span annotations.

Both exist only when a :class:`PhoenixResource` is configured (``EVAL_PIPELINE_PHOENIX_URL``
in the UI's code location, ``--from-phoenix``/``--to-phoenix`` on the CLI): without one the
graph is the file pipeline, unchanged.

The sensor writes what it pulls as a span drop (``<store>/phoenix/<project>/<key>.jsonl``)
and registers it as a batch the way ``new_drop_sensor`` registers a split drop, so every
per-batch asset downstream is the same for Phoenix traces and files, and the trace and span
ids travel in the trajectories (``extra``) and clips (``trace_id``, ``span_id``).
"""


from collections.abc import Sequence
from pathlib import Path

import dagster as dg
import pandas as pd

from eval_pipeline.defs.pipeline.assets.judging import judgment_asset_key
from eval_pipeline.defs.pipeline.assets.metadata import counts, per_batch_output, preview
from eval_pipeline.defs.pipeline.automation import batch_job
from eval_pipeline.defs.pipeline.partitions import (
    BATCHES_PARTITION,
    batch_ranges,
    batch_run_request,
    batches_backfill_policy,
    batches_partitions_def,
    described,
)
from eval_pipeline.defs.pipeline.resources import PhoenixResource
from eval_pipeline.defs.pipeline.settings import PipelineSettings
from eval_pipeline.exports.common import clip_span_ids, trajectory_info
from eval_pipeline.exports.phoenix import span_annotations
from eval_pipeline.formats.spans import FORMAT_NAME
from eval_pipeline.judges.config import JudgeConfig
from eval_pipeline.phoenix.connection import PhoenixError
from eval_pipeline.phoenix.sink import log_annotations
from eval_pipeline.phoenix.source import (
    PhoenixCursor,
    batch_key,
    chunks,
    pull_complete_traces,
    utc_now,
    write_span_drop,
)
from eval_pipeline.splitting import partition_key_for, split_batch_folder
from eval_pipeline.versions import source_version

PHOENIX_GROUP = "phoenix"
TRAJECTORY_COLUMNS = ["trajectory_id", "batch", "task_id", "extra", "steps"]
CLIP_COLUMNS = ["trajectory_id", "clip_index", "step_start", "step_end"]
SUMMARY_COLUMNS = ["trajectory_id", "overall_trajectory_score", "successful_evaluations",
                   "total_clips"]


def drops_path(phoenix: PhoenixResource, pipeline: PipelineSettings) -> Path:
    """Where pulled span drops are kept: beside the store's batches, never in incoming/
    (the drop sensor would take them a second time)."""
    if phoenix.drops_dir:
        return Path(phoenix.drops_dir)
    return pipeline.batches_path.parent / "phoenix" / partition_key_for(phoenix.project)


def build_phoenix_sensor() -> dg.SensorDefinition:
    """A sensor object per Definitions that has a Phoenix resource (a module-level one would
    be collected by dg's loader into every graph, Phoenix or not)."""
    return dg.sensor(job=batch_job, minimum_interval_seconds=30, name="phoenix_sensor",
                     default_status=dg.DefaultSensorStatus.RUNNING)(phoenix_sensor)


def phoenix_sensor(context: dg.SensorEvaluationContext, pipeline: PipelineSettings,
                   phoenix: PhoenixResource) -> dg.SensorResult | dg.SkipReason:
    """Read the Phoenix project's new complete traces (root span ended ``settle_seconds``
    ago), ``split_size`` traces per batch, register one partition per batch and run them.

    The cursor (JSON) is the latest root start time taken and the traces taken within the
    look-back, so no trace is read twice; an unreachable server skips the tick in one line
    and leaves the cursor as it was."""
    cursor = (PhoenixCursor.model_validate_json(context.cursor) if context.cursor
              else PhoenixCursor())
    connection = phoenix.connection()
    try:
        pull = pull_complete_traces(
            connection, connection.client().spans, cursor, now=utc_now(),
            settle_s=phoenix.settle_seconds, lookback_s=phoenix.lookback_seconds,
            max_traces=phoenix.max_traces_per_tick)
    except PhoenixError as exc:
        return dg.SkipReason(str(exc))
    state = f"{pull.waiting} trace(s) still settling, {pull.deferred} deferred"
    if not pull.traces:
        return dg.SensorResult(skip_reason=f"no new complete traces in {connection.describe()}"
                               f" ({state})", cursor=pull.cursor.model_dump_json())
    folder = drops_path(phoenix, pipeline)
    number, keys = cursor.batches, []
    for traces in chunks(pull.traces, pipeline.split_size):
        number += 1
        key = batch_key(phoenix.project, number)
        drop = folder / f"{key}.jsonl"
        spans = write_span_drop(drop, traces)
        split_batch_folder([drop], pipeline.batches_path, key, {drop: key},
                           lambda _path: FORMAT_NAME)
        keys.append(key)
        context.log.info(f"{key}: {len(traces)} trace(s), {spans} span(s) -> {drop}")
    ordered = [*context.instance.get_dynamic_partitions(BATCHES_PARTITION), *keys]
    new_cursor = pull.cursor.model_copy(update={"batches": number})
    return dg.SensorResult(
        run_requests=[batch_run_request(run, f"{run[0]}...{run[-1]}")
                      for run in batch_ranges(keys, ordered)],
        dynamic_partitions_requests=[batches_partitions_def.build_add_request(keys)],
        cursor=new_cursor.model_dump_json())


def build_phoenix_annotations_asset(configs: Sequence[JudgeConfig]) -> dg.AssetsDefinition:
    """``phoenix_annotations``: every batch's evaluations written to Phoenix, the rows sent
    kept as the asset's table."""
    ins = {f"judgments_{c.name}": dg.AssetIn(key=judgment_asset_key(c),
                                              dagster_type=dict[str, pd.DataFrame])
           for c in configs}
    names = {f"judgments_{c.name}": c.name for c in configs}
    # Per batch (a dict even for one batch, as every per-batch asset reads its inputs), and
    # only the columns the annotations need.
    for name, columns in (("preprocessed_trajectories", TRAJECTORY_COLUMNS),
                          ("clips", CLIP_COLUMNS), ("trajectory_summaries", SUMMARY_COLUMNS)):
        ins[name] = dg.AssetIn(metadata={"columns": columns},
                               dagster_type=dict[str, pd.DataFrame])

    @dg.asset(
        ins=ins,
        partitions_def=batches_partitions_def,
        backfill_policy=batches_backfill_policy,
        group_name=PHOENIX_GROUP,
        kinds={"pandas", "parquet"},
        code_version=source_version("eval_pipeline.exports.phoenix", "eval_pipeline.phoenix"),
    )
    def phoenix_annotations(context: dg.AssetExecutionContext, phoenix: PhoenixResource,
                            **tables: dict[str, pd.DataFrame]) -> dg.Output:
        """Each clip's judged metrics, the ReAct labels and the trajectory score, written to
        Phoenix as span annotations on the spans they judge (trace-level results on the
        root span), one per judge (the annotation's identifier and metadata name it); a
        failed judgment as the label "failed" with its error, never a score. Logged with
        sync=True, so an unknown span is an error, and idempotent: a rerun updates the same
        annotations. Batches from files without span ids write nothing and say so."""
        connection = phoenix.connection()
        frames: dict[str, pd.DataFrame] = {}
        metadata: dict[str, dict[str, object]] = {}
        for batch in context.partition_keys:
            trajectories, clips = tables["preprocessed_trajectories"][batch], tables["clips"][batch]
            spans = clip_span_ids(clips, trajectory_info(trajectories), trajectories)
            frame, tally = span_annotations(
                {names[k]: v[batch] for k, v in tables.items() if k in names},
                tables["trajectory_summaries"][batch], trajectories, spans)
            try:
                written = log_annotations(connection, frame)
            except PhoenixError as exc:
                raise dg.Failure(
                    description=f"{exc}; the judgments are kept: materialize "
                    f"phoenix_annotations again when the server is up", allow_retries=False
                ) from None
            frames[batch] = frame
            metadata[batch] = {
                "annotations_written": written,
                "spans_annotated": tally.spans,
                "failed_judgments_written": tally.failed,
                "left_out_no_span_id": tally.left_out_no_id,
                "left_out_same_span": tally.left_out_same_span,
                "by_name": dg.MetadataValue.json(tally.by_name),
                "phoenix": connection.describe(),
                "annotators": counts(frame["identifier"].replace("", "eval_pipeline"))
                if len(frame) else dg.MetadataValue.json({}),
                "preview": preview(frame, ["span_id", "name", "identifier", "label", "score"]),
            }
            context.log.info(f"{batch}: {written} annotation(s) on {tally.spans} span(s) "
                             f"written to {connection.describe()}")
        return per_batch_output(context, frames, metadata)

    return described([phoenix_annotations])[0]
