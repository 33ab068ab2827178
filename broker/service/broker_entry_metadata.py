"""Broker entry metadata (PIP-70): what the broker prepends to each stored entry when
``brokerEntryMetadataInterceptors`` names Pulsar's interceptors.

- ``AppendBrokerTimestampMetadataInterceptor``: broker_timestamp, the broker's ms clock at add;
- ``AppendIndexMetadataInterceptor``: index, the index of the entry's last message, counting
  messages (a batch's num_messages_in_batch) from 0 per topic; recovered when the topic loads
  from the newest stored entry that carries it.

One ``EntryStamper`` per persistent topic, None when no interceptor is configured (the publish
path then does nothing more). The bytes are laid out by broker/protocol/entry.py.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from broker.protocol.entry import entry_meta, peek_broker_entry_metadata, with_broker_entry_metadata
from broker.vocabulary import INDEX_INTERCEPTOR, TIMESTAMP_INTERCEPTOR
from managed_ledger import ManagedLedger

# Entries looked at (newest first) for the last index: entries the broker writes itself
# (markers) may carry none.
_RECOVERY_SCAN = 64


class EntryStamper:
    def __init__(self, interceptors: Sequence[str]) -> None:
        self.timestamp = TIMESTAMP_INTERCEPTOR in interceptors
        self.indexed = INDEX_INTERCEPTOR in interceptors
        # Index of the last message stored (-1: none yet).
        self.last_index = -1

    @classmethod
    def configured(cls, interceptors: Sequence[str]) -> EntryStamper | None:
        return cls(interceptors) if interceptors else None

    def stamp(self, entries: list[bytes], num_messages: int) -> list[bytes]:
        """``entries`` with BrokerEntryMetadata prepended; ``num_messages``: their messages in all."""
        ts = int(time.time() * 1000) if self.timestamp else None
        if not self.indexed:
            return [with_broker_entry_metadata(e, ts, None) for e in entries]
        out = []
        index = self.last_index
        for e in entries:
            index += num_messages if len(entries) == 1 else entry_meta(e).num_messages
            out.append(with_broker_entry_metadata(e, ts, index))
        self.last_index = index
        return out

    async def recover(self, ledger: ManagedLedger) -> None:
        """The index continues from the newest stored entry that has one."""
        if not self.indexed:
            return
        pos = ledger.last_confirmed_entry
        first = ledger.first_position
        for _ in range(_RECOVERY_SCAN):
            if pos.entry_id < 0 or pos < first:
                return
            bem = peek_broker_entry_metadata((await ledger.read_entry(pos)).data)
            if bem is not None and bem.HasField("index"):
                self.last_index = bem.index
                return
            pos = ledger.previous_position(pos)
