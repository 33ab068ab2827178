"""Permit accounting of the Shared dispatcher when consumers come and go with FLOW still queued.

Invariant: dispatcher.total_permits == sum(c.permits - c.pending_flow for c in consumers).
The lane is drained by the event loop; these tests control when by awaiting a loop turn.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from broker.dispatch.context import DispatchContext, DispatchPolicy, UnackedBlocked
from broker.dispatch.key_shared import KeySharedDispatcher
from broker.dispatch.shared import SharedDispatcher
from broker.dispatch.single_active import SingleActiveConsumerDispatcher
from broker.embedded import Broker
from broker.protocol import pulsar_api_pb2 as pb
from broker.protocol.frames import FrameDecoder
from broker.service.consumer import Consumer
from broker.topic_name import TopicName
from managed_ledger import (
    Entry,
    InitialPosition,
    ManagedCursor,
    ManagedLedger,
    ManagedLedgerConfig,
    MemoryManagedLedgerFactory,
    Position,
)
from tests.waiting import eventually

# A consumer's subscription is only named in its repr: the dispatchers here have none.
NO_SUBSCRIPTION: Any = SimpleNamespace(name="sub")


class FakeCnx:
    def __init__(self) -> None:
        self.frames = 0
        self.writable = True
        self.remote_address = "test"
        self.client_version = "test"
        self.keeps_broker_entry_metadata = False

    def write(self, data: bytes) -> None:
        self.frames += 1

    def write_many(self, frames: list[bytes]) -> None:
        self.frames += 1

    def consumer_closed_by_broker(self, consumer: Consumer) -> None:
        pass

    def producer_closed_by_broker(self, producer_id: int) -> None:
        pass


def entry_bytes(batch: int = 0) -> bytes:
    md = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
    if batch:
        md.num_messages_in_batch = batch
    meta = md.SerializeToString()
    return struct.pack(">I", len(meta)) + meta + b"x"


class Harness:
    """A Shared dispatcher over a real in-memory cursor, with fake connections: built from a
    dispatch context (the broker's defaults, no rate limits), no topic or service."""

    def __init__(self, ledger: ManagedLedger, cursor: ManagedCursor) -> None:
        self.unacked_limit = 0  # maxUnackedMessagesOnSubscription (0 = none)
        self.consumer_unacked_limit = 50000  # maxUnackedMessagesPerConsumer (0 = none)
        self.pause_on_ack_state = False  # dispatcherPauseOnAckStatePersistent
        self.unacked_blocked: set[UnackedBlocked] = set()
        self.context = DispatchContext(
            loop=asyncio.get_running_loop(), name="sub", max_read_batch=100,
            policy=lambda: DispatchPolicy(max_unacked_per_consumer=self.consumer_unacked_limit,
                                          max_unacked_per_subscription=self.unacked_limit,
                                          pause_on_ack_state=self.pause_on_ack_state),
            unacked_blocked=self.unacked_blocked)
        self.ledger = ledger
        self.cursor = cursor
        self.dispatcher: SharedDispatcher | SingleActiveConsumerDispatcher = SharedDispatcher(self.context, cursor)
        self.next_id = 0

    def shared(self) -> SharedDispatcher:
        assert isinstance(self.dispatcher, SharedDispatcher)
        return self.dispatcher

    @classmethod
    async def create(cls, config: ManagedLedgerConfig | None = None) -> Harness:
        factory = MemoryManagedLedgerFactory()
        ledger = await factory.open("permits", config)
        cursor = await ledger.open_cursor("sub", InitialPosition.EARLIEST)
        return cls(ledger, cursor)

    @classmethod
    async def create_keyed(cls, config: ManagedLedgerConfig | None = None) -> KeyHarness:
        h = await KeyHarness.create(config)
        assert isinstance(h, KeyHarness)
        return h

    def consumer(self, consumer_id: int | None = None, name: str | None = None) -> Consumer:
        if consumer_id is None:
            consumer_id = self.next_id
            self.next_id += 1
        if name is None:
            name = f"c{consumer_id}"
        return Consumer(FakeCnx(), consumer_id, name, pb.CommandSubscribe.Shared, 0, NO_SUBSCRIPTION,  # type: ignore[arg-type]
                        -1, {})

    def publish(self, n: int, batch: int = 0) -> None:
        for _ in range(n):
            self.ledger.add_entry(entry_bytes(batch), lambda pos, exc: None)

    def ack(self, consumer: Consumer, positions: list[Position]) -> None:
        """What the subscription does for an individual ack: forget, delete, tell the dispatcher."""
        for p in positions:
            consumer.remove_pending(p)
        self.cursor.delete(positions)
        self.dispatcher.on_acked(positions)

    def check(self) -> None:
        d = self.dispatcher
        assert d.total_permits == d.permit_balance(), (d.total_permits, d.permit_balance())


async def drain_lane() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


async def test_flow_queued_then_consumer_removed() -> None:
    h = await Harness.create()
    d = h.dispatcher
    c = h.consumer()
    d.add_consumer(c)
    d.flow(c, 10)
    d.remove_consumer(c)  # before the lane settles the flow
    h.check()
    await drain_lane()
    assert d.total_permits == 0
    h.check()


async def test_queued_flow_does_not_credit_an_equal_replacement() -> None:
    h = await Harness.create()
    d = h.dispatcher
    old = h.consumer(consumer_id=7, name="same")
    d.add_consumer(old)
    d.flow(old, 1000)
    d.remove_consumer(old)
    new = h.consumer(consumer_id=7, name="same")
    d.add_consumer(new)
    await drain_lane()
    assert d.total_permits == 0
    d.flow(new, 5)
    await drain_lane()
    assert d.total_permits == 5
    h.check()


async def test_dispatch_before_queued_flow_gives_negative_balance() -> None:
    h = await Harness.create()
    d = h.dispatcher
    c = h.consumer()
    d.add_consumer(c)
    d.flow(c, 2)
    await drain_lane()
    h.publish(1, batch=5)  # one entry costing 5 permits with only 2 settled
    await drain_lane()
    assert c.permits == -3
    d.flow(c, 10)  # queued: permits 7, pending 10, settled balance -3
    h.check()
    d.remove_consumer(c)
    assert d.total_permits == 0
    await drain_lane()
    assert d.total_permits == 0
    h.check()


async def test_shutdown_with_flows_queued() -> None:
    h = await Harness.create()
    d = h.dispatcher
    cs = [h.consumer() for _ in range(3)]
    for c in cs:
        d.add_consumer(c)
        d.flow(c, 50)
    d.close()
    await drain_lane()
    assert d.lane.pending == 3  # never run after close
    for c in cs:
        d.remove_consumer(c)
    assert d.total_permits == 0
    h.check()


async def test_subscription_unacked_limit_stops_new_entries_until_half_is_acked() -> None:
    h = await Harness.create()
    h.unacked_limit = 10
    d = h.shared()
    a, b = h.consumer(), h.consumer()
    for c in (a, b):
        d.add_consumer(c)
        d.flow(c, 100)
    await drain_lane()
    h.publish(30)
    await drain_lane()
    # One read of 10 went out (5 each); the limit is reached, the other 20 entries stay unread.
    assert (len(a.pending_acks), len(b.pending_acks)) == (5, 5)

    def unacked() -> int:
        return a.unacked_messages + b.unacked_messages

    assert d.blocked_on_unacked and h.unacked_blocked == {d}
    # A redelivery still goes out while blocked.
    d.redeliver(a, None)
    await drain_lane()
    assert unacked() == 10 and d.blocked_on_unacked

    async def ack(n: int) -> None:
        for c in (a, b):
            taken = sorted(c.pending_acks)[:n]
            h.ack(c, taken)
            n -= len(taken)
        await drain_lane()

    await ack(4)  # 6 unacked: above half (5), still blocked
    assert unacked() == 6 and d.blocked_on_unacked
    await ack(1)  # at half it reads again, up to the limit
    assert unacked() == 10 and d.blocked_on_unacked
    seen = {p for c in (a, b) for p in c.pending_acks}
    assert max(seen).entry_id == 14  # the next new entries, in order
    h.check()


def policy_changed(h: Harness) -> None:
    """What the broker's metadata listener does after a policy change."""
    for blocked in list(h.unacked_blocked):
        blocked.unacked_limits_changed()


async def test_consumer_unacked_limit_follows_a_policy_change() -> None:
    """maxUnackedMessagesPerConsumer changed under a live Shared dispatcher applies to its consumers at
    once, as Pulsar's Consumer.getMaxUnackedMessages reads the topic's policies each time: removed or
    raised, a blocked consumer is unblocked without waiting for an ack; lowered, it blocks there. The
    dispatcher used to keep the limit it was made with, so the consumer stayed blocked."""
    h = await Harness.create()
    h.consumer_unacked_limit = 4
    d = h.shared()
    c = h.consumer()
    d.add_consumer(c)
    d.flow(c, 100)
    await drain_lane()
    h.publish(20)
    await drain_lane()
    assert len(c.pending_acks) == 4 and c.blocked and h.unacked_blocked == {d}
    h.consumer_unacked_limit = 10  # raised: 4 unacked is at most half of it
    policy_changed(h)
    await drain_lane()
    assert len(c.pending_acks) == 10 and c.blocked
    h.consumer_unacked_limit = 0  # removed
    policy_changed(h)
    await drain_lane()
    assert not c.blocked and not h.unacked_blocked
    h.consumer_unacked_limit = 22  # set again: the consumer stops there
    h.publish(20)
    await drain_lane()
    assert len(c.pending_acks) == 22 and c.blocked and h.unacked_blocked == {d}
    h.check()


async def test_consumer_unacked_limit_caps_its_share_of_one_read() -> None:
    """A read of many entries gives a consumer no more than its maxUnackedMessagesPerConsumer room, as
    Pulsar's getMaxEntriesInThisBatch caps each consumer's share of a read; the rest goes to the other
    consumers. The room was checked against the count before the read, so one consumer took the whole
    read (20 here) past its limit of 5."""
    h = await Harness.create()
    h.consumer_unacked_limit = 5
    d = h.shared()
    h.publish(20)  # there before anyone asks: one read takes them all
    a, b = h.consumer(), h.consumer()
    d.add_consumer(a)
    d.add_consumer(b)
    d.flow(a, 100)
    await drain_lane()
    assert len(a.pending_acks) == 5 and a.blocked
    d.flow(b, 100)
    await drain_lane()
    assert len(b.pending_acks) == 5 and b.blocked
    assert h.unacked_blocked == {d}
    h.ack(a, list(a.pending_acks)[:3])  # 2 left: at most half the limit
    await drain_lane()
    assert len(a.pending_acks) == 5 and len(b.pending_acks) == 5
    h.check()


def chunk(chunk_id: int, num_chunks: int, uuid: str = "u", key: str = "") -> bytes:
    md = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1, uuid=uuid, chunk_id=chunk_id,
                            num_chunks_from_msg=num_chunks, total_chunk_msg_size=num_chunks, partition_key=key)
    meta = md.SerializeToString()
    return struct.pack(">I", len(meta)) + meta + b"x"


