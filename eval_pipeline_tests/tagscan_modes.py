"""A fixture that runs a test twice: with the C tag-scan kernel and with its numpy twin.

Test modules whose comparisons must hold both ways (the Arrow stages against the Python
path) use it for every test: ``pytestmark = pytest.mark.usefixtures("scan_mode")`` with
``from eval_pipeline_tests.tagscan_modes import scan_mode``. The ``c`` run is skipped when
the extension is not built (an install without a compiler); ``.ci/run`` requires it built.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from eval_pipeline import tagscan


@pytest.fixture(params=["c", "numpy"])
def scan_mode(request: pytest.FixtureRequest) -> Iterator[str]:
    if request.param == "c" and tagscan.BUILT is None:
        pytest.skip("the C kernel eval_pipeline/_tagscan.c is not built")
    with tagscan.use_kernel(request.param == "c"):
        yield request.param
