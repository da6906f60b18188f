"""The Dagster the demo hands its files to.

The demo lands files and lets the daemon's sensors find them and launch the runs, as they
do for a user's files: every tick is in the sensor's tick history and every run is a run
of its job, launched by the sensor. When `make dev` is up on the demo's instance, the demo
uses it (running the work itself beside it would do it twice); otherwise it starts
`dagster dev` on a free loopback port and stops it by its pid.

It follows the work through Dagster's GraphQL API (what the UI reads): the ticks of a
sensor since a moment, and the runs they launched.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg

LOCATION = {"repositoryLocationName": "lakehouse", "repositoryName": "__repository__"}
MAKE_DEV_URL = "http://127.0.0.1:3000"
FINISHED = {dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED}
TICKS = """
query SensorTicks($location: RepositorySelector!, $after: Float!) {
  sensorsOrError(repositorySelector: $location) {
    __typename
    ... on Sensors {
      results {
        name
        sensorState {
          status
          ticks(afterTimestamp: $after, limit: 100) {
            status timestamp endTimestamp runIds error { message }
          }
        }
      }
    }
    ... on PythonError { message }
  }
}
"""
UNREACHABLE = "DagsterUserCodeUnreachableError"
UNREACHABLE_LIMIT = 300
"""Seconds the demo waits out sensor ticks failing because the code server is briefly
out of reach."""
AUTOMATION_TAG = "dagster/from_automation_condition"
"""The tag of every run declarative automation launched, directly or through a backfill."""
INSTANCE = "query { instance { info daemonHealth { allDaemonStatuses { daemonType healthy } } } }"


class DemoError(RuntimeError):
    """The demo's work did not go through: a sensor stopped or failing, a run failed, or
    Dagster not answering."""


@dataclass(frozen=True)
class Tick:
    status: str
    started: float
    ended: float
    run_ids: tuple[str, ...]
    error: str | None


def graphql(url: str, text: str, variables: Mapping[str, object] | None = None) -> dict:
    """The answer of the Dagster webserver at `url` to a GraphQL query."""
    body = json.dumps({"query": text, "variables": dict(variables or {})}).encode()
    request = urllib.request.Request(
        f"{url}/graphql", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        answer = json.load(response)
    if answer.get("errors"):
        raise DemoError(f"Dagster at {url}: {answer['errors'][0]['message']}")
    return answer["data"]


@dataclass(frozen=True)
class Launched:
    """A run a sensor launched."""

    run_id: str
    job_name: str
    partition_key: str
    """The run's partition, or its range as `first..last`."""
    tags: Mapping[str, str]
    status: dg.DagsterRunStatus
    end_time: float

    @property
    def ok(self) -> bool:
        return self.status == dg.DagsterRunStatus.SUCCESS

    @property
    def going(self) -> bool:
        """Not finished, or failed with a retry the daemon has yet to launch."""
        return self.status not in FINISHED or (
            self.tags.get("dagster/will_retry") == "true"
            and "dagster/auto_retry_run_id" not in self.tags
        )


