"""Raw-socket tests against an in-process broker: handshake, errors, malformed input policy."""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
from collections.abc import AsyncIterator

import pytest

from broker.embedded import Broker
from broker.protocol import commands
from broker.protocol import pulsar_api_pb2 as pb
from broker.protocol.limits import DEFAULT_MAX_MESSAGE_SIZE, max_frame_size
from broker.topic_name import TopicName
from managed_ledger import ManagedLedgerError
from managed_ledger.stored import StoredManagedLedger
from tests.component.wire import WAIT_S, T, WireClient, port_of, producer_cmd, send_frame, subscribe_cmd
from tests.waiting import eventually


@pytest.fixture
async def broker() -> AsyncIterator[Broker]:
    async with Broker() as b:
        yield b


async def subscribed_with_producer(broker: Broker, topic: str) -> WireClient:
    """A connected wire client with consumer 1 subscribed to ``topic`` and producer 1 on it."""
    c = await WireClient.open(port_of(broker))
    await c.connect()
    c.send(subscribe_cmd(topic, request_id=1))
    assert (await c.recv()).type == T.SUCCESS
    c.send(producer_cmd(topic, request_id=2))
    assert (await c.recv()).type == T.PRODUCER_SUCCESS
    return c


async def test_handshake_answers_connected(broker: Broker) -> None:
    c = await WireClient.open(port_of(broker))
    connected = await c.connect()
    assert connected.protocol_version == 20
    assert connected.max_message_size == DEFAULT_MAX_MESSAGE_SIZE
    assert connected.server_version
    ping = pb.BaseCommand(type=T.PING)
    ping.ping.SetInParent()
    c.send(ping)
    assert (await c.recv()).type == T.PONG
    c.close()


async def test_command_before_connect_closes(broker: Broker) -> None:
    c = await WireClient.open(port_of(broker))
    c.send(producer_cmd("t"))
    assert await c.closed_by_broker()


async def test_oversize_frame_closes_only_that_connection(broker: Broker) -> None:
    good = await WireClient.open(port_of(broker))
    await good.connect()
    bad = await WireClient.open(port_of(broker))
    await bad.connect()
    bad.writer.write(struct.pack(">II", max_frame_size(DEFAULT_MAX_MESSAGE_SIZE), 10))
    assert await bad.closed_by_broker()
    good.send(producer_cmd("persistent://public/default/wire-ok"))
    assert (await good.recv()).type == T.PRODUCER_SUCCESS
    good.close()


async def test_checksum_error_keeps_connection(broker: Broker) -> None:
    c = await WireClient.open(port_of(broker))
    await c.connect()
    c.send(producer_cmd("persistent://public/default/wire-crc"))
    assert (await c.recv()).type == T.PRODUCER_SUCCESS
    c.send(*send_frame(1, 0, b"bad", corrupt=True))
    err = await c.recv()
    assert err.type == T.SEND_ERROR and err.send_error.error == pb.ServerError.ChecksumError
    c.send(*send_frame(1, 1, b"good"))
    receipt = await c.recv()
    assert receipt.type == T.SEND_RECEIPT and receipt.send_receipt.sequence_id == 1
    c.close()


async def test_a_batch_claiming_more_messages_than_it_holds_is_refused(broker: Broker) -> None:
    """The count is refused (consumers would read past the payload: the C++ client crashed on one
    claiming 2**31-1), the SENDs around it in the same read are stored."""
    c = await WireClient.open(port_of(broker))
    await c.connect()
    c.send(producer_cmd("persistent://public/default/wire-batch-count"))
    assert (await c.recv()).type == T.PRODUCER_SUCCESS
    single = struct.pack(">I", 2) + b"\x18\x00"  # one empty message: its size and SingleMessageMetadata
    sends = [send_frame(1, 0, single, num_messages_in_batch=1),
             send_frame(1, 1, single, num_messages_in_batch=2**31 - 1),
             send_frame(1, 2, single * 5, num_messages_in_batch=6),
             send_frame(1, 3, single * 5, num_messages_in_batch=5)]
    c.writer.write(b"".join(commands.frame_with_payload(cmd, payload) for cmd, payload in sends))
    replies = [await c.recv() for _ in range(4)]
    # (an error is answered at once, a receipt once stored)
    assert sorted((r.send_receipt.sequence_id if r.type == T.SEND_RECEIPT else r.send_error.sequence_id, r.type)
                  for r in replies) == [(0, T.SEND_RECEIPT), (1, T.SEND_ERROR), (2, T.SEND_ERROR), (3, T.SEND_RECEIPT)]
    assert {r.send_error.error for r in replies if r.type == T.SEND_ERROR} == {pb.ServerError.MetadataError}
    c.close()


