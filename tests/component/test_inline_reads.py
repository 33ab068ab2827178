"""Exclusive reads served from memory at once (``read_entries_or_wait``'s ``inline``): the dispatcher's fused
completion sends, acknowledges and cuts exactly what its general completion does.

The same backlog (batches, single messages, a keyed entry, markers, entries of an aborted and of an open
transaction, a partly acknowledged batch) is drained twice by an Exclusive dispatcher in small FLOWs, once
as the broker runs it and once with every read completed through the callback (the general path); what the
consumer got, when, and what the cursor acknowledged must be the same, and the first run must have taken
the inline path.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from broker.dispatch.context import DispatchContext, DispatchPolicy
from broker.dispatch.single_active import SingleActiveConsumerDispatcher
from broker.protocol import pulsar_api_pb2 as pb
from broker.service.consumer import Consumer
from managed_ledger import Entry, InitialPosition, ManagedCursor, ManagedLedgerFactory, MemoryManagedLedgerFactory
from managed_ledger.file import FileManagedLedgerFactory
from tests.component.test_permits import NO_SUBSCRIPTION, RecordingCnx, drain_lane

ABORTED = (7, 1)
OPEN_TXN = (7, 2)


def entry(batch: int = 0, key: str = "", marker: int | None = None, txn: tuple[int, int] | None = None) -> bytes:
    md = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1_700_000_000_000)
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
           entry(6), entry(), entry(3, txn=OPEN_TXN), entry(1), entry(marker=11), entry(7), entry(2), entry()]


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


async def drain(factory: ManagedLedgerFactory, general: bool, partly_acked: bool) -> tuple[list[Any], int]:
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
    context = DispatchContext(loop=asyncio.get_running_loop(), name="s", max_read_batch=4,
                              policy=lambda: DispatchPolicy(), txn_aborted=lambda most, least: (most, least) == ABORTED)
    d = SingleActiveConsumerDispatcher(context, cursor, failover=False)
    cnx = RecordingCnx()
    c = Consumer(cnx, 0, "c", pb.CommandSubscribe.Exclusive, 0, NO_SUBSCRIPTION, -1, {})  # type: ignore[arg-type]
    d.add_consumer(c)
    steps: list[Any] = []
    for _ in range(12):
        d.flow(c, 4)
        await drain_lane()
        got = list(cnx.sent)
        cnx.sent.clear()
        acked = sorted(c.pending_acks)
        c.remove_pending_many(acked)
        cursor.delete(acked)
        d.on_acked(acked)
        assert d.total_permits == d.permit_balance()
        steps.append((got, c.permits, d.total_permits, c.msg_out, cursor.mark_delete_position, cursor.read_position))
    await factory.close()
    return steps, reads.inline


@pytest.mark.parametrize("partly_acked", [False, True])
@pytest.mark.parametrize("storage", ["memory", "file"])
async def test_inline_reads_dispatch_what_the_general_path_does(storage: str, partly_acked: bool,
                                                                tmp_path: Path) -> None:
    def factory(run: str) -> ManagedLedgerFactory:
        return MemoryManagedLedgerFactory() if storage == "memory" else FileManagedLedgerFactory(str(tmp_path / run))

    fused, inline = await drain(factory("fused"), general=False, partly_acked=partly_acked)
    general, none = await drain(factory("general"), general=True, partly_acked=partly_acked)
    assert inline > 0 and none == 0
    assert fused == general
    delivered = [p for got, *_ in fused for p in got]
    assert len(delivered) == len(set(delivered)) == len(BACKLOG) - 3  # all but the markers and the aborted entry
