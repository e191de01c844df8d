"""glibc's malloc told to keep the memory a batch frees for the next batch (#12.1).

The data stages allocate and free the same few large blocks for every batch: the batch
file's bytes, numpy temporaries over its text, the joined responses, Python's lists of
steps. glibc hands blocks over 128 kB to ``mmap`` and gives them back with ``munmap`` on
free, and trims the top of its heap as soon as 128 kB are free there; its dynamic
threshold only grows after an mmapped block is freed. So each batch faults its pages in
anew: 50,000 minor page faults over the 200 MB drop, a tenth of the stages' CPU time
spent in the kernel (0.13 to 0.20 s of 1.6 s, ``bench/bench_pipeline.py --sections
drop``). With blocks up to 32 MiB taken from the heap and up to 64 MiB of free heap kept,
the next batch reuses the pages: 4,000 faults, 0.03 s in the kernel.

What it costs is memory kept, not grown: the heap keeps at most what one batch's peak
needed plus 64 MiB, the same for any number of batches (the CLI's peak RSS, target 3, is
measured with it, ``--sections cli-memory``). Arrow's buffers come from its own pool
(mimalloc) and are not concerned.

Set once per process at its start (the CLI, its worker processes, the code location's
import): ``mallopt`` changes process-wide state. ``EVAL_PIPELINE_MALLOC_DEFAULTS=1``
leaves glibc's defaults; a libc without ``mallopt`` (musl, macOS) is left alone.
"""

from __future__ import annotations

import ctypes
import os
import sys

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
"""``mallopt`` parameters (glibc's ``malloc.h``)."""

MMAP_THRESHOLD = 32 << 20
"""Blocks up to this size come from the heap, not from ``mmap`` (glibc's maximum)."""

TRIM_THRESHOLD = 64 << 20
"""Free memory at the heap's top kept for reuse up to this size."""

_done: bool | None = None


def keep_freed_memory() -> bool:
    """Set both thresholds (setting one turns glibc's dynamic adjustment of both off, so
    one alone faults more than neither); True when glibc took them. Idempotent."""
    global _done
    if _done is not None:
        return _done
    _done = False
    if os.environ.get("EVAL_PIPELINE_MALLOC_DEFAULTS") or not sys.platform.startswith("linux"):
        return _done
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # no libc symbols to read, or a libc without mallopt
        return _done
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    _done = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
                 and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    return _done
