"""Backpressure, limits and hostile input on a live in-process broker (raw sockets)."""

from __future__ import annotations

import asyncio
import os
import random
import struct
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pulsar
import pytest

from broker.config import BrokerConfig
from broker.connection import Connection
from broker.dispatch.key_shared import KeySharedDispatcher
from broker.embedded import Broker
from broker.protocol import commands
from broker.protocol import pulsar_api_pb2 as pb
from broker.server import BrokerServer
from managed_ledger import AddCallback, ManagedLedger, ManagedLedgerConfig, MemoryManagedLedgerFactory
from tests.component.wire import T, WireClient, port_of, producer_cmd, send_frame, subscribe_cmd
from tests.waiting import eventually

# Also on asyncio's own loop (tests/conftest.py): an embedding program's loop may be asyncio's, and the transports'
# write buffers and pausing, which these tests exercise, differ between the two.
pytestmark = pytest.mark.both_loops

# -- a managed ledger whose appends complete only when the test says so ------------------------------

class GatedLedger:
    def __init__(self, real: ManagedLedger, gate: Gate) -> None:
        self._real = real
        self._gate = gate

    def add_entry(self, data: bytes, callback: AddCallback) -> None:
        self._gate.held.append((self._real, [data], callback))

    def add_entries(self, data: list[bytes], callback: AddCallback) -> None:
        self._gate.held.append((self._real, data, callback))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


class Gate(MemoryManagedLedgerFactory):
    def __init__(self) -> None:
        super().__init__()
        self.held: list[tuple[ManagedLedger, list[bytes], AddCallback]] = []

    async def open(self, name: str, config: ManagedLedgerConfig | None = None) -> Any:  # a GatedLedger, duck-typed
        return GatedLedger(await super().open(name, config), self)

    def release(self) -> None:
        held, self.held = self.held, []
        for real, data, callback in held:
            real.add_entries(data, callback)


@pytest.fixture
async def gated() -> AsyncIterator[tuple[BrokerServer, Gate]]:
    cfg = BrokerConfig(brokerServicePort=0, webServicePort=0, bindAddress="127.0.0.1", dataDir="",
                       managedLedgerStorage="memory",
                       maxPendingPublishRequestsPerConnection=10, maxMessagePublishBufferSizeInMB=1)
    server = BrokerServer(cfg)
    gate = Gate()
    server.service.ledger_factory = gate
    await server.start()
    try:
        yield server, gate
    finally:
        await server.stop()


def producer_connection(server: BrokerServer) -> Connection:
    return next(c for c in server.connections if c.cnx.producers)


async def sending(server: BrokerServer, topic: str, count: int, payload: bytes) -> WireClient:
    """A connection with a producer on ``topic`` that has sent ``count`` messages of ``payload`` (receipts not read)."""
    c = await WireClient.open(server.port)
    await c.connect()
    c.send(producer_cmd(topic))
    assert (await c.recv()).type == T.PRODUCER_SUCCESS
    for seq in range(count):
        c.send(*send_frame(1, seq, payload))
    return c


async def receipts_as_released(c: WireClient, gate: Gate, n: int) -> list[int]:
    """The sequence ids of the next ``n`` receipts, the gate letting one held write through before each wait."""
    receipts: list[int] = []
    while len(receipts) < n:
        gate.release()
        try:
            reply = await asyncio.wait_for(c.recv(), 0.2)
        except TimeoutError:
            continue
        assert reply.type == T.SEND_RECEIPT, reply
        receipts.append(reply.send_receipt.sequence_id)
    return receipts


async def test_pending_sends_pause_reading_not_errors(gated: tuple[BrokerServer, Gate]) -> None:
    server, gate = gated
    c = await sending(server, "persistent://public/default/bp-count", 50, b"x")
    conn = producer_connection(server)
    await eventually(lambda: conn.reading_paused, "reading to pause")
    # Exactly the limit is in flight: the rest waits unread, no SendError is written.
    assert conn.pending_sends == 10 and sum(len(data) for _, data, _ in gate.held) == 10
    assert await receipts_as_released(c, gate, 50) == list(range(50))
    await eventually(lambda: not conn.reading_paused, "reading to resume")
    c.close()


