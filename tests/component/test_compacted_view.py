"""The compacted view read from its ledger: the first record at or after any topic position, found by binary
search over the records; a reader going through the view in order pays one lookup per read."""

from __future__ import annotations

import bisect

from broker.protocol import pulsar_api_pb2 as pb
from broker.protocol.entry import build_entry
from broker.service.compacted_view import PROBE_CACHE, CompactedEntry, CompactedView, encode_record, open_view
from managed_ledger import Entry, ManagedLedgerConfig, MemoryManagedLedgerFactory, Position

RECORDS = 1000


async def a_view(factory: MemoryManagedLedgerFactory) -> tuple[CompactedView, list[Position]]:
    """RECORDS records at topic positions with gaps (every third entry, over ledgers of 50), in ledgers of 64."""
    ledger = await factory.open("view", ManagedLedgerConfig(max_entries_per_ledger=64, min_ledger_rollover_time_s=0,
                                                            retention_time_s=-1, retention_size_bytes=-1))
    positions = [Position(10 + i * 3 // 50, i * 3 % 50) for i in range(RECORDS)]
    md = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1, partition_key="k").SerializeToString()
    for p in positions:
        await ledger.add_entry_async(encode_record(CompactedEntry(Entry(p, build_entry(md, b"v")), None, 1, -1)))
    return await open_view(ledger, positions[-1]), positions


async def test_a_read_starts_at_the_first_record_at_or_after_the_position() -> None:
    view, positions = await a_view(MemoryManagedLedgerFactory())
    assert len(view) == RECORDS and view.last == (positions[-1], -1)
    candidates = [Position(-1, -1), *positions, *(Position(p.ledger_id, p.entry_id + 1) for p in positions),
                  Position(positions[-1].ledger_id + 1, 0)]
    for start in candidates:
        records, at_end = await view.read(start, 5)
        i = bisect.bisect_left(positions, start)
        assert [r.entry.position for r in records] == positions[i:i + 5]
        assert at_end == (i + 5 >= RECORDS)
    await view.close()


async def test_reading_in_order_costs_one_lookup_per_read() -> None:
    view, positions = await a_view(MemoryManagedLedgerFactory())
    lookups = 0
    real = view.ledger.read_entry

    async def counted(position: Position) -> Entry:
        nonlocal lookups
        lookups += 1
        return await real(position)

    view.ledger.read_entry = counted  # type: ignore[method-assign]
    start, seen, reads, at_end = Position(-1, -1), [], 0, False
    while not at_end:
        records, at_end = await view.read(start, 10)
        reads += 1
        seen += [r.entry.position for r in records]
        last = records[-1].entry.position
        start = Position(last.ledger_id, last.entry_id + 1)  # (as a dispatcher goes on after what it got)
    assert seen == positions
    # the first read searches (about log2 of the records); each next one finds its record at the first probe
    assert lookups <= reads + RECORDS.bit_length()
    assert len(view._probes) <= PROBE_CACHE
    await view.close()
