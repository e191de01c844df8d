"""The three uses of the UI, in a real browser (#9.6): see the pipeline, run it on new data,
and see what a rubric change makes stale and how the scores moved.

``dagster dev`` runs on a copy of the project with its own instance and store; headless
Chromium (Debian's package, started by Playwright through ``executable_path``) clicks
through the UI as a user would:

1. the asset graph, every group opened: every asset of the pipeline is drawn;
2. the new-drop sensor ships running; it is switched off and on again, a drop is copied
   into the incoming folder, and its partition and the sensor's run appear; the run
   succeeds;
3. one partition of ``judgments/heuristic`` is materialized from its page's Materialize
   dialog, and the run succeeds;
4. a rubric is changed in the copy and the code location reloaded from the Deployment
   page: exactly the judgments assets (whose code version hashes the rubrics) are marked
   Unsynced, with "a new code version"; everything else stays synced;
5. the judgments partition is materialized again: it is synced, its page shows the
   score-change metadata (``changed_upstream`` names the old and new ``template_version``,
   beside the ``delta/*`` values over every clip), and its direct downstream assets are now
   marked (Dagster marks a child once its parent has a new data version, not before).

GraphQL is used only to wait (for runs, for the reload). A screenshot of each step goes to
the test's output folder (``$EVAL_PIPELINE_UI_SHOTS`` to keep them elsewhere); docs/ui/ holds
a few of them for the README.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from eval_pipeline.defs.pipeline.definitions import build_definitions
from eval_pipeline.judges.config import load_judges
from eval_pipeline_tests.ui.server import (
    CHROMIUM_ARGS,
    DagsterDev,
    chromium_path,
    copy_project,
    dagster_dev,
    missing_browser,
    wait_for,
    wait_for_run,
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.browser,
    pytest.mark.timeout(1200),
    pytest.mark.skipif(bool(missing_browser()),
                       reason=f"browser test needs {' and '.join(missing_browser())}"),
]

SHOTS_ENV = "EVAL_PIPELINE_UI_SHOTS"
SENSOR = "new_drop_sensor"
DROP = "alpha"
PARTITION = f"{DROP}01"  # one batch: the drop is smaller than the split size
DROP_RECORDS = 8
JUDGE = "heuristic"
JUDGMENTS = f"judgments/{JUDGE}"
CHANGED_RUBRIC = "microsandbox"
RUN_TIMEOUT = 420  # one batch took 100 s on a 2-core machine with load 8
SCORE_CHANGE_KEYS = ("changed_upstream", "changed_upstream_count", "upstream_versions",
                     "delta/mean_change", "delta/compared", "delta/moved_over_0.1",
                     "delta/added", "delta/removed", "delta/movers")
"""The score-change metadata of every scoring asset's materialization (README, "Why did
this score change?")."""


# -- the pipeline as the code says it is --------------------------------------------------

def pipeline_graph():
    return build_definitions(load_judges(None)).resolve_asset_graph()


def per_batch_assets(graph) -> list[str]:
    return sorted(k.to_user_string() for k in graph.get_all_asset_keys()
                  if graph.get(k).partitions_def is not None)


def descendants(graph, name: str) -> set[str]:
    todo = [k for k in graph.get_all_asset_keys() if k.to_user_string() == name]
    seen: set[str] = set()
    while todo:
        for child in graph.get(todo.pop()).child_keys:
            if child.to_user_string() not in seen:
                seen.add(child.to_user_string())
                todo.append(child)
    return seen


def children(graph, name: str) -> set[str]:
    key = next(k for k in graph.get_all_asset_keys() if k.to_user_string() == name)
    return {c.to_user_string() for c in graph.get(key).child_keys}


# -- the browser ---------------------------------------------------------------------------