async def test_receipts_in_send_order(broker: Broker) -> None:
    c = await WireClient.open(port_of(broker))
    await c.connect()
    c.send(producer_cmd("persistent://public/default/wire-order"))
    assert (await c.recv()).type == T.PRODUCER_SUCCESS
    for seq in range(50):
        c.send(*send_frame(1, seq, b"x"))
    seqs = [(await c.recv()).send_receipt.sequence_id for _ in range(50)]
    assert seqs == list(range(50))
    c.close()


async def test_send_for_unknown_producer_closes(broker: Broker) -> None:
    c = await WireClient.open(port_of(broker))
    await c.connect()
    c.send(*send_frame(42, 0, b"x"))
    assert await c.closed_by_broker()


async def test_flow_with_zero_permits_closes(broker: Broker) -> None:
    c = await WireClient.open(port_of(broker))
    await c.connect()
    flow = pb.BaseCommand(type=T.FLOW)
    flow.flow.consumer_id = 1
    flow.flow.messagePermits = 0
    c.send(flow)
    assert await c.closed_by_broker()


async def test_lookup_errors_use_lookup_response(broker: Broker) -> None:
    c = await WireClient.open(port_of(broker))
    await c.connect()
    cmd = pb.BaseCommand(type=T.LOOKUP)
    cmd.lookupTopic.topic = "persistent://no-such-tenant/ns/t"
    cmd.lookupTopic.request_id = 7
    c.send(cmd)
    reply = await c.recv()
    assert reply.type == T.LOOKUP_RESPONSE
    assert reply.lookupTopicResponse.response == pb.CommandLookupTopicResponse.Failed
    assert reply.lookupTopicResponse.error == pb.ServerError.TopicNotFound
    cmd = pb.BaseCommand(type=T.PARTITIONED_METADATA)
    cmd.partitionMetadata.topic = "bad://name"
    cmd.partitionMetadata.request_id = 8
    c.send(cmd)
    reply = await c.recv()
    assert reply.type == T.PARTITIONED_METADATA_RESPONSE
    assert reply.partitionMetadataResponse.error == pb.ServerError.InvalidTopicName
    c.close()


async def test_transactions_are_refused(broker: Broker) -> None:
    c = await WireClient.open(port_of(broker))
    await c.connect()
    cmd = pb.BaseCommand(type=T.NEW_TXN)
    cmd.newTxn.request_id = 3
    c.send(cmd)
    reply = await c.recv()
    assert reply.type == T.ERROR and reply.error.error == pb.ServerError.NotAllowedError
    c.close()


async def test_keepalive_closes_a_silent_connection() -> None:
    async with Broker(keepAliveIntervalSeconds=1) as b:
        quiet = await WireClient.open(port_of(b))
        await quiet.connect()
        # The broker pings; this client never answers, so the next tick closes it.
        ping = await quiet.recv()
        assert ping.type == T.PING
        assert await quiet.closed_by_broker()


async def test_keepalive_closes_a_connection_without_connect() -> None:
    async with Broker(keepAliveIntervalSeconds=1) as b:
        idle = await WireClient.open(port_of(b))
        assert await idle.closed_by_broker()