async def publish_chunks(h: Harness, num_chunks: int, one_a_read: bool = True) -> None:
    """A chunked message of key "k": its chunks stored one a loop turn (one a read, as at the tail) or at once."""
    for i in range(num_chunks):
        h.ledger.add_entry(chunk(i, num_chunks, key="k"), lambda pos, exc: None)
        if one_a_read:
            await drain_lane()


async def test_consumer_unacked_limit_does_not_hold_back_the_rest_of_a_chunked_message() -> None:
    """A chunked message of 10 chunks, a maxUnackedMessagesPerConsumer of 5: the consumer that got the first
    chunks gets the others past its limit, as Pulsar's SharedConsumerAssignor sends a message's chunks to the
    consumer of its first chunk whatever that consumer's count. Held back at the limit, the rest waited for
    acks that could not come (a client acknowledges a chunked message once it has all of it) and the
    subscription stalled on that message for good: from the backlog (one read, capped at the limit since
    the consumer's share of a read counts) and at the tail (one chunk per read) alike."""
    for backlog in (True, False):
        h = await Harness.create()
        h.consumer_unacked_limit = 5
        d = h.shared()
        if backlog:
            for i in range(10):
                h.ledger.add_entry(chunk(i, 10), lambda pos, exc: None)
        a, b = h.consumer(), h.consumer()
        for c in (a, b):
            d.add_consumer(c)
            d.flow(c, 100)
        await drain_lane()
        if not backlog:
            for i in range(10):
                h.ledger.add_entry(chunk(i, 10), lambda pos, exc: None)
                await drain_lane()
        await drain_lane()
        owner = a if a.pending_acks else b
        assert len(owner.pending_acks) == 10 and not d.replay, (backlog, len(owner.pending_acks), len(d.replay))
        assert owner.blocked  # (past its limit: it gets nothing else until it acks)
        h.ledger.add_entry(entry_bytes(), lambda pos, exc: None)
        await drain_lane()
        other = b if owner is a else a
        assert len(other.pending_acks) == 1 and len(owner.pending_acks) == 10
        h.check()


