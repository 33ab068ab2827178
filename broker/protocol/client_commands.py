"""Encoders for the clients inside the broker (client -> broker commands): the health check, the WebSocket service,
the producers of replication and of the dead-letter topic (broker/service/peer_link.BrokerLink carries them).

A request (PRODUCER, SUBSCRIBE, CLOSE_*, UNSUBSCRIBE) is returned as ``(command, body)`` for ``BrokerLink.request``,
which sets the body's request id; the others are complete frames. ``commands`` holds the broker -> client side.
"""

from __future__ import annotations

import time

from broker.protocol import commands
from broker.protocol import pulsar_api_pb2 as pb
from broker.protocol.entry import build_entry

T = pb.BaseCommand.Type
LATEST = (commands.INT64_MAX, commands.INT64_MAX)  # MessageId.latest's ledger and entry ids (a reader's start)
EARLIEST = (-1, -1)  # MessageId.earliest's


def producer(topic: str, producer_id: int, name: str | None = None,
             user_provided_name: bool = False) -> tuple[pb.BaseCommand, pb.CommandProducer]:
    cmd = pb.BaseCommand(type=T.PRODUCER)
    p = cmd.producer
    p.topic, p.producer_id = topic, producer_id
    if name:
        p.producer_name = name
        if user_provided_name:
            p.user_provided_producer_name = True
    return cmd, p


def subscribe(topic: str, subscription: str, consumer_id: int, sub_type: int, consumer_name: str, *,
              durable: bool = True, earliest: bool = False,
              start: pb.MessageIdData | None = None) -> tuple[pb.BaseCommand, pb.CommandSubscribe]:
    """A SUBSCRIBE; ``start`` makes it a reader's (the message to start at, or MessageId.latest / earliest)."""
    cmd = pb.BaseCommand(type=T.SUBSCRIBE)
    s = cmd.subscribe
    s.topic, s.subscription, s.consumer_id, s.consumer_name = topic, subscription, consumer_id, consumer_name
    s.subType = sub_type  # type: ignore[assignment]
    s.durable = durable
    s.initialPosition = pb.CommandSubscribe.Earliest if earliest else pb.CommandSubscribe.Latest
    if start is not None:
        s.start_message_id.CopyFrom(start)
    return cmd, s


def reader_start_latest() -> pb.MessageIdData:
    return pb.MessageIdData(ledgerId=LATEST[0], entryId=LATEST[1])


def flow(consumer_id: int, permits: int) -> bytes:
    cmd = pb.BaseCommand(type=T.FLOW)
    cmd.flow.consumer_id, cmd.flow.messagePermits = consumer_id, permits
    return commands.frame(cmd)


def send(producer_id: int, sequence_id: int, num_messages: int, entry: bytes, *,
         highest_sequence_id: int | None = None, is_chunk: bool = False) -> bytes:
    """A SEND of one entry (its metadata and payload, as ``build_entry`` makes it)."""
    cmd = pb.BaseCommand(type=T.SEND)
    s = cmd.send
    s.producer_id, s.sequence_id, s.num_messages = producer_id, sequence_id, num_messages
    if highest_sequence_id is not None and highest_sequence_id != sequence_id:
        s.highest_sequence_id = highest_sequence_id
    if is_chunk:
        s.is_chunk = True
    return commands.frame_with_payload(cmd, entry)


def single_message(producer_name: str, sequence_id: int, payload: bytes) -> bytes:
    """The entry of one message alone (not batched), published now."""
    md = pb.MessageMetadata(producer_name=producer_name, sequence_id=sequence_id,
                            publish_time=int(time.time() * 1000))
    return build_entry(md.SerializeToString(), payload)


def close_producer(producer_id: int) -> tuple[pb.BaseCommand, pb.CommandCloseProducer]:
    cmd = pb.BaseCommand(type=T.CLOSE_PRODUCER)
    cmd.close_producer.producer_id = producer_id
    return cmd, cmd.close_producer


def close_consumer(consumer_id: int) -> tuple[pb.BaseCommand, pb.CommandCloseConsumer]:
    cmd = pb.BaseCommand(type=T.CLOSE_CONSUMER)
    cmd.close_consumer.consumer_id = consumer_id
    return cmd, cmd.close_consumer


def unsubscribe(consumer_id: int) -> tuple[pb.BaseCommand, pb.CommandUnsubscribe]:
    cmd = pb.BaseCommand(type=T.UNSUBSCRIBE)
    cmd.unsubscribe.consumer_id = consumer_id
    return cmd, cmd.unsubscribe
