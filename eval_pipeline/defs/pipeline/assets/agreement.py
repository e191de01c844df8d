"""The judge_agreement and judge_disagreements tables of each batch (#8.8, #8.9).

Thin: the figures come from :mod:`eval_pipeline.agreement_report`; this reads every judge's
judgments, the clips (human step labels) and the trajectories (outcome labels) of the batch,
and the disagreement threshold from the ``pipeline`` resource.
"""


from collections.abc import Sequence

import dagster as dg
import pandas as pd

from eval_pipeline.agreement_report import agreement_markdown, build_agreement
from eval_pipeline.defs.pipeline.assets.judging import judgment_asset_key
from eval_pipeline.defs.pipeline.assets.metadata import per_batch_output
from eval_pipeline.defs.pipeline.partitions import batches_backfill_policy, batches_partitions_def
from eval_pipeline.defs.pipeline.settings import PipelineSettings
from eval_pipeline.judges.config import JudgeConfig
from eval_pipeline.versions import source_version

AGREEMENT_GROUP = "summaries"
OUTCOME_COLUMNS = ["trajectory_id", "task_id", "final_label", "reward", "success"]
"""The columns of the preprocessed trajectories ``build_agreement`` reads (``outcome_of``'s
three labels and the ids)."""


def build_agreement_assets(configs: Sequence[JudgeConfig]) -> dg.AssetsDefinition:
    ins = {f"judgments_{c.name}": dg.AssetIn(key=judgment_asset_key(c),
                                              dagster_type=dict[str, pd.DataFrame])
           for c in configs}
    names = {f"judgments_{c.name}": c.name for c in configs}
    version = source_version("eval_pipeline.agreement", "eval_pipeline.agreement_report")

    @dg.multi_asset(
        name="judge_agreement_assets",
        ins={**ins,
             "clips": dg.AssetIn(dagster_type=dict[str, pd.DataFrame]),
             # Only the outcome labels and ids the comparison with humans reads (not the
             # nested steps, converted for every batch for nothing, #12.4).
             "preprocessed_trajectories": dg.AssetIn(dagster_type=dict[str, pd.DataFrame],
                                                     metadata={"columns": OUTCOME_COLUMNS})},
        outs={
            "judge_agreement": dg.AssetOut(
                description="Per batch: Krippendorff's alpha, Fleiss' kappa and spread "
                "between the judges per metric; per judge accuracy, Cohen's kappa, confusion "
                "matrix and AUC against the source's human labels.",
                kinds={"pandas", "parquet"}, code_version=version),
            "judge_disagreements": dg.AssetOut(
                description="Per batch: clips where the judges' spread exceeds the "
                "disagreement threshold, and items where a judge's decision is not the "
                "human's (human label, judge score).",
                kinds={"pandas", "parquet"}, code_version=version),
        },
        partitions_def=batches_partitions_def,
        backfill_policy=batches_backfill_policy,
        group_name=AGREEMENT_GROUP,
    )
    def judge_agreement_assets(context: dg.AssetExecutionContext, pipeline: PipelineSettings,
                               clips: dict[str, pd.DataFrame],
                               preprocessed_trajectories: dict[str, pd.DataFrame],
                               **judgments: dict[str, pd.DataFrame]):
        agreement: dict[str, pd.DataFrame] = {}
        disagreements: dict[str, pd.DataFrame] = {}
        for b in context.partition_keys:
            agreement[b], disagreements[b] = build_agreement(
                b, {names[k]: v[b] for k, v in judgments.items()}, clips[b],
                preprocessed_trajectories[b], pipeline.disagreement_threshold)
        yield per_batch_output(context, agreement, {b: {
            "rows": len(agreement[b]),
            "disagreement_threshold": pipeline.disagreement_threshold,
            "report": dg.MetadataValue.md(agreement_markdown(agreement[b], disagreements[b])),
        } for b in agreement}, "judge_agreement")
        yield per_batch_output(context, disagreements, {b: {
            "disagreements": len(disagreements[b]),
        } for b in disagreements}, "judge_disagreements")

    return judge_agreement_assets
