"""Run tags and retry policies shared by families of jobs."""

import dagster as dg

IN_ORDER = "updates/in_order"
"""For jobs whose days build on the table the days before them left: their runs go one at
a time, in the order they were queued (`platform/dagster.yaml` limits the tag to one run
per value)."""

NO_RETRY_ON_REFUSAL = {"dagster/retry_on_asset_or_op_failure": "false"}
"""For jobs whose step failures are refusals (bad input, a configuration naming nothing
restorable): they fail the same way every time, so the instance's run retries are kept
for runs whose process died (run monitoring), not spent on step failures."""

TRANSIENT_RETRIES = dg.RetryPolicy(
    max_retries=3, delay=2, backoff=dg.Backoff.EXPONENTIAL, jitter=dg.Jitter.PLUS_MINUS
)
"""For the steps of those jobs: a failure that is not a refusal (the long-lived Spark died,
the store did not answer) is retried in the run, after about 2, 6 and 14 s. A refusal
raises `dg.Failure(allow_retries=False)` (`SourceDataError` is one), which fails the step
at once with its message: the same input would be refused again."""
