"""The telemetry assets, one partition per subject (dynamic partitions `subjects`).

A materialization of a subject does all of that subject's pending work, whoever starts
it: the sensor, a backfill, or a click in the UI.
"""

import datetime as dt
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import dagster as dg
import pyarrow as pa

from assets.catalog import RESTORE_OPERATOR_JOBS, declared
from assets.columns import column_description
from assets.materialization import TABLE_NAME, commit_metadata, materialization_metadata
from assets.progress import Progress
from assets.telemetry import control
from assets.telemetry.derive import Reconciled, reconcile_hourly, reconcile_totals
from assets.telemetry.ingest import SubjectIngest, metadata_lists
from assets.telemetry.settings import TelemetrySettings
from assets.telemetry.subjects import SUBJECT_TAG, subjects
from resources import Lakehouse, LandingZone
from resources.lakehouse import StaleWriteError

GROUP = "telemetry"
# Waits of 2, 4, 8, 16, 32 s: a winner still working through a large batch (a few
# commits, each up to seconds through Spark) is done before the loser gives up.
STALE_RETRIES = 5
STALE_FIRST_WAIT_SECONDS = 2


@contextmanager
def redo_if_stale(context: dg.AssetExecutionContext) -> Iterator[None]:
    """A step that lost the race for its subject (another run committed first) is redone
    from the state the winner left, after a growing wait; any other error fails the step
    as it is."""
    try:
        yield
    except StaleWriteError as error:
        wait = STALE_FIRST_WAIT_SECONDS * 2**context.retry_number
        context.log.warning(f"{error}; redoing the step in {wait} s")
        raise dg.RetryRequested(max_retries=STALE_RETRIES, seconds_to_wait=wait) from error


def _metadata(context: dg.AssetExecutionContext):
    def build(**facts):
        return commit_metadata(context, partition_key=context.partition_key, **facts)

    return build


@dg.asset(
    partitions_def=subjects,
    group_name=GROUP,
    kinds={"delta"},
    check_specs=[
        dg.AssetCheckSpec(
            "no_failed_files",
            asset="telemetry_raw",
            description="No report file of the subject failed every parse attempt. A failed "
            "file is listed with its line and error; fix and re-deliver it, or run "
            "blacklist_telemetry_file. Warns; the subject's other files still flow.",
        ),
        dg.AssetCheckSpec(
            "no_quarantined_files",
            asset="telemetry_raw",
            description="No file waits in quarantine (data far behind the subject's newest). "
            "Release one with release_quarantined_file, or drop it with "
            "blacklist_telemetry_file.",
        ),
    ],
    **declared(
        "out-of-order-telemetry",
        restore=RESTORE_OPERATOR_JOBS,
        reads=["telemetry"],
        writes=[
            "telemetry_file_state",
            "telemetry_ingest_events",
            "telemetry_blacklist",
            "telemetry_quarantine",
        ],
    ),
)
def telemetry_raw(
    context: dg.AssetExecutionContext,
    lakehouse: Lakehouse,
    landing: LandingZone,
    telemetry_settings: TelemetrySettings,
) -> dg.MaterializeResult:
    """Every ingested row of a tool's report files (`telemetry/<subject>/*.csv`), with its
    source file and line. New files are ingested whole, appended files from just before
    their previous end, rewritten files replace their rows; broken files are retried
    and then marked failed, files far behind the subject's newest data are quarantined.
    Control tables: telemetry_file_state, telemetry_ingest_events, telemetry_quarantine,
    telemetry_blacklist."""
    subject = context.partition_key
    with (
        Progress(context.log, f"telemetry_raw {subject}").phase("ingest") as ingested,
        redo_if_stale(context),
    ):
        report = SubjectIngest(
            lakehouse=lakehouse,
            landing=landing,
            settings=telemetry_settings,
            subject_key=subject,
            run_id=context.run.run_id,
            commit_metadata=_metadata(context),
            now=dt.datetime.now(dt.UTC),
            spark=telemetry_settings.spark_lakehouse(lakehouse),
        ).run()
        ingested.update(
            files_applied=len(report.applied),
            files_unchanged=report.unchanged,
            rows_written=report.rows_written,
            raw_version=report.raw_version,
        )
    open_quarantine = report.open_quarantine
    failed = sorted(
        f"{s.source}: {s.last_error}" for s in report.states.values() if s.status == "failed"
    )
    # What this run refused or set aside, where the user reads the run: its log.
    this_run = metadata_lists(report)
    for kind, entries in this_run.items():
        for entry in entries:
            context.log.warning(f"{kind.removesuffix('_files').replace('_', ' ')} file: {entry}")
    quarantined = [f"{q.source}: {q.reason}" for q in open_quarantine]
    return dg.MaterializeResult(
        metadata={
            "table_name": control.RAW,
            "table_uri": dg.MetadataValue.path(lakehouse.uri(control.RAW)),
            "delta_version": dg.MetadataValue.int(
                report.raw_version
                if report.raw_version is not None
                else lakehouse.version(control.RAW) or 0
            ),
            "partition": subject,
            "files_applied": dg.MetadataValue.int(len(report.applied)),
            "changes": dg.MetadataValue.json(report.kinds),
            "rows_written": dg.MetadataValue.int(report.rows_written),
            "files_unchanged": dg.MetadataValue.int(report.unchanged),
            "blacklisted_rows_removed": dg.MetadataValue.int(sum(report.removed.values())),
            **{name: dg.MetadataValue.json(value) for name, value in this_run.items()},
        },
        check_results=[
            dg.AssetCheckResult(
                check_name="no_failed_files",
                passed=not failed,
                severity=dg.AssetCheckSeverity.WARN,
                metadata={
                    "failed_files": dg.MetadataValue.json(failed),
                    "files": _markdown_list(failed),
                },
            ),
            dg.AssetCheckResult(
                check_name="no_quarantined_files",
                passed=not open_quarantine,
                severity=dg.AssetCheckSeverity.WARN,
                metadata={
                    "quarantined_files": dg.MetadataValue.json(quarantined),
                    "files": _markdown_list(quarantined),
                },
            ),
        ],
    )


