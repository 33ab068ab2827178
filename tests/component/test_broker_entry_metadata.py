"""Broker entry metadata (PIP-70) over the wire: brokerEntryMetadataInterceptors stamps each
stored entry with the broker's publish time and its last message's index; the index continues
after a restart; consumers see it only when they asked for it and the broker exposes it."""

from __future__ import annotations

import time
from pathlib import Path

import aiohttp

from broker.embedded import Broker
from broker.protocol import pulsar_api_pb2 as pb
from broker.protocol.entry import peek_broker_entry_metadata
from broker.vocabulary import INDEX_INTERCEPTOR, TIMESTAMP_INTERCEPTOR
from tests.component.wire import T, WireClient, port_of, producer_cmd, send_frame, subscribe_cmd

TOPIC = "persistent://public/default/bem"
INTERCEPTORS = [TIMESTAMP_INTERCEPTOR, INDEX_INTERCEPTOR]


async def recv_frame(c: WireClient) -> tuple[pb.BaseCommand, bytes | None]:
    """The next frame with its payload (WireClient.recv gives only the command)."""
    while True:
        f = c.decoder.next_frame()
        if f is not None:
            return f.command, f.payload
        data = await c.reader.read(65536)
        assert data, "closed by broker"
        c.decoder.feed(data)


async def connect(port: int, supports: bool) -> WireClient:
    c = await WireClient.open(port)
    cmd = pb.BaseCommand(type=T.CONNECT)
    cmd.connect.client_version = "wire-test"
    cmd.connect.protocol_version = 20
    cmd.connect.feature_flags.supports_broker_entry_metadata = supports
    c.send(cmd)
    assert (await c.recv()).type == T.CONNECTED
    return c


async def publish(port: int, batches: list[int]) -> None:
    """One entry per item: a single message (0) or a batch of that many messages."""
    c = await connect(port, False)
    c.send(producer_cmd(TOPIC))
    assert (await c.recv()).type == T.PRODUCER_SUCCESS
    for seq, n in enumerate(batches):
        fields: dict[str, object] = {"num_messages_in_batch": n} if n else {}
        cmd, payload = send_frame(1, seq, b"x" * max(6 * n, 1), False, **fields)  # (6 bytes a message at least)
        cmd.send.num_messages = max(n, 1)
        c.send(cmd, payload)
        assert (await c.recv()).type == T.SEND_RECEIPT
    c.close()


async def consume(port: int, supports: bool, count: int, sub: str) -> list[bytes]:
    """The payloads of the first ``count`` MESSAGEs from the earliest entry."""
    c = await connect(port, supports)
    c.send(subscribe_cmd(TOPIC, sub, initialPosition=pb.CommandSubscribe.Earliest))
    assert (await c.recv()).type == T.SUCCESS
    flow = pb.BaseCommand(type=T.FLOW)
    flow.flow.consumer_id, flow.flow.messagePermits = 1, 1000
    c.send(flow)
    out: list[bytes] = []
    while len(out) < count:
        cmd, payload = await recv_frame(c)
        if cmd.type == T.MESSAGE:
            assert payload is not None
            out.append(payload)
    c.close()
    return out


def stamps(payloads: list[bytes]) -> list[tuple[int, int]]:
    out = []
    for p in payloads:
        bem = peek_broker_entry_metadata(p)
        assert bem is not None and bem.HasField("broker_timestamp") and bem.HasField("index")
        out.append((bem.broker_timestamp, bem.index))
    return out


async def test_index_counts_messages_and_continues_after_a_restart(tmp_path: Path) -> None:
    before = int(time.time() * 1000)
    async with Broker(data_dir=tmp_path, brokerEntryMetadataInterceptors=INTERCEPTORS,
                      exposingBrokerEntryMetadataToClientEnabled=True) as b:
        await publish(port_of(b), [0, 3, 0])
        after = int(time.time() * 1000)
        first = stamps(await consume(port_of(b), True, 3, "a"))
        assert [i for _, i in first] == [0, 3, 4]
        assert all(before <= ts <= after for ts, _ in first)
        # A consumer that did not say supports_broker_entry_metadata gets the entries as sent.
        plain = await consume(port_of(b), False, 3, "b")
        assert all(p[:2] == b"\x0e\x01" for p in plain)
    async with Broker(data_dir=tmp_path, brokerEntryMetadataInterceptors=INTERCEPTORS,
                      exposingBrokerEntryMetadataToClientEnabled=True) as b:
        await publish(port_of(b), [2, 0])
        assert [i for _, i in stamps(await consume(port_of(b), True, 5, "c"))] == [0, 3, 4, 6, 7]


async def test_not_exposed_unless_enabled(tmp_path: Path) -> None:
    async with Broker(data_dir=tmp_path, brokerEntryMetadataInterceptors=[INDEX_INTERCEPTOR]) as b:
        await publish(port_of(b), [0])
        (payload,) = await consume(port_of(b), True, 1, "a")
        assert payload[:2] == b"\x0e\x01"
        # ... but it is stored: the admin peek shows it in Pulsar's headers.
        url = f"{b.web_url}/admin/v2/persistent/public/default/bem/examinemessage?initialPosition=earliest"
        async with aiohttp.ClientSession() as http, http.get(url) as reply:
            assert reply.status == 200
            assert reply.headers["X-Pulsar-Broker-Entry-METADATA-index"] == "0"
            assert "X-Pulsar-Broker-Entry-METADATA-timestamp" not in reply.headers
            assert reply.headers["X-Pulsar-sequence-id"] == "0"
            assert await reply.read() == b"x"


async def test_nothing_is_stamped_without_interceptors(tmp_path: Path) -> None:
    async with Broker(data_dir=tmp_path, exposingBrokerEntryMetadataToClientEnabled=True) as b:
        await publish(port_of(b), [0, 2])
        assert all(p[:2] == b"\x0e\x01" for p in await consume(port_of(b), True, 2, "a"))
