"""Non-persistent topics over the raw wire: what the official client hides (Failover's
ACTIVE_CONSUMER_CHANGE, GetLastMessageId refused, seek and ack answers, read_compacted
refusal, permits per batch and the permit invariant)."""

from __future__ import annotations

import struct
from collections.abc import AsyncIterator

import pytest

from broker.dispatch.key_selector import key_hash
from broker.embedded import Broker
from broker.protocol import pulsar_api_pb2 as pb
from broker.protocol.checksum import crc32c
from broker.service.nonpersistent import NonPersistentSubscription
from broker.topic_name import TopicName
from tests.component import wire
from tests.component.wire import T, WireClient, port_of, producer_cmd, send_frame
from tests.waiting import eventually

TOPIC = "non-persistent://public/default/np-wire"


@pytest.fixture
async def broker() -> AsyncIterator[Broker]:
    async with Broker() as b:
        yield b


async def client(broker: Broker) -> WireClient:
    c = await WireClient.open(port_of(broker))
    await c.connect()
    return c


def subscribe_cmd(consumer_id: int, request_id: int, name: str,
                  sub_type: pb.CommandSubscribe.SubType = pb.CommandSubscribe.Exclusive) -> pb.BaseCommand:
    return wire.subscribe_cmd(TOPIC, "sub", consumer_id, request_id, sub_type, consumer_name=name)


def flow_cmd(consumer_id: int, permits: int) -> pb.BaseCommand:
    cmd = pb.BaseCommand(type=T.FLOW)
    cmd.flow.consumer_id, cmd.flow.messagePermits = consumer_id, permits
    return cmd


def batch_frame(producer_id: int, seq: int, messages: int) -> tuple[pb.BaseCommand, bytes]:
    """A SEND whose metadata says it carries a batch of ``messages`` (the body is not parsed; it is as long
    as the shortest batch of that many messages)."""
    cmd = pb.BaseCommand(type=T.SEND)
    cmd.send.producer_id, cmd.send.sequence_id, cmd.send.num_messages = producer_id, seq, messages
    meta = pb.MessageMetadata(producer_name="p", sequence_id=seq, publish_time=1,
                              num_messages_in_batch=messages).SerializeToString()
    tail = struct.pack(">I", len(meta)) + meta + b"b" * 6 * messages
    return cmd, b"\x0e\x01" + struct.pack(">I", crc32c(tail)) + tail


def subscription(broker: Broker) -> NonPersistentSubscription:
    assert broker.server is not None
    topic = broker.server.service.get_topic_if_loaded(TopicName.parse(TOPIC))
    assert topic is not None
    sub = topic.subscriptions["sub"]
    assert isinstance(sub, NonPersistentSubscription)
    return sub


async def test_failover_tells_each_consumer_whether_it_is_active(broker: Broker) -> None:
    a, b = await client(broker), await client(broker)
    a.send(subscribe_cmd(1, 1, "a", pb.CommandSubscribe.Failover))
    assert (await a.recv()).type == T.SUCCESS
    change = await a.recv()
    assert change.type == T.ACTIVE_CONSUMER_CHANGE and change.active_consumer_change.is_active
    b.send(subscribe_cmd(2, 1, "b", pb.CommandSubscribe.Failover))
    assert (await b.recv()).type == T.SUCCESS
    change = await b.recv()
    assert change.type == T.ACTIVE_CONSUMER_CHANGE and not change.active_consumer_change.is_active
    a.close()  # the active one leaves: "b" takes over
    change = await b.recv()
    assert change.type == T.ACTIVE_CONSUMER_CHANGE and change.active_consumer_change.is_active
    b.close()


async def test_last_message_id_seek_ack_and_read_compacted(broker: Broker) -> None:
    c = await client(broker)
    c.send(subscribe_cmd(1, 1, "c"))
    assert (await c.recv()).type == T.SUCCESS
    last = pb.BaseCommand(type=T.GET_LAST_MESSAGE_ID)
    last.getLastMessageId.consumer_id, last.getLastMessageId.request_id = 1, 2
    c.send(last)
    reply = await c.recv()  # Pulsar's NonPersistentTopic throws UnsupportedOperationException: UnknownError
    assert reply.type == T.ERROR and reply.error.request_id == 2
    assert reply.error.error == pb.ServerError.UnknownError
    assert reply.error.message == "GetLastMessageId is not supported on non-persistent topic"
    seek = pb.BaseCommand(type=T.SEEK)
    seek.seek.consumer_id, seek.seek.request_id, seek.seek.message_publish_time = 1, 3, 1
    c.send(seek)
    reply = await c.recv()  # success, and no CLOSE_CONSUMER: there is nothing to rewind
    assert reply.type == T.SUCCESS and reply.success.request_id == 3
    ack = pb.BaseCommand(type=T.ACK)
    ack.ack.consumer_id, ack.ack.ack_type, ack.ack.request_id = 1, pb.CommandAck.Cumulative, 4
    ack.ack.message_id.add(ledgerId=0, entryId=0, ack_set=[1])
    c.send(ack)
    reply = await c.recv()
    assert reply.type == T.ACK_RESPONSE and not reply.ackResponse.HasField("error")
    compacted = subscribe_cmd(2, 5, "rc")
    compacted.subscribe.subscription, compacted.subscribe.read_compacted = "other", True
    c.send(compacted)
    reply = await c.recv()
    assert reply.type == T.ERROR and reply.error.error == pb.ServerError.NotAllowedError
    assert reply.error.message == "readCompacted only valid on persistent topics"  # Pulsar's words
    c.close()


