"""Batch mode for LLM judges: the providers' batch APIs (half price, answers within 24 h).

:mod:`.ledger` records what was submitted and what came back (durable, so nothing is paid
twice), :mod:`.transport` speaks the OpenAI Batch and Anthropic Message Batches APIs through
the official SDKs, :mod:`.engine` walks the judgments wave by wave through the live judge's
request building, cache, validation and row building, :mod:`.waves` says how many waves a
run needs. No module here waits for a batch: the orchestration (a Dagster sensor, the CLI)
decides when to look again. Import from the submodules: only :mod:`.engine` and
:mod:`.transport` load the SDKs.
"""