async def test_publish_buffer_limit_pauses_publishers(gated: tuple[BrokerServer, Gate]) -> None:
    server, gate = gated
    # 8 x 300 KiB > the 1 MiB buffer, but under the 10-send limit
    c = await sending(server, "persistent://public/default/bp-bytes", 8, b"y" * 300 * 1024)
    conn = producer_connection(server)
    await eventually(lambda: conn.reading_paused, "reading to pause on the byte limit")
    assert server.publish_buffer_bytes > 1024 * 1024 and conn.pending_sends < 8
    assert len(await receipts_as_released(c, gate, 8)) == 8
    assert server.publish_buffer_bytes == 0
    c.close()


async def test_publish_buffer_limit_raised_while_paused_reads_the_publishers_again(
        gated: tuple[BrokerServer, Gate]) -> None:
    """maxMessagePublishBufferSizeInMB is a dynamic setting: raised while a publisher is held for it, the publisher
    is read again at once (before, only when the held bytes drained to half the old limit)."""
    server, gate = gated
    c = await sending(server, "persistent://public/default/bp-raised", 8, b"y" * 300 * 1024)
    conn = producer_connection(server)
    await eventually(lambda: conn.reading_paused, "reading to pause on the byte limit")
    assert conn.pending_sends < 8
    await server.service.metadata.update_dynamic_configuration(
        lambda stored: stored.__setitem__("maxMessagePublishBufferSizeInMB", "64"))
    # Nothing stored yet (the gate holds every write): the rest of the sends are read all the same.
    await eventually(lambda: conn.pending_sends == 8, "the held sends read under the raised limit")
    assert not conn.reading_paused and server.publish_buffer_limit == 64 * 1024 * 1024
    assert len(await receipts_as_released(c, gate, 8)) == 8
    c.close()


# -- consumer backpressure -----------------------------------------------------------------------------

async def idle_consumer_and_producer(b: Broker, topic: str, permits: int) -> tuple[WireClient, WireClient, Connection]:
    """A consumer given ``permits`` that then reads nothing, a producer on the same topic, and the
    broker's connection of the consumer."""
    assert b.server is not None
    consumer = await WireClient.open(port_of(b))
    await consumer.connect()
    consumer.send(subscribe_cmd(topic))
    assert (await consumer.recv()).type == T.SUCCESS
    flow = pb.BaseCommand(type=T.FLOW)
    flow.flow.consumer_id, flow.flow.messagePermits = 1, permits
    consumer.send(flow)
    conn = next(c for c in b.server.connections if c.cnx.consumers)
    producer = await WireClient.open(port_of(b))
    await producer.connect()
    producer.send(producer_cmd(topic))
    assert (await producer.recv()).type == T.PRODUCER_SUCCESS
    return consumer, producer, conn


async def receive_entries_in_order(consumer: WireClient, n: int) -> None:
    seqs: list[int] = []
    while len(seqs) < n:
        msg = await consumer.recv()
        assert msg.type == T.MESSAGE
        seqs.append(msg.message.message_id.entryId)
    assert seqs == sorted(seqs) and len(set(seqs)) == n


async def test_slow_reader_bounds_broker_buffers_and_gets_everything_in_order() -> None:
    async with Broker() as b:
        # The consumer stops reading its socket while 8192 x 8 KiB are published.
        consumer, producer, conn = await idle_consumer_and_producer(b, "persistent://public/default/bp-reader", 32768)
        body = b"z" * 8192
        peak = 0
        for seq in range(8192):
            producer.send(*send_frame(1, seq, body))
            if seq % 256 == 255:
                for _ in range(256):
                    assert (await producer.recv()).type == T.SEND_RECEIPT
                assert conn.transport is not None
                peak = max(peak, conn.transport.get_write_buffer_size())
        # One read batch (100 entries) may go out past the high-water mark, never the backlog.
        assert peak < 2 * 1024 * 1024, peak
        assert not conn.writable
        await receive_entries_in_order(consumer, 8192)
        consumer.close()
        producer.close()


