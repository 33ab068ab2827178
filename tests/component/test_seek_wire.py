"""SEEK on a Shared / Key_Shared subscription whose dispatcher has a read parked at the end of the topic (every
message delivered, permits left): the backlog must be delivered again to the consumer that comes back. Raw frames,
as pulsar-rs sends them (its seek test found the bug: the parked read was served from the new position by the
reset, its entries dropped as stale, and the cursor skipped the backlog). A SEEK whose cursor an unload closes
meanwhile is refused as Pulsar refuses it, not logged as an error."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from broker.embedded import Broker
from broker.protocol import pulsar_api_pb2 as pb
from broker.service.topic import PersistentTopic
from broker.topic_name import TopicName
from tests.component.wire import T, WireClient, port_of, producer_cmd, send_frame, subscribe_cmd
from tests.waiting import eventually

MESSAGES = 5
PERMITS = 1000


@pytest.fixture
async def broker() -> AsyncIterator[Broker]:
    async with Broker() as b:
        yield b


def flow(consumer_id: int, permits: int) -> pb.BaseCommand:
    cmd = pb.BaseCommand(type=T.FLOW)
    cmd.flow.consumer_id, cmd.flow.messagePermits = consumer_id, permits
    return cmd


def seek_to(consumer_id: int, request_id: int, ledger_id: int, entry_id: int) -> pb.BaseCommand:
    cmd = pb.BaseCommand(type=T.SEEK)
    cmd.seek.consumer_id, cmd.seek.request_id = consumer_id, request_id
    cmd.seek.message_id.ledgerId, cmd.seek.message_id.entryId = ledger_id, entry_id
    return cmd


def ack(consumer_id: int, ids: list[pb.MessageIdData]) -> pb.BaseCommand:
    cmd = pb.BaseCommand(type=T.ACK)
    cmd.ack.consumer_id, cmd.ack.ack_type = consumer_id, pb.CommandAck.Individual
    for message_id in ids:
        cmd.ack.message_id.add().CopyFrom(message_id)
    return cmd


async def frames_until(c: WireClient, wanted: dict[int, int]) -> dict[int, list[pb.BaseCommand]]:
    """Receive until ``wanted[type]`` frames of each type came (others are kept too), whatever their order."""
    got: dict[int, list[pb.BaseCommand]] = {}
    while any(len(got.get(t, [])) < n for t, n in wanted.items()):
        frame = await c.recv()
        got.setdefault(frame.type, []).append(frame)
    return got


@pytest.mark.parametrize("sub_type", [pb.CommandSubscribe.Shared, pb.CommandSubscribe.Key_Shared])
async def test_seek_with_a_parked_read_delivers_the_backlog_again(broker: Broker, sub_type: int) -> None:
    assert broker.server is not None
    service = broker.server.service
    topic = f"persistent://public/default/seek-parked-{uuid.uuid4().hex[:8]}"
    c = await WireClient.open(port_of(broker))
    await c.connect()
    c.send(producer_cmd(topic, producer_id=1, request_id=1))
    assert (await c.recv()).type == T.PRODUCER_SUCCESS
    c.send(subscribe_cmd(topic, "s", consumer_id=1, request_id=2, sub_type=sub_type,
                         initialPosition=pb.CommandSubscribe.Earliest))
    assert (await c.recv()).type == T.SUCCESS
    c.send(flow(1, PERMITS))
    for seq in range(MESSAGES):
        c.send(*send_frame(1, seq, b"m%d" % seq, partition_key="k"))
    got = await frames_until(c, {T.SEND_RECEIPT: MESSAGES, T.MESSAGE: MESSAGES})
    delivered = [f.message.message_id for f in got[T.MESSAGE]]
    c.send(ack(1, delivered))

    # Everything delivered, permits left: the dispatcher waits at the end of the topic with a parked read.
    cursor = service.topics[topic].subscriptions["s"].cursor
    await eventually(lambda: cursor.has_pending_read and cursor.number_of_entries_in_backlog() == 0,
                     "a read parked at the end, everything acknowledged")

    first = delivered[0]
    c.send(seek_to(1, 3, first.ledgerId, first.entryId))
    got = await frames_until(c, {T.SUCCESS: 1, T.CLOSE_CONSUMER: 1})
    assert got[T.SUCCESS][0].success.request_id == 3

    # The consumer comes back (as the clients do after CLOSE_CONSUMER) with fresh permits: all five again.
    c.send(subscribe_cmd(topic, "s", consumer_id=1, request_id=4, sub_type=sub_type))
    assert (await c.recv()).type == T.SUCCESS
    c.send(flow(1, PERMITS))
    again = await frames_until(c, {T.MESSAGE: MESSAGES})
    assert [(m.message.message_id.ledgerId, m.message.message_id.entryId) for m in again[T.MESSAGE]] == \
        [(m.ledgerId, m.entryId) for m in delivered]
    c.close()


async def test_a_seek_whose_cursor_closes_meanwhile_is_refused_as_pulsar_does_with_no_error_logged(
        broker: Broker, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A SEEK by publish time whose topic is unloaded while the position is looked for finds its cursor closed:
    answered UnknownError "Error when resetting subscription: ..." and logged as a warning, as Pulsar's handleSeek
    answers and logs any failure of the reset (it was logged as an error with a traceback)."""
    assert broker.server is not None
    service = broker.server.service
    topic = f"persistent://public/default/seek-closed-{uuid.uuid4().hex[:6]}"
    c = await WireClient.open(port_of(broker))
    try:
        await c.connect()
        c.send(subscribe_cmd(topic, "s", 1, 1))
        assert (await c.recv()).type == T.SUCCESS
        reached, resume = asyncio.Event(), asyncio.Event()
        find = PersistentTopic.find_position_by_time

        async def held(self: PersistentTopic, publish_time: int) -> Any:
            reached.set()
            await resume.wait()
            return await find(self, publish_time)

        monkeypatch.setattr(PersistentTopic, "find_position_by_time", held)
        cmd = pb.BaseCommand(type=T.SEEK)
        cmd.seek.consumer_id, cmd.seek.request_id, cmd.seek.message_publish_time = 1, 2, 1
        c.send(cmd)
        await asyncio.wait_for(reached.wait(), 10)
        assert await service.unload_topic(TopicName.parse(topic))
        resume.set()
        while (reply := await c.recv()).type != T.ERROR:
            assert reply.type == T.CLOSE_CONSUMER, reply  # (the unload's)
        assert (reply.error.request_id, reply.error.error) == (2, pb.UnknownError)
        assert reply.error.message.startswith("Error when resetting subscription: "), reply
    finally:
        c.close()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
