"""Cursors of the file ledger, and how their state reaches the disk.

Reading: positions are taken (and ``read_position`` moved) when the read is issued; the entries
come from the factory's cache, or from disk on a worker thread (see ``FileManagedLedger._fetch``).

Persisting (durable cursors only; readers' non-durable cursors never touch the disk): rate-limited
by ``cursor_persistence.CursorPersistence`` (the first change after a quiet interval at once, then at
most one write per ``persist_interval_s``, Pulsar's managedLedgerDefaultMarkDeleteRateLimit = 1/s;
``save_now``, a reset and a flush skip the limit); each write replaces the cursor's file atomically
on the writer thread.

The crash window: acknowledgements made since the last completed write (at most
``persist_interval_s`` of them) are lost by a crash and those entries are delivered again
(at-least-once). A cursor state never points past stored
data: a mark-delete only moves over confirmed (synced) entries.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from managed_ledger.cursor_persistence import CursorPersistence
from managed_ledger.stored import StoredCursor

if TYPE_CHECKING:
    from managed_ledger.file_ledger import FileManagedLedger


class FileCursor(StoredCursor):
    _ledger: FileManagedLedger

    @property
    def ledger(self) -> FileManagedLedger:
        return self._ledger


__all__ = ["CursorPersistence", "FileCursor"]