async def test_reads_completing_within_one_loop_turn_stop_at_the_high_water_mark() -> None:
    # Entries confirmed together wake the tailing read once; its reads then complete inline from
    # the cache, one after the other, in the same loop turn, before that turn's writev tells the
    # transport anything. The frames queued in the turn count toward the high-water mark, so a
    # consumer that reads nothing makes the broker hold at most the mark plus one read.
    batch = 20
    async with Broker(dispatcherMaxReadBatchSize=batch) as b:
        consumer, producer, conn = await idle_consumer_and_producer(b, "persistent://public/default/bp-one-turn", 1000)
        peak = 0
        queue = conn.write_many

        def watched(frames: list[bytes]) -> None:
            nonlocal peak
            queue(frames)
            peak = max(peak, conn.queued_bytes())

        conn.write_many = watched  # type: ignore[method-assign]
        body = b"q" * 8192
        producer.writer.write(b"".join(commands.frame_with_payload(*send_frame(1, seq, body)) for seq in range(400)))
        for _ in range(400):
            assert (await producer.recv()).type == T.SEND_RECEIPT
        assert conn.transport is not None
        high_water = conn.transport.get_write_buffer_limits()[1]
        assert 0 < peak <= high_water + batch * (8192 + 256), (peak, high_water)
        await receive_entries_in_order(consumer, 400)
        consumer.close()
        producer.close()


