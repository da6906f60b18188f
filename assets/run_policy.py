"""Run tags and retry policies shared by families of jobs."""

from collections.abc import Mapping
from typing import Any

import dagster as dg

IN_ORDER = "updates/in_order"
"""For jobs whose days build on the table the days before them left: their runs go one at
a time, in the order they were queued (`platform/dagster.yaml` limits the tag to one run
per value)."""

NO_RETRY_ON_REFUSAL = {"dagster/retry_on_asset_or_op_failure": "false"}
"""For jobs whose step failures are refusals (bad input, a configuration naming nothing
restorable): they fail the same way every time, so the instance's run retries are kept
for runs whose process died (`dead_runs`), not spent on step failures."""

AHEAD_IN_QUEUE = {"dagster/priority": "1"}
"""For jobs whose runs each end the wait of many landed files (a tick's event batches):
when a tick's runs queue together, these leave the queue first (Dagster's run coordinator
takes higher priorities first, then queue order). A file's wait from landing to its
commit is what the platform is held to; a run of a dozen batches ends a dozen waits in
the time the others end one or two each, and delays them by one run at most."""

BEHIND_IN_QUEUE = {"dagster/priority": "-1"}
"""For runs that bring derived tables up to date (the automation sensor's): when they
queue together with runs that commit landed files, the landed files go first. A derived
day follows its upstream one run later at most; a landed file's wait is what the
platform is held to (landed to committed within 15 s of a sensor tick)."""

REFUSED = "refused"
"""The metadata key that marks a step failure as the data's own (`Refusal`)."""


class Refusal(dg.Failure):
    """A step failure that is the data's own (bad input, a failed audit, a batch not
    landed): it fails the step at once, with `description`, and its work is never asked
    for again (`sensors/requested_again.py`, which reads the `REFUSED` mark in the
    failure's metadata); the same input would be refused again."""

    def __init__(self, description: str, metadata: Mapping[str, Any] | None = None) -> None:
        marked = {**(metadata or {}), REFUSED: True}
        super().__init__(description, metadata=marked, allow_retries=False)


TRANSIENT_RETRIES = dg.RetryPolicy(
    max_retries=3, delay=2, backoff=dg.Backoff.EXPONENTIAL, jitter=dg.Jitter.PLUS_MINUS
)
"""For the steps of those jobs: a failure that is not a refusal (the long-lived Spark died,
the store did not answer) is retried in the run, after about 2, 6 and 14 s. A `Refusal`
(`SourceDataError` is one) fails the step at once with its message."""