@pytest.mark.parametrize("key_shared", [False, True])
async def test_a_consumer_alone_at_its_unacked_limit_still_reads_the_rest_of_its_chunked_message(
        key_shared: bool) -> None:
    """The consumer of a chunked message of 10 chunks is the only one (maxUnackedMessagesPerConsumer 5), and
    the chunks come one a read (the tail). Past its limit it may take the rest of the message, but the read
    loop read only while some consumer was under its limit: with none, it stopped after 5 chunks and the
    message never completed (Shared and Key_Shared alike)."""
    h = await (Harness.create_keyed() if key_shared else Harness.create())
    h.consumer_unacked_limit = 5
    d = h.dispatcher
    a = h.consumer()
    d.add_consumer(a)
    d.flow(a, 100)
    await drain_lane()
    await publish_chunks(h, 10)
    assert len(a.pending_acks) == 10
    h.publish(1)  # past its limit, the next message waits for acks
    await drain_lane()
    assert len(a.pending_acks) == 10
    h.check()


class HeldReads:
    """Reads of new entries that complete while ``holding`` are held, as a disk read still in flight would be
    (the cursor has read the entries, the dispatcher does not have them yet) until ``release``."""

    def __init__(self, cursor: ManagedCursor) -> None:
        self.holding = False
        self._held: list[Callable[[], None]] = []
        real_read = cursor.read_entries_or_wait

        def read(n: int, callback: Any, max_bytes: int | None = None, inline: Any = None) -> None:
            # (never inline: a completion while holding is held)
            real_read(n, lambda es, exc: self._complete(callback, es, exc), max_bytes)

        cursor.read_entries_or_wait = read  # type: ignore[method-assign,assignment]

    def _complete(self, callback: Any, entries: list[Entry], exc: BaseException | None) -> None:
        if self.holding:
            self._held.append(lambda: callback(entries, exc))
        else:
            callback(entries, exc)

    def release(self) -> None:
        self.holding = False
        assert self._held, "no read was held"
        while self._held:
            self._held.pop(0)()


