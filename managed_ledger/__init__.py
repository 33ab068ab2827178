"""Storage for the broker: Apache Pulsar's ManagedLedger / ManagedCursor concepts.

``api`` is the interface the service layer programs against; ``memory`` implements it in
process memory, ``file`` in segment files with group commit (the broker's default). Every
implementation must pass the contract suite in ``tests/managed_ledger``.
"""

from managed_ledger.api import (
    AddCallback,
    CursorClosedError,
    CursorNotFoundError,
    EntryNotFoundError,
    InitialPosition,
    InvalidPositionError,
    LedgerClosedError,
    LedgerFencedError,
    LedgerInfo,
    LedgerNotFoundError,
    ManagedCursor,
    ManagedLedger,
    ManagedLedgerConfig,
    ManagedLedgerError,
    ManagedLedgerFactory,
    NoMoreEntriesError,
    OffloadPolicy,
    ReadCallback,
    StorageUnavailableError,
)
from managed_ledger.entry import Entry
from managed_ledger.file import FileManagedLedger, FileManagedLedgerFactory
from managed_ledger.memory import MemoryManagedLedger, MemoryManagedLedgerFactory
from managed_ledger.memory_cursor import MemoryCursor
from managed_ledger.position import Position
from managed_ledger.range_set import PositionRangeSet

__all__ = [
    "AddCallback",
    "CursorClosedError",
    "CursorNotFoundError",
    "Entry",
    "EntryNotFoundError",
    "FileManagedLedger",
    "FileManagedLedgerFactory",
    "InitialPosition",
    "InvalidPositionError",
    "LedgerClosedError",
    "LedgerFencedError",
    "LedgerInfo",
    "LedgerNotFoundError",
    "ManagedCursor",
    "ManagedLedger",
    "ManagedLedgerConfig",
    "ManagedLedgerError",
    "ManagedLedgerFactory",
    "MemoryCursor",
    "MemoryManagedLedger",
    "MemoryManagedLedgerFactory",
    "NoMoreEntriesError",
    "OffloadPolicy",
    "Position",
    "PositionRangeSet",
    "ReadCallback",
    "StorageUnavailableError",
]
