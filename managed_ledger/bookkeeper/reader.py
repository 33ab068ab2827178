"""Reading a ledger up to its last add confirmed."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from managed_ledger.bookkeeper.digest import Digester
from managed_ledger.bookkeeper.errors import EntryReadError
from managed_ledger.bookkeeper.metadata import LedgerMetadata

if TYPE_CHECKING:
    from managed_ledger.bookkeeper.client import BookKeeper


class LedgerReader:
    """Reads entries up to `last_add_confirmed` (the last entry of a closed ledger)."""

    def __init__(self, bk: BookKeeper, ledger_id: int, metadata: LedgerMetadata, password: bytes,
                 last_add_confirmed: int) -> None:
        self.bk = bk
        self.ledger_id = ledger_id
        self.metadata = metadata
        self.last_add_confirmed = last_add_confirmed
        self._digester = Digester(metadata.digest_type, password)

    @property
    def length(self) -> int:
        return self.metadata.length

    async def read(self, first: int, last: int) -> list[bytes]:
        """Payloads of entries first..last (inclusive), which must be <= the LAC."""
        if first < 0 or last > self.last_add_confirmed or first > last:
            raise EntryReadError(f"entries {first}..{last} are outside 0..{self.last_add_confirmed}")
        frames = await asyncio.gather(*(self.bk.read_entry(self.ledger_id, self.metadata, self._digester, e)
                                        for e in range(first, last + 1)))
        return [f.payload for f in frames]
