"""Entries waiting in a Shared or Key_Shared dispatcher's replay set go out as soon as they can: when
the consumer they wait for becomes writable again (not only at the next FLOW, ack or publish, which
on a quiet topic may never come), and a replay read made stale by a cursor reset does not put its
positions back when it fails (they would go out twice: from the reset position, and from the replay);
and an entry acknowledged while its replay read is in flight is not sent again when the read completes."""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import Any

import pytest

from broker.dispatch.context import Delivery
from broker.dispatch.key_shared import KeySharedDispatcher
from broker.dispatch.shared import SharedDispatcher
from broker.protocol import pulsar_api_pb2 as pb
from broker.service.consumer import Consumer
from managed_ledger import Position
from tests.component.test_lane_ordering import HeldReads, make_dispatcher
from tests.component.test_permits import NO_SUBSCRIPTION, FakeCnx, Harness, KeyHarness, drain_lane


async def drain(turns: int = 5) -> None:
    for _ in range(turns):
        await drain_lane()


async def one_consumer_with(entries: int) -> tuple[Harness, SharedDispatcher, Consumer]:
    """A Shared dispatcher whose one consumer holds ``entries`` delivered entries."""
    h = await Harness.create()
    d = h.shared()
    a = h.consumer()
    d.add_consumer(a)
    d.flow(a, 100)
    await drain_lane()
    h.publish(entries)
    await drain_lane()
    assert len(a.pending_acks) == entries
    return h, d, a


def set_writable(consumer: Any, writable: bool) -> None:
    cnx = consumer.cnx
    assert isinstance(cnx, FakeCnx)
    cnx.writable = writable


async def test_key_shared_nacked_entries_go_out_once_their_consumer_is_writable_again() -> None:
    h = await KeyHarness.create_keyed()
    d = h.dispatcher
    assert isinstance(d, KeySharedDispatcher)
    a, b = h.consumer_named("a"), h.consumer_named("b")
    d.add_consumer(a)
    d.add_consumer(b)
    d.flow(a, 100)
    d.flow(b, 100)
    await drain_lane()
    key = next(k for k in (f"k{i}" for i in range(10_000)) if d.owner(d.key_hash(k.encode())) is a)
    h.publish_key(key)
    await drain_lane()
    [p1] = list(a.pending_acks)
    set_writable(a, False)  # a's socket is backed up when its client nacks
    d.redeliver(a, None)
    await drain_lane()
    assert not a.pending_acks and d.replay == [p1]
    set_writable(a, True)  # drained: ServerCnx.on_writable tells the dispatchers
    d.on_writable()
    await drain()
    assert p1 in a.pending_acks
    h.check()


async def test_a_replay_read_that_completed_while_the_consumer_was_backed_up_goes_out_when_it_drains() -> None:
    h, d, a = await one_consumer_with(1)
    [p1] = list(a.pending_acks)
    held: list[Any] = []
    real_replay = h.cursor.replay_entries
    h.cursor.replay_entries = (  # type: ignore[method-assign]
        lambda positions, callback: real_replay(positions, lambda es, exc: held.append((callback, es, exc))))
    d.redeliver(a, None)  # the nack's replay read is held (a disk read)
    await drain_lane()
    set_writable(a, False)
    h.cursor.replay_entries = real_replay  # type: ignore[method-assign]
    callback, entries, exc = held.pop()
    callback(entries, exc)  # it completes while nobody can take it
    await drain_lane()
    set_writable(a, True)
    d.on_writable()
    await drain()
    assert p1 in a.pending_acks
    h.check()


async def test_a_stale_replay_read_that_fails_does_not_put_its_positions_back() -> None:
    h, d, a = await one_consumer_with(3)
    held: list[Any] = []
    real_replay = h.cursor.replay_entries
    h.cursor.replay_entries = lambda positions, callback: held.append(callback)  # type: ignore[method-assign]
    d.redeliver(a, None)  # the replay read of the three is in flight
    await drain_lane()
    assert held and d.read_outstanding
    # A seek to the first entry, as Subscription.reset_cursor makes it: consumers dropped, reads
    # cancelled, the cursor reset, the dispatcher told; then a consumer attaches again.
    a.closed = True
    d.remove_consumer(a)
    d.cancel_reads()
    h.cursor.reset(Position(1, 0))
    d.on_cursor_reset()
    h.cursor.replay_entries = real_replay  # type: ignore[method-assign]
    b = h.consumer()
    d.add_consumer(b)
    d.flow(b, 100)
    await drain()
    held[0]([], OSError("disk read failed"))  # the stale replay read fails (new reads waited for it)
    d.trigger_read()  # (what the retry after a failed read does, a moment later)
    await drain()
    assert b.msg_out == 3 and not d.replay  # the three from the reset position, once
    h.check()