async def test_single_frames_queued_in_one_loop_turn_count_toward_the_high_water_mark() -> None:
    # write() (errors, pongs, single answers) is accounted as write_many() is: past the mark within
    # one turn the connection is not writable, and the turn's writev makes it writable again.
    async with Broker() as b:
        assert b.server is not None
        client = await WireClient.open(port_of(b))
        await client.connect()
        conn = next(iter(b.server.connections))
        assert conn.transport is not None and conn.writable
        high_water = conn.transport.get_write_buffer_limits()[1]
        frame = commands.error(1, pb.ServerError.UnknownError, "x" * 1000)
        written = 0
        for _ in range(high_water // len(frame) + 2):
            if not conn.writable:
                break
            conn.write(frame)
            written += len(frame)
        assert not conn.writable
        assert high_water < written <= high_water + len(frame)
        await eventually(lambda: conn.writable, "the turn's writev")
        client.close()


# -- limits ---------------------------------------------------------------------------------------------

async def test_publish_rate_limit_stops_reading_the_socket_until_released() -> None:
    # 10 messages per second at broker level: the first read's 30 SENDs are all stored (the
    # limit is applied after the read), then the socket is not read; what was sent meanwhile is
    # taken once the throttle lets go (released here at once instead of after 2 s).
    async with Broker(maxPublishRatePerTopicInMessages=10, managedLedgerStorage="memory", dataDir="") as b:
        assert b.server is not None
        c = await WireClient.open(port_of(b))
        await c.connect()
        c.send(producer_cmd("persistent://public/default/rate-wire"))
        assert (await c.recv()).type == T.PRODUCER_SUCCESS
        c.writer.write(b"".join(commands.frame_with_payload(*send_frame(1, seq, b"x")) for seq in range(30)))
        conn = producer_connection(b.server)
        await eventually(lambda: conn.reading_paused, "the rate limit to stop reading")
        receipts = [(await c.recv()).send_receipt.sequence_id for _ in range(30)]
        assert receipts == list(range(30))
        for seq in range(30, 40):
            c.send(*send_frame(1, seq, b"x"))
        topic = b.server.service.topics["persistent://public/default/rate-wire"]
        assert topic.publish_throttle.throttled_times == 1
        topic.publish_throttle.release()
        receipts = [(await c.recv()).send_receipt.sequence_id for _ in range(10)]
        assert receipts == list(range(30, 40))
        c.close()


async def test_broker_publish_rate_limit_holds_every_topic_s_publishers() -> None:
    # brokerPublisherThrottlingMaxMessageRate=1: one limit over all topics (Pulsar's broker publish
    # rate limiter). A connection that publishes 30 to one topic empties it (29 s to pay back) and is not
    # read; another connection's single message to another topic then finds it empty too and is held.
    async with Broker(brokerPublisherThrottlingMaxMessageRate=1, managedLedgerStorage="memory", dataDir="") as b:
        assert b.server is not None
        throttle = b.server.service.broker_publish_throttle
        assert throttle is not None
        first, second = await WireClient.open(port_of(b)), await WireClient.open(port_of(b))
        for c, name in ((first, "broker-rate-a"), (second, "broker-rate-b")):
            await c.connect()
            c.send(producer_cmd(f"persistent://public/default/{name}"))
            assert (await c.recv()).type == T.PRODUCER_SUCCESS
        first.writer.write(b"".join(commands.frame_with_payload(*send_frame(1, seq, b"x")) for seq in range(30)))
        assert [(await first.recv()).send_receipt.sequence_id for _ in range(30)] == list(range(30))
        await eventually(lambda: throttle.paused == 1, "the broker rate limit to stop reading the first")
        second.send(*send_frame(1, 0, b"x"))
        assert (await second.recv()).send_receipt.sequence_id == 0
        await eventually(lambda: throttle.paused == 2, "the broker rate limit to stop reading the second")
        assert all(c.reading_paused for c in b.server.connections) and throttle.throttled_times == 1
        for seq in range(30, 35):
            first.send(*send_frame(1, seq, b"x"))
        throttle.release()  # (what its timer does once the bucket is back at zero)
        assert [(await first.recv()).send_receipt.sequence_id for _ in range(5)] == list(range(30, 35))
        first.close()
        second.close()


async def test_a_closed_connection_is_let_go_by_the_publish_rate_limits_at_once() -> None:
    # A connection held by the broker-wide and the topic's publish rate limits is closed while they still
    # throttle (29 s to pay back): both forget it then. They kept it (and through it its producers and
    # buffers) until their timers fired, and a limit kept busy by other connections pushes its timer
    # further each time: with connections coming and going, the held set only grew. (Closed here by the
    # broker, as its keep-alive does: a connection not read does not read the client's pongs, nor its close.)
    async with Broker(brokerPublisherThrottlingMaxMessageRate=1, maxPublishRatePerTopicInMessages=1,
                      managedLedgerStorage="memory", dataDir="") as b:
        assert b.server is not None
        broker_throttle = b.server.service.broker_publish_throttle
        assert broker_throttle is not None
        c = await WireClient.open(port_of(b))
        await c.connect()
        c.send(producer_cmd("persistent://public/default/rate-closed"))
        assert (await c.recv()).type == T.PRODUCER_SUCCESS
        c.writer.write(b"".join(commands.frame_with_payload(*send_frame(1, seq, b"x")) for seq in range(30)))
        assert [(await c.recv()).send_receipt.sequence_id for _ in range(30)] == list(range(30))
        topic_throttle = b.server.service.topics["persistent://public/default/rate-closed"].publish_throttle
        await eventually(lambda: broker_throttle.paused == 1 and topic_throttle.paused == 1,
                         "the rate limits to stop reading the connection")
        server = b.server
        producer_connection(server).close()
        await eventually(lambda: not server.connections, "the broker to see the connection closed")
        assert (broker_throttle.paused, topic_throttle.paused) == (0, 0)
        c.close()


async def test_no_broker_publish_rate_limit_makes_no_limiter() -> None:
    async with Broker(managedLedgerStorage="memory", dataDir="") as b:
        assert b.server is not None and b.server.service.broker_publish_throttle is None


async def test_connection_limit() -> None:
    async with Broker(brokerMaxConnections=2) as b:
        first = await WireClient.open(port_of(b))
        second = await WireClient.open(port_of(b))
        await first.connect()
        await second.connect()
        third = await WireClient.open(port_of(b))
        err = await third.recv()
        assert err.type == T.ERROR and err.error.error == pb.ServerError.NotAllowedError
        assert "maximum number of connections" in err.error.message
        assert await third.closed_by_broker()
        first.close()
        second.close()


async def test_producer_and_consumer_limits() -> None:
    async with Broker(maxProducersPerTopic=1, maxConsumersPerSubscription=1) as b:
        c = await WireClient.open(port_of(b))
        await c.connect()
        topic = "persistent://public/default/limits"
        c.send(producer_cmd(topic, 1, 1))
        assert (await c.recv()).type == T.PRODUCER_SUCCESS
        c.send(producer_cmd(topic, 2, 2))
        err = await c.recv()
        assert err.type == T.ERROR and err.error.error == pb.ServerError.ProducerBusy
        for consumer_id, request_id in ((1, 3), (2, 4)):
            c.send(subscribe_cmd(topic, "sub", consumer_id, request_id, pb.CommandSubscribe.Shared))
        assert (await c.recv()).type == T.SUCCESS
        err = await c.recv()
        assert err.type == T.ERROR and err.error.error == pb.ServerError.ConsumerBusy
        c.close()


# -- hostile input ------------------------------------------------------------------------------------------

async def assert_healthy(b: Broker) -> None:
    """Another connection is unaffected: handshake and a ping round trip."""
    c = await WireClient.open(port_of(b))
    await c.connect()
    ping = pb.BaseCommand(type=T.PING)
    ping.ping.SetInParent()
    c.send(ping)
    assert (await c.recv()).type == T.PONG
    c.close()


async def test_unknown_command_type_is_ignored() -> None:
    async with Broker() as b:
        c = await WireClient.open(port_of(b))
        await c.connect()
        body = b"\x08\x63"  # BaseCommand.type = 99, a type this broker does not know
        c.writer.write(struct.pack(">II", len(body) + 4, len(body)) + body)
        ping = pb.BaseCommand(type=T.PING)
        ping.ping.SetInParent()
        c.send(ping)
        assert (await c.recv()).type == T.PONG
        c.close()


async def test_truncated_frame_and_silence_are_closed_by_keepalive() -> None:
    async with Broker(keepAliveIntervalSeconds=1) as b:
        c = await WireClient.open(port_of(b))
        await c.connect()
        c.writer.write(struct.pack(">II", 100, 20) + b"\x08")  # promises 100 bytes, sends 9
        assert (await c.recv()).type == T.PING
        assert await c.closed_by_broker()
        await assert_healthy(b)


async def test_mutated_frames_never_hurt_other_connections() -> None:
    rng = random.Random(6650)
    templates = [send_frame(1, 0, b"payload")]
    for cmd in (producer_cmd("persistent://public/default/fuzz"), pb.BaseCommand(type=T.PING)):
        templates.append((cmd, b""))
    templates[-1][0].ping.SetInParent()
    async with Broker() as b:
        for _ in range(150):
            c = await WireClient.open(port_of(b))
            await c.connect()
            c.send(producer_cmd("persistent://public/default/fuzz"))
            await c.recv()
            cmd, payload = rng.choice(templates)
            from broker.protocol import commands

            data = bytearray(commands.frame_with_payload(cmd, payload) if payload else commands.frame(cmd))
            for _ in range(rng.randint(1, 4)):
                data[rng.randrange(len(data))] = rng.randrange(256)
            c.writer.write(bytes(data))
            await c.writer.drain()
            c.close()
        await assert_healthy(b)
        # And the official client still works against this broker.
        assert b.server is not None
        url = b.service_url

        def roundtrip() -> bytes:
            client = pulsar.Client(url, operation_timeout_seconds=10)
            try:
                consumer = client.subscribe("after-fuzz", "sub")
                client.create_producer("after-fuzz").send(b"still fine")
                return bytes(consumer.receive(10_000).data())
            finally:
                client.close()

        assert await asyncio.to_thread(roundtrip) == b"still fine"


# -- disconnect storms ----------------------------------------------------------------------------------

async def test_abrupt_disconnect_storm_leaks_nothing() -> None:
    async with Broker() as b:
        assert b.server is not None
        server = b.server
        topics = [f"persistent://public/default/storm-{i}" for i in range(5)]
        # Load the topics first: the broker's own housekeeping tasks start with the first topic.
        warm = await WireClient.open(port_of(b))
        await warm.connect()
        for i, t in enumerate(topics):
            warm.send(producer_cmd(t, i, i))
            assert (await warm.recv()).type == T.PRODUCER_SUCCESS
        warm.close()
        await eventually(lambda: not server.connections, "the warm-up connection to close")
        tasks_before = len(asyncio.all_tasks())
        fds_before = len(os.listdir("/proc/self/fd"))
        clients: list[WireClient] = []
        for i in range(1000):
            c = await WireClient.open(port_of(b))
            await c.connect()
            topic = topics[i % len(topics)]
            if i % 2:
                c.send(producer_cmd(topic, 1, 1))
                assert (await c.recv()).type == T.PRODUCER_SUCCESS
            else:
                c.send(subscribe_cmd(topic, sub_type=pb.CommandSubscribe.Shared))
                assert (await c.recv()).type == T.SUCCESS
                flow = pb.BaseCommand(type=T.FLOW)
                flow.flow.consumer_id, flow.flow.messagePermits = 1, 1000
                c.send(flow)
            clients.append(c)
        for c in clients:
            c.writer.transport.abort()  # no CLOSE_PRODUCER / CLOSE_CONSUMER: dropped
        await eventually(lambda: not server.connections, "the broker to notice every drop")
        for t in topics:
            loaded = server.service.topics[t]
            assert not loaded.producers
            for s in loaded.subscriptions.values():
                assert not s.consumers
                assert s.dispatcher is not None and s.dispatcher.total_permits == 0
        await eventually(lambda: len(asyncio.all_tasks()) <= tasks_before, "handler tasks to finish")
        await eventually(lambda: len(os.listdir("/proc/self/fd")) <= fds_before, "sockets to close")
        await assert_healthy(b)


async def test_non_durable_shared_consumer_has_no_unacked_limit() -> None:
    # maxUnackedMessagesPerConsumer does not apply to the consumers of a non-durable subscription:
    # Pulsar's Consumer.getMaxUnackedMessages answers 0 unless the subscription is durable. A
    # non-durable Shared consumer used to stop after 5 unacknowledged messages here.
    async with Broker(maxUnackedMessagesPerConsumer=5, managedLedgerStorage="memory", dataDir="") as b:
        topic = "persistent://public/default/non-durable-unacked"
        c = await WireClient.open(port_of(b))
        await c.connect()
        c.send(producer_cmd(topic))
        assert (await c.recv()).type == T.PRODUCER_SUCCESS
        for seq in range(20):
            c.send(*send_frame(1, seq, b"x"))
        assert [(await c.recv()).send_receipt.sequence_id for _ in range(20)] == list(range(20))
        c.send(subscribe_cmd(topic, "nd", 1, 2, pb.CommandSubscribe.Shared, durable=False,
                             initialPosition=pb.CommandSubscribe.Earliest))
        assert (await c.recv()).type == T.SUCCESS
        flow = pb.BaseCommand(type=T.FLOW)
        flow.flow.consumer_id, flow.flow.messagePermits = 1, 100
        c.send(flow)
        messages = [await c.recv() for _ in range(20)]
        assert all(m.type == T.MESSAGE for m in messages)
        c.close()


async def test_raised_consumer_unacked_limit_frees_a_blocked_key_shared_consumer() -> None:
    # maxUnackedMessagesPerConsumer=2: Key_Shared consumer "a" holds 2 unacked messages of its key and is
    # blocked; the 3rd waits in the replay set while the dispatcher's read waits for new entries on behalf
    # of "b". Raised by a namespace policy, the limit must let the 3rd go out to "a" at once (the live
    # consumers follow the policy). The policy change only asked for a read, which the waiting read made
    # a no-op: the 3rd stayed put until "a" acked or sent a FLOW.
    async with Broker(maxUnackedMessagesPerConsumer=2, managedLedgerStorage="memory", dataDir="") as b:
        assert b.server is not None
        topic = "persistent://public/default/key-shared-unacked-raised"
        c = await WireClient.open(port_of(b))
        await c.connect()
        c.send(producer_cmd(topic))
        assert (await c.recv()).type == T.PRODUCER_SUCCESS
        for consumer_id, name in ((1, "a"), (2, "b")):
            c.send(subscribe_cmd(topic, "ks", consumer_id, 10 + consumer_id, pb.CommandSubscribe.Key_Shared,
                                 consumer_name=name))
            assert (await c.recv()).type == T.SUCCESS
            flow = pb.BaseCommand(type=T.FLOW)
            flow.flow.consumer_id, flow.flow.messagePermits = consumer_id, 100
            c.send(flow)
        sub = b.server.service.topics[topic].subscriptions["ks"]
        d = sub.dispatcher
        assert isinstance(d, KeySharedDispatcher)
        await eventually(lambda: d.total_permits == 200, "both consumers' permits")
        a = next(x for x in d.consumers if x.consumer_id == 1)
        key = next(k for k in (f"k{i}" for i in range(10_000)) if d.owner(d.key_hash(k.encode())) is a)
        for seq in range(3):
            c.send(*send_frame(1, seq, b"m%d" % seq, partition_key=key))
        received: list[int] = []
        while len(received) < 5:  # 3 receipts and the 2 messages "a" may take
            frame = await c.recv()
            if frame.type == T.MESSAGE:
                assert frame.message.consumer_id == 1
                received.append(frame.message.message_id.entryId)
            else:
                assert frame.type == T.SEND_RECEIPT
                received.append(-1)
        await eventually(lambda: a.blocked and len(d.replay) == 1 and d.read_outstanding,
                         "the 3rd message held for the blocked consumer, the read waiting for new entries")
        url = f"{b.web_url}/admin/v2/namespaces/public/default/maxUnackedMessagesPerConsumer"
        async with aiohttp.ClientSession() as http, http.post(url, json=100) as reply:
            assert reply.status == 204
        frame = await c.recv()
        assert frame.type == T.MESSAGE and frame.message.consumer_id == 1 and frame.message.message_id.entryId == 2
        c.close()
