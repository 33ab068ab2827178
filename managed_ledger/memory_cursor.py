"""Cursors of the in-memory managed ledger: entries are fetched straight from the ledger's lists.

The acknowledgement logic lives in ``cursor_base`` (shared with the file implementation).
``CursorRecord`` is re-exported here for compatibility.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from managed_ledger.api import InlineRead, ReadCallback
from managed_ledger.cursor_base import BaseCursor, CursorRecord
from managed_ledger.position import Position

if TYPE_CHECKING:
    from managed_ledger.memory import MemoryManagedLedger

__all__ = ["CursorRecord", "MemoryCursor"]


class MemoryCursor(BaseCursor):
    _ledger: MemoryManagedLedger

    @property
    def ledger(self) -> MemoryManagedLedger:
        return self._ledger

    def _deliver(self, positions: list[Position], callback: ReadCallback, read_from: Position | None) -> None:
        entry = self._ledger._entry
        self._ledger.add_stats.count_read(len(positions), False)  # memory: everything is "cached"
        self._completer.complete(partial(callback, [entry(p) for p in positions], None))

    def _read_inline(self, positions: list[Position], inline: InlineRead) -> bool:
        completer = self._completer
        if not completer.inline_allowed():
            return False
        entry = self._ledger._entry
        self._ledger.add_stats.count_read(len(positions), False)
        completer.run_inline(inline, [entry(p) for p in positions])
        return True

    async def flush(self) -> None:
        self._check_usable()  # memory: every change is as durable as it will ever be
