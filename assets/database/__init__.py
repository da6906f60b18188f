"""Database patterns: idempotent inserts that verify what they skip (`payments`)."""

from assets.database.payments import PaymentsSettings, payments

assets = [payments]

__all__ = ["PaymentsSettings", "assets", "payments"]
