"""REACHED_END_OF_TOPIC: a consumer that has read a terminated topic to its end is told so, as Pulsar tells it, but
only when its client is the Java client: the C++ client (and so the Python and Node clients) and the Go client take
the command for an invalid one and drop the connection (measured against Pulsar 4.0.7, which sends it to all)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from broker.embedded import Broker
from broker.protocol import pulsar_api_pb2 as pb
from tests.component.wire import port_of
from tests.transactions.client import T, TxnWireClient

NS = "public/default"
QUIET_S = 0.3  # how long "nothing comes" is watched for (never asserted on time)
WAIT_S = 10.0


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    async with Broker(data_dir=tmp_path) as b:
        yield b


async def client_as(b: Broker, version: str) -> TxnWireClient:
    connect = pb.BaseCommand(type=T.CONNECT)
    connect.connect.client_version = version
    connect.connect.protocol_version = 20
    return await TxnWireClient.open(port_of(b), connect)


async def terminate(b: Broker, name: str) -> None:
    async with aiohttp.ClientSession() as http, http.post(
            f"{b.web_url}/admin/v2/persistent/{NS}/{name}/terminate") as reply:
        assert reply.status == 200, await reply.text()


async def end_told(client: TxnWireClient, consumer_id: int) -> pb.BaseCommand:
    cmd = await asyncio.wait_for(client.pushed(T.REACHED_END_OF_TOPIC).get(), WAIT_S)
    assert cmd.reachedEndOfTopic.consumer_id == consumer_id
    return cmd


@pytest.mark.parametrize("sub_type", [pb.CommandSubscribe.Exclusive, pb.CommandSubscribe.Shared,
                                      pb.CommandSubscribe.Failover, pb.CommandSubscribe.Key_Shared])
async def test_a_java_consumer_is_told_at_the_end(broker: Broker, sub_type: int) -> None:
    name = f"ended-{sub_type}"
    topic = f"persistent://{NS}/{name}"
    java = await client_as(broker, "Pulsar-Java-v4.0.13")
    await java.producer(topic, 1)
    for i in range(2):
        await java.send(1, i, f"m{i}")
    # caught up when the topic is terminated: told then
    await java.subscribe(topic, "early", 1, sub_type=sub_type)
    assert [m.body for m in await java.receive_n(1, 2)] == ["m0", "m1"]
    await terminate(broker, name)
    await end_told(java, 1)
    # subscribed afterwards from the start: the two messages, then told
    late = await client_as(broker, "Pulsar-Java-v4.0.13")
    await late.subscribe(topic, "late", 2, sub_type=sub_type)
    assert [m.body for m in await late.receive_n(2, 2)] == ["m0", "m1"]
    await end_told(late, 2)
    await java.close()
    await late.close()


async def test_other_clients_are_not_told_and_keep_their_connection(broker: Broker) -> None:
    topic = f"persistent://{NS}/ended-quietly"
    for version in ("Pulsar-CPP-v3.5.1", "Pulsar-Go-v0.19.0", "pulsar-rs-6.8.0"):
        client = await client_as(broker, version)
        await client.subscribe(topic, f"s-{version}", 1)
        if version == "Pulsar-CPP-v3.5.1":
            await terminate(broker, "ended-quietly")
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(client.pushed(T.REACHED_END_OF_TOPIC).get(), QUIET_S)
        assert (await client.last_message_id(1)) is not None  # (the connection still answers)
        await client.close()