async def test_a_batch_costs_its_message_count_in_permits(broker: Broker) -> None:
    c = await client(broker)
    c.send(subscribe_cmd(1, 1, "c"))
    assert (await c.recv()).type == T.SUCCESS
    c.send(flow_cmd(1, 3))
    c.send(producer_cmd(TOPIC, producer_id=7, request_id=2))
    assert (await c.recv()).type == T.PRODUCER_SUCCESS
    c.send(*batch_frame(7, 0, 5))  # 3 permits: delivered, permits now -2
    c.send(*send_frame(7, 1, b"x"))  # no permits: dropped
    kinds = {T.SEND_RECEIPT: 0, T.MESSAGE: 0}
    for _ in range(3):
        frame = await c.recv()
        kinds[frame.type] += 1
        if frame.type == T.SEND_RECEIPT:
            mid = frame.send_receipt.message_id
            assert (mid.ledgerId, mid.entryId) == (0, 0)
        else:
            mid = frame.message.message_id
            assert (mid.ledgerId, mid.entryId, mid.partition) == (0, 0, -1)
    assert kinds == {T.SEND_RECEIPT: 2, T.MESSAGE: 1}
    sub = subscription(broker)
    assert sub.msg_dropped == 1
    d = sub.dispatcher
    assert d is not None and d.total_permits == d.permit_balance() == -2
    c.send(flow_cmd(1, 3))  # back to 1: the next message goes out
    c.send(*send_frame(7, 2, b"y"))
    assert {(await c.recv()).type for _ in range(2)} == {T.SEND_RECEIPT, T.MESSAGE}
    assert d.total_permits == d.permit_balance() == 0
    c.close()


async def test_shared_delivers_to_a_consumer_with_permits_when_the_total_is_spent(broker: Broker) -> None:
    """A batch overdraws one Shared consumer and the dispatcher's total falls to -2 while the other still has
    permits. Pulsar's NonPersistentDispatcherMultipleConsumers.sendMessages drops everything while the total is
    <= 0; here the consumer that asked for messages gets them (kept on purpose: better for the application)."""
    a, b = await client(broker), await client(broker)
    for c, consumer_id, permits in ((a, 1, 1), (b, 2, 2)):
        c.send(subscribe_cmd(consumer_id, 1, f"c{consumer_id}", pb.CommandSubscribe.Shared))
        assert (await c.recv()).type == T.SUCCESS
        c.send(flow_cmd(consumer_id, permits))
    sub = subscription(broker)
    d = sub.dispatcher
    assert d is not None
    await eventually(lambda: d.total_permits == 3, "both consumers' permits")
    a.send(producer_cmd(TOPIC, producer_id=7, request_id=2))
    assert (await a.recv()).type == T.PRODUCER_SUCCESS
    a.send(*batch_frame(7, 0, 5))  # to one of them: total 3 - 5 = -2, the other keeps its permits
    await eventually(lambda: d.total_permits == -2, "the batch delivered")
    a.send(*send_frame(7, 1, b"x"))
    await eventually(lambda: sum(c.msg_out for c in sub.consumers) == 6, "the single message delivered too")
    assert sub.msg_dropped == 0
    assert d.total_permits == d.permit_balance() == -3
    a.close()
    b.close()