class RecordingCnx(FakeCnx):
    """A connection that keeps the position of every MESSAGE written to it, in the order written."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[Position] = []
        self._decoder = FrameDecoder(1 << 20)

    def write_many(self, frames: list[bytes]) -> None:
        super().write_many(frames)
        self._decoder.feed(b"".join(frames))
        while (frame := self._decoder.next_frame()) is not None:
            mid = frame.command.message.message_id
            self.sent.append(Position(mid.ledgerId, mid.entryId))


@pytest.mark.parametrize("key_shared", [False, True])
@pytest.mark.parametrize("meanwhile", ["flow", "redelivery"])
async def test_chunks_reach_their_consumer_in_order_when_an_earlier_one_waits_for_replay(
        meanwhile: str, key_shared: bool) -> None:
    """A chunked message of 4 chunks whose consumer got the first ones: an earlier chunk waits in the replay
    set (read while the consumer had no permit, or redelivered) while a read of the next chunk is in flight.
    When that read completes and the consumer has permits, the next chunk waits behind the earlier one: sent
    first, it reached the client before the chunk it follows (the client drops a message whose chunks come
    out of order), and Shared then gave the chunk left behind to another consumer, the message being over."""
    h = await (Harness.create_keyed() if key_shared else Harness.create())
    d = h.dispatcher
    assert isinstance(d, SharedDispatcher)
    cnx = RecordingCnx()
    a = Consumer(cnx, 0, "a", pb.CommandSubscribe.Key_Shared if key_shared else pb.CommandSubscribe.Shared,  # type: ignore[arg-type]
                 0, NO_SUBSCRIPTION, -1, {})
    b = h.consumer_named("b") if isinstance(h, KeyHarness) else h.consumer(1)
    reads = HeldReads(h.cursor)
    for c in (a, b):  # (flow: no one has permits for all 4 chunks, the first goes round robin, to a)
        d.add_consumer(c)
        d.flow(c, 2 if meanwhile == "flow" else 10)
    await drain_lane()
    # (Key_Shared: a key of a's)
    key = next(k for k in (f"k{i}" for i in range(10_000)) if d.owner(d.key_hash(k.encode())) is a) \
        if isinstance(d, KeySharedDispatcher) else ""
    for i in range(3):  # one a read, as at the tail
        h.ledger.add_entry(chunk(i, 4, key=key), lambda pos, exc: None)
        await drain_lane()
    c0, c1, c2 = sorted(a.pending_acks) + d.replay  # (flow: c2 waits for a permit)
    reads.holding = True
    h.ledger.add_entry(chunk(3, 4, key=key), lambda pos, exc: None)  # the read of c3 completes, not yet handed out
    await drain_lane()
    if meanwhile == "flow":
        assert d.replay == [c2]
        d.flow(a, 5)
    else:
        d.redeliver(a, [c1])  # (the client's negative ack: c1 waits in the replay set)
    await drain_lane()
    reads.release()
    await drain_lane()
    c3 = max(a.pending_acks)
    assert cnx.sent == ([c0, c1, c2, c3] if meanwhile == "flow" else [c0, c1, c2, c1, c3]), cnx.sent
    assert not d.replay and not b.pending_acks
    h.check()

async def test_subscription_unacked_limit_lifted_by_a_policy_change() -> None:
    h = await Harness.create()
    h.unacked_limit = 4
    d = h.shared()
    c = h.consumer()
    d.add_consumer(c)
    d.flow(c, 100)
    await drain_lane()
    h.publish(20)
    await drain_lane()
    assert len(c.pending_acks) == 4 and d.blocked_on_unacked
    h.unacked_limit = 0
    policy_changed(h)
    await drain_lane()
    assert len(c.pending_acks) == 20 and not d.blocked_on_unacked
    assert not h.unacked_blocked
    h.check()


async def test_round_robin_spreads_over_consumers() -> None:
    h = await Harness.create()
    d = h.dispatcher
    cs = [h.consumer() for _ in range(3)]
    for c in cs:
        d.add_consumer(c)
        d.flow(c, 100)
    await drain_lane()
    h.publish(30)
    await drain_lane()
    assert sorted(len(c.pending_acks) for c in cs) == [10, 10, 10]
    h.check()


class PermitMachine(RuleBasedStateMachine):
    """Interleave flow, lane drains, publishes (dispatch), acks, adds, removes and reconnects."""

    # The managed ledger's settings (subclasses: a small managedLedgerMaxUnackedRangesToPersist).
    config: ManagedLedgerConfig | None = None

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.h: Harness = self.loop.run_until_complete(Harness.create(self.config))
        self.members: list[Consumer] = []

    def teardown(self) -> None:
        self.h.dispatcher.close()
        self.loop.close()

    def turn(self) -> None:
        self.loop.run_until_complete(drain_lane())

    @initialize()
    def start(self) -> None:
        self.add()

    @rule()
    def add(self) -> None:
        c = self.h.consumer()
        self.h.dispatcher.add_consumer(c)
        self.members.append(c)

    @rule(i=st.integers(min_value=0, max_value=10), n=st.integers(min_value=1, max_value=20))
    def flow(self, i: int, n: int) -> None:
        if self.members:
            self.h.dispatcher.flow(self.members[i % len(self.members)], n)

    @rule(i=st.integers(min_value=0, max_value=10))
    def remove(self, i: int) -> None:
        if self.members:
            self.h.dispatcher.remove_consumer(self.members.pop(i % len(self.members)))

    @rule(i=st.integers(min_value=0, max_value=10), n=st.integers(min_value=1, max_value=20))
    def reconnect_with_flow_queued(self, i: int, n: int) -> None:
        if not self.members:
            return
        old = self.members.pop(i % len(self.members))
        self.h.dispatcher.flow(old, n)
        self.h.dispatcher.remove_consumer(old)
        new = self.h.consumer(consumer_id=old.consumer_id, name=old.name)
        self.h.dispatcher.add_consumer(new)
        self.members.append(new)

    @rule(n=st.integers(min_value=1, max_value=10), batch=st.sampled_from([0, 1, 3]))
    def publish(self, n: int, batch: int) -> None:
        self.h.publish(n, batch)

    @rule()
    def ack_some(self) -> None:
        for c in self.members:
            done = list(c.pending_acks)[:3]
            for p in done:
                c.remove_pending(p)
            self.h.dispatcher.cursor.delete(done)

    @rule()
    def loop_turn(self) -> None:
        self.turn()

    @invariant()
    def permits_balance(self) -> None:
        self.h.check()


PermitMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
TestPermitMachine = PermitMachine.TestCase


# -- Key_Shared per-key order across consumer changes ------------------------------------------------

def keyed_entry(key: str) -> bytes:
    md = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1, partition_key=key)
    meta = md.SerializeToString()
    return struct.pack(">I", len(meta)) + meta + key.encode()


class KeyHarness(Harness):
    def __init__(self, ledger: ManagedLedger, cursor: ManagedCursor) -> None:
        super().__init__(ledger, cursor)
        self.dispatcher = KeySharedDispatcher(self.context, cursor, sticky=False, allow_out_of_order=False)

    def consumer_named(self, name: str) -> Consumer:
        c = self.consumer(name=name)
        c.sub_type = pb.CommandSubscribe.Key_Shared
        return c

    def publish_key(self, key: str) -> None:
        self.ledger.add_entry(keyed_entry(key), lambda pos, exc: None)

    @classmethod
    async def with_first_consumer(cls, permits: int) -> tuple[KeyHarness, Any, Consumer]:
        """A Key_Shared harness whose consumer "a" has joined with permits: (harness, dispatcher, a)."""
        h = await cls.create_keyed()
        d = h.dispatcher
        a = h.consumer_named("a")
        d.add_consumer(a)
        d.flow(a, permits)
        await drain_lane()
        return h, d, a


def key_moving_to(h: KeyHarness, newcomer: Consumer, before: list[Consumer]) -> str:
    """A key owned by someone in ``before`` that the ring gives to ``newcomer`` once it joins."""
    d = h.dispatcher
    assert isinstance(d, KeySharedDispatcher)
    for i in range(10_000):
        key = f"key-{i}"
        kh = d.key_hash(key.encode())
        d.consumers.append(newcomer)
        d._rebuild_ring()
        after = d.owner(kh)
        d.consumers.remove(newcomer)
        d._rebuild_ring()
        if after is newcomer and d.owner(kh) in before:
            return key
    raise AssertionError("no key moves to the newcomer")


async def test_key_shared_holds_a_moved_key_until_the_old_owner_acks() -> None:
    h, d, a = await KeyHarness.with_first_consumer(100)
    b = h.consumer_named("b")
    key = key_moving_to(h, b, [a])
    h.publish_key(key)
    await drain_lane()
    first = list(a.pending_acks)
    assert len(first) == 1
    d.add_consumer(b)  # the key now hashes to b, but a still holds an unacked message of it
    d.flow(b, 100)
    await drain_lane()
    h.publish_key(key)
    await drain_lane()
    assert not b.pending_acks, "b received a newer message while a had an older one unacked"
    h.ack(a, first)
    await drain_lane()
    assert len(b.pending_acks) == 1
    h.check()


async def test_key_shared_leaving_owner_messages_go_first() -> None:
    h, d, a = await KeyHarness.with_first_consumer(100)
    b = h.consumer_named("b")
    key = key_moving_to(h, b, [a])
    for _ in range(3):
        h.publish_key(key)
    await drain_lane()
    held = sorted(a.pending_acks)
    assert len(held) == 3
    d.add_consumer(b)
    d.flow(b, 100)
    h.publish_key(key)  # newer; must not reach b before the three a holds
    await drain_lane()
    d.remove_consumer(a)  # a leaves without acking: its three go to b first, then the newer one
    await drain_lane()
    got = list(b.pending_acks)  # in delivery order
    assert got[:3] == held and len(got) == 4 and got[3] > held[-1]
    h.check()


def keys_for(h: KeyHarness, wanted: Callable[[object, object], bool], leaving: Consumer) -> str:
    """A key whose owner now and once ``leaving`` has left satisfy ``wanted(now, after)``."""
    d = h.dispatcher
    assert isinstance(d, KeySharedDispatcher)
    for i in range(10_000):
        key = f"key-{i}"
        kh = d.key_hash(key.encode())
        now = d.owner(kh)
        d.consumers.remove(leaving)
        d._rebuild_ring()
        after = d.owner(kh)
        d.consumers.append(leaving)
        d._rebuild_ring()
        if wanted(now, after):
            return key
    raise AssertionError("no such key")


async def test_key_shared_replay_skips_hashes_whose_consumer_cannot_take_them() -> None:
    """Entries waiting for a consumer without permits must not hold back the entries behind them
    that another consumer can take (head-of-line blocking of the replay set; Pulsar 4 filters
    replays by hash the same way)."""
    h = await KeyHarness.create_keyed()
    d = h.dispatcher
    a, b, c = h.consumer_named("a"), h.consumer_named("b"), h.consumer_named("c")
    for consumer in (a, b, c):
        d.add_consumer(consumer)
    key_x = keys_for(h, lambda now, after: now is c and after is a, leaving=c)  # goes c -> a
    key_b = keys_for(h, lambda now, after: now is b and after is b, leaving=c)
    d.flow(c, 100)
    await drain_lane()
    for key in (key_x, key_x, key_x, key_b, key_b, key_b):
        h.publish_key(key)
    await drain_lane()
    assert len(c.pending_acks) == 3 and not b.pending_acks  # b has no permits: key_b waits
    d.remove_consumer(c)  # its three key_x entries wait ahead of key_b's, for a, who has no permits
    await drain_lane()
    d.flow(b, 2)
    await drain_lane()
    assert len(b.pending_acks) == 2, "b's entries were held behind entries only a (no permits) can take"
    assert not a.pending_acks
    d.flow(a, 10)
    await drain_lane()
    assert len(a.pending_acks) == 3
    h.check()


@pytest.mark.parametrize("shape", ["backlog", "tail", "few permits"])
async def test_key_shared_unacked_limit_does_not_hold_back_the_rest_of_a_chunked_message(shape: str) -> None:
    """Key_Shared, a chunked message of 10 chunks, maxUnackedMessagesPerConsumer 5: the key's consumer gets
    every chunk past its limit, in order, from the backlog (one read), at the tail (one chunk per read) and
    with permits coming a few at a time (the chunks that had none wait in the replay set, and are let out
    of it past the limit). Held back at the limit, the rest waited for acks the client cannot send before it
    has the whole message, and the subscription stalled on it. The limit holds again after the message."""
    h = await Harness.create_keyed()
    h.consumer_unacked_limit = 5
    d = h.dispatcher
    assert isinstance(d, KeySharedDispatcher)
    a, b = h.consumer_named("a"), h.consumer_named("b")
    if shape == "backlog":
        await publish_chunks(h, 10, one_a_read=False)
    for c in (a, b):
        d.add_consumer(c)
        d.flow(c, 3 if shape == "few permits" else 100)
    await drain_lane()
    if shape != "backlog":
        await publish_chunks(h, 10)
    owner, other = (a, b) if d.owner(d.key_hash(b"k")) is a else (b, a)
    if shape == "few permits":
        for _ in range(3):
            d.flow(owner, 3)
            await drain_lane()
    await drain_lane()
    assert len(owner.pending_acks) == 10 and not d.replay, (shape, len(owner.pending_acks), len(d.replay))
    sent = list(owner.pending_acks)  # (in the order sent: nothing is acknowledged here)
    assert sent == sorted(sent), shape  # the chunks in order
    h.publish_key("k")  # past its limit, the next message of its key waits for acks
    await drain_lane()
    assert len(owner.pending_acks) == 10 and not other.pending_acks and len(d.replay) == 1, shape
    h.check()


async def test_key_shared_chunked_message_whose_consumer_leaves_midway_goes_whole_to_the_next() -> None:
    """The key's consumer leaves with 7 chunks of a 10-chunk message (past its unacked limit of 5): they come
    back through the replay set and the key's next consumer gets the whole message, in order."""
    h = await Harness.create_keyed()
    h.consumer_unacked_limit = 5
    d = h.dispatcher
    assert isinstance(d, KeySharedDispatcher)
    a, b = h.consumer_named("a"), h.consumer_named("b")
    for c in (a, b):
        d.add_consumer(c)
    owner, other = (a, b) if d.owner(d.key_hash(b"k")) is a else (b, a)
    d.flow(owner, 7)
    await drain_lane()
    await publish_chunks(h, 10)
    assert len(owner.pending_acks) == 7
    d.remove_consumer(owner)
    d.flow(other, 100)
    await drain_lane()
    sent = list(other.pending_acks)
    assert len(sent) == 10 and sent == sorted(sent) and not d.replay
    h.check()


