"""Run one judge in a separate process (the multiprocess executor's situation).

Usage: python -m eval_pipeline_tests.judges.cache_worker BASE_URL CACHE_PATH FIRST COUNT
Prints the run summary as JSON; the key comes from FAKE_OPENAI_KEY like in production.
"""

from __future__ import annotations

import os
import sys

from eval_pipeline.judges.cache import JudgeCache
from eval_pipeline.judges.config import JudgeConfig
from eval_pipeline.judges.runner import summarize_rows
from eval_pipeline_tests.judges.conftest import make_tasks
from eval_pipeline_tests.judges.helpers import run


def main() -> None:
    base_url, cache_path, first, count = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:5])
    tasks = [t for t in make_tasks(first + count, 3)
             if int(t.trajectory_id[1:]) >= first]
    config = JudgeConfig(name="gpt", provider="openai", model="gpt-4.1-mini",
                         base_url=base_url, api_key_env="FAKE_OPENAI_KEY", concurrency=8)
    cache = JudgeCache(cache_path)
    rows = run(config, tasks, cache=cache, api_key=os.environ["FAKE_OPENAI_KEY"])
    cache.close()
    print(summarize_rows(rows).model_dump_json())


if __name__ == "__main__":
    main()
