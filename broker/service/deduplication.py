"""Broker deduplication state that survives restarts (Pulsar's MessageDeduplication design).

The state is, per producer name, the highest sequence id persisted on the topic. It lives in
memory (see Producer.publish) and is snapshotted into the properties of a durable cursor named
``pulsar.dedup``, with that cursor's mark-delete moved to the last entry covered: every
brokerDeduplicationEntriesInterval entries, and by time when entries came since the last snapshot
(the topic's, else namespace's deduplicationSnapshotInterval, else
brokerDeduplicationSnapshotIntervalSeconds; the housekeeping job checks). After a restart the
snapshot is loaded and the entries written after it are replayed (their metadata carries producer
name and sequence ids) to catch up. The cursor holds back trimming by at most one interval of
entries.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from broker.protocol.entry import read_entry_metadata
from managed_ledger import InitialPosition, ManagedCursor, Position

if TYPE_CHECKING:
    from broker.service.topic import PersistentTopic

log = logging.getLogger(__name__)

DEDUP_CURSOR = "pulsar.dedup"  # Pulsar's name for it; not a subscription
REPLAY_CHUNK = 1000


class Deduplication:
    def __init__(self, topic: PersistentTopic) -> None:
        self.topic = topic
        self.cursor: ManagedCursor | None = None
        self._since_snapshot = 0
        self._last_snapshot = time.monotonic()
        self._opening: asyncio.Task[None] | None = None
        # The last entry whose producer and sequence id are in topic.sequence_persisted.
        self.covered: Position | None = None

    @property
    def interval(self) -> int:
        return max(1, self.topic.service.config.brokerDeduplicationEntriesInterval)

    async def recover(self) -> None:
        """On topic load: restore the snapshot and replay what was written after it."""
        topic = self.topic
        ledger = topic.ledger
        cursor = ledger.cursors.get(DEDUP_CURSOR)
        if not topic.deduplication_enabled:
            if cursor is not None:  # turned off: stop holding back trimming
                await ledger.delete_cursor(DEDUP_CURSOR)
            return
        if cursor is None:
            await self._open()
            return
        self.cursor = cursor
        state = {name: int(seq) for name, seq in cursor.properties.items()}
        reader = ledger.new_non_durable_cursor(cursor.mark_delete_position, "__dedup-recovery")
        replayed = 0
        try:
            while reader.has_more_entries():
                entries = await reader.read_entries_async(REPLAY_CHUNK)
                if not entries:
                    break
                for e in entries:
                    md = read_entry_metadata(e.data)
                    highest = md.sequence_id + max(1, md.num_messages_in_batch) - 1
                    if md.HasField("highest_sequence_id"):
                        highest = max(highest, md.highest_sequence_id)
                    if highest > state.get(md.producer_name, -1):
                        state[md.producer_name] = highest
                replayed += len(entries)
        finally:
            await reader.close()
        topic.sequence_persisted.update(state)
        topic.sequence_pushed.update(state)
        if replayed:
            log.info("deduplication state of %s recovered: %d producers, %d entries replayed",
                     topic.name, len(state), replayed)

    async def _open(self) -> None:
        self.cursor = await self.topic.ledger.open_cursor(DEDUP_CURSOR, InitialPosition.LATEST)
        self.cursor.set_active(False)  # it never reads: it must not hold entries in the cache

    def entries_persisted(self, count: int, last: Position) -> None:
        """Called as entries are stored while deduplication is on, once ``sequence_persisted`` covers them (up to
        ``last``); snapshots every interval."""
        if self.covered is None or last > self.covered:
            self.covered = last
        if self.cursor is None:
            if self._opening is None or self._opening.done():
                self._opening = asyncio.get_running_loop().create_task(self._open())
            return
        self._since_snapshot += count
        if self._since_snapshot >= self.interval:
            self.snapshot()

    def snapshot(self) -> None:
        # The position the state covers, not the ledger's last confirmed entry: entries confirmed whose producer
        # completions have not run yet (a topic closing under load) are not in sequence_persisted, and a snapshot
        # past them would keep the next owner from replaying them (their resends would be stored twice).
        last = self.covered
        if self.cursor is None or self.cursor.is_closed or last is None or last.entry_id < 0:
            return
        self._since_snapshot = 0
        self._last_snapshot = time.monotonic()
        self.cursor.mark_delete(last, dict(self.topic.sequence_persisted))

    def snapshot_if_due(self, interval_s: int) -> bool:
        """The periodic check: snapshot when entries came since the last snapshot and it is
        ``interval_s`` old (0 = snapshots by entries only). True if it took one."""
        if interval_s <= 0 or not self._since_snapshot or time.monotonic() - self._last_snapshot < interval_s:
            return False
        self.snapshot()
        return True

    async def close(self) -> None:
        if self._opening is not None and not self._opening.done():
            await asyncio.gather(self._opening, return_exceptions=True)
        if self.cursor is not None and self._since_snapshot:
            self.snapshot()
            await self.cursor.flush()