async def test_key_shared_hash_held_by_a_chunked_message_past_its_drain_shows_as_draining_and_clears() -> None:
    """The ring moves key k from a to b while a holds the first chunks of a message of k; a acknowledges them
    (the drain clears) and the rest of the message still goes to a, its chunks' consumer. A message of k for b
    is then held back by a consumer the ring did not move it from at the last change: that hash is draining
    again (the stats name it, with the blocked attempt) and clears, blocked count and all, once a acknowledges.
    Before, the blocked attempts were counted for a hash the stats did not show and kept until the next ring
    change."""
    h, d, a = await KeyHarness.with_first_consumer(100)
    assert isinstance(d, KeySharedDispatcher)
    b = h.consumer_named("b")
    key = key_moving_to(h, b, [a])
    kh = d.key_hash(key.encode())
    for i in range(2):
        h.ledger.add_entry(chunk(i, 4, key=key), lambda pos, exc: None)
    await drain_lane()
    first = list(a.pending_acks)
    assert len(first) == 2
    d.add_consumer(b)
    d.flow(b, 100)
    await drain_lane()
    assert [x["hash"] for x in d.consumer_key_stats()[a]["drainingHashes"]] == [kh]
    h.ack(a, first)
    await drain_lane()
    assert d.consumer_key_stats()[a]["drainingHashes"] == []
    for i in range(2, 4):
        h.ledger.add_entry(chunk(i, 4, key=key), lambda pos, exc: None)
    await drain_lane()
    rest = list(a.pending_acks)
    assert len(rest) == 2 and not b.pending_acks
    h.publish_key(key)
    await drain_lane()
    assert not b.pending_acks  # (a still holds the end of the message of this key)
    (held,) = d.consumer_key_stats()[a]["drainingHashes"]
    assert held["hash"] == kh and held["unackMsgs"] == 2 and held["blockedAttempts"] >= 1
    h.ack(a, rest)
    await drain_lane()
    assert len(b.pending_acks) == 1
    assert d.consumer_key_stats()[a]["drainingHashes"] == [] and not d._blocked_attempts
    h.check()