class Dagster:
    """A `dagster dev` (webserver and daemon) serving the demo's instance at `url`."""

    def __init__(self, url: str, instance: dg.DagsterInstance, *, started: bool) -> None:
        self.url = url
        self.instance = instance
        self.started = started
        """Whether the demo started it (else it is a `make dev` that was already up)."""

    def ticks(self, sensors: Sequence[str], ended_after: float) -> dict[str, list[Tick]]:
        """Each sensor's ticks that ended after `ended_after`, oldest first. A sensor that
        is not running fails here: the demo would wait for it forever."""
        # A tick takes seconds; ten minutes back from the end covers any tick's start.
        after = ended_after - 600
        data = graphql(self.url, TICKS, {"location": LOCATION, "after": after})
        data = data["sensorsOrError"]
        if data["__typename"] != "Sensors":
            raise DemoError(f"Dagster at {self.url} lists no sensors: {data.get('message')}")
        found = {sensor["name"]: sensor["sensorState"] for sensor in data["results"]}
        ticks = {}
        for name in sensors:
            state = found.get(name)
            if state is None or state["status"] != "RUNNING":
                raise DemoError(
                    f"sensor {name} is {'missing' if state is None else 'stopped'} on the "
                    f"Dagster at {self.url}: start it (Automation page) and run the demo again"
                )
            ticks[name] = sorted(
                (
                    Tick(
                        tick["status"],
                        tick["timestamp"],
                        tick["endTimestamp"],
                        tuple(tick["runIds"]),
                        (tick["error"] or {}).get("message"),
                    )
                    for tick in state["ticks"]
                    if tick["status"] != "STARTED" and tick["endTimestamp"] > ended_after
                ),
                key=lambda tick: tick.started,
            )
        return ticks

    def launched(self, run_ids: Sequence[str]) -> list[Launched]:
        """The runs, and the retries the daemon launched for those that failed."""
        if not run_ids:
            return []
        records = list(self.instance.get_run_records(dg.RunsFilter(run_ids=list(run_ids))))
        retries = self.instance.get_run_records(
            dg.RunsFilter(tags={"dagster/root_run_id": list(run_ids)})
        )
        runs = []
        for record in sorted([*records, *retries], key=lambda r: r.create_timestamp):
            run = record.dagster_run
            tags = dict(run.tags)
            start = tags.get("dagster/asset_partition_range_start")
            end = tags.get("dagster/asset_partition_range_end")
            span = start if start == end else f"{start}..{end}"
            runs.append(
                Launched(
                    run.run_id,
                    run.job_name,
                    span or tags.get("dagster/partition", ""),
                    tags,
                    run.status,
                    record.end_time or 0.0,
                )
            )
        return runs

    def settle(
        self, sensors: Sequence[str], landing_began: float, *, timeout: float = 1800
    ) -> list[Launched]:
        """Waits for the sensors to take in files whose landing began at `landing_began`
        (and has ended): until every run their ticks launched since then has finished
        (with the daemon's retries), and a tick of each sensor that started after the
        landing and after the last of those runs asked for nothing more. Returns the runs
        that succeeded, in launch order; fails naming a run that failed for good."""
        landed = time.time()
        deadline = time.monotonic() + timeout
        waited_out: set[tuple[str, float]] = set()
        while True:
            # A tick that ended before the landing began cannot have seen its files; one
            # that ended after may have seen some of them.
            ticks = self.ticks(sensors, landing_began)
            for name, sensor_ticks in ticks.items():
                for tick in sensor_ticks:
                    if tick.status == "FAILURE" and (name, tick.started) not in waited_out:
                        first = min([tick.started, *(started for _, started in waited_out)])
                        self.wait_out(name, tick, first)
                        waited_out.add((name, tick.started))
            run_ids = [run_id for t in ticks.values() for tick in t for run_id in tick.run_ids]
            runs = self.launched(run_ids)
            if not any(run.going for run in runs):
                quiet_from = max([landed, *(run.end_time for run in runs)])
                if all(
                    any(tick.started > quiet_from and not tick.run_ids for tick in t)
                    for t in ticks.values()
                ):
                    return self.succeeded(runs)
            if time.monotonic() > deadline:
                waiting = [r.run_id for r in runs if r.going]
                raise DemoError(
                    f"sensors {', '.join(sensors)} did not settle in {timeout:.0f} s "
                    f"(runs still going: {waiting or 'none'}); see {self.url}"
                )
            time.sleep(2)

    def automated(
        self,
        asset: str,
        upstream: str,
        since: float,
        *,
        partition_of: Callable[[str], str | None] = lambda key: key,
        read_version: str | None = None,
        timeout: float = 900,
    ) -> list[Launched]:
        """Waits for declarative automation to bring `asset` up to date with `upstream`:
        until each partition of `asset` (the asset, if unpartitioned) has materialized
        since the last materialization of what it reads of `upstream` (the partition
        `partition_of` an upstream partition, by default the same key; None: one that
        does not exist yet; any partition for an unpartitioned asset), and none of
        automation's runs of it is going. Returns the runs automation launched for
        `asset` since `since` that succeeded, in launch order; fails naming one that
        failed for good.

        `read_version`: the metadata key under which `asset` records the Delta version of
        `upstream` it read. Then a partition is also behind while that version is older
        than one its upstream partitions committed: a build that read the upstream just
        before a change may still record its materialization after the change's, and be
        taken for up to date while automation has yet to ask for it again."""
        after = dt.datetime.fromtimestamp(since, dt.UTC)
        deadline = time.monotonic() + timeout
        while True:
            runs = self.launched(
                [
                    record.dagster_run.run_id
                    for record in self.instance.get_run_records(
                        dg.RunsFilter(tags={AUTOMATION_TAG: "true"}, created_after=after)
                    )
                    if dg.AssetKey(asset) in (record.dagster_run.asset_selection or ())
                ]
            )
            built_records = _latest_records(self.instance, asset)
            changed_records = _latest_records(self.instance, upstream)
            built = {key: r.storage_id for key, r in built_records.items()}
            changed = {key: r.storage_id for key, r in changed_records.items()}
            if None in built:
                behind = [] if built[None] > max(changed.values(), default=0) else [asset]
                if read_version is not None:
                    behind += _behind_in_version(
                        asset, built_records, changed_records, None, read_version
                    )
            else:
                needed: dict[str, int] = {}
                for key, id_ in changed.items():
                    if key is not None and (downstream := partition_of(key)) is not None:
                        needed[downstream] = max(needed.get(downstream, 0), id_)
                behind = [key for key, id_ in needed.items() if built.get(key, 0) < id_]
                if read_version is not None:
                    behind += _behind_in_version(
                        asset, built_records, changed_records, partition_of, read_version
                    )
            # Up to date, and no build of it still going: a build asked for because the
            # upstream changed while an earlier one ran must end before the tables are
            # compared (the earlier one may have read the upstream before the change).
            if not behind and not any(run.going for run in runs):
                return self.succeeded(runs)
            if any(not run.ok and not run.going for run in runs):
                self.succeeded(runs)  # raises if one failed for good
            if time.monotonic() > deadline:
                raise DemoError(
                    f"automation did not bring {asset} up to date with {upstream} in "
                    f"{timeout:.0f} s (behind: {', '.join(sorted(behind)[:5])}); see "
                    f"{self.url}/assets/{asset}?view=automation"
                )
            time.sleep(2)

    def wait_out(self, sensor: str, tick: Tick, first_failure: float) -> None:
        """A failed tick stops the demo, unless the machinery failed it for a moment: the
        code server out of reach (seen when the 2 cores are busy) is waited out, with one
        line saying so, for up to UNREACHABLE_LIMIT seconds; the next tick does the work."""
        error = tick.error or ""
        if UNREACHABLE not in error:
            raise DemoError(f"sensor {sensor} failed a tick: {error}")
        if tick.started - first_failure > UNREACHABLE_LIMIT:
            raise DemoError(
                f"sensor {sensor}: the code server has been out of reach for over "
                f"{UNREACHABLE_LIMIT} s: {error}"
            )
        print(f"   (a {sensor} tick failed: the code server was out of reach; waiting it out)")

    def succeeded(self, runs: list[Launched]) -> list[Launched]:
        """The runs that succeeded; fails naming a run that failed for good (its retries
        failed too)."""
        done = {run.tags.get("dagster/root_run_id", run.run_id) for run in runs if run.ok}
        for run in runs:
            if not run.ok and run.tags.get("dagster/root_run_id", run.run_id) not in done:
                raise DemoError(
                    f"run {run.run_id} of {run.job_name} {run.partition_key} ended "
                    f"{run.status.value}: see {self.url}/runs/{run.run_id}"
                )
        return [run for run in runs if run.ok]


