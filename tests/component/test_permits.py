"""Permit accounting of the Shared dispatcher when consumers come and go with FLOW still queued.

Invariant: dispatcher.total_permits == sum(c.permits - c.pending_flow for c in consumers).
The lane is drained by the event loop; these tests control when by awaiting a loop turn.
"""

from __future__ import annotations

import asyncio
import struct
from types import SimpleNamespace
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from broker.config import BrokerConfig
from broker.dispatch.shared import SharedDispatcher
from broker.protocol import pulsar_api_pb2 as pb
from broker.service.consumer import Consumer
from broker.service.subscription import Subscription
from managed_ledger import InitialPosition, MemoryManagedLedgerFactory


class FakeCnx:
    def __init__(self) -> None:
        self.frames = 0
        self.writable = True
        self.remote_address = "test"
        self.client_version = "test"

    def write(self, data: bytes) -> None:
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
    """A Shared dispatcher over a real in-memory cursor, with fake connections."""

    def __init__(self, ledger: Any, cursor: Any) -> None:
        loop = asyncio.get_running_loop()
        topic = SimpleNamespace(loop=loop, name=SimpleNamespace(partition_index=-1),
                                service=SimpleNamespace(config=BrokerConfig()))
        self.sub = Subscription(topic, "sub", cursor, durable=True)  # type: ignore[arg-type]
        self.ledger = ledger
        self.dispatcher = SharedDispatcher(self.sub, max_read_batch=100, max_unacked_per_consumer=50000)  # type: ignore[arg-type]
        self.next_id = 0

    @classmethod
    async def create(cls) -> Harness:
        factory = MemoryManagedLedgerFactory()
        ledger = await factory.open("permits")
        cursor = await ledger.open_cursor("sub", InitialPosition.EARLIEST)
        return cls(ledger, cursor)

    def consumer(self, consumer_id: int | None = None, name: str = "c") -> Consumer:
        if consumer_id is None:
            consumer_id = self.next_id
            self.next_id += 1
        return Consumer(FakeCnx(), consumer_id, name, pb.CommandSubscribe.Shared, 0, self.sub,  # type: ignore[arg-type]
                        -1, {})

    def publish(self, n: int, batch: int = 0) -> None:
        for _ in range(n):
            self.ledger.add_entry(entry_bytes(batch), lambda pos, exc: None)

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

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.h: Harness = self.loop.run_until_complete(Harness.create())
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
