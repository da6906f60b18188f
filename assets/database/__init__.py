"""Database patterns: idempotent inserts that verify what they skip (`payments`) and Keyed
Idempotency (`user_sessions`). The Transactional Writer, which every family writes with,
is assets/transactional_writer.py."""

from assets.database.payments import PaymentsSettings, payments
from assets.database.user_sessions import SessionSettings, user_sessions

assets = [payments, user_sessions]

__all__ = ["PaymentsSettings", "SessionSettings", "assets", "payments", "user_sessions"]
