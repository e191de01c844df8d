"""The compiled tag-scan kernel (``_tagscan.c``), or None: the switch the Arrow stages read.

The Arrow stages (``formats/xml_arrow.py``, ``preprocess_arrow.py``, ``clips_arrow.py``)
compute their tag positions, trims and UTF-8 offsets either with the C kernel (one pass
over a batch's buffers) or with numpy (a few dozen passes; the fallback when the extension
was not built, e.g. on an install without a C compiler). Both give the same arrays, which
the tests check by running the stages both ways (``use_kernel(False)``).

``EVAL_PIPELINE_NO_C_KERNEL=1`` in the environment starts without the kernel.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType

BUILT: ModuleType | None
"""The extension module if it was built, whatever the switch says."""
try:
    from eval_pipeline import _tagscan as BUILT
except ImportError:  # not built (no compiler at install time): numpy does the work
    BUILT = None

_active: ModuleType | None = None if os.environ.get("EVAL_PIPELINE_NO_C_KERNEL") else BUILT


def kernel() -> ModuleType | None:
    """The kernel module the stages should call now, or None for the numpy code."""
    return _active


@contextmanager
def use_kernel(enabled: bool) -> Iterator[None]:
    """The C kernel on (if built) or off within the block; for tests and benchmarks."""
    global _active
    before = _active
    _active = BUILT if enabled else None
    try:
        yield
    finally:
        _active = before