def _latest_records(
    instance: dg.DagsterInstance, asset: str
) -> dict[str | None, dg.EventLogRecord]:
    """The latest materialization record of each partition of `asset` (None:
    unpartitioned)."""
    latest: dict[str | None, dg.EventLogRecord] = {}
    cursor = None
    while True:
        page = instance.fetch_materializations(dg.AssetKey(asset), limit=1000, cursor=cursor)
        for record in page.records:
            latest.setdefault(record.partition_key, record)
        if not page.has_more:
            return latest
        cursor = page.cursor


def _metadata(record: dg.EventLogRecord) -> Mapping[str, Any]:
    return record.asset_materialization.metadata if record.asset_materialization else {}


def _behind_in_version(
    asset: str,
    built: Mapping[str | None, dg.EventLogRecord],
    changed: Mapping[str | None, dg.EventLogRecord],
    partition_of: Callable[[str], str | None] | None,
    read_version: str,
) -> list[str]:
    """Partitions of `asset` (`partition_of` None: the asset, unpartitioned) whose latest
    build (`built`) recorded under `read_version` a Delta version of the upstream older
    than one its upstream partitions' latest materializations (`changed`) committed."""
    needed: dict[str | None, int] = {}
    for key, record in changed.items():
        version = _metadata(record).get("delta_version")
        down = partition_of(key) if partition_of and key is not None else None
        if version is None or (partition_of is not None and down is None):
            continue  # nothing recorded, or no partition of `asset` reads it yet
        needed[down] = max(needed.get(down, -1), int(version.value))
    read = {
        key: int(metadata[read_version].value)
        for key, record in built.items()
        if read_version in (metadata := _metadata(record))
    }
    return [key or asset for key, version in needed.items() if read.get(key, -1) < version]