Reconcile = Callable[
    [Lakehouse, str, Callable[..., dict[str, Any]], Callable[[str], None], Lakehouse | None],
    Reconciled,
]


def _reconciled(
    context: dg.AssetExecutionContext,
    lakehouse: Lakehouse,
    settings: TelemetrySettings,
    table: str,
    reconcile: Reconcile,
) -> Reconciled:
    """Bring the subject's rows of the derived `table` up to the raw table, as a phase of
    the run's progress (redone from the start if another run committed meanwhile), on
    Spark or in this process as the settings choose."""
    with (
        Progress(context.log, f"{table} {context.partition_key}").phase("reconcile") as phase,
        redo_if_stale(context),
    ):
        result = reconcile(
            lakehouse,
            context.partition_key,
            _metadata(context),
            context.log.warning,
            settings.spark_lakehouse(lakehouse),
        )
        phase.update(result.progress())
    return result


def _derived_result(
    lakehouse: Lakehouse,
    table: str,
    result: Reconciled,
    subject: str,
    shown: dict[str, dg.MetadataValue] | None = None,
    relation: dict[str, Any] | None = None,
) -> dg.MaterializeResult:
    """`relation`: what names the relation users read, over what the commit says."""
    extra = {
        **(shown or {}),
        "regime": result.regime,
        "raw_version_reflected": dg.MetadataValue.int(result.raw_version or 0),
        "rows_recomputed": dg.MetadataValue.int(result.rows_recomputed),
        "rows_replaced": dg.MetadataValue.int(result.rows_replaced),
        "frontier": result.frontier.isoformat() if result.frontier else "",
        "hours_recomputed": dg.MetadataValue.int(result.hours_recomputed),
    }
    if result.note:
        extra["note"] = result.note
    if result.commit is None:
        metadata = {"table_name": table, "partition": subject, **extra}
    else:
        metadata = materialization_metadata(
            lakehouse, result.commit, partition_key=subject, extra=extra
        )
    return dg.MaterializeResult(metadata={**metadata, **(relation or {})})


