"""Run tags shared by families of jobs."""

IN_ORDER = "updates/in_order"
"""For jobs whose days build on the table the days before them left: their runs go one at
a time, in the order they were queued (`platform/dagster.yaml` limits the tag to one run
per value)."""

NO_RETRY_ON_REFUSAL = {"dagster/retry_on_asset_or_op_failure": "false"}
"""For jobs whose step failures are refusals (bad input, a configuration naming nothing
restorable): they fail the same way every time, so the instance's run retries are kept
for runs whose process died (run monitoring), not spent on step failures."""
