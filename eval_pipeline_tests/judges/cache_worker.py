"""Run one judge in a separate process (the multiprocess executor's situation).

Usage: python -m eval_pipeline_tests.judges.cache_worker BASE_URL CACHE_PATH FIRST COUNT
       [CONCURRENCY [WRITE_DELAY_S]]
Prints the run summary as JSON; the key comes from FAKE_OPENAI_KEY like in production.
``WRITE_DELAY_S`` makes every cache write wait that long first (a disk or another
process's lock being slow), so a crash test can kill the process while writes are pending.
"""

from __future__ import annotations

import os
import sys
import time

from eval_pipeline.judges.base import JudgeReply
from eval_pipeline.judges.cache import JudgeCache
from eval_pipeline.judges.config import JudgeConfig
from eval_pipeline.judges.runner import summarize_rows
from eval_pipeline_tests.judges.conftest import make_tasks
from eval_pipeline_tests.judges.helpers import run


class SlowCache(JudgeCache):
    """A cache whose every write first waits ``delay_s``."""

    def __init__(self, path: str, delay_s: float) -> None:
        super().__init__(path)
        self.delay_s = delay_s

    def put(self, key: str, judge: str, model: str, reply: JudgeReply) -> None:
        time.sleep(self.delay_s)
        super().put(key, judge, model, reply)


def main() -> None:
    base_url, cache_path, first, count = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:5])
    concurrency = int(sys.argv[5]) if len(sys.argv) > 5 else 8
    write_delay_s = float(sys.argv[6]) if len(sys.argv) > 6 else 0.0
    tasks = [t for t in make_tasks(first + count, 3)
             if int(t.trajectory_id[1:]) >= first]
    config = JudgeConfig(name="gpt", provider="openai", model="gpt-4.1-mini",
                         base_url=base_url, api_key_env="FAKE_OPENAI_KEY",
                         concurrency=concurrency)
    cache = (SlowCache(cache_path, write_delay_s) if write_delay_s
             else JudgeCache(cache_path))
    rows = run(config, tasks, cache=cache, api_key=os.environ["FAKE_OPENAI_KEY"])
    cache.close()
    print(summarize_rows(rows).model_dump_json())


if __name__ == "__main__":
    main()
