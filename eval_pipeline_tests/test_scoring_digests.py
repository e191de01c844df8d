"""Averaging and the summaries write exactly what they wrote before the speed work (#12.2).

The expected digests (``scoring_digests.json``) were computed by the implementation before
it was made faster: the averaged table and the summaries (every value, floats bit for bit,
columns and dtypes) and the ``evaluated.jsonl`` lines, with one judge in memory and with
three disagreeing judges through Parquet, on the sample drops and on files of every corpus.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eval_pipeline_tests.scoring_digests import EXPECTED, inputs, scoring_digests

_EXPECTED = json.loads(EXPECTED.read_text("utf-8"))


@pytest.mark.parametrize("name", sorted(k for k in _EXPECTED if k.startswith("data/")))
def test_sample_drops_unchanged(name: str) -> None:
    assert scoring_digests(inputs(None)[name]) == _EXPECTED[name]


def test_corpora_unchanged(corpora_dir: Path) -> None:
    found = inputs(corpora_dir)
    names = sorted(k for k in _EXPECTED if k.startswith("corpora/"))
    assert names == sorted(k for k in found if k.startswith("corpora/"))
    changed = {name: (got, _EXPECTED[name]) for name in names
               if (got := scoring_digests(found[name])) != _EXPECTED[name]}
    assert not changed
