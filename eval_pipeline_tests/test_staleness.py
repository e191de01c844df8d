from eval_pipeline.staleness import BATCH_FILE_GONE, BatchState, why_stale

EXPECTED = {"raw_trajectories": "r1", "clips": "c1", "judgments/gpt": "g1"}


def _state(**overrides):
    values = {"summarized": True, "ingested_fingerprint": "f", "current_fingerprint": "f",
              "code_versions": dict(EXPECTED)}
    values.update(overrides)
    return BatchState(**values)


def test_up_to_date_batch_needs_nothing():
    assert why_stale(_state(), EXPECTED) is None


def test_reasons_in_order_of_what_users_look_for():
    assert why_stale(_state(summarized=False), EXPECTED) == "missing"
    assert why_stale(_state(current_fingerprint="g"), EXPECTED) == "new data"
    changed = dict(EXPECTED, clips="old", **{"judgments/gpt": "old"})
    assert why_stale(_state(code_versions=changed), EXPECTED) == "judge gpt changed"
    assert why_stale(_state(code_versions=dict(EXPECTED, clips="old")), EXPECTED) \
        == "code of clips changed"
    # A batch file that vanished is its own state (the schedule skips it), whatever else
    # holds; a never-run judge is a change.
    assert why_stale(_state(current_fingerprint=None), EXPECTED) == BATCH_FILE_GONE
    assert why_stale(_state(current_fingerprint=None, summarized=False), EXPECTED) \
        == BATCH_FILE_GONE
    assert why_stale(_state(code_versions={k: v for k, v in EXPECTED.items()
                                           if k != "judgments/gpt"}), EXPECTED) \
        == "judge gpt changed"