@dg.asset(
    partitions_def=subjects,
    group_name=GROUP,
    kinds={"delta"},
    deps=[telemetry_raw],
    **declared("out-of-order-telemetry", restore=RESTORE_OPERATOR_JOBS),
)
def telemetry_running_totals(
    context: dg.AssetExecutionContext, lakehouse: Lakehouse, telemetry_settings: TelemetrySettings
) -> dg.MaterializeResult:
    """Cumulative in-spec, out-of-spec and mispick counts of each raw row since the start
    of the subject's history (ordered by ts, source, line). Read it by name in SQL
    (`lakehouse.telemetry_running_totals`, a view) or with `control.running_totals`: it
    is stored as in-hour sums (telemetry_totals_within_hour) plus the totals before each
    hour (telemetry_totals_hour_start), so late data recomputes the rows of the hours it
    touches and one row per later hour, never the rows after it. Records the raw version
    it reflects."""
    subject = context.partition_key
    result = _reconciled(context, lakehouse, telemetry_settings, control.TOTALS, reconcile_totals)
    lakehouse.expose(control.RUNNING_TOTALS_VIEW)
    shown = {
        "hour_starts_rewritten": dg.MetadataValue.int(result.hour_starts_rewritten),
        "stored_in": dg.MetadataValue.json([control.WITHIN_HOUR, control.HOUR_START]),
        "latest_rows": _latest_rows(lakehouse, subject),
    }
    view = _view_metadata(lakehouse, result, subject)
    return _derived_result(lakehouse, control.TOTALS, result, subject, shown, view)


def _view_metadata(lakehouse: Lakehouse, result: Reconciled, subject: str) -> dict[str, Any]:
    """The metadata of the relation users read (the view), over that of the last commit
    (the hour starts'): its name, columns and rows, and what each table's commit did."""
    rows_uri = lakehouse.uri(control.WITHIN_HOUR)
    view: dict[str, Any] = {
        TABLE_NAME: control.TOTALS,
        "table_uri": dg.MetadataValue.path(rows_uri),
        "dagster/uri": rows_uri,
        "dagster/table_name": control.TOTALS,
        "dagster/column_schema": dg.TableSchema(
            columns=[
                dg.TableColumn(
                    f.name, str(f.type), description=column_description(control.TOTALS, f.name)
                )
                for f in control.TOTALS_SCHEMA
            ]
        ),
    }
    if result.commit is not None:
        view["summary"] = _totals_summary(result, subject)
    if result.rows_commit is not None:
        view["within_hour_version"] = dg.MetadataValue.int(result.rows_commit.version)
        for metric, value in result.rows_commit.metrics.items():
            view[metric] = dg.MetadataValue.int(value)
    facts = lakehouse.table_facts(control.WITHIN_HOUR)
    if facts is not None and facts.rows is not None:
        view["dagster/row_count"] = dg.MetadataValue.int(facts.rows)  # the view's rows
    return view


def _totals_summary(result: Reconciled, subject: str) -> dg.MetadataValue:
    """What a running totals run did to each of its two tables."""
    parts = []
    if result.rows_commit is not None:
        parts.append(
            f"{result.rows_recomputed:,} rows recomputed ({result.rows_replaced:,} replaced) "
            f"in `{control.WITHIN_HOUR}`, version {result.rows_commit.version}"
        )
    if result.commit is not None and result.commit is not result.rows_commit:
        parts.append(
            f"{result.hour_starts_rewritten:,} hour starts rewritten in "
            f"`{control.HOUR_START}`, version {result.commit.version}"
        )
    return dg.MetadataValue.md(
        f"**{result.regime}** on partition `{subject}` of `{control.TOTALS}` (a view over "
        f"two tables):  \n" + "; ".join(parts) + "."
    )


