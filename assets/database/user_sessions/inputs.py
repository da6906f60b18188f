"""The versions of its inputs a build of `user_sessions` reads: `visits_daily` and
`visit_first_seen`, each pinned once when the build starts.

Every read of a build (the change detection's counts and first-seen records, the whole
days, every widening of the rebuild) is at these versions, so a visits run that commits
while a build runs is seen by the next build whole, never by part of this one. The
versions are recorded in the materialization's metadata: what a day's sessions were
built from.
"""

from dataclasses import dataclass
from typing import Any

import dagster as dg

from assets.overwriting.data_overwrite import VISITS_DAILY
from assets.overwriting.visit_first_seen import FIRST_SEEN
from resources import Lakehouse


@dataclass(frozen=True)
class InputVersions:
    visits: int
    """The version of `visits_daily` read."""
    first_seen: int
    """The version of `visit_first_seen` read."""

    @classmethod
    def current(cls, lakehouse: Lakehouse) -> "InputVersions":
        """The latest versions. `visits_daily` first: a visits run records first-seen
        times before it writes the visits, so the first-seen version taken after it holds
        a record for every visit of the visits version."""
        visits = lakehouse.version(VISITS_DAILY)
        first_seen = lakehouse.version(FIRST_SEEN)
        if visits is None or first_seen is None:
            pairs = ((VISITS_DAILY, visits), (FIRST_SEEN, first_seen))
            missing = [table for table, found in pairs if found is None]
            raise dg.Failure(
                f"no table {' or '.join(missing)} yet: materialize visits_daily (which writes "
                "both) for days with visits first"
            )
        return cls(visits, first_seen)

    def metadata(self) -> dict[str, Any]:
        return {
            f"{VISITS_DAILY}_version": dg.MetadataValue.int(self.visits),
            f"{FIRST_SEEN}_version": dg.MetadataValue.int(self.first_seen),
        }
