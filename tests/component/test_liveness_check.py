"""Pulsar's connection liveness check (connectionLivenessCheckTimeoutMillis): a second producer of a name, a second
consumer of an Exclusive subscription, or a STICKY Key_Shared consumer whose hash range another holds, is refused only
if the holder's connection answers a PING in time. A holder
whose client went away without closing (a half-open connection: a crashed host, a dropped network) would otherwise
keep the name until the keep-alive notices, a minute or more, and a restarted client could not come back."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from broker.embedded import Broker
from broker.protocol import commands
from broker.protocol import pulsar_api_pb2 as pb
from tests.component.wire import T, WireClient, port_of, producer_cmd, subscribe_cmd

TOPIC = "persistent://public/default/liveness"
CHECK_MS = 300


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    async with Broker(data_dir=tmp_path, connectionLivenessCheckTimeoutMillis=CHECK_MS) as b:
        yield b


async def holder(b: Broker, cmd: pb.BaseCommand) -> WireClient:
    client = await WireClient.open(port_of(b))
    await client.connect()
    client.send(cmd)
    answer = await client.recv()
    assert answer.type in (T.PRODUCER_SUCCESS, T.SUCCESS), answer
    return client


async def answer_pings(client: WireClient) -> None:
    """A live client: every PING answered."""
    while True:
        try:
            if (await client.recv()).type == T.PING:
                client.writer.write(commands.PONG)
        except TimeoutError:
            continue


async def newcomer(b: Broker, cmd: pb.BaseCommand) -> pb.BaseCommand:
    client = await WireClient.open(port_of(b))
    await client.connect()
    client.send(cmd)
    while (answer := await client.recv()).type == T.PING:
        client.writer.write(commands.PONG)
    client.close()
    return answer


def named_producer(name: str) -> pb.BaseCommand:
    cmd = producer_cmd(TOPIC)
    cmd.producer.producer_name = name
    return cmd


def sticky(start: int, end: int) -> pb.BaseCommand:
    cmd = subscribe_cmd(TOPIC, "ks", sub_type=pb.CommandSubscribe.Key_Shared)
    cmd.subscribe.keySharedMeta.keySharedMode = pb.STICKY
    cmd.subscribe.keySharedMeta.hashRanges.add(start=start, end=end)
    return cmd


@pytest.mark.parametrize(("first", "answers"), [
    (named_producer("same"), (T.PRODUCER_SUCCESS, T.ERROR)),
    (subscribe_cmd(TOPIC, "sub"), (T.SUCCESS, T.ERROR)),
    (sticky(0, 100), (T.SUCCESS, T.ERROR)),
], ids=["producer name", "exclusive consumer", "sticky hash range"])
async def test_a_silent_holder_is_closed_and_the_newcomer_admitted(broker: Broker, first: pb.BaseCommand,
                                                                  answers: tuple[int, int]) -> None:
    admitted, refused = answers
    silent = await holder(broker, first)  # (it reads nothing more: the PING goes unanswered)
    answer = await newcomer(broker, first)
    assert answer.type == admitted, answer
    assert await silent.closed_by_broker()

    live = await holder(broker, _renamed(first))
    pinger = asyncio.ensure_future(answer_pings(live))
    try:
        answer = await newcomer(broker, _renamed(first))
        assert answer.type == refused
        E = pb.ServerError
        expected = (E.ProducerBusy if first.type == T.PRODUCER else
                    E.ConsumerAssignError if first.subscribe.HasField("keySharedMeta") else E.ConsumerBusy)
        assert answer.error.error == expected
    finally:
        pinger.cancel()
        live.close()


def _renamed(cmd: pb.BaseCommand) -> pb.BaseCommand:
    """The same claim on another name, so the second half of a test does not meet the first's newcomer."""
    out = pb.BaseCommand()
    out.CopyFrom(cmd)
    if out.type == T.PRODUCER:
        out.producer.producer_name = "other"
    else:
        out.subscribe.subscription = "other"
    return out


async def test_with_the_check_off_a_silent_holder_keeps_its_name(tmp_path: Path) -> None:
    async with Broker(data_dir=tmp_path, connectionLivenessCheckTimeoutMillis=0) as b:
        silent = await holder(b, named_producer("same"))
        answer = await newcomer(b, named_producer("same"))
        assert (answer.type, answer.error.error) == (T.ERROR, pb.ServerError.ProducerBusy)
        silent.close()
