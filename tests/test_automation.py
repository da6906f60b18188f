"""Declarative automation: the derived assets ask for exactly the partitions whose upstream
changed, whatever their age, once each, and the platform's sensor evaluates them in the
daemon from the start. Evaluated by Dagster's own evaluator against a real instance, the
upstream materializations reported to it as runs would."""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import dagster as dg
import pytest
from support import platform_module

from assets.automation import after_upstream
from sensors.automation import AUTOMATION_SENSOR

USER_SESSIONS = dg.AssetKey("user_sessions")
DEVICE_SNAPSHOT = dg.AssetKey("device_snapshot")
VISITS_WEEKLY = dg.AssetKey("visits_weekly")
DERIVED = dg.AssetSelection.assets(USER_SESSIONS, DEVICE_SNAPSHOT, VISITS_WEEKLY)


@pytest.fixture(scope="module")
def defs(tmp_path_factory) -> dg.Definitions:
    root = tmp_path_factory.mktemp("automation")
    return platform_module("definitions").build_definitions({"LAKEHOUSE_ROOT": str(root)})


class Automation:
    """Successive ticks of the automation sensor over one instance."""

    def __init__(
        self,
        defs: dg.Definitions,
        instance: dg.DagsterInstance,
        selection: dg.AssetSelection = DERIVED,
    ):
        self.defs, self.instance, self.selection, self.cursor = defs, instance, selection, None

    def tick(self, at: dt.datetime | None = None) -> dg.EvaluateAutomationConditionsResult:
        result = dg.evaluate_automation_conditions(
            defs=self.defs,
            instance=self.instance,
            asset_selection=self.selection,
            cursor=self.cursor,
            evaluation_time=at,
        )
        self.cursor = result.cursor
        return result

    def materialized(self, asset: str, *partitions: str) -> None:
        for partition in partitions or (None,):
            self.instance.report_runless_asset_event(
                dg.AssetMaterialization(asset, partition=partition)
            )


@pytest.fixture
def automation(defs):
    with dg.instance_for_test() as instance:
        yield Automation(defs, instance)


def test_sessions_follow_the_days_of_visits_that_changed_whatever_their_age(automation):
    # Nothing materialized yet: nothing to do (no day of the calendar is asked for).
    assert automation.tick().total_requested == 0

    automation.materialized("visits_daily", "2024-03-04", "2024-03-05", "2024-03-07")
    result = automation.tick()
    assert result.get_requested_partitions(USER_SESSIONS) == {
        "2024-03-04",
        "2024-03-05",
        "2024-03-07",
    }
    # Asked for once: the next tick, with nothing new, asks for nothing.
    assert automation.tick().total_requested == 0

    # A late file rewrites one old day: that day alone, though newer days exist
    # (Dagster's eager() would look at the latest day only).
    automation.materialized("visits_daily", "2024-01-02")
    assert automation.tick().get_requested_partitions(USER_SESSIONS) == {"2024-01-02"}


def test_days_of_visits_built_before_automation_watched_get_their_sessions_once(automation):
    """Automation turned on over a lakehouse that holds visits (or its sensor started
    after their runs): the first tick builds the sessions they lack, and only those."""
    automation.materialized("visits_daily", "2024-03-04", "2024-03-05", "2024-03-06")
    automation.materialized("user_sessions", "2024-03-05")
    assert automation.tick().get_requested_partitions(USER_SESSIONS) == {
        "2024-03-04",
        "2024-03-06",
    }
    # Asked for once: no tick asks again while nothing changed and no build failed.
    assert automation.tick().total_requested == 0


def test_weeks_follow_their_days_and_a_week_needs_only_some_of_them(automation):
    # Monday and Wednesday of one week, Tuesday of the next: each week is asked for
    # once, though most of its days never came (a day without visits has no files).
    automation.materialized("visits_daily", "2024-03-04", "2024-03-06", "2024-03-12")
    assert automation.tick().get_requested_partitions(VISITS_WEEKLY) == {
        "2024-03-04",
        "2024-03-11",
    }
    assert automation.tick().total_requested == 0
    # A late file on a Sunday: its week (Monday to Sunday) alone.
    automation.materialized("visits_daily", "2024-03-10")
    assert automation.tick().get_requested_partitions(VISITS_WEEKLY) == {"2024-03-04"}


def test_the_snapshot_follows_any_day_of_the_catalog_though_most_days_never_came(automation):
    automation.tick()
    automation.materialized("device_catalog", "2024-03-04", "2024-03-05")
    result = automation.tick()
    assert result.get_num_requested(DEVICE_SNAPSHOT) == 1
    assert result.get_requested_partitions(USER_SESSIONS) == set()
    assert automation.tick().total_requested == 0
    automation.materialized("device_snapshot")
    automation.materialized("device_catalog", "2024-03-04")
    assert automation.tick().get_num_requested(DEVICE_SNAPSHOT) == 1


def test_one_sensor_evaluates_the_conditions_from_the_start(defs):
    """(It ticks as often as the file sensors: tests/test_definitions.py.)"""
    sensor = {s.name: s for s in defs.sensors}[AUTOMATION_SENSOR]
    assert isinstance(sensor, dg.AutomationConditionSensorDefinition)
    assert sensor.default_status == dg.DefaultSensorStatus.RUNNING
    # Its runs leave the queue after those that commit landed files (default priority 0).
    assert sensor.run_tags == {"dagster/priority": "-1"}
    graph = defs.resolve_asset_graph()
    automated = {
        key.to_user_string()
        for key in graph.materializable_asset_keys
        if graph.get(key).automation_condition is not None
    }
    assert automated == {"user_sessions", "device_snapshot", "visits_weekly"}
    # Its label, as the UI's Automation tab shows it.
    assert graph.get(USER_SESSIONS).automation_condition.get_label() == "after upstream"


