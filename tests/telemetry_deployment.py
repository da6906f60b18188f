"""A telemetry deployment for tests: real landing zone, Delta tables, Dagster instance,
the real sensor; runs are materialized in-process exactly as the sensor asks."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

import dagster as dg
import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder
from support import land
from telemetry_history import ReportFile
from ticks import evaluate_tick

from assets.telemetry import (
    TelemetrySettings,
    control,
    subjects,
    telemetry_hourly,
    telemetry_raw,
    telemetry_running_totals,
)
from assets.telemetry.pending import PendingSubject, pending_subjects
from resources import Lakehouse, LandingZone
from sensors import file_state, telemetry_files

TELEMETRY_ASSETS = [telemetry_raw, telemetry_running_totals, telemetry_hourly]
"""The telemetry pipeline's assets, built together by one run of telemetry_job."""


class Deployment:
    def __init__(
        self,
        instance: dg.DagsterInstance,
        lakehouse: Lakehouse,
        landing: LandingZone,
        settings: TelemetrySettings,
    ) -> None:
        self.instance = instance
        self.lakehouse = lakehouse
        self.landing = landing
        self.settings = settings
        self.cursor: str | None = None
        self.runs: list[dg.ExecuteInProcessResult] = []
        self.launched_keys: set[str] = set()

    @property
    def resources(self) -> dict:
        return {
            "lakehouse": self.lakehouse,
            "landing": self.landing,
            "telemetry_settings": self.settings,
        }

    def deliver(self, files: Iterable[ReportFile]) -> None:
        for f in files:
            land(self.landing, f.path, f.content)

    def write(self, path: str, content: bytes) -> None:
        land(self.landing, path, content)

    def tick(self) -> dg.SensorResult:
        result = evaluate_tick(telemetry_files, self.instance, self.cursor, self.resources)
        self.cursor = result.cursor
        assert [r.run_key for r in result.run_requests] == [
            p.run_key for p in self.decided_from_scratch()
        ], "the decision kept from tick to tick differs from one made from every file"
        return result

    def decided_from_scratch(self) -> list[PendingSubject]:
        """The sensor's decision made from every remembered file and whole control tables,
        as a process that kept nothing between ticks would make it."""
        seen = file_state.load(self.lakehouse, telemetry_files.name, self.cursor)
        landed = {
            path: (seen.labels[path], fingerprint.sha256)
            for path, fingerprint in seen.fingerprints.items()
            if path in seen.labels
        }
        states = control.file_states(self.lakehouse)
        subject_keys = sorted(
            {s for s, _ in landed.values()} | {s.subject_key for s in states.values()}
        )
        return pending_subjects(
            landed,
            states,
            blacklist={
                r["source"]: r["subject_key"]
                for r in control.read_records(self.lakehouse, control.BLACKLIST, None)
            },
            released=control.released(control.quarantine_entries(self.lakehouse)),
            reflected=control.reconciled_versions(self.lakehouse, subject_keys),
            now=dt.datetime.now(dt.UTC),
        )

    def materialize(self, subject: str, tags: dict | None = None) -> dg.ExecuteInProcessResult:
        if not self.instance.has_dynamic_partition(subjects.name, subject):
            self.instance.add_dynamic_partitions(subjects.name, [subject])
        result = dg.materialize(
            TELEMETRY_ASSETS,
            partition_key=subject,
            resources=self.resources,
            instance=self.instance,
            tags=tags,
        )
        self.runs.append(result)
        return result

    def operate(self, job: dg.JobDefinition, source: str) -> dg.ExecuteInProcessResult:
        """An operator job (blacklist, re-ingest, release) run on one file, as from the UI."""
        return job.execute_in_process(
            run_config={
                "ops": {job.nodes[0].name: {"config": {"source": source, "reason": "test"}}}
            },
            resources={"lakehouse": self.lakehouse},
            instance=self.instance,
        )

    def run_pending(self) -> list[dg.RunRequest]:
        """One sensor tick, then every run it asked for (a run key is launched once)."""
        result = self.tick()
        launched = []
        for request in result.run_requests:
            if request.run_key in self.launched_keys:
                continue
            self.launched_keys.add(request.run_key)
            self.materialize(request.partition_key, request.tags)
            launched.append(request)
        return launched

    def metadata(self, result: dg.ExecuteInProcessResult, asset: str) -> dict:
        for event in result.get_asset_materialization_events():
            if event.asset_key.to_user_string() == asset:
                return {k: v.value for k, v in event.materialization.metadata.items()}
        raise KeyError(asset)

    def totals(self) -> list[tuple]:
        rows = control.running_totals(self.lakehouse).to_pylist()
        return sorted(
            (
                r["subject_key"],
                r["ts"],
                r["source"],
                r["line"],
                r["cum_in_spec"],
                r["cum_out_of_spec"],
                r["cum_mispicks"],
            )
            for r in rows
        )

    def totals_by_sql(self) -> list[tuple]:
        """The running totals as SQL clients see them: the view's SQL, run by DataFusion
        on the two tables."""
        query = QueryBuilder()
        for table in (control.WITHIN_HOUR, control.HOUR_START):
            query.register(table, DeltaTable(self.lakehouse.uri(table)))
        rows = pa.table(query.execute(control.RUNNING_TOTALS_VIEW.sql(str)).read_all()).to_pylist()
        return sorted(tuple(r.values()) for r in rows)

    def hourly(self) -> list[tuple]:
        rows = self.lakehouse.read_arrow(control.HOURLY).to_pylist()
        return sorted(
            (r["subject_key"], r["hour"], r["in_spec"], r["out_of_spec"], r["mispicks"], r["rows"])
            for r in rows
        )

    def raw(self) -> list[tuple]:
        rows = self.lakehouse.read_arrow(control.RAW).to_pylist()
        return sorted(
            (
                r["subject_key"],
                r["ts"],
                r["source"],
                r["line"],
                r["in_spec"],
                r["out_of_spec"],
                r["mispicks"],
            )
            for r in rows
        )

    def states(self) -> dict[str, control.FileState]:
        return control.file_states(self.lakehouse)