def serves(url: str, home: Path) -> bool:
    """Whether a Dagster webserver answers at `url` for the instance in `home`, with its
    daemon up."""
    try:
        instance = graphql(url, INSTANCE)["instance"]
    except (OSError, DemoError, ValueError):
        return False
    healthy = all(d["healthy"] for d in instance["daemonHealth"]["allDaemonStatuses"])
    return healthy and str(home) in (instance["info"] or "")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def dagster_dev(
    project_root: Path, *, environment: Mapping[str, str], log: Path, timeout: float = 180
) -> Iterator[str]:
    """`dagster dev` (webserver, daemon, code server) on a free loopback port, in its own
    process group, stopped by its pid whatever happens. Yields its URL once it answers."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with log.open("ab") as output:
        server = subprocess.Popen(
            [sys.executable, "-m", "dagster", "dev", "-w", "workspace.yaml"]
            + ["-h", "127.0.0.1", "-p", str(port)],
            cwd=project_root,
            env=dict(environment),
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                urllib.request.urlopen(f"{url}/server_info", timeout=2).close()
                break
            except OSError as error:
                if server.poll() is not None:
                    raise DemoError(
                        f"dagster dev exited with {server.returncode}; see {log}"
                    ) from error
                if time.monotonic() > deadline:
                    raise DemoError(
                        f"dagster dev did not answer in {timeout:.0f} s; see {log}"
                    ) from error
                time.sleep(1)
        yield url
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


@contextmanager
def attach_or_start(
    project_root: Path, instance: dg.DagsterInstance, *, log: Path
) -> Iterator[Dagster]:
    """The running `make dev` on this instance, or a `dagster dev` started for the demo."""
    home = Path(os.environ["DAGSTER_HOME"])
    url = os.environ.get("DAGSTER_WEBSERVER_URL", MAKE_DEV_URL)
    if serves(url, home):
        yield Dagster(url, instance, started=False)
        return
    with dagster_dev(project_root, environment=os.environ, log=log) as started_url:
        dagster = Dagster(started_url, instance, started=True)
        wait_for_daemon(dagster)
        yield dagster


def wait_for_daemon(dagster: Dagster, *, timeout: float = 120) -> None:
    """Until the daemon's heartbeats are in: before that its sensors do not tick."""
    deadline = time.monotonic() + timeout
    while True:
        statuses = graphql(dagster.url, INSTANCE)["instance"]["daemonHealth"]["allDaemonStatuses"]
        if statuses and all(status["healthy"] for status in statuses):
            return
        if time.monotonic() > deadline:
            raise DemoError(f"the daemon of {dagster.url} is not healthy after {timeout:.0f} s")
        time.sleep(1)