async def test_ack_receipt_and_consumer_stats(broker: Broker) -> None:
    c = await WireClient.open(port_of(broker))
    await c.connect()
    topic = "persistent://public/default/wire-stats"
    c.send(producer_cmd(topic))
    assert (await c.recv()).type == T.PRODUCER_SUCCESS
    c.send(*send_frame(1, 0, b"x"))
    receipt = (await c.recv()).send_receipt
    c.send(subscribe_cmd(topic, "sub", 5, 2, initialPosition=pb.CommandSubscribe.Earliest))
    assert (await c.recv()).type == T.SUCCESS
    flow = pb.BaseCommand(type=T.FLOW)
    flow.flow.consumer_id, flow.flow.messagePermits = 5, 10
    c.send(flow)
    msg = await c.recv()
    assert msg.type == T.MESSAGE and msg.message.message_id.entryId == receipt.message_id.entryId
    stats = pb.BaseCommand(type=T.CONSUMER_STATS)
    stats.consumerStats.request_id, stats.consumerStats.consumer_id = 3, 5
    c.send(stats)
    r = (await c.recv()).consumerStatsResponse
    assert (r.request_id, r.unackedMessages, r.availablePermits, r.type) == (3, 1, 9, "Exclusive")
    ack = pb.BaseCommand(type=T.ACK)
    ack.ack.consumer_id, ack.ack.ack_type, ack.ack.request_id = 5, pb.CommandAck.Individual, 4
    ack.ack.message_id.add(ledgerId=receipt.message_id.ledgerId, entryId=receipt.message_id.entryId)
    c.send(ack)
    reply = await c.recv()
    assert reply.type == T.ACK_RESPONSE and reply.ackResponse.request_id == 4
    assert not reply.ackResponse.HasField("error")
    c.send(stats)
    r = (await c.recv()).consumerStatsResponse
    assert (r.unackedMessages, r.msgBacklog) == (0, 0)
    unknown = pb.BaseCommand(type=T.CONSUMER_STATS)
    unknown.consumerStats.request_id, unknown.consumerStats.consumer_id = 6, 99
    c.send(unknown)
    assert (await c.recv()).consumerStatsResponse.error_code == pb.ServerError.ConsumerNotFound
    c.close()


async def test_read_compacted_refused_on_shared(broker: Broker) -> None:
    c = await WireClient.open(port_of(broker))
    await c.connect()
    c.send(subscribe_cmd("persistent://public/default/rc", "s", sub_type=pb.CommandSubscribe.Shared,
                         read_compacted=True))
    reply = await c.recv()
    assert reply.type == T.ERROR and reply.error.error == pb.ServerError.NotAllowedError
    c.close()


async def test_a_cumulative_ack_past_the_last_entry_is_refused_and_the_connection_goes_on(broker: Broker) -> None:
    c = await WireClient.open(port_of(broker))
    await c.connect()
    topic = "persistent://public/default/wire-ack-past-end"
    c.send(subscribe_cmd(topic, request_id=1))
    assert (await c.recv()).type == T.SUCCESS
    ack = pb.BaseCommand(type=T.ACK)
    ack.ack.consumer_id = 1
    ack.ack.ack_type = pb.CommandAck.Cumulative
    ack.ack.request_id = 2
    ack.ack.message_id.add(ledgerId=2**62, entryId=0)
    c.send(ack)
    answer = await c.recv()
    assert answer.type == T.ACK_RESPONSE and answer.ackResponse.request_id == 2
    assert answer.ackResponse.error == pb.ServerError.PersistenceError
    ping = pb.BaseCommand(type=T.PING)
    ping.ping.SetInParent()
    c.send(ping)
    assert (await c.recv()).type == T.PONG
    c.close()


