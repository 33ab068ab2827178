"""Reads served from memory at once (``read_entries_or_wait``'s ``inline``): the Exclusive and the Shared
dispatchers' fused completions send, acknowledge, cut and set aside exactly what their general completions do.

The same backlog (batches, single messages, a keyed entry, markers, entries of an aborted and of an open
transaction, a partly acknowledged batch, a delayed message, a chunked one) is drained twice by a dispatcher
in small FLOWs, once as the broker runs it and once with every read completed through the callback (the
general path); what each consumer got, when, and what the cursor acknowledged must be the same, and the
first run must have taken the inline path.
Shared runs with one consumer, and with three (one of a lower priority, one whose FLOWs are smaller), so
entries go round robin, some find no consumer with permits and wait in the replay set. Each with the
metadata parsed per read and shared between subscriptions (``SharedEntryMetas``), as a topic does with one
subscription and with several.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from broker.dispatch.base import Dispatcher
from broker.dispatch.context import DispatchContext, DispatchPolicy
from broker.dispatch.entry_metas import SharedEntryMetas
from broker.dispatch.shared import SharedDispatcher
from broker.dispatch.single_active import SingleActiveConsumerDispatcher
from broker.protocol import pulsar_api_pb2 as pb
from broker.service.consumer import Consumer
from managed_ledger import Entry, InitialPosition, ManagedCursor, ManagedLedgerFactory, MemoryManagedLedgerFactory
from managed_ledger.file import FileManagedLedgerFactory
from tests.component.test_permits import NO_SUBSCRIPTION, RecordingCnx, drain_lane

ABORTED = (7, 1)
OPEN_TXN = (7, 2)


DELAYED = 4_102_444_800_000  # 2100-01-01: a Shared subscription holds it for the whole test


def entry(batch: int = 0, key: str = "", marker: int | None = None, txn: tuple[int, int] | None = None,
          deliver_at: int = 0, chunk: int | None = None) -> bytes:
    md = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1_700_000_000_000)
    if deliver_at:
        md.deliver_at_time = deliver_at
    if chunk is not None:  # chunk ``chunk`` of a message of two
        md.uuid, md.chunk_id, md.num_chunks_from_msg, md.total_chunk_msg_size = "p-0", chunk, 2, 16
    if batch:
        md.num_messages_in_batch = batch
    if key:
        md.partition_key = key
    if marker is not None:
        md.marker_type = marker
    if txn is not None:
        md.txnid_most_bits, md.txnid_least_bits = txn
    meta = md.SerializeToString()
    return struct.pack(">I", len(meta)) + meta + b"x" * 8


BACKLOG = [entry(5), entry(), entry(3), entry(marker=10), entry(4, key="k"), entry(2), entry(txn=ABORTED),
           entry(6), entry(), entry(3, txn=OPEN_TXN), entry(1), entry(marker=11), entry(7), entry(deliver_at=DELAYED),
           entry(2), entry(chunk=0), entry(3), entry(chunk=1), entry()]


class Reads:
    """Counts the reads a cursor completed inline; ``general``: never lets one (the callback gets them all)."""

    def __init__(self, cursor: ManagedCursor, general: bool) -> None:
        self.inline = 0
        real = cursor.read_entries_or_wait

        def read(n: int, callback: Any, max_bytes: int | None = None,
                 inline: Callable[[list[Entry]], None] | None = None) -> None:
            if general or inline is None:
                real(n, callback, max_bytes)
                return

            def counted(entries: list[Entry]) -> None:
                self.inline += 1
                inline(entries)

            real(n, callback, max_bytes, counted)

        cursor.read_entries_or_wait = read  # type: ignore[method-assign,assignment]


async def settle(d: Dispatcher) -> None:
    """Until the FLOWs are settled and the reads they started are done (a read left parked waits for entries
    that will not come): the file ledger may complete a read on a later loop turn, or from its pool."""
    await drain_lane()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    while d.lane.pending or (d.read_outstanding and not d.cursor.has_pending_read):
        assert loop.time() < deadline, "the dispatcher did not settle"
        await asyncio.sleep(0.001 if d.read_outstanding else 0)


# Consumers per kind: (priority level, permits per FLOW) each.
KINDS = {"exclusive": [(0, 4)], "shared": [(0, 4)], "shared-3": [(0, 4), (0, 2), (1, 3)]}


async def drain(factory: ManagedLedgerFactory, general: bool, partly_acked: bool,
                kind: str = "exclusive", shared_metas: bool = False) -> tuple[list[Any], int]:
    ml = await factory.open("t")
    cursor = await ml.open_cursor("s", InitialPosition.EARLIEST)
    added = asyncio.Event()
    positions = []

    def on_added(position: Any, exc: BaseException | None) -> None:
        assert exc is None
        positions.append(position)
        if len(positions) == len(BACKLOG):
            added.set()

    for data in BACKLOG:
        ml.add_entry(data, on_added)
    await added.wait()
    if partly_acked:  # the first batch: messages 0 and 2 of 5 acknowledged (bits set: still to deliver)
        cursor.set_batch_ack(positions[0], [0b11010])
    reads = Reads(cursor, general)
    metas = SharedEntryMetas(lambda: shared_metas)  # (as a topic's with more than one subscription, or one)
    context = DispatchContext(loop=asyncio.get_running_loop(), name="s", max_read_batch=4,
                              policy=lambda: DispatchPolicy(), txn_aborted=lambda most, least: (most, least) == ABORTED,
                              entry_meta=metas.get, entry_messages=metas.messages)
    d: Dispatcher
    if kind == "exclusive":
        d = SingleActiveConsumerDispatcher(context, cursor, failover=False)
        sub_type = pb.CommandSubscribe.Exclusive
    else:
        d = SharedDispatcher(context, cursor)
        sub_type = pb.CommandSubscribe.Shared
    members = []
    for i, (priority, permits) in enumerate(KINDS[kind]):
        cnx = RecordingCnx()
        c = Consumer(cnx, i, f"c{i}", sub_type, priority, NO_SUBSCRIPTION, -1, {})  # type: ignore[arg-type]
        d.add_consumer(c)
        members.append((c, cnx, permits))
    steps: list[Any] = []
    for _ in range(12):
        for c, _cnx, permits in members:
            d.flow(c, permits)
        await settle(d)
        for c, cnx, _permits in members:
            got = list(cnx.sent)
            cnx.sent.clear()
            acked = sorted(c.pending_acks)
            c.remove_pending_many(acked)
            cursor.delete(acked)
            d.on_acked(acked)
            assert d.total_permits == d.permit_balance()
            steps.append((c.name, got, c.permits, d.total_permits, c.msg_out, cursor.mark_delete_position,
                          cursor.read_position))
    d.close()
    await factory.close()
    return steps, reads.inline


@pytest.mark.parametrize("shared_metas", [False, True])
@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("partly_acked", [False, True])
@pytest.mark.parametrize("storage", ["memory", "file"])
async def test_inline_reads_dispatch_what_the_general_path_does(storage: str, partly_acked: bool, kind: str,
                                                                shared_metas: bool, tmp_path: Path) -> None:
    def factory(run: str) -> ManagedLedgerFactory:
        return MemoryManagedLedgerFactory() if storage == "memory" else FileManagedLedgerFactory(str(tmp_path / run))

    fused, inline = await drain(factory("fused"), general=False, partly_acked=partly_acked, kind=kind,
                                shared_metas=shared_metas)
    general, none = await drain(factory("general"), general=True, partly_acked=partly_acked, kind=kind,
                                shared_metas=shared_metas)
    assert inline > 0 and none == 0
    assert fused == general
    delivered = [p for _name, got, *_ in fused for p in got]
    # All but the markers and the aborted entry; Shared holds the delayed one back.
    assert len(delivered) == len(set(delivered)) == len(BACKLOG) - (3 if kind == "exclusive" else 4)