@pytest.fixture
def shots(tmp_path: Path) -> Path:
    folder = Path(os.environ.get(SHOTS_ENV) or tmp_path / "screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture
def page() -> Iterator:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        # launch() gives the browser a fresh profile folder of its own each time.
        browser = p.chromium.launch(executable_path=chromium_path(), headless=True,
                                    args=list(CHROMIUM_ARGS))
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 900})
            context.set_default_timeout(60_000)
            yield context.new_page()
        finally:
            browser.close()


def appears(locator, timeout_ms: float) -> bool:
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        locator.wait_for(state="visible", timeout=timeout_ms)
    except PlaywrightTimeout:
        return False
    return True


def open_page(page, server: DagsterDev, path: str, nudge_wait_ms: float = 0) -> None:
    page.goto(server.url + path, wait_until="domcontentloaded")
    # Dagster's "join the community" dialog covers the first page an instance serves.
    skip = page.get_by_role("button", name="Skip", exact=True)
    if appears(skip, nudge_wait_ms) if nudge_wait_ms else skip.is_visible():
        skip.click()


def shoot(page, shots: Path, name: str, **kwargs) -> None:
    page.screenshot(path=str(shots / f"{name}.png"), **kwargs)


def switch(page):
    """The Running switch of an automation's page (a styled checkbox in its label)."""
    return page.locator("label:has(input[type=checkbox])").first


def set_switch(page, on: bool) -> None:
    box = page.locator("input[type=checkbox]").first
    box.wait_for(state="attached")
    if box.is_checked() != on:
        switch(page).click()
    wait_for(f"the switch to be {'on' if on else 'off'}", lambda: box.is_checked() == on,
             30, every=0.5)


def automation_states(server: DagsterDev) -> dict[str, tuple[str, str]]:
    """name -> (kind, RUNNING/STOPPED) for the location's sensors and schedules."""
    data = server.graphql("""{ repositoriesOrError { ... on RepositoryConnection { nodes {
        sensors { name sensorState { status } }
        schedules { name scheduleState { status } } } } } }""")
    states: dict[str, tuple[str, str]] = {}
    for repo in data["repositoriesOrError"]["nodes"]:
        states.update({s["name"]: ("sensors", s["sensorState"]["status"])
                       for s in repo["sensors"]})
        states.update({s["name"]: ("schedules", s["scheduleState"]["status"])
                       for s in repo["schedules"]})
    return states


def label_matches(label: str, name: str) -> bool:
    """A graph label is the name, or the name cut in the middle ("prep…_trajectories")."""
    if "…" not in label:
        return label == name
    head, tail = label.split("…", 1)
    return name.startswith(head) and name.endswith(tail) and len(name) > len(label) - 1


def partition_page(page, server: DagsterDev, asset: str) -> None:
    """The asset's Partitions tab with PARTITION selected, its materialization loaded."""
    open_page(page, server, f"/assets/{asset}?view=partitions&partition={PARTITION}")
    page.get_by_text("Latest materialization").first.wait_for()
    page.get_by_role("link", name=re.compile("^[0-9a-f]{8}$")).first.wait_for()


MARK_WAIT_MS = 20_000
"""How long an expected Unsynced tag may take: it comes with the asset's live data, which
loads apart from the partition's materialization."""
NO_MARK_WAIT_MS = 3_000
"""How long to look for a tag that should not be there."""


def unsynced_badge(page):
    return page.get_by_text(re.compile(r"^Unsynced")).first


def is_unsynced(page, expected: bool) -> bool:
    return appears(unsynced_badge(page), MARK_WAIT_MS if expected else NO_MARK_WAIT_MS)


def unsynced_causes(page) -> str:
    """The Unsynced tag's tooltip: each cause, e.g. "has a new code version"."""
    unsynced_badge(page).hover()
    tip = page.locator("[role=tooltip], .dagster-popover, [data-radix-popper-content-wrapper]")
    tip.first.wait_for(state="visible", timeout=15_000)
    text = " ".join(tip.all_inner_texts())
    page.mouse.move(0, 0)
    return text


