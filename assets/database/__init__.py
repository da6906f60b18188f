"""Database patterns: idempotent inserts that verify what they skip (`payments`) and Keyed
Idempotency (`user_sessions`). The Transactional Writer, which every family writes with,
is assets/transactional_writer.py."""

import dagster as dg

from assets.database.payments import PaymentsSettings, payments
from assets.database.user_sessions import SessionSettings, user_sessions

payments_job = dg.define_asset_job(
    "payments_job",
    selection=[payments],
    description="Insert days of payments once per idempotency key (a replay must match).",
)
user_sessions_job = dg.define_asset_job(
    "user_sessions_job",
    selection=[user_sessions],
    description="Build days of user_sessions from visits_daily (session ids never change).",
)

assets = [payments, user_sessions]
jobs = [payments_job, user_sessions_job]

__all__ = [
    "PaymentsSettings",
    "SessionSettings",
    "assets",
    "jobs",
    "payments",
    "payments_job",
    "user_sessions",
    "user_sessions_job",
]
