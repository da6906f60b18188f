"""Per-deployment telemetry settings, one resource (`telemetry`), editable in the launchpad."""

import datetime as dt
from typing import Literal

import dagster as dg

from resources import Lakehouse

LANDING_PREFIX = "telemetry"
REPORT_SUFFIX = ".csv"


class TelemetrySettings(dg.ConfigurableResource):
    """How subjects are found in file paths and how late or broken files are treated.

    Deployments differ in where a report's subject (its tool) is written: the folder
    under `telemetry/` (default), a pattern on the file name, or a header line such as
    `# subject: Tool07` before the CSV header.
    """

    subject_rule: Literal["folder", "file_name", "header"] = "folder"
    file_name_pattern: str = r"^(?P<subject>.+?)_"
    """For `file_name`: a regular expression whose group `subject` is the subject key."""
    header_prefix: str = "# subject:"
    """For `header`: the first line starts with this; the rest of it is the subject key."""
    back_correction_window_seconds: float = 5.0
    """An appended file re-ingests its rows from this long before its previous end."""
    lateness_horizon_hours: float = 7 * 24
    """A file whose data ends this long before the subject's newest data is quarantined."""
    max_future_skew_hours: float = 24
    """A row whose `ts` is more than this after the time of ingestion is a bad row (a
    clock set to 2999 must not make every later file look late)."""
    max_parse_attempts: int = 3
    """A file that fails to parse is retried this many times in all, then marked failed."""
    retry_backoff_seconds: float = 60.0
    """Wait before the first retry; doubles with every further attempt."""
    compute: Literal["auto", "embedded", "spark"] = "auto"
    """Where a subject's rows are parsed and its running totals computed (TELEMETRY_COMPUTE).
    `embedded`: in the run's process, streamed in bounded chunks, starting no Spark;
    `spark`: on the deployment's Spark (the long-lived one, or a cluster), whose executors
    read the files and write Delta; `auto`: Spark when the deployment already does its
    work there (a cluster master, or the delta-spark engine), else embedded. Both give the
    same tables."""

    @property
    def back_correction_window(self) -> dt.timedelta:
        return dt.timedelta(seconds=self.back_correction_window_seconds)

    @property
    def max_future_skew(self) -> dt.timedelta:
        return dt.timedelta(hours=self.max_future_skew_hours)

    @property
    def lateness_horizon(self) -> dt.timedelta:
        return dt.timedelta(hours=self.lateness_horizon_hours)

    def retry_delay(self, attempts: int) -> dt.timedelta:
        """How long to wait after the `attempts`-th failed attempt."""
        return dt.timedelta(seconds=self.retry_backoff_seconds * 2 ** max(attempts - 1, 0))

    def spark_lakehouse(self, lakehouse: Lakehouse) -> Lakehouse | None:
        """`lakehouse` through delta-spark when telemetry computes on Spark, else None."""
        on_spark = self.compute == "spark" or (
            self.compute == "auto"
            and (lakehouse.engine == "delta-spark" or lakehouse.spark.is_cluster)
        )
        return lakehouse.on_spark() if on_spark else None