def metadata(page) -> dict[str, str]:
    """The partition's latest materialization metadata table: key -> value text.

    Read while scrolling down through it: a long table (a judge's metadata has dozens of
    keys) may keep only the rows near the viewport in the page, so one look misses the rest.
    """
    shown: dict[str, str] = {}
    quiet = 0
    for _ in range(80):
        rows = page.evaluate("""() => [...document.querySelectorAll('tr')]
            .map(r => [...r.querySelectorAll('td')].map(c => c.innerText.trim()))
            .filter(c => c.length >= 2)""")
        before = len(shown)
        shown.update({cells[0]: cells[1] for cells in rows})
        quiet = quiet + 1 if len(shown) == before else 0
        if quiet >= 3:
            break
        page.locator("tr").last.scroll_into_view_if_needed()
        page.mouse.wheel(0, 600)
        page.wait_for_timeout(150)
    return shown


def materialize_partition(page, server: DagsterDev, shots: Path, name: str) -> str:
    """The asset page's Materialize dialog, one partition chosen by hand; returns the run id
    the launched-run toast names."""
    open_page(page, server, f"/assets/{JUDGMENTS}")
    page.locator("button", has_text="Materialize").first.click()
    dialog = page.locator(".dagster-dialog")
    dialog.get_by_text("Select a partition or create one").click()
    # visible only: the list also renders each name in a hidden MiddleTruncate measuring div
    (page.locator(".dagster-popover").get_by_text(PARTITION, exact=True)
     .filter(visible=True).first.click())
    page.keyboard.press("Escape")  # close the partition list, keep the dialog
    launch = dialog.get_by_role("button", name="Launch 1 run")
    launch.wait_for()
    shoot(page, shots, name)
    before = {r["runId"] for r in server.runs()}
    launch.click()
    toast = page.get_by_text(re.compile(r"Launched run [0-9a-f]{8}"))
    short = re.search(r"[0-9a-f]{8}", toast.first.inner_text())
    assert short is not None
    new = [r["runId"] for r in server.runs({"dagster/partition": PARTITION})
           if r["runId"] not in before and r["runId"].startswith(short.group())]
    assert len(new) == 1, f"the toast's run {short.group()} is not a new {PARTITION} run"
    return new[0]


def see_run_succeeded(page, server: DagsterDev, run_id: str, shots: Path, name: str) -> None:
    wait_for_run(server, run_id, RUN_TIMEOUT)
    open_page(page, server, f"/runs/{run_id}")
    page.get_by_text("Success", exact=True).first.wait_for()
    shoot(page, shots, name)


# -- the test ------------------------------------------------------------------------------

