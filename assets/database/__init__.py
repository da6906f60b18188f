"""Database patterns: idempotent inserts that verify what they skip (`payments`) and Keyed
Idempotency (`user_sessions`). The Transactional Writer, which every family writes with,
is assets/transactional_writer.py."""

from assets.database.payments import PaymentsSettings, payments, payments_job
from assets.database.user_sessions import SessionSettings, user_sessions, user_sessions_job

__all__ = [
    "PaymentsSettings",
    "SessionSettings",
    "payments",
    "payments_job",
    "user_sessions",
    "user_sessions_job",
]
