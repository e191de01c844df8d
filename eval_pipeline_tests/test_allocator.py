"""``allocator.keep_freed_memory``: a batch's freed blocks are reused by the next one
instead of being given back to the kernel and faulted in again."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from eval_pipeline import allocator

CHILD = """
import json, resource, sys
from eval_pipeline.allocator import keep_freed_memory
took = keep_freed_memory()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):  # a batch's blocks (20 MiB of them), made, written and freed in turn
    blocks = [b"x" * (100 << 10) for _ in range(200)]
    del blocks
print(json.dumps({"took": took, "faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt
                  - before}))
"""


def _child(defaults: bool) -> dict[str, int]:
    env = {k: v for k, v in os.environ.items() if k != "EVAL_PIPELINE_MALLOC_DEFAULTS"}
    if defaults:
        env["EVAL_PIPELINE_MALLOC_DEFAULTS"] = "1"
    done = subprocess.run([sys.executable, "-c", CHILD], env=env, check=True,
                          capture_output=True, text=True)
    return json.loads(done.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_freed_blocks_are_reused_not_faulted_in_again() -> None:
    kept, default = _child(defaults=False), _child(defaults=True)
    assert kept["took"] and not default["took"]
    # 20 MiB are 5,000 pages: faulted in for every batch by default (glibc gives the free
    # top of its heap back), once when kept.
    assert default["faults"] > 20 * 4000
    assert kept["faults"] < default["faults"] / 10


def test_idempotent_and_the_same_answer() -> None:
    assert allocator.keep_freed_memory() == allocator.keep_freed_memory()
