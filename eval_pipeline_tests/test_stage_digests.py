"""Parse, preprocess and clips write exactly what they wrote before the speed work (#12.1).

The expected digests were computed by the implementation before it was made faster; every
table's values (floats bit for bit), columns and dtypes must match, on the sample drops and
on every corpora file (where the corpora are present).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eval_pipeline_tests.stage_digests import EXPECTED, inputs, stage_digests
from eval_pipeline_tests.tagscan_modes import scan_mode  # noqa: F401

pytestmark = pytest.mark.usefixtures("scan_mode")  # with the C kernel and without

_EXPECTED = json.loads(EXPECTED.read_text("utf-8"))


@pytest.mark.parametrize("name", sorted(k for k in _EXPECTED if k.startswith("data/")))
def test_sample_drops_unchanged(name: str) -> None:
    path = inputs(None)[name]
    assert stage_digests(path) == _EXPECTED[name]


def test_corpora_unchanged(corpora_dir: Path) -> None:
    found = inputs(corpora_dir)
    names = sorted(k for k in _EXPECTED if k.startswith("corpora/"))
    assert names == sorted(k for k in found if k.startswith("corpora/"))
    changed = {name: (got, _EXPECTED[name]) for name in names
               if (got := stage_digests(found[name])) != _EXPECTED[name]}
    assert not changed