@pytest.mark.parametrize("kind", ["shared", "key_shared"])
async def test_an_entry_acknowledged_while_its_replay_read_is_in_flight_is_not_sent_again(kind: str) -> None:
    # A nack (or an ack timeout) puts entries in the replay set; their replay read goes to disk; the
    # client's late ack of one of them lands before the read completes. That one is acknowledged: it
    # must not go out again (the replay read left out acknowledged positions only when it was issued).
    h = await Harness.create()
    make_dispatcher(h, kind)
    d = h.shared()
    a = h.consumer()
    d.add_consumer(a)
    d.flow(a, 100)
    await drain_lane()
    h.publish(2)
    await drain_lane()
    p1, p2 = sorted(a.pending_acks)
    reads = HeldReads(h.cursor)
    d.redeliver(a, [p1, p2])
    await drain_lane()
    assert len(reads.pending) == 1 and d.read_outstanding  # the replay read of both is in flight
    h.ack(a, [p1])
    while reads.release():  # the replay read completes (and whatever it triggers)
        await drain_lane()
    assert list(a.pending_acks) == [p2]  # p2 went out again, p1 did not
    assert a.msg_out == 3
    h.check()


def chunk_entry(uuid: str, chunk_id: int, num_chunks: int) -> bytes:
    md = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1, uuid=uuid, chunk_id=chunk_id,
                            num_chunks_from_msg=num_chunks, total_chunk_msg_size=num_chunks)
    meta = md.SerializeToString()
    return struct.pack(">I", len(meta)) + meta + b"x"


class Recording(Consumer):
    """A consumer that remembers every position it was sent, in order."""

    __slots__ = ("received",)
    received: list[Position]

    def send_entries(self, batch: Iterable[Delivery]) -> int:
        batch = list(batch)
        self.received.extend(d.entry.position for d in batch)
        return super().send_entries(batch)


def recording(h: Harness) -> Recording:
    c = Recording(FakeCnx(), h.next_id, f"c{h.next_id}", pb.CommandSubscribe.Shared, 0,  # type: ignore[arg-type]
                  NO_SUBSCRIPTION, -1, {})
    h.next_id += 1
    c.received = []
    return c


async def test_a_chunk_read_while_its_consumer_leaves_does_not_overtake_the_earlier_chunks_sent_back() -> None:
    # Shared: consumer a got chunks 0 and 1 of a message; chunk 2 is being read (a disk read) when a
    # leaves, which puts chunks 0 and 1 back in the replay set. Chunk 2 must not go out ahead of them, to
    # a consumer that then never gets the start of the message: all three go to one consumer, in order.
    h = await Harness.create()
    reads = HeldReads(h.cursor)
    d = h.shared()
    a, b, c = recording(h), recording(h), recording(h)
    for consumer in (a, b, c):
        d.add_consumer(consumer)
        d.flow(consumer, 100)
    await drain_lane()
    for chunk_id in (0, 1):
        h.ledger.add_entry(chunk_entry("u", chunk_id, 3), lambda pos, exc: None)
    while reads.release():
        await drain_lane()
    p0, p1 = a.received
    h.ledger.add_entry(chunk_entry("u", 2, 3), lambda pos, exc: None)
    await drain_lane()
    assert len(reads.pending) == 1  # the read of chunk 2 is in flight
    a.closed = True
    d.remove_consumer(a)  # chunks 0 and 1 go back to the replay set
    while reads.release():
        await drain_lane()
    receivers = [x for x in (b, c) if x.received]
    assert len(receivers) == 1, (b.received, c.received)  # one consumer got the whole message ...
    assert receivers[0].received[:2] == [p0, p1] and len(receivers[0].received) == 3  # ... in order
    h.check()
