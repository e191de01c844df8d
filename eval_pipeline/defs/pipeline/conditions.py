"""Declarative automation: why each asset of a batch is (or will be) run, as the UI shows it.

Every pipeline asset carries an ``AutomationCondition`` (attached where its partitions note
is, :func:`eval_pipeline.defs.pipeline.partitions.described`), evaluated by
``catch_up_sensor`` (:mod:`eval_pipeline.defs.pipeline.automation`). Each part is labelled,
so an asset's Automation tab reads as the reasons the old daily schedule computed by hand
("never materialized", "code version changed since its last run", ...), per batch.
Only built-in conditions: the daemon evaluates them without the code server.
"""

from __future__ import annotations

import dagster as dg

REPORT_KEY = dg.AssetKey("evaluation_report")

DAILY_CRON = "0 3 * * *"
DAILY_TIMEZONE = "UTC"
CATCH_UP_SENSOR = "catch_up_sensor"

_AC = dg.AutomationCondition


def _handled() -> dg.AutomationCondition:
    """What ``since_last_handled()`` resets on (requested, updated, first evaluation),
    spelled out: Dagster types that method for asset-or-check conditions only, and
    ``code_version_changed`` is an asset condition."""
    return (_AC.newly_requested() | _AC.newly_updated() | _AC.initial_evaluation()
            ).with_label("handled")


def _daily_tick() -> dg.AutomationCondition:
    return _AC.cron_tick_passed(DAILY_CRON, DAILY_TIMEZONE).with_label(
        f"daily tick ({DAILY_CRON} {DAILY_TIMEZONE}) passed")


def _rerun_reasons(root: bool) -> dg.AutomationCondition:
    """Why a batch of an asset needs a run, each reason labelled as the UI shows it.

    A root (raw_trajectories, quarantine) whose last run failed is not retried: it fails
    where the batch file is read, and a batch whose file is gone (a partition added by
    hand, a file deleted) would otherwise fail every day. Its downstream waits for it."""
    missing = (
        (_AC.missing() & ~_AC.execution_failed()).with_label(
            "never materialized (and its last run did not fail: a gone batch file is not "
            "retried daily)")
        if root else _AC.missing().with_label("never materialized"))
    code = _AC.code_version_changed().since(_handled()).with_label(
        "code version changed since its last run (a judge's settings, a rubric, a prompt "
        "template, the stage's code)")
    if root:
        return (missing | code).with_label("rerun reasons")
    upstream = _AC.any_deps_updated().since_last_handled().with_label(
        "an upstream stage of the batch updated since its last run, or runs with it now")
    return (missing | code | upstream).with_label("rerun reasons")


def daily_catch_up(root: bool) -> dg.AutomationCondition:
    """At 03:00 UTC: every batch that is missing or out of date, once nothing it needs is
    missing or running. What the hand-written daily schedule did, evaluated by Dagster
    (batched queries, not ~11 event-log reads per batch) and explained per partition in the
    asset's Automation tab."""
    return (_daily_tick() & _rerun_reasons(root) & ~_AC.in_progress()
            & ~_AC.any_deps_missing()).with_label("daily catch-up")


def batch_condition(root: bool) -> dg.AutomationCondition:
    """A per-batch asset's condition: downstream stages follow an upstream batch at once
    (``eager``: a stage re-materialized by hand is followed by everything after it), and
    everything catches up daily. Roots are only requested by the daily catch-up: new drops
    are the new-drop sensor's business (it splits, registers and runs them)."""
    if root:
        return daily_catch_up(root=True)
    return (_AC.eager() | daily_catch_up(root=False)).with_label(
        "eager, or daily catch-up")


def report_condition() -> dg.AutomationCondition:
    """evaluation_report (and any cross-batch asset) at the daily tick, when it is missing
    or a batch's summaries changed since it last ran (also when they run in this catch-up:
    it follows them). Not held back by missing batches: the report reads those it finds."""
    return (_daily_tick()
            & (_AC.missing().with_label("never materialized")
               | _AC.any_deps_updated().since_last_handled().with_label(
                   "a batch's summaries updated since its last run, or run now"))
            & ~_AC.in_progress()).with_label("daily catch-up")


def with_automation(spec: dg.AssetSpec) -> dg.AssetSpec:
    """A pipeline asset with its condition: per batch, or across batches (the report; any
    unpartitioned asset of the pipeline). A condition set on the asset itself is kept."""
    if spec.automation_condition is not None:
        return spec
    condition = (report_condition() if spec.partitions_def is None
                 else batch_condition(root=not spec.deps))
    return spec.replace_attributes(automation_condition=condition)
