"""Positions of entries in a managed ledger."""

from __future__ import annotations

from typing import NamedTuple


class Position(NamedTuple):
    """Where an entry lives: (ledger id, entry id inside that ledger).

    Tuple ordering is the log order: every entry of ledger 3 comes before every entry of
    ledger 4. Entry id -1 means "before the first entry of this ledger" (Pulsar uses it for
    mark-delete positions such as "3:-1", i.e. nothing of ledger 3 consumed yet).
    """

    ledger_id: int
    entry_id: int

    def __str__(self) -> str:
        # Pulsar's PositionImpl.toString: "ledgerId:entryId", e.g. "3:-1"
        return f"{self.ledger_id}:{self.entry_id}"