async def test_a_command_failing_unexpectedly_closes_only_its_connection(
        broker: Broker, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    from broker.service.server_cnx import ServerCnx

    def broken(self: ServerCnx, cmd: pb.BaseCommand, payload: bytes | None) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(ServerCnx, "handle_get_last_message_id", broken)
    good = await WireClient.open(port_of(broker))
    await good.connect()
    bad = await WireClient.open(port_of(broker))
    await bad.connect()
    ask = pb.BaseCommand(type=T.GET_LAST_MESSAGE_ID)
    ask.getLastMessageId.consumer_id = 1
    ask.getLastMessageId.request_id = 1
    bad.send(ask)
    assert await bad.closed_by_broker()
    assert any("a command failed unexpectedly" in r.getMessage() and r.exc_info for r in caplog.records)
    good.send(producer_cmd("persistent://public/default/wire-after-bug"))
    assert (await good.recv()).type == T.PRODUCER_SUCCESS
    good.close()


async def test_a_producer_closed_before_its_creation_completed_is_not_left_behind(broker: Broker) -> None:
    topic = "persistent://public/default/wire-close-pending"
    c = await WireClient.open(port_of(broker))
    await c.connect()
    create = producer_cmd(topic)
    create.producer.producer_access_mode = pb.Exclusive
    close = pb.BaseCommand(type=T.CLOSE_PRODUCER)
    close.close_producer.producer_id = 1
    close.close_producer.request_id = 2
    c.writer.write(commands.frame(create) + commands.frame(close))  # the close comes while the creation waits
    answers = {(a := await c.recv()).type: a for _ in range(2)}
    assert answers[T.SUCCESS].success.request_id == 2
    assert answers[T.ERROR].error.request_id == 1  # the creation is abandoned, as Pulsar answers it
    other = await WireClient.open(port_of(broker))
    await other.connect()
    other.send(create)  # an Exclusive producer: nothing holds the topic
    assert (await other.recv()).type == T.PRODUCER_SUCCESS
    c.close()
    other.close()


async def test_a_client_that_never_reads_its_answers_is_no_longer_read_past_a_limit(
        broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    # The answers the broker holds for it stay bounded (it stops reading requests), and once the client
    # reads, every request is answered.
    from broker import connection as connection_module

    monkeypatch.setattr(connection_module, "UNREAD_OUTPUT_LIMIT", 256 * 1024)
    c = await WireClient.open(port_of(broker))
    await c.connect()
    assert broker.server is not None
    [conn] = broker.server.connections
    for sock, option in ((c.writer.get_extra_info("socket"), socket.SO_RCVBUF),
                         (conn.transport.get_extra_info("socket") if conn.transport else None, socket.SO_SNDBUF)):
        assert sock is not None
        sock.setsockopt(socket.SOL_SOCKET, option, 16 * 1024)  # (small kernel buffers: the test stays small)
    ping = pb.BaseCommand(type=T.PING)
    ping.ping.SetInParent()
    pings = 100_000
    c.writer.write(commands.frame(ping) * pings)  # never drained: the client does not read either
    await eventually(lambda: conn.reading_paused, "the broker to stop reading")
    assert conn.queued_bytes() < 2 * 1024 * 1024
    pongs = 0
    while pongs < pings:
        assert (await c.recv()).type == T.PONG
        pongs += 1
    assert not conn.reading_paused
    c.close()


async def test_a_topic_name_past_the_length_limit_is_refused_as_invalid(broker: Broker) -> None:
    from broker.topic_name import MAX_NAME_LENGTH

    topic = "persistent://public/default/" + "x" * MAX_NAME_LENGTH
    c = await WireClient.open(port_of(broker))
    await c.connect()
    c.send(producer_cmd(topic))
    refused = await c.recv()
    assert refused.type == T.ERROR and refused.error.error == pb.ServerError.InvalidTopicName
    ask = pb.BaseCommand(type=T.GET_OR_CREATE_SCHEMA)
    ask.getOrCreateSchema.request_id = 2
    ask.getOrCreateSchema.topic = topic
    ask.getOrCreateSchema.schema.name = "s"
    ask.getOrCreateSchema.schema.type = pb.Schema.String
    ask.getOrCreateSchema.schema.schema_data = b""
    c.send(ask)
    answer = await c.recv()  # answered (before, an error other than the broker's own left it unanswered)
    assert answer.type == T.GET_OR_CREATE_SCHEMA_RESPONSE
    assert answer.getOrCreateSchemaResponse.error_code == pb.ServerError.InvalidTopicName
    c.send(producer_cmd("persistent://public/default/" + "x" * 200, producer_id=2, request_id=3))
    assert (await c.recv()).type == T.PRODUCER_SUCCESS
    c.close()


async def test_an_ack_set_longer_than_any_batch_is_cut_to_what_a_batch_can_hold(broker: Broker) -> None:
    topic = "persistent://public/default/wire-huge-ack-set"
    c = await subscribed_with_producer(broker, topic)
    c.send(*send_frame(1, 0, b"x"))
    receipt = await c.recv()
    assert receipt.type == T.SEND_RECEIPT
    ack = pb.BaseCommand(type=T.ACK)
    ack.ack.consumer_id = 1
    ack.ack.ack_type = pb.CommandAck.Individual
    mid = ack.ack.message_id.add(ledgerId=receipt.send_receipt.message_id.ledgerId,
                                 entryId=receipt.send_receipt.message_id.entryId)
    mid.ack_set.extend([-1] * 100_000)  # 800 KB of "still unacknowledged" bits (a 1 MB frame)
    c.send(ack)
    ping = pb.BaseCommand(type=T.PING)
    ping.ping.SetInParent()
    c.send(ping)
    assert (await c.recv()).type == T.PONG  # (the ACK before it was handled)
    assert broker.server is not None
    sub = broker.server.service.topics[topic].subscriptions["sub"]
    [kept] = sub.batch_ack_sets.values()
    assert len(kept) == -(-broker.server.config.maxMessageSize // 6 // 64)
    c.close()


async def test_a_second_unsubscribe_while_the_first_runs_is_answered_consumer_not_found(
        broker: Broker, caplog: pytest.LogCaptureFixture) -> None:
    c = await WireClient.open(port_of(broker))
    await c.connect()
    c.send(subscribe_cmd("persistent://public/default/wire-unsub-twice", request_id=1))
    assert (await c.recv()).type == T.SUCCESS
    frames = b""
    for request_id in (2, 3):  # (one write: the second arrives while the first deletes the subscription)
        unsub = pb.BaseCommand(type=T.UNSUBSCRIBE)
        unsub.unsubscribe.consumer_id = 1
        unsub.unsubscribe.request_id = request_id
        frames += commands.frame(unsub)
    c.writer.write(frames)
    answers = {}
    for _ in range(2):
        answer = await c.recv()
        request_id = answer.success.request_id if answer.type == T.SUCCESS else answer.error.request_id
        answers[request_id] = answer
    assert answers[2].type == T.SUCCESS
    assert answers[3].type == T.ERROR
    assert (answers[3].error.error, answers[3].error.message) == (pb.ServerError.MetadataError, "Consumer not found")
    assert not [r for r in caplog.records if r.exc_info]
    c.close()


def gate_cursor_removal(broker: Broker, topic: str, monkeypatch: pytest.MonkeyPatch) -> tuple[
        asyncio.Event, asyncio.Event]:
    """Hold the removal of a deleted cursor's stored state (a ZooKeeper round trip on BookKeeper storage) of the
    loaded ``topic``'s managed ledger until the second event is set; the first is set once one started."""
    assert broker.server is not None
    ledger = broker.server.service.topics[topic].ledger
    assert isinstance(ledger, StoredManagedLedger)
    entered, release = asyncio.Event(), asyncio.Event()
    remove = type(ledger)._remove_cursor_state

    async def slow_remove(self: StoredManagedLedger, name: str) -> None:
        entered.set()
        await release.wait()
        await remove(self, name)

    monkeypatch.setattr(type(ledger), "_remove_cursor_state", slow_remove)
    return entered, release


def unsubscribe_cmd(consumer_id: int, request_id: int) -> pb.BaseCommand:
    cmd = pb.BaseCommand(type=T.UNSUBSCRIBE)
    cmd.unsubscribe.consumer_id, cmd.unsubscribe.request_id = consumer_id, request_id
    return cmd


async def test_a_subscribe_while_the_subscription_is_deleted_is_refused_as_not_ready(
        broker: Broker, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """Pulsar's fenced subscription: until the cursor of an unsubscribed subscription is deleted, a SUBSCRIBE to
    its name is answered ServiceNotReady (the client retries), then makes a new one. It used to open the cursor
    being deleted, which the deletion then closed under the new subscription ("cursor sub is closed")."""
    topic = "persistent://public/default/wire-subscribe-while-deleted"
    c = await subscribed_with_producer(broker, topic)
    entered, release = gate_cursor_removal(broker, topic, monkeypatch)
    c.send(unsubscribe_cmd(1, 3))
    await asyncio.wait_for(entered.wait(), WAIT_S)
    other = await WireClient.open(port_of(broker))
    await other.connect()
    other.send(subscribe_cmd(topic, request_id=1))
    refused = await other.recv()
    assert refused.type == T.ERROR and refused.error.error == pb.ServerError.ServiceNotReady, refused
    release.set()
    assert (await c.recv()).type == T.SUCCESS
    other.send(subscribe_cmd(topic, request_id=2))
    assert (await other.recv()).type == T.SUCCESS
    c.send(*send_frame(1, 0, b"after"))
    assert (await c.recv()).type == T.SEND_RECEIPT
    flow = pb.BaseCommand(type=T.FLOW)
    flow.flow.consumer_id, flow.flow.messagePermits = 1, 10
    other.send(flow)
    assert (await other.recv()).type == T.MESSAGE
    c.close()
    other.close()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


async def test_an_unsubscribe_whose_cursor_deletion_fails_is_answered_persistence_error_and_logged_once(
        broker: Broker, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """The managed ledger cannot delete the cursor (storage failing): the UNSUBSCRIBE is answered PersistenceError
    with the reason, as Pulsar answers a failed cursor deletion, and the failure is logged once, by the topic that
    ran the deletion (it was also answered UnknownError and logged a second time by the connection's handler)."""
    topic = "persistent://public/default/wire-unsub-fails"
    c = await subscribed_with_producer(broker, topic)
    assert broker.server is not None
    ledger = broker.server.service.topics[topic].ledger

    async def failing(name: str) -> None:
        raise ManagedLedgerError("the storage is gone")

    monkeypatch.setattr(ledger, "delete_cursor", failing)
    c.send(unsubscribe_cmd(1, 3))
    answer = await c.recv()
    assert answer.type == T.ERROR and answer.error.error == pb.ServerError.PersistenceError, answer
    assert "the storage is gone" in answer.error.message
    c.close()
    assert len([r for r in caplog.records if r.levelno >= logging.ERROR]) == 1


async def test_an_unsubscribe_whose_connection_closes_midway_still_deletes_the_subscription(
        broker: Broker, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """The client closes its connection while its UNSUBSCRIBE removes the cursor's stored state (a ZooKeeper round
    trip on BookKeeper storage): the connection's handler is cancelled, but the deletion is the topic's and goes
    on, as in Pulsar (its ServerCnx does not stop an unsubscribe when the client goes). Cancelled halfway, it left
    the cursor in the managed ledger with the subscription gone from the topic: back at the next load, and on
    BookKeeper its every state write failed ("has no stored state") and the close logged an error."""
    topic = "persistent://public/default/wire-unsub-then-gone"
    c = await WireClient.open(port_of(broker))
    await c.connect()
    c.send(subscribe_cmd(topic, request_id=1))
    assert (await c.recv()).type == T.SUCCESS
    assert broker.server is not None
    service = broker.server.service
    ledger = service.topics[topic].ledger
    entered, release = gate_cursor_removal(broker, topic, monkeypatch)
    closed_before = broker.server.connections_closed
    c.send(unsubscribe_cmd(1, 2))
    await asyncio.wait_for(entered.wait(), WAIT_S)
    c.close()
    await eventually(lambda: broker.server is not None and broker.server.connections_closed > closed_before,
                     "the broker to see the connection closed")
    release.set()
    await eventually(lambda: "sub" not in ledger.cursors, "the cursor deleted")
    assert await service.unload_topic(TopicName.parse(topic))
    c = await WireClient.open(port_of(broker))
    await c.connect()
    c.send(producer_cmd(topic, request_id=3))  # (loads the topic again)
    assert (await c.recv()).type == T.PRODUCER_SUCCESS
    assert "sub" not in service.topics[topic].subscription_names()
    c.close()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


@pytest.mark.parametrize("name", ["", "  "])
async def test_an_empty_subscription_name_is_refused_on_a_persistent_topic(broker: Broker, name: str) -> None:
    c = await WireClient.open(port_of(broker))
    await c.connect()
    c.send(subscribe_cmd("persistent://public/default/wire-empty-sub", name, request_id=1))
    refused = await c.recv()
    assert refused.type == T.ERROR  # (PersistentTopic.internalSubscribe's NamingException)
    assert (refused.error.error, refused.error.message) == (pb.ServerError.ProducerBusy, "Empty subscription name")
    c.send(subscribe_cmd("non-persistent://public/default/wire-empty-sub", name, consumer_id=2, request_id=2))
    assert (await c.recv()).type == T.SUCCESS  # (NonPersistentTopic has no such check)
    c.close()


async def test_an_id_closed_while_its_creation_is_pending(broker: Broker) -> None:
    """A producer id is free again at once (Pulsar's handleCloseProducer removes the pending future); a
    consumer id is not until its creation ends (handleCloseConsumer keeps the failed future)."""
    topic = "persistent://public/default/wire-reuse-pending-id"
    c = await WireClient.open(port_of(broker))
    await c.connect()
    close_producer = pb.BaseCommand(type=T.CLOSE_PRODUCER)
    close_producer.close_producer.producer_id = 1
    close_producer.close_producer.request_id = 2
    close_consumer = pb.BaseCommand(type=T.CLOSE_CONSUMER)
    close_consumer.close_consumer.consumer_id = 1
    close_consumer.close_consumer.request_id = 5
    # (one write: each CLOSE arrives while the creation before it is pending, then the client asks again
    # with the same id, as a client whose request timed out does)
    c.writer.write(b"".join(commands.frame(cmd) for cmd in (
        producer_cmd(topic, 1, 1), close_producer, producer_cmd(topic, 1, 3),
        subscribe_cmd(topic, consumer_id=1, request_id=4), close_consumer, subscribe_cmd(topic, consumer_id=1,
                                                                                          request_id=6))))
    answers: dict[int, pb.BaseCommand] = {}
    while not {2, 3, 5, 6} <= answers.keys():
        answer = await c.recv()
        body = {T.PRODUCER_SUCCESS: "producer_success", T.SUCCESS: "success", T.ERROR: "error"}[answer.type]
        answers[getattr(answer, body).request_id] = answer
    assert answers[2].type == answers[5].type == T.SUCCESS
    assert answers[3].type == T.PRODUCER_SUCCESS  # (before, ServiceNotReady until the first creation ended)
    assert answers[6].type == T.ERROR
    assert (answers[6].error.error, answers[6].error.message) == (
        pb.ServerError.UnknownError, "Consumer that failed is already present on the connection")
    assert broker.server is not None
    assert len(broker.server.service.topics[topic].producers) == 1
    c.close()


async def test_a_string_field_that_is_not_utf8_is_read_with_replacement_characters(broker: Broker) -> None:
    # (the protobuf runtime hands such a field back as bytes: before, a traceback and the connection closed)
    c = await WireClient.open(port_of(broker))
    await c.connect()
    ask = pb.BaseCommand(type=T.GET_SCHEMA)
    ask.getSchema.topic = "persistent://public/default/wire-utf8-AAA"
    ask.getSchema.request_id = 1
    c.writer.write(commands.frame(ask).replace(b"AAA", b"A\xffA"))
    answer = await c.recv()
    assert answer.type == T.GET_SCHEMA_RESPONSE and answer.getSchemaResponse.error_code == pb.ServerError.TopicNotFound
    c.writer.write(commands.frame(producer_cmd("persistent://public/default/wire-utf8-BBB")).replace(b"BBB", b"B\xfeB"))
    assert (await c.recv()).type == T.PRODUCER_SUCCESS  # (as Pulsar, whose decoder reads it as Java's UTF-8 does)
    assert broker.server is not None
    assert "persistent://public/default/wire-utf8-B\ufffdB" in broker.server.service.topics
    c.close()


async def test_a_partition_key_that_is_not_utf8_does_not_stop_dispatch(broker: Broker) -> None:
    topic = "persistent://public/default/wire-utf8-key"
    c = await subscribed_with_producer(broker, topic)
    cmd, payload = send_frame(1, 0, b"a", partition_key="KEYX")
    c.writer.write(commands.frame_with_payload(cmd, payload.replace(b"KEYX", b"KE\xffX")[6:]))  # (no checksum)
    c.send(*send_frame(1, 1, b"b"))
    flow = pb.BaseCommand(type=T.FLOW)
    flow.flow.consumer_id = 1
    flow.flow.messagePermits = 10
    c.send(flow)
    received: list[int] = []
    while len(received) < 2:  # (before, the dispatcher's read failed on the key: nothing was delivered)
        answer = await c.recv()
        if answer.type == T.MESSAGE:
            received.append(answer.message.message_id.entryId)
    assert received == sorted(received)
    c.close()


async def test_get_schema_names_the_schema_by_its_topic(broker: Broker) -> None:
    """GET_SCHEMA's schema is named as Pulsar 4.0.7 names it (measured, tests/security/test_pulsar_auth_answers.py):
    ``tenant/ns/<encoded local name>`` of the partitioned topic, whatever name the producer gave its schema."""
    c = await WireClient.open(port_of(broker))
    await c.connect()
    cmd = producer_cmd("persistent://public/default/named schema-partition-0")
    cmd.producer.schema.CopyFrom(pb.Schema(name="whatever", schema_data=b"", type=pb.Schema.String))
    c.send(cmd)
    assert (await c.recv()).type == T.PRODUCER_SUCCESS
    for topic in ("persistent://public/default/named schema-partition-0", "public/default/named schema"):
        ask = pb.BaseCommand(type=T.GET_SCHEMA)
        ask.getSchema.topic, ask.getSchema.request_id = topic, 2
        c.send(ask)
        answer = (await c.recv()).getSchemaResponse
        assert answer.schema.name == "public/default/named+schema", topic
    c.close()
