"""The lakehouse port: Delta tables behind one small interface, two engines."""

from resources.lakehouse.port import (
    AppTransaction,
    ChangesUnavailableError,
    Column,
    CommitConflictError,
    CommitResult,
    HistoryEntry,
    LakehouseError,
    StaleWriteError,
    Stream,
    TableNotFoundError,
    VersionUnavailableError,
    WhenMatchedDelete,
    WhenMatchedUpdate,
    WhenNotMatchedInsert,
    spooled,
)
from resources.lakehouse.resource import Lakehouse

__all__ = [
    "AppTransaction",
    "Column",
    "CommitConflictError",
    "CommitResult",
    "HistoryEntry",
    "Lakehouse",
    "LakehouseError",
    "StaleWriteError",
    "Stream",
    "TableNotFoundError",
    "VersionUnavailableError",
    "ChangesUnavailableError",
    "WhenMatchedDelete",
    "WhenMatchedUpdate",
    "WhenNotMatchedInsert",
    "spooled",
]
