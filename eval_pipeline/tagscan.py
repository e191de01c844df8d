"""The compiled tag-scan kernel (``_tagscan.c``), or None: the switch the Arrow stages read.

The Arrow stages (``formats/xml_arrow.py``, ``preprocess_arrow.py``, ``clips_arrow.py``)
compute their tag positions, trims and UTF-8 offsets either with the C kernel (one pass
over a batch's buffers) or with numpy (a few dozen passes; the fallback when the extension
was not built, e.g. on an install without a C compiler). Both give the same arrays, which
the tests check by running the stages both ways (``use_kernel(False)``).

The batch JSON reader (``_jsonlines.c``, :func:`json_reader`) is a second extension under
the same switch: with the kernel off, ``formats/xml_arrow.json_table`` reads with pyarrow.

``EVAL_PIPELINE_NO_C_KERNEL=1`` in the environment starts without the kernels.
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

JSON_BUILT: ModuleType | None
"""The JSON reader extension if it was built, whatever the switch says."""
try:
    from eval_pipeline import _jsonlines as JSON_BUILT
except ImportError:  # not built: pyarrow's JSON reader does the work
    JSON_BUILT = None

_off = bool(os.environ.get("EVAL_PIPELINE_NO_C_KERNEL"))
_active: ModuleType | None = None if _off else BUILT
_json_active: ModuleType | None = None if _off else JSON_BUILT


def kernel() -> ModuleType | None:
    """The kernel module the stages should call now, or None for the numpy code."""
    return _active


def json_reader() -> ModuleType | None:
    """The C batch JSON reader the parse should call now, or None for pyarrow's."""
    return _json_active


@contextmanager
def use_kernel(enabled: bool) -> Iterator[None]:
    """The C kernels on (if built) or off within the block; for tests and benchmarks."""
    global _active, _json_active
    before = _active, _json_active
    _active = BUILT if enabled else None
    _json_active = JSON_BUILT if enabled else None
    try:
        yield
    finally:
        _active, _json_active = before
