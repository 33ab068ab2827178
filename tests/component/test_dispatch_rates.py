"""Dispatch rate limits on the dispatchers' paths, with a fake clock: what a dispatcher sends while
the limit has nothing left, and that it is charged for what it sent."""

from __future__ import annotations

import asyncio
import bisect
from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import Any

import pulsar

from broker.dispatch.context import DispatchContext
from broker.dispatch.shared import SharedDispatcher
from broker.dispatch.single_active import SingleActiveConsumerDispatcher
from broker.embedded import BrokerThread
from broker.protocol import pulsar_api_pb2 as pb
from broker.service.consumer import Consumer
from broker.service.rate_limits import DispatchRate
from managed_ledger import Entry, InitialPosition, MemoryManagedLedgerFactory, Position
from tests.component.test_permits import NO_SUBSCRIPTION, FakeCnx, entry_bytes
from tests.waiting import eventually, wait_for


class View:
    """A compacted view over every entry up to ``horizon`` (all of them survived)."""

    def __init__(self, entries: list[Entry]) -> None:
        self.entries = [SimpleNamespace(entry=e, messages=1, ack_set=None) for e in entries]
        self.horizon = entries[-1].position
        self._positions = [e.position for e in entries]

    def read_entries(self, start: Position, max_entries: int, max_bytes: int | None,
                     callback: Callable[[Sequence[Any], bool, BaseException | None], None]) -> None:
        i = bisect.bisect_left(self._positions, start)
        read = self.entries[i:i + max_entries]
        asyncio.get_running_loop().call_soon(callback, read, i + len(read) >= len(self.entries), None)


async def compacted_reader(entries: int, in_view: int, limits: tuple[int, int]) -> tuple[Any, Consumer, DispatchRate]:
    """A read_compacted Exclusive consumer with permits for 100 on a topic of ``entries`` entries whose first
    ``in_view`` are its compacted view, under a dispatch rate of ``limits`` (messages, bytes) per period whose
    clock stands still: (dispatcher, consumer, rate)."""
    factory = MemoryManagedLedgerFactory()
    ledger = await factory.open("compacted")
    cursor = await ledger.open_cursor("sub", InitialPosition.EARLIEST)
    stored: list[Entry] = []
    data = entry_bytes()

    def added(pos: Position | None, exc: BaseException | None) -> None:
        assert pos is not None
        stored.append(Entry(pos, data))

    for _ in range(entries):
        ledger.add_entry(data, added)
    await eventually(lambda: len(stored) == entries, "the entries stored")
    view = View(stored[:in_view])
    rate = DispatchRate(SimpleNamespace(generation=1), lambda: (*limits, 1, False), clock=lambda: 0.0)
    context = DispatchContext(loop=asyncio.get_running_loop(), name="sub", rates=(rate,),
                              compacted_view=lambda: view)
    d = SingleActiveConsumerDispatcher(context, cursor, failover=False)
    c = Consumer(FakeCnx(), 0, "c", pb.CommandSubscribe.Exclusive, 0, NO_SUBSCRIPTION, -1, {})  # type: ignore[arg-type]
    c.read_compacted = True
    d.add_consumer(c)
    d.flow(c, 100)
    return d, c, rate


async def test_compacted_view_is_read_within_the_dispatch_rate() -> None:
    """A read_compacted consumer of an Exclusive / Failover subscription is served from the compacted
    view within the dispatch rate limits, as Pulsar sizes that read with the same calculateToRead: 3
    messages per period here, with the clock standing still. The view used to be served at once,
    whatever the limit."""
    d, c, rate = await compacted_reader(10, 10, (3, 0))
    await eventually(lambda: rate.throttled_times > 0, "the dispatcher to run out of budget")
    assert len(c.pending_acks) == 3 and d.throttled_msg_events[0] >= 1
    assert d._rate_timer is not None  # (the read is retried when the limit allows it)
    d.close()


async def test_a_read_compacted_consumer_crossing_from_the_view_to_the_ledger_is_charged_once_per_message() -> None:
    """The single active dispatcher charges the dispatch rate where it serves the compacted view and where it
    serves a ledger read; a read goes one way or the other, never both, so a read_compacted consumer that reads
    the view and then the entries after its horizon is charged once for every message it is sent (as Pulsar
    charges each read once, in dispatchEntriesToConsumer, whichever reader read it): 10 from the view and 5
    from the ledger cost 15 (the clock stands still, so nothing refills)."""
    d, c, rate = await compacted_reader(15, 10, (1000, 1 << 20))
    await eventually(lambda: len(c.pending_acks) == 15, "the view and the ledger's entries after it sent")
    assert rate.budget() == (1000 - 15, (1 << 20) - 15 * len(entry_bytes()))
    d.close()


