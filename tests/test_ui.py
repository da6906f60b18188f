"""The UI as a data engineer walks it: `dagster dev` on a loopback port, driven in Debian's
headless Chromium by Playwright. Screenshots land in `.data/ui/` to look at.

Three days of visits are backfilled first (one run through the CLI), so the pages have a
partitioned asset with materializations to show.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout
from playwright.sync_api import sync_playwright
from support import instance_home

from demo.dagster_dev import dagster_dev as start_dagster_dev
from demo.dates import DemoDates, default_start
from demo.generate import write_initial_files
from demo.landing_files import LandingFiles
from resources import LandingZone

PROJECT_ROOT = Path(__file__).resolve().parents[1]
SHOTS = PROJECT_ROOT / ".data" / "ui"
CHROMIUM = "/usr/bin/chromium"
# The demo's days as a first run today lands them: in the UI's default 90-day window.
DAYS = DemoDates(default_start()).visit_days
FIRST, LAST = DAYS[0].isoformat(), DAYS[2].isoformat()

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def environment(tmp_path_factory) -> dict[str, str]:
    work = tmp_path_factory.mktemp("ui")
    home = instance_home(work / "dagster_home")
    landing = work / "landing"
    write_initial_files(LandingFiles(LandingZone(root=str(landing))), DAYS)
    # Only the three days backfilled below: the sensors (running in `dagster dev`) then
    # have nothing new to launch while the pages are looked at.
    for folder in (landing / "visits").iterdir():
        if not FIRST <= folder.name.removeprefix("date=") <= LAST:
            shutil.rmtree(folder)
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "LAKEHOUSE_ROOT": str(work / "lakehouse"),
        "LANDING_ROOT": str(landing),
        "SPARK_MASTER": "local[1]",
        # The automation sensor's first tick comes within seconds (see the last test).
        "SENSOR_INTERVAL_SECONDS": "5",
    }
    done = subprocess.run(
        [sys.executable, "-m", "dagster", "asset", "materialize", "-f", "platform/definitions.py"]
        + ["-d", ".", "--select", "visits_daily", "--partition-range", f"{FIRST}...{LAST}"],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return env


@pytest.fixture(scope="module")
def dagster_dev(environment) -> Iterator[str]:
    """`dagster dev` as the demo starts it: its own process group, stopped by its pid
    whatever happens."""
    log = Path(environment["DAGSTER_HOME"]) / "dev.log"
    with start_dagster_dev(PROJECT_ROOT, environment=environment, log=log) as url:
        yield url


@pytest.fixture(scope="module")
def page(dagster_dev):
    assert Path(CHROMIUM).exists(), f"{CHROMIUM} is missing: apt-get install chromium"
    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        page = browser.new_page(viewport={"width": 1500, "height": 1000})
        page.set_default_timeout(60_000)
        yield page
        browser.close()


def visit(page, url: str, shot: str, waits_for: str) -> str:
    """Open `url`, wait until `waits_for` shows, save a screenshot; the page's text."""
    page.goto(url)
    try:
        # A first visit asks to join the community: the dialog hides the page.
        skip = page.get_by_role("button", name="Skip")
        with contextlib.suppress(PlaywrightTimeout):
            skip.wait_for(timeout=5000)
            skip.click()
        page.get_by_text(waits_for, exact=False).first.wait_for()
        page.wait_for_timeout(1500)
    finally:
        page.screenshot(path=str(SHOTS / f"{shot}.png"))
    return page.inner_text("body")


def test_the_asset_graph_shows_every_group_and_a_groups_assets(page, dagster_dev):
    text = visit(page, f"{dagster_dev}/asset-groups", "asset-graph", "overwriting")
    for group in ("database", "immutable", "telemetry", "updates", "warehouse"):
        assert group in text
    text = visit(
        page,
        f"{dagster_dev}/locations/lakehouse/asset-groups/overwriting",
        "asset-group-overwriting",
        "visits_weekly",
    )
    assert "visits_daily" in text


def test_the_partitions_tab_shows_the_backfilled_days(page, dagster_dev):
    text = visit(
        page, f"{dagster_dev}/assets/visits_daily?view=partitions", "partitions", "Materialized ("
    )
    assert "Materialized (3)" in text


