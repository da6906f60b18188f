"""Database patterns: idempotent inserts that verify what they skip (`payments`), Keyed
Idempotency (`user_sessions`), and the Transactional Writer other families write with."""

from assets.database.payments import PaymentsSettings, payments
from assets.database.user_sessions import SessionSettings, user_sessions

assets = [payments, user_sessions]

__all__ = ["PaymentsSettings", "SessionSettings", "assets", "payments", "user_sessions"]