def test_the_three_uses_in_a_browser(tmp_path: Path, project_root: Path, shots: Path,
                                     page) -> None:
    started = time.monotonic()

    def step(what: str) -> None:  # the log says where the minutes go
        print(f"[{time.monotonic() - started:4.0f} s] {what}", flush=True)

    def sensor_is(status: str):
        return lambda: automation_states(server)[SENSOR][1] == status

    graph = pipeline_graph()
    assets = sorted(k.to_user_string() for k in graph.get_all_asset_keys())
    batch_assets = per_batch_assets(graph)
    judged = {a for a in batch_assets if a.startswith("judgments/")}
    assert JUDGMENTS in judged

    project = copy_project(project_root, tmp_path / "project")
    store = tmp_path / "store"
    (store / "incoming").mkdir(parents=True)
    with dagster_dev(project, tmp_path / "home", store, tmp_path / "dagster_dev.log") as server:
        try:
            step("server up")
            # 1. The asset graph: open every group, then every asset is drawn.
            open_page(page, server, "/asset-groups", nudge_wait_ms=10_000)
            # Open one closed group (its ⇕) at a time, reloading in between: the graph then
            # lays itself out to fit, so every group box is on screen (and in the page).
            closed = page.locator('[aria-label="unfold_more"]')
            nodes = page.locator('[class*="AssetNode_assetName"]')
            for _ in range(20):
                page.locator('[aria-label="unfold_more"], [class*="AssetNode_assetName"]'
                             ).first.wait_for()
                page.wait_for_timeout(1000)
                if not closed.count():
                    break
                closed.first.click()
                page.wait_for_timeout(1000)
                page.reload(wait_until="domcontentloaded")
            wait_for("the graph's asset nodes", lambda: nodes.count() >= len(assets), 60,
                     every=1, server=server)
            labels = [t.strip() for t in nodes.all_inner_texts()]
            for asset in assets:
                short = asset.rsplit("/", 1)[-1]
                assert [lbl for lbl in labels if label_matches(lbl, short)], (
                    f"{asset} is not drawn in the asset graph: {labels}")
            assert len(labels) == len(assets), labels
            shoot(page, shots, "01_asset_graph")

            step("graph checked")
            # 2. The new-drop sensor: running as shipped; off, on; a drop becomes a partition
            # and a run. Nothing else runs by itself during the test.
            states = automation_states(server)
            assert states[SENSOR][1] == "RUNNING", states
            for name, (kind, status) in states.items():
                if name != SENSOR and status == "RUNNING":
                    open_page(page, server, f"/locations/eval_pipeline/{kind}/{name}")
                    set_switch(page, False)
            open_page(page, server, f"/locations/eval_pipeline/sensors/{SENSOR}")
            page.get_by_text("Running", exact=True).first.wait_for()
            set_switch(page, False)
            page.reload(wait_until="domcontentloaded")
            box = page.locator("input[type=checkbox]").first
            box.wait_for(state="attached")
            assert not box.is_checked(), "the sensor's switch did not stay off after a reload"
            wait_for("the instance to record the sensor stopped", sensor_is("STOPPED"), 30)
            shoot(page, shots, "02_sensor_off")
            set_switch(page, True)
            wait_for("the instance to record the sensor running", sensor_is("RUNNING"), 30)
            shoot(page, shots, "03_sensor_on")

            sample = (project_root / "data" / "incoming" / "sample_agent_runs.jsonl")
            lines = sample.read_text("utf-8").splitlines(keepends=True)[:DROP_RECORDS]
            assert len(lines) == DROP_RECORDS
            (store / "incoming" / f"{DROP}.jsonl").write_text("".join(lines), "utf-8")

            def partition_listed() -> bool:  # the sensor ticks every 30 s
                open_page(page, server, "/assets/raw_trajectories?view=partitions")
                return appears(page.get_by_text(PARTITION, exact=True).filter(visible=True).first,
                               5000)

            wait_for(f"partition {PARTITION} on raw_trajectories' Partitions tab",
                     partition_listed, 180, every=3, server=server)
            shoot(page, shots, "04_drop_partition")
            sensor_runs = wait_for("the sensor's run",
                                   lambda: server.runs({"dagster/sensor_name": SENSOR}), 60,
                                   server=server)
            assert len(sensor_runs) == 1, sensor_runs
            open_page(page, server, "/runs")
            page.get_by_text(sensor_runs[0]["runId"][:8]).first.wait_for()
            page.get_by_text(re.compile(f"^{SENSOR}")).first.wait_for()
            shoot(page, shots, "05_sensor_run")
            see_run_succeeded(page, server, sensor_runs[0]["runId"], shots, "06_sensor_run_done")

            step("sensor run succeeded")
            # 3. One partition materialized from the UI.
            run_id = materialize_partition(page, server, shots, "07_materialize_dialog")
            see_run_succeeded(page, server, run_id, shots, "08_ui_run_done")
            partition_page(page, server, JUDGMENTS)
            assert not is_unsynced(page, False), f"{JUDGMENTS} unsynced before any change"
            old_template = metadata(page)["template_version"]

            step("UI run succeeded")
            # 4. A rubric changed in the copy, the location reloaded from the Deployment page.
            rubrics_file = project / "eval_pipeline" / "rubrics" / "rubrics.yaml"
            rubrics = yaml.safe_load(rubrics_file.read_text("utf-8"))
            rubrics[CHANGED_RUBRIC]["metrics"]["output_verification"] = (
                "Whether the agent checked a result before relying on it")
            rubrics_file.write_text(yaml.safe_dump(rubrics, sort_keys=False), "utf-8")
            open_page(page, server, "/deployment/locations")
            loaded = server.location_updated()
            page.locator('button:has([aria-label="code_location_reload"])').click()
            wait_for("the code location to reload", lambda: server.location_updated() > loaded,
                     180, server=server)
            page.get_by_text("Loaded", exact=True).first.wait_for()
            shoot(page, shots, "09_location_reloaded")

            marked = {}
            for asset in batch_assets:
                partition_page(page, server, asset)
                marked[asset] = (unsynced_causes(page) if is_unsynced(page, asset in judged)
                                 else None)
                if asset == JUDGMENTS:
                    shoot(page, shots, "10_unsynced_after_rubric_change")
                if asset == "raw_trajectories":
                    shoot(page, shots, "11_synced_upstream")
            assert {a for a, cause in marked.items() if cause} == judged, marked
            for asset in judged:
                assert "new code version" in str(marked[asset]), marked[asset]

            step("unsynced marks checked")
            # 5. Materialized again: synced, its children marked, the score-change metadata.
            run_id = materialize_partition(page, server, shots, "12_rematerialize_dialog")
            see_run_succeeded(page, server, run_id, shots, "13_rematerialized_run_done")
            partition_page(page, server, JUDGMENTS)
            assert not is_unsynced(page, False), f"{JUDGMENTS} still unsynced"
            shown = metadata(page)
            missing = [k for k in SCORE_CHANGE_KEYS if k not in shown]
            assert not missing, (f"score-change metadata missing on the page: {missing}; "
                                 f"the page shows {sorted(shown)}")
            new_template = shown["template_version"]
            assert new_template != old_template
            assert f"template_version: {old_template} -> {new_template}" in (
                shown["changed_upstream"]), shown["changed_upstream"]
            assert shown["changed_upstream_count"] == "1", shown["changed_upstream_count"]
            key_cell = page.locator("td", has_text=re.compile("^changed_upstream$")).first
            key_cell.scroll_into_view_if_needed()
            shoot(page, shots, "14_score_change_metadata")

            rows = shown["dagster/row_count"]
            assert (shown["delta/compared"], shown["delta/added"], shown["delta/removed"]) == (
                rows, "0", "0"), "every clip scored before and after is compared"

            step("score-change metadata checked")
            # Its children now read a new version of it; what it reads from is untouched.
            for asset in sorted(children(graph, JUDGMENTS)):
                partition_page(page, server, asset)
                assert is_unsynced(page, True), f"{asset} not marked after {JUDGMENTS} moved"
                causes = unsynced_causes(page)
                assert JUDGMENTS.replace("/", " / ") in causes, causes  # the UI's key display
                assert "new data version" in causes, causes
                if asset == "averaged_scores":
                    shoot(page, shots, "15_downstream_unsynced")
            partition_page(page, server, "raw_trajectories")
            assert not is_unsynced(page, False), "raw_trajectories marked"
            assert "raw_trajectories" not in descendants(graph, JUDGMENTS)

            open_page(page, server, "/asset-groups")
            page.locator('[class*="AssetNode_assetName"]').first.wait_for()
            page.wait_for_timeout(2000)
            shoot(page, shots, "16_asset_graph_after")
        except BaseException:
            shoot(page, shots, "failed_here", full_page=True)  # what the browser saw
            raise

    print(f"\nbrowser test: {time.monotonic() - started:.0f} s, screenshots in {shots}")