async def test_subscription_and_topic_go_with_their_last_client(broker: Broker) -> None:
    assert broker.server is not None
    service = broker.server.service
    c = await client(broker)
    c.send(subscribe_cmd(1, 1, "c"))
    assert (await c.recv()).type == T.SUCCESS
    c.send(producer_cmd(TOPIC, producer_id=7, request_id=2))
    assert (await c.recv()).type == T.PRODUCER_SUCCESS
    topic = service.get_topic_if_loaded(TopicName.parse(TOPIC))
    assert topic is not None
    close = pb.BaseCommand(type=T.CLOSE_CONSUMER)
    close.close_consumer.consumer_id, close.close_consumer.request_id = 1, 3
    c.send(close)
    assert (await c.recv()).type == T.SUCCESS
    assert topic.subscriptions == {} and service.get_topic_if_loaded(TopicName.parse(TOPIC)) is topic
    close = pb.BaseCommand(type=T.CLOSE_PRODUCER)
    close.close_producer.producer_id, close.close_producer.request_id = 7, 4
    c.send(close)
    assert (await c.recv()).type == T.SUCCESS
    assert service.get_topic_if_loaded(TopicName.parse(TOPIC)) is None and topic.closed
    c.close()


async def test_a_fencing_producer_keeps_the_topic(broker: Broker) -> None:
    assert broker.server is not None
    service = broker.server.service
    old, new = await client(broker), await client(broker)
    old.send(producer_cmd(TOPIC, producer_id=1, request_id=1))
    assert (await old.recv()).type == T.PRODUCER_SUCCESS
    fencing = producer_cmd(TOPIC, producer_id=2, request_id=1)
    fencing.producer.producer_access_mode = pb.ProducerAccessMode.ExclusiveWithFencing
    new.send(fencing)
    assert (await new.recv()).type == T.PRODUCER_SUCCESS
    assert (await old.recv()).type == T.CLOSE_PRODUCER
    topic = service.get_topic_if_loaded(TopicName.parse(TOPIC))
    assert topic is not None and not topic.closed
    assert [p.producer_id for p in topic.producers.values()] == [2]
    new.send(*send_frame(2, 0, b"x"))
    assert (await new.recv()).type == T.SEND_RECEIPT
    old.close()
    new.close()


async def test_a_topic_no_client_ever_attached_to_is_collected_when_inactive() -> None:
    """A refused SUBSCRIBE (here: Key_Shared disabled) creates the topic and leaves it with no client, so
    nothing ever makes it "the last client leaving": Pulsar's checkGC deletes it once inactive for
    brokerDeleteInactiveTopicsMaxInactiveDurationSeconds; it stayed loaded (and listed) for ever."""
    async with Broker(subscriptionKeySharedEnable=False, brokerDeleteInactiveTopicsFrequencySeconds=0.05,
                      brokerDeleteInactiveTopicsMaxInactiveDurationSeconds=1) as broker:
        assert broker.server is not None
        service = broker.server.service
        c = await client(broker)
        c.send(subscribe_cmd(1, 1, "c", pb.CommandSubscribe.Key_Shared))
        reply = await c.recv()
        assert reply.type == T.ERROR and reply.error.error == pb.ServerError.NotAllowedError
        topic = service.get_topic_if_loaded(TopicName.parse(TOPIC))
        assert topic is not None and not topic.subscriptions  # the refusal left nothing attached
        await eventually(lambda: service.get_topic_if_loaded(TopicName.parse(TOPIC)) is None,
                         "the inactive topic to be forgotten")
        assert topic.closed
        c.close()


async def test_key_shared_consumers_of_one_name_share_the_keys(broker: Broker) -> None:
    """Clients often give every instance the same consumer name: each still owns part of the ring
    (Pulsar 4.0 adds a per-name index to the points). Before, both had the same points and the
    first took every key."""
    a, b = await client(broker), await client(broker)
    for c, consumer_id in ((a, 1), (b, 2)):
        c.send(subscribe_cmd(consumer_id, 1, "same", pb.CommandSubscribe.Key_Shared))
        assert (await c.recv()).type == T.SUCCESS
        c.send(flow_cmd(consumer_id, 1000))
    a.send(producer_cmd(TOPIC, producer_id=7, request_id=2))
    assert (await a.recv()).type == T.PRODUCER_SUCCESS
    keys = 64
    for i in range(keys):
        a.send(*send_frame(7, i, b"x", partition_key=f"key-{i}"))
    sub = subscription(broker)
    await eventually(lambda: sum(c.msg_out for c in sub.consumers) == keys, "every message delivered")
    assert sub.msg_dropped == 0
    assert all(c.msg_out > 0 for c in sub.consumers), [c.msg_out for c in sub.consumers]
    a.close()
    b.close()