class KeySharedMachine(PermitMachine):
    """The same interleavings on Key_Shared, plus: a key is never pending on two consumers at once."""

    def __init__(self) -> None:
        RuleBasedStateMachine.__init__(self)
        self.loop = asyncio.new_event_loop()
        self.h = self.loop.run_until_complete(Harness.create_keyed())
        self.members = []

    @rule(n=st.integers(min_value=1, max_value=20), keys=st.integers(min_value=1, max_value=20))
    def publish(self, n: int, batch: int = 0, keys: int = 3) -> None:
        assert isinstance(self.h, KeyHarness)
        for i in range(n):
            self.h.publish_key(f"k{i % keys}")

    @rule(i=st.integers(min_value=0, max_value=10))
    def nack_all(self, i: int) -> None:
        if self.members:
            c = self.members[i % len(self.members)]
            self.h.dispatcher.redeliver(c, None)

    @invariant()
    def one_owner_per_key(self) -> None:
        dispatcher = self.h.dispatcher
        assert isinstance(dispatcher, KeySharedDispatcher)
        hash_of = dispatcher._hash_of
        holders: dict[int, int] = {}
        for c in self.members:
            for p in c.pending_acks:
                kh = hash_of[p]
                assert holders.setdefault(kh, id(c)) == id(c), "a key is pending on two consumers"


KeySharedMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
TestKeySharedMachine = KeySharedMachine.TestCase


async def test_key_shared_dispatcher_replaced_after_everyone_left_keeps_every_entry() -> None:
    """All consumers leave while entries wait in the replay set; the next one must get them all.
    (The subscription replaces the dispatcher: a real broker's topic and subscription.)"""
    async with Broker() as broker:
        assert broker.server is not None
        topic = await broker.server.service.get_persistent_topic(
            TopicName.parse("persistent://public/default/ks-renew"), create=True)
        sub = await topic.get_or_create_subscription("sub", True, pb.CommandSubscribe.Earliest, None)

        def key_shared_consumer(name: str) -> Consumer:
            return Consumer(FakeCnx(), 0, name, pb.CommandSubscribe.Key_Shared, 0, sub, -1, {})  # type: ignore[arg-type]

        a = key_shared_consumer("a")
        sub.add_consumer(a)
        d = sub.dispatcher
        assert d is not None
        d.flow(a, 1)
        for _ in range(3):
            topic.ledger.add_entry(keyed_entry("k"), lambda pos, exc: None)
        await eventually(lambda: a.pending_acks and topic.ledger.number_of_entries == 3, "one delivered")
        await drain_lane()
        assert len(a.pending_acks) == 1  # one permit: the other two wait
        sub.remove_consumer(a)
        b = key_shared_consumer("b")
        sub.add_consumer(b)  # a fresh dispatcher (nobody was left on the old one)
        assert sub.dispatcher is not None and sub.dispatcher is not d
        sub.dispatcher.flow(b, 10)
        await eventually(lambda: len(b.pending_acks) == 3, "b to receive all three")


