"""Batch mode for LLM judges: the providers' batch APIs (half price, answers within 24 h).

:mod:`.ledger` records what was submitted and what came back (durable, so nothing is paid
twice), :mod:`.transport` speaks the OpenAI Batch and Anthropic Message Batches APIs through
the official SDKs, :mod:`.engine` walks the judgments wave by wave through the live judge's
request building, cache, validation and row building. No module here waits for a batch:
the orchestration (a Dagster sensor, the CLI) decides when to look again.
"""

from eval_pipeline.judges.batch.engine import (
    BatchRun,
    advance,
    chain_description,
    expected_waves,
    job_scope,
    poll,
)
from eval_pipeline.judges.batch.ledger import BatchLedger, ledger_path_for

__all__ = ["BatchLedger", "BatchRun", "advance", "chain_description", "expected_waves",
           "job_scope", "ledger_path_for", "poll"]
