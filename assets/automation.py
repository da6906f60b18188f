"""When a derived asset brings itself up to date: Dagster's declarative automation.

A derived asset carries an automation condition, and the platform's automation sensor
(sensors/automation.py) evaluates it every tick in the daemon and launches what it asks
for. A range of partitions asked for at once goes out as a backfill, so the asset's
single-run backfill policy builds it in one run.

`after_upstream` is Dagster's `eager()` with three differences, each of which would leave
a table stale:
- It looks at every partition, not only the latest time window: here an upstream day
  changes when an old day is backfilled or a late file lands, and its downstream day must
  follow, whatever its age. `eager()` would rebuild today alone.
- An upstream change is forgotten only by a request made before it. `eager()` forgets it
  also when the asset materializes, and on the tick after any request: a late file that
  lands while the downstream day is being built (from the files before it) would never
  reach that day. The change's time is its materialization's, which Dagster carries
  through `any_deps_match(newly_updated())` (not through `any_deps_updated()`, whose
  `&` drops it), and the request's is its tick's.
- What was never built, though its upstream exists, is built once: on the sensor's first
  tick on a lakehouse that already holds upstream days (automation turned on, or the
  sensor started after its upstream ran), and when a day of it goes missing. Once: a
  build that fails is retried by the daemon's run retries, then by the next clause.

And one addition: a partition whose latest run failed is asked for again at each
`ASK_AGAIN_CRON` tick (every 5 minutes) until a run of it lands (Dagster's
`execution_failed()` and `cron_tick_passed()`), so work that failed on something
transient (a killed run, a lost Spark) after the daemon's retries does not wait for its
upstream to change again, or for a person. The derived assets read tables that were
checked on their way in, and carry no blocking checks of their own, so their failures are
never the data's own: such a failure costs one run every 5 minutes, not a frozen table.

The price of the second: a run that builds an upstream day and its downstream day
together is followed by one more build of the downstream day (its runs are idempotent).
"""

from __future__ import annotations

import dagster as dg

AC = dg.AutomationCondition

ASK_AGAIN_CRON = "*/5 * * * *"
"""When a partition whose latest run failed is asked for again."""


def after_upstream(*, every_upstream_partition: bool = True) -> dg.AutomationCondition:
    """A partition is requested once after any partition it reads changed, once when
    it is missing while something it reads exists, and every `ASK_AGAIN_CRON` tick while
    its latest run failed; when none of what it reads is being built or failed a blocking
    check, and it is not being built itself. With `every_upstream_partition`, it also
    waits until every partition it reads exists; an asset that reads several days of a
    calendar (a week of them, or all of them for a snapshot of "what there is now") says
    False, or the days never delivered (a day without visits has no files) would hold it
    back forever."""
    changed = (
        AC.any_deps_match(AC.newly_updated())
        .since(AC.newly_requested())
        .with_label("upstream changed since last requested")
    )
    never_built = (
        (AC.missing() & AC.any_deps_match(~AC.missing()))
        .newly_true()
        .since(AC.newly_requested())
        .with_label("never built, upstream there")
    )
    failed = (
        AC.execution_failed() & AC.cron_tick_passed(ASK_AGAIN_CRON).since(AC.newly_requested())
    ).with_label("its latest run failed, asked again every 5 minutes")
    condition = (
        (changed | never_built | failed)
        & ~AC.any_deps_in_progress()
        & AC.all_deps_blocking_checks_passed()
        & ~AC.in_progress()
    )
    if every_upstream_partition:
        condition = condition & ~AC.any_deps_missing()
    return condition.with_label("after upstream")