async def test_key_shared_replay_read_in_flight_never_overtakes_a_leaving_consumers_entries() -> None:
    """A replay read completes later (a disk read); meanwhile the owner leaves and its OLDER pending
    entry of the same key joins the replay set. The newer replayed entry must wait for it."""
    h, d, a = await KeyHarness.with_first_consumer(1)
    b = h.consumer_named("b")
    # A key that stays with "a" when "b" joins (so "a" holds it until it leaves).
    key = next(k for k in (f"k{i}" for i in range(10_000))
               if _owner_with(d, [a, b], d.key_hash(k.encode())) is a)
    h.publish_key(key)  # e1 -> a (its one permit)
    h.publish_key(key)  # e2 -> replay set (a has no permits)
    await drain_lane()
    [e1] = list(a.pending_acks)
    d.add_consumer(b)
    d.flow(b, 10)
    await drain_lane()
    # From now on replay reads complete on a later loop turn, as a disk read would.
    cursor = h.cursor
    real_replay = cursor.replay_entries
    loop = asyncio.get_running_loop()

    def deferred_replay(positions: Any, callback: Any) -> None:
        def post(entries: list[Entry], exc: BaseException | None) -> None:
            loop.call_soon(callback, entries, exc)

        real_replay(positions, post)

    cursor.replay_entries = deferred_replay  # type: ignore[method-assign]
    d.flow(a, 1)  # a can take e2 again: a replay read for e2 starts
    await asyncio.sleep(0)  # the lane settles the flow and issues the (deferred) replay read
    d.remove_consumer(a)  # a leaves before that read completes: e1 joins the replay set
    await drain_lane()
    await drain_lane()
    got = list(b.pending_acks)
    assert got and got[0] == e1, f"b received {got}, expected {e1} first"
    h.check()


def _owner_with(d: Any, consumers: list[Consumer], key_hash: int) -> Consumer | None:
    saved = list(d.consumers)
    d.consumers[:] = consumers
    d._rebuild_ring()
    owner = d.owner(key_hash)
    d.consumers[:] = saved
    d._rebuild_ring()
    return owner  # type: ignore[no-any-return]


# -- batch entries: permits count messages, reads count entries ---------------------------------------


async def exclusive_harness() -> Harness:
    h = await Harness.create()
    h.dispatcher = SingleActiveConsumerDispatcher(h.context, h.cursor, failover=False)
    return h


async def test_exclusive_stops_at_permits_with_batch_entries() -> None:
    h = await exclusive_harness()
    d = h.dispatcher
    h.publish(30, batch=100)
    c = h.consumer()
    d.add_consumer(c)
    d.flow(c, 1000)  # the first read asks for 100 entries: nothing tells it entries are batches yet
    await drain_lane()
    assert (c.msg_out, c.permits) == (1000, 0)  # ten entries, not a hundred
    d.flow(c, 150)  # an entry that does not fit whole still goes out (permits go negative)
    await drain_lane()
    assert (c.msg_out, c.permits) == (1200, -50)
    d.flow(c, 250)
    await drain_lane()
    assert (c.msg_out, c.permits) == (1400, 0)
    # nothing skipped or repeated by the reads that stopped early
    assert [p.entry_id for p in sorted(c.pending_acks)] == list(range(14))
    assert d.avg_messages_per_entry == 100
    h.check()


async def test_shared_sizes_reads_by_messages_per_entry() -> None:
    h = await Harness.create()
    d = h.dispatcher
    h.publish(40, batch=50)
    c = h.consumer()
    d.add_consumer(c)
    d.flow(c, 100)
    await drain_lane()
    assert c.msg_out == 100  # two entries; the rest waits in the log or the replay set
    d.flow(c, 500)
    await drain_lane()
    assert c.msg_out == 600
    assert d.entries_to_read(500) == 10  # learnt: 50 messages per entry
    assert [p.entry_id for p in sorted(c.pending_acks)] == list(range(12))
    h.check()
