"""Entry metadata parsed once per topic, not once per subscription.

Every dispatcher parses the MessageMetadata of each entry it reads (``filter_markers``: markers,
batch size, key, delivery time). When a topic fans out to several subscriptions, each of them reads
the same entries at about the same time (the same bytes, from the read cache), so the topic keeps
the last few parsed ones: a stored entry never changes, and a position is never reused within a
topic's managed ledger. A topic with one subscription keeps nothing (nothing to share).
"""

from __future__ import annotations

from collections.abc import Callable

from broker.protocol.entry import EntryMeta, entry_messages, entry_meta
from managed_ledger import Entry

# Parsed metadata kept per topic. Subscriptions that tail a topic read each new entry within a
# few loop turns of one another; far apart (a backlog), they would miss anyway. 128 small tuples
# bound the memory to a few tens of KB per topic that fans out.
SHARED_ENTRY_METAS = 128


class SharedEntryMetas:
    """A topic's recently parsed entry metadata, for its dispatchers (``DispatchContext.entry_meta``)."""

    __slots__ = ("_memo", "_shared")

    def __init__(self, shared: Callable[[], bool]) -> None:
        self._shared = shared  # whether more than one subscription may read the entries now
        # (ledger id, entry id) as plain int tuples: untracked by the garbage collector.
        self._memo: dict[tuple[int, int], EntryMeta] = {}

    def get(self, entry: Entry) -> EntryMeta:
        memo = self._memo
        if not self._shared():
            if memo:
                memo.clear()
            return entry_meta(entry.data)
        position = entry.position
        key = (position[0], position[1])
        meta = memo.get(key)
        if meta is None:
            meta = memo[key] = entry_meta(entry.data)
            if len(memo) > SHARED_ENTRY_METAS:
                del memo[next(iter(memo))]
        return meta

    def messages(self, entry: Entry) -> int:
        """The messages a plain entry costs (``DispatchContext.entry_messages``): ``entry_messages`` of
        its bytes, or, while the topic shares its parsed metadata, the shared EntryMeta's count when it is
        none of a marker, a transaction's entry, a delayed message or a chunk; 0 otherwise (ask ``get``)."""
        if not self._shared():
            if self._memo:
                self._memo.clear()
            return entry_messages(entry.data)
        meta = self.get(entry)
        if meta.is_marker or meta.txn is not None or meta.deliver_at_time or meta.num_chunks:
            return 0
        return meta.num_messages
