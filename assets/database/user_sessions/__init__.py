"""Keyed Idempotency: `user_sessions`, sessions per user whose ids never change (the
pattern: asset.py).

- `asset.py`: the asset and a run's build of its days.
- `changes.py`: what changed of the days since they were last built, and whose sessions.
- `users.py`: those users, by name or every user of some days; how each is read and held.
- `rebuild.py`: the sessions the changes can touch, rebuilt, and the ids they retire.
- `sessionize.py`: sessions cut from visits (a pure transformation).
- `publish.py`: the retired ids, one MERGE, the days' build marks.
- `tables.py`: the tables' names and their one schema each.
"""

from assets.database.user_sessions.asset import SessionSettings, user_sessions, user_sessions_job
from assets.database.user_sessions.changes import changed_users
from assets.database.user_sessions.publish import publish
from assets.database.user_sessions.rebuild import rebuild
from assets.database.user_sessions.sessionize import sessionize
from assets.database.user_sessions.tables import (
    BUILDS,
    RETIRED,
    USER_SESSIONS,
)

__all__ = [
    "BUILDS",
    "RETIRED",
    "USER_SESSIONS",
    "SessionSettings",
    "changed_users",
    "publish",
    "rebuild",
    "sessionize",
    "user_sessions",
    "user_sessions_job",
]
