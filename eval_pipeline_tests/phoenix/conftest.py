"""The fake provider servers of the judge tests, for the LLM judge of the round trip."""

from eval_pipeline_tests.judges.conftest import openai_server  # noqa: F401