@dg.asset(
    partitions_def=subjects,
    group_name=GROUP,
    kinds={"delta"},
    # After the running totals: their hour starts hold each hour's sums, so the dirty
    # hours are read from there (one row an hour) rather than summed from raw rows again.
    deps=[telemetry_raw, telemetry_running_totals],
    **declared("out-of-order-telemetry", restore=RESTORE_OPERATOR_JOBS),
)
def telemetry_hourly(
    context: dg.AssetExecutionContext, lakehouse: Lakehouse, telemetry_settings: TelemetrySettings
) -> dg.MaterializeResult:
    """Per subject and UTC hour: summed counts and rows. Only hours touched by changed
    files are recomputed, from the running totals' hour starts when they are current."""
    result = _reconciled(context, lakehouse, telemetry_settings, control.HOURLY, reconcile_hourly)
    chart = (
        {"hourly_chart": hourly_chart(context.partition_key, result.written)}
        if result.written is not None
        else {}
    )
    return _derived_result(lakehouse, control.HOURLY, result, context.partition_key, chart)


LATEST_ROWS = 5


def _latest_rows(lakehouse: Lakehouse, subject: str) -> dg.MetadataValue:
    """The subject's last running totals, read through the view as every reader does."""
    last_hour = control.last_hour(lakehouse, subject)
    if last_hour is None:
        return dg.MetadataValue.md("no rows")
    rows = control.running_totals(lakehouse, subject, since=last_hour).to_pylist()
    lines = ["| ts | source | line | cum in spec | cum out of spec | cum mispicks |"]
    lines.append("|---|---|---:|---:|---:|---:|")
    for r in rows[-LATEST_ROWS:]:
        lines.append(
            f"| {r['ts']:%Y-%m-%d %H:%M:%S} | `{r['source']}` | {r['line']} | "
            f"{r['cum_in_spec']:,} | {r['cum_out_of_spec']:,} | {r['cum_mispicks']:,} |"
        )
    return dg.MetadataValue.md("\n".join(lines))


CHART_HOURS = 24
CHART_WIDTH = 30


def hourly_chart(subject: str, hours: pa.Table) -> dg.MetadataValue:
    """The hours a run recomputed (the newest 24 of them) as a markdown bar chart of
    in-spec (█) and out-of-spec (░) counts: the data itself, on the materialization."""
    rows = sorted(hours.to_pylist(), key=lambda r: r["hour"])[-CHART_HOURS:]
    if not rows:
        return dg.MetadataValue.md("no hours recomputed")
    widest = max(r["in_spec"] + r["out_of_spec"] for r in rows) or 1
    lines = [
        f"Subject `{subject}`, hours recomputed by this run (UTC; █ in spec, ░ out of spec)",
        "",
        "| hour | in spec | out of spec | |",
        "|---|---:|---:|---|",
    ]
    for r in rows:
        inside = round(CHART_WIDTH * r["in_spec"] / widest)
        outside = round(CHART_WIDTH * r["out_of_spec"] / widest)
        lines.append(
            f"| {r['hour']:%Y-%m-%d %H:00} | {r['in_spec']:,} | {r['out_of_spec']:,} | "
            f"`{'█' * inside}{'░' * outside}` |"
        )
    return dg.MetadataValue.md("\n".join(lines))


telemetry_job = dg.define_asset_job(
    "telemetry_job",
    selection=[telemetry_raw, telemetry_running_totals, telemetry_hourly],
    description="All pending work of one subject: ingest, running totals, hourly rollups.",
    # Launched from the launchpad too, a run carries its subject tag, so the instance's
    # one-run-per-subject limit (platform/dagster.yaml) holds for it as for sensor runs.
    config=dg.PartitionedConfig(
        partitions_def=subjects,
        run_config_for_partition_key_fn=lambda key: {},
        tags_for_partition_key_fn=lambda key: {SUBJECT_TAG: key},
    ),
)


def _markdown_list(entries: list[str]) -> dg.MetadataValue:
    """Entries shown as they are in the check's view (JSON hides them behind a click)."""
    return dg.MetadataValue.md("\n".join(f"- `{e}`" for e in entries) or "none")