async def test_key_shared_counts_as_dropped_only_what_an_owner_could_not_take(broker: Broker) -> None:
    """A key outside every STICKY range has no consumer: Pulsar releases it without counting a drop.
    A key whose owner has no permits is dropped and counted (msgDropRate)."""
    covered = key_hash(b"in", sticky=True)
    assert key_hash(b"out", sticky=True) != covered
    c = await client(broker)
    cmd = subscribe_cmd(1, 1, "sticky", pb.CommandSubscribe.Key_Shared)
    cmd.subscribe.keySharedMeta.keySharedMode = pb.KeySharedMode.STICKY
    cmd.subscribe.keySharedMeta.hashRanges.add(start=covered, end=covered)
    c.send(cmd)
    assert (await c.recv()).type == T.SUCCESS
    c.send(producer_cmd(TOPIC, producer_id=7, request_id=2))
    assert (await c.recv()).type == T.PRODUCER_SUCCESS
    c.send(*send_frame(7, 0, b"x", partition_key="in"))  # owned, but no permits: dropped
    c.send(*send_frame(7, 1, b"y", partition_key="out"))  # nobody's: released
    for _ in range(2):
        assert (await c.recv()).type == T.SEND_RECEIPT  # each dispatched right after its receipt
    assert subscription(broker).msg_dropped == 1
    c.close()


async def test_a_subscription_keeps_an_inactive_topic_in_every_delete_mode() -> None:
    """Pulsar's NonPersistentTopic.isActive ignores inactiveTopicDeleteMode: any subscription keeps
    the topic. Here the subscription a refused SUBSCRIBE left behind (a STICKY consumer without
    ranges: the subscription is made before the consumer is refused, and stays, as in Pulsar). In
    delete_when_subscriptions_caught_up mode the topic was collected with it."""
    async with Broker(brokerDeleteInactiveTopicsMode="delete_when_subscriptions_caught_up",
                      brokerDeleteInactiveTopicsFrequencySeconds=0.05,
                      brokerDeleteInactiveTopicsMaxInactiveDurationSeconds=1) as broker:
        assert broker.server is not None
        service = broker.server.service
        c = await client(broker)
        cmd = subscribe_cmd(1, 1, "sticky", pb.CommandSubscribe.Key_Shared)
        cmd.subscribe.keySharedMeta.keySharedMode = pb.KeySharedMode.STICKY
        c.send(cmd)
        reply = await c.recv()
        assert reply.type == T.ERROR and reply.error.error == pb.ServerError.ConsumerAssignError
        name = TopicName.parse(TOPIC)
        topic = service.get_topic_if_loaded(name)
        assert topic is not None and list(topic.subscriptions) == ["sub"] and not topic.subscriptions["sub"].consumers
        topic.last_active -= 3600  # inactive for long enough already
        checks = service.inactive_topics.checks
        await eventually(lambda: service.inactive_topics.checks >= checks + 2, "two inactive-topic checks")
        assert service.get_topic_if_loaded(name) is topic and not topic.closed
        c.close()


async def test_a_consumer_unlike_the_subscription_is_refused_as_in_pulsar(broker: Broker) -> None:
    """Pulsar's checkForConsumerCompatibilityErrorWithDispatcher: another type, another Key_Shared
    mode or another ordering is ConsumerBusy, with these words (the mode and ordering ones were
    ConsumerAssignError)."""
    c = await client(broker)
    c.send(subscribe_cmd(1, 1, "first", pb.CommandSubscribe.Key_Shared))
    assert (await c.recv()).type == T.SUCCESS
    other_type = subscribe_cmd(2, 2, "other", pb.CommandSubscribe.Shared)
    sticky = subscribe_cmd(3, 3, "sticky", pb.CommandSubscribe.Key_Shared)
    sticky.subscribe.keySharedMeta.keySharedMode = pb.KeySharedMode.STICKY
    sticky.subscribe.keySharedMeta.hashRanges.add(start=0, end=100)
    out_of_order = subscribe_cmd(4, 4, "ooo", pb.CommandSubscribe.Key_Shared)
    out_of_order.subscribe.keySharedMeta.keySharedMode = pb.KeySharedMode.AUTO_SPLIT
    out_of_order.subscribe.keySharedMeta.allowOutOfOrderDelivery = True
    expected = [
        "Subscription is of different type. Active subscription type of 'Key_Shared' is different than "
        "the connecting consumer's type 'Shared'.",
        "Subscription is of different type. Active subscription key_shared mode of 'AUTO_SPLIT' is different "
        "than the connecting consumer's key_shared mode 'STICKY'.",
        "Subscription is of different type. Active subscription does not allow out of order delivery while "
        "the connecting consumer allows it.",
    ]
    for cmd, message in zip((other_type, sticky, out_of_order), expected, strict=True):
        c.send(cmd)
        reply = await c.recv()
        assert reply.type == T.ERROR
        assert (reply.error.error, reply.error.message) == (pb.ServerError.ConsumerBusy, message)
    c.close()