def test_the_materialize_dialog_s_last_90_days_hold_the_demo_s_days(page, dagster_dev):
    """The dialog a backfill starts from offers the last 90 days; the demo's days, relative
    to today, are among them without "Show all partitions"."""
    url = f"{dagster_dev}/assets/visits_daily?view=partitions"
    visit(page, url, "partitions", "Materialized (")
    page.locator('button:has-text("Materialize")').first.click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_text("Showing the last 90 days").wait_for()
    page.wait_for_timeout(1000)
    page.screenshot(path=str(SHOTS / "materialize-dialog.png"))
    window = re.findall(r"\d{4}-\d{2}-\d{2}", dialog.inner_text())
    page.keyboard.press("Escape")
    assert window[0] <= FIRST and LAST <= window[-1], window


def test_a_materialization_shows_rows_version_and_schema(page, dagster_dev):
    text = visit(
        page,
        f"{dagster_dev}/assets/visits_daily?view=events&partition={LAST}",
        "materialization",
        "delta_version",
    )
    assert "delta_version" in text
    assert "rows_inserted" in text
    page.get_by_text("dagster/column_schema").first.scroll_into_view_if_needed()
    assert "visit_id" in page.inner_text("body") or "column_schema" in text


def test_the_restore_launchpad_shows_its_fields(page, dagster_dev):
    text = visit(
        page,
        f"{dagster_dev}/locations/lakehouse/jobs/restore_table/playground",
        "restore-launchpad",
        "restore_delta_table",
    )
    # The launchpad scaffolds a target and refuses to launch until it names an asset.
    for shown in ("target", "undo_materialization", "partition"):
        assert shown in text, shown
    assert 'Missing required config entry "asset_key"' in text
    # The other target, a table version: the launchpad names its `table` and `version`
    # fields, with an example, until both are given; then the run can launch.
    editor = page.locator(".CodeMirror").first
    editor.click()
    page.keyboard.press("Control+A")
    page.keyboard.type("ops: {restore_delta_table: {config: {target: {table_version: {}}}}}")
    missing = "Missing required config entries ['table', 'version']"
    page.get_by_text(missing).first.wait_for()
    page.screenshot(path=str(SHOTS / "restore-launchpad-table-version.png"))
    page.keyboard.press("Control+A")
    page.keyboard.type(
        "ops: {restore_delta_table: {config: {target: "
        "{table_version: {table: visits_daily, version: 3}}}}}"
    )
    page.get_by_text(missing).first.wait_for(state="detached")
    page.wait_for_timeout(1000)
    page.screenshot(path=str(SHOTS / "restore-launchpad-table-version-complete.png"))
    assert page.get_by_role("button", name="Launch Run").is_enabled()


def test_the_sensor_shows_its_ticks_and_a_compact_cursor(page, dagster_dev):
    """The daemon of `dagster dev` ticks the sensors (as it does for the demo's files):
    each tick is in the sensor's history, with the cursor of a few bytes."""
    text = visit(
        page,
        f"{dagster_dev}/locations/lakehouse/sensors/visits_late_files",
        "sensor-ticks",
        "requested",
    )
    assert "Materializes new days of visits" in text
    assert '{"state_version":' in text


def test_the_automation_tab_shows_each_evaluation_and_the_condition_behind_it(page, dagster_dev):
    """The three days of visits were backfilled before `dagster dev` started, so the
    automation sensor's first tick asks for their sessions (never built, upstream there);
    user_sessions' Automation tab lists that evaluation, and opening it shows the
    condition's tree, each part with what it was true for."""
    visit(
        page,
        f"{dagster_dev}/assets/user_sessions?view=automation",
        "automation-evaluations",
        "3 requested",
    )
    row = page.locator("tr").filter(has_text="3 requested").first
    row.get_by_text(re.compile(r"\d{1,2}:\d\d:\d\d")).first.click()
    page.get_by_text("never built, upstream there").first.wait_for()
    page.wait_for_timeout(1000)
    page.screenshot(path=str(SHOTS / "automation-evaluation.png"))
    text = page.inner_text("body")
    for part in ("after upstream", "upstream changed since last requested", "in_progress"):
        assert part in text, part