def test_broker_dispatch_rate_is_shared_by_every_topic_s_subscriptions() -> None:
    """dispatchThrottlingRateInMsg: one limit over what every subscription of the broker dispatches
    (Pulsar's broker dispatch rate limiter, asked by calculateToRead next to the topic's and the
    subscription's). Its clock stands still here, so it never refills: 10 messages in all, whichever
    topic takes them. The first topic's consumer takes the 10; the second topic's consumer, with 10
    waiting in its backlog and permits for 1000, is then refused by the broker's limit and gets nothing.
    A limit per topic or per subscription would have given it 10 of its own."""
    with BrokerThread(dispatchThrottlingRateInMsg=10, managedLedgerStorage="memory", dataDir="") as broker:
        service = broker.server.service
        rate = service.broker_dispatch_rate
        assert rate is not None
        rate._clock = lambda: 0.0  # (what is dispatched is never paid back)
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
        try:
            topics = {name: f"persistent://public/default/{name}" for name in ("first", "second")}
            client.subscribe(topics["second"], "s").close()  # (its subscription keeps the backlog)
            for topic in topics.values():
                producer = client.create_producer(topic, batching_enabled=False)
                for i in range(10):
                    producer.send(b"%d" % i)

            def dispatcher(name: str) -> Any:
                return service.topics[topics[name]].subscriptions["s"].dispatcher

            def sent(name: str) -> int:
                return sum(len(c.pending_acks) for c in dispatcher(name).consumers)

            def parked_on_the_limit(name: str) -> bool:  # refused, and waiting for the limit to allow more
                d = dispatcher(name)
                return d is not None and d.consumers and d._rate_timer is not None

            client.subscribe(topics["first"], "s", receiver_queue_size=1000,
                             initial_position=pulsar.InitialPosition.Earliest)
            wait_for(lambda: sent("first") == 10 and parked_on_the_limit("first"), what="the first to take the 10")
            client.subscribe(topics["second"], "s", receiver_queue_size=1000)
            wait_for(lambda: parked_on_the_limit("second"), what="the second to be refused")
            assert sent("second") == 0 and sent("first") == 10
            assert dispatcher("second").throttled_msg_events[2] >= 1  # (refused by the broker's limit, index 2)
        finally:
            client.close()


def test_no_broker_dispatch_rate_adds_no_limit() -> None:
    with BrokerThread(managedLedgerStorage="memory", dataDir="") as broker:
        assert broker.server.service.broker_dispatch_rate is None


async def test_dispatch_rate_spares_an_active_cursor_when_non_backlog_throttling_is_off() -> None:
    """dispatchThrottlingOnNonBacklogConsumerEnabled=false: a subscription whose cursor is active (not
    backlogged) is neither held to the dispatch rate nor charged for what it is sent, as Pulsar's
    calculateToRead and acquirePermitsForDeliveredMessages skip the limits while cursor.isActive();
    once the cursor is inactive (backlogged) the limit applies again. The key was not known: every
    subscription was held to the limit."""
    factory = MemoryManagedLedgerFactory()
    ledger = await factory.open("non-backlog")
    cursor = await ledger.open_cursor("sub", InitialPosition.EARLIEST)
    rate = DispatchRate(SimpleNamespace(generation=1), lambda: (3, 0, 1, False), clock=lambda: 0.0)
    context = DispatchContext(loop=asyncio.get_running_loop(), name="sub", rates=(rate,), throttle_non_backlog=False)
    d = SharedDispatcher(context, cursor)
    c = Consumer(FakeCnx(), 0, "c", pb.CommandSubscribe.Shared, 0, NO_SUBSCRIPTION, -1, {})  # type: ignore[arg-type]
    d.add_consumer(c)
    d.flow(c, 100)
    assert cursor.is_active
    for _ in range(10):
        ledger.add_entry(entry_bytes(), lambda pos, exc: None)
    await eventually(lambda: len(c.pending_acks) == 10, "everything sent to the active cursor's consumer")
    assert rate.throttled_times == 0 and rate.budget() == (3, None)  # nothing charged
    # Another subscription of the topic, backlogged (inactive): the same limit holds it to 3.
    backlogged = await ledger.open_cursor("backlogged", InitialPosition.EARLIEST)
    backlogged.set_active(False)  # (what a subscription does once it is backlogged)
    d2 = SharedDispatcher(context, backlogged)
    c2 = Consumer(FakeCnx(), 1, "c2", pb.CommandSubscribe.Shared, 0, NO_SUBSCRIPTION, -1, {})  # type: ignore[arg-type]
    d2.add_consumer(c2)
    d2.flow(c2, 100)
    await eventually(lambda: rate.throttled_times > 0, "the limit to hold the inactive cursor")
    assert len(c2.pending_acks) == 3
    d2.close()
    d.close()


async def test_dispatch_rate_counts_entries_with_batch_message_throttling() -> None:
    """dispatchThrottlingOnBatchMessageEnabled: a limit on messages counts entries, so a batch of 10
    costs one (Pulsar's acquirePermitsForDeliveredMessages charges entries then). 3 per period: three
    batches go out, and one period later three more. The key was unknown: the three batches cost 30
    and the next period found the limit still 24 short."""
    factory = MemoryManagedLedgerFactory()
    ledger = await factory.open("batch-throttling")
    cursor = await ledger.open_cursor("sub", InitialPosition.EARLIEST)
    for _ in range(10):
        ledger.add_entry(entry_bytes(batch=10), lambda pos, exc: None)
    now = [0.0]
    rate = DispatchRate(SimpleNamespace(generation=1), lambda: (3, 0, 1, False), clock=lambda: now[0])
    context = DispatchContext(loop=asyncio.get_running_loop(), name="sub", rates=(rate,), rate_counts_entries=True)
    d = SharedDispatcher(context, cursor)
    c = Consumer(FakeCnx(), 0, "c", pb.CommandSubscribe.Shared, 0, NO_SUBSCRIPTION, -1, {})  # type: ignore[arg-type]
    d.add_consumer(c)
    d.flow(c, 1000)
    await eventually(lambda: rate.throttled_times > 0, "the limit to hold the dispatcher")
    assert len(c.pending_acks) == 3 and c.unacked_messages == 30
    now[0] = 1.0  # a period later: 3 entries' worth again
    d.trigger_read()  # (what the retry timer does)
    await eventually(lambda: len(c.pending_acks) == 6, "three more batches")
    d.close()