# The condition's timing, on two stand-in assets whose runs the test holds open: a run of
# the platform's assets cannot be paused at will, and the condition is the same object.
DAYS = dg.DailyPartitionsDefinition(start_date="2024-01-01")
DAY = "2024-03-04"
HELD: dict[str, tuple[threading.Event, threading.Event]] = {}
FAILING: set[str] = set()


def _held(context: dg.AssetExecutionContext) -> None:
    """Runs until the test lets it finish, if the test holds it; fails, if it fails it."""
    if context.asset_key.to_user_string() in FAILING:
        raise ConnectionError("the long-lived Spark went away")
    running, release = HELD.get(context.asset_key.to_user_string(), (None, None))
    if running is not None:
        running.set()
        assert release.wait(60), "the test never let the run finish"


@dg.asset(partitions_def=DAYS)
def upstream(context) -> None:
    _held(context)


@dg.asset(partitions_def=DAYS, deps=[upstream], automation_condition=after_upstream())
def downstream(context) -> None:
    _held(context)


@pytest.fixture
def stand_ins() -> Iterator[Automation]:
    with dg.instance_for_test() as instance:
        automation = Automation(
            dg.Definitions(assets=[upstream, downstream]),
            instance,
            dg.AssetSelection.assets(downstream),
        )
        automation.tick()
        yield automation
    HELD.clear()
    FAILING.clear()


@contextmanager
def running(automation: Automation, *assets: dg.AssetsDefinition) -> Iterator[None]:
    """A real run of `assets` for DAY, in progress for the body of the block."""
    held = assets[-1].key.to_user_string()
    HELD[held] = started, release = threading.Event(), threading.Event()
    run = threading.Thread(
        target=dg.materialize,
        args=(list(assets),),
        kwargs={"instance": automation.instance, "partition_key": DAY},
    )
    run.start()
    try:
        assert started.wait(60), "the run did not start"
        yield
    finally:
        release.set()
        run.join()
        del HELD[held]


def test_the_downstream_waits_for_its_upstream_day_being_built(stand_ins):
    with running(stand_ins, upstream):
        assert stand_ins.tick().total_requested == 0
    assert stand_ins.tick().get_requested_partitions(downstream.key) == {DAY}


def test_a_change_while_the_downstream_day_is_built_gets_it_built_again(stand_ins):
    """The late file that lands while its day's sessions are being built from the files
    before it: eager() would forget it when that build ends."""
    stand_ins.materialized("upstream", DAY)
    assert stand_ins.tick().get_requested_partitions(downstream.key) == {DAY}
    with running(stand_ins, downstream):
        stand_ins.materialized("upstream", DAY)
        assert stand_ins.tick().total_requested == 0
    assert stand_ins.tick().get_requested_partitions(downstream.key) == {DAY}
    assert stand_ins.tick().total_requested == 0


def test_a_day_built_together_with_its_upstream_is_built_once_more(stand_ins):
    """The price of never missing a change: after a backfill of both assets, automation
    builds the downstream day once more (the runs are idempotent), then rests."""
    assert dg.materialize([upstream, downstream], instance=stand_ins.instance, partition_key=DAY)
    assert stand_ins.tick().get_requested_partitions(downstream.key) == {DAY}
    assert stand_ins.tick().total_requested == 0


def test_a_day_whose_build_failed_is_asked_for_again_every_five_minutes_until_it_lands(
    stand_ins,
):
    """A build that failed on something transient, after the daemon's run retries: the
    day is not left stale until its upstream changes again, or a person acts."""
    now = dt.datetime.now(dt.UTC)
    # Half a minute after the next 5-minute tick: the ticks below go forward in time.
    at = now.replace(minute=now.minute // 5 * 5, second=30, microsecond=0) + dt.timedelta(minutes=5)
    stand_ins.materialized("upstream", DAY)
    assert stand_ins.tick(at).get_requested_partitions(downstream.key) == {DAY}
    FAILING.add("downstream")
    result = dg.materialize(
        [downstream], instance=stand_ins.instance, partition_key=DAY, raise_on_error=False
    )
    assert not result.success
    # Not at once (the daemon's run retries come first), but at the next 5-minute tick.
    assert stand_ins.tick(at + dt.timedelta(minutes=2)).total_requested == 0
    again = stand_ins.tick(at + dt.timedelta(minutes=5))
    assert again.get_requested_partitions(downstream.key) == {DAY}
    assert stand_ins.tick(at + dt.timedelta(minutes=6)).total_requested == 0
    # Still failing: asked again at the next tick; once it lands, no more.
    assert (
        dg.materialize(
            [downstream], instance=stand_ins.instance, partition_key=DAY, raise_on_error=False
        ).success
        is False
    )
    assert stand_ins.tick(at + dt.timedelta(minutes=10)).get_requested_partitions(
        downstream.key
    ) == {DAY}
    FAILING.clear()
    assert dg.materialize([downstream], instance=stand_ins.instance, partition_key=DAY)
    assert stand_ins.tick(at + dt.timedelta(minutes=15)).total_requested == 0
