"""The broker-to-broker client of END_TXN_ON_* (broker/service/txn_buffer_client.py) against scripted in-process
peers (failure paths: redirects, a refusal, a peer gone). The real thing runs in tests/cluster/test_transactions.py."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from broker.config import BrokerConfig
from broker.protocol import commands
from broker.protocol import pulsar_api_pb2 as pb
from broker.service.txn_buffer_client import TxnBufferClient, TxnBufferClientError
from broker.transactions.model import TxnID
from tests.scripted_broker import commands_from

T = pb.BaseCommand.Type
E = pb.ServerError
TOPIC = "persistent://public/default/t"
Answer = Callable[[pb.BaseCommand], pb.BaseCommand | None]


class Peer:
    """A scripted broker: CONNECTED, then each request answered by ``answer`` (None: no answer, connection closed)."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.seen: list[pb.BaseCommand] = []
        self.connects: list[pb.CommandConnect] = []
        self.server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"pulsar://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async for cmd in commands_from(reader):
                if cmd.type == T.CONNECT:
                    self.connects.append(cmd.connect)
                    writer.write(commands.frame(pb.BaseCommand(type=T.CONNECTED,
                                                               connected=pb.CommandConnected(server_version="x"))))
                    continue
                self.seen.append(cmd)
                reply = self.answer(cmd)
                if reply is None:
                    writer.close()
                    return
                writer.write(commands.frame(reply))
        finally:
            writer.close()


def lookup_reply(cmd: pb.BaseCommand, url: str, kind: int, authoritative: bool = False) -> pb.BaseCommand:
    reply = pb.BaseCommand(type=T.LOOKUP_RESPONSE)
    r = reply.lookupTopicResponse
    r.request_id, r.response, r.brokerServiceUrl, r.authoritative = (
        cmd.lookupTopic.request_id, kind, url, authoritative)  # type: ignore[assignment]
    return reply


def end_reply(cmd: pb.BaseCommand, error: int | None = None) -> pb.BaseCommand:
    reply = pb.BaseCommand(type=T.END_TXN_ON_PARTITION_RESPONSE)
    r = reply.endTxnOnPartitionResponse
    r.request_id = cmd.endTxnOnPartition.request_id
    if error is not None:
        r.error, r.message = error, "Namespace bundle not served by this instance"  # type: ignore[assignment]
    return reply


@pytest.fixture
async def peers() -> AsyncIterator[list[Peer]]:
    started: list[Peer] = []
    yield started
    for peer in started:
        assert peer.server is not None
        peer.server.close()
        await peer.server.wait_closed()


async def start(peers: list[Peer], answer: Answer) -> Peer:
    peer = Peer(answer)
    peer.server = await asyncio.start_server(peer.serve, "127.0.0.1", 0)
    peers.append(peer)
    return peer


async def test_redirects_are_followed_and_a_refusal_forgets_the_owner(peers: list[Peer]) -> None:
    refusals = [E.ServiceNotReady]

    def owner_answer(cmd: pb.BaseCommand) -> pb.BaseCommand:
        if cmd.type == T.LOOKUP:
            return lookup_reply(cmd, owner.url, pb.CommandLookupTopicResponse.Connect, True)
        return end_reply(cmd, refusals.pop() if refusals else None)

    owner = await start(peers, owner_answer)
    # This broker (own URL) redirects to the owner, as a non-leader does; the owner answers Connect to itself.
    own = await start(peers, lambda cmd: lookup_reply(cmd, owner.url, pb.CommandLookupTopicResponse.Redirect, True))
    client = TxnBufferClient(own.url, BrokerConfig())
    try:
        with pytest.raises(TxnBufferClientError, match="ServiceNotReady"):
            await client.end_on_partition(TOPIC, TxnID(0, 7), commit=True)
        await client.end_on_partition(TOPIC, TxnID(0, 7), commit=True)  # (looked up again, then heard)
    finally:
        await client.close()
    assert [c.type for c in own.seen] == [T.LOOKUP, T.LOOKUP]
    assert [c.type for c in owner.seen] == [T.LOOKUP, T.END_TXN_ON_PARTITION, T.LOOKUP, T.END_TXN_ON_PARTITION]
    assert owner.seen[0].lookupTopic.authoritative  # (the redirect's flag is passed on)
    end = owner.seen[-1].endTxnOnPartition
    assert (end.topic, end.txnid_most_bits, end.txnid_least_bits, end.txn_action) == (TOPIC, 0, 7, pb.COMMIT)


async def test_a_peer_that_goes_away_fails_the_request_and_the_next_one_reconnects(peers: list[Peer]) -> None:
    calls = 0

    def flaky(cmd: pb.BaseCommand) -> pb.BaseCommand | None:
        nonlocal calls
        if cmd.type == T.LOOKUP:
            return lookup_reply(cmd, peer.url, pb.CommandLookupTopicResponse.Connect)
        calls += 1
        return None if calls == 1 else end_reply(cmd)  # the first END_TXN_ON_PARTITION: connection dropped

    peer = await start(peers, flaky)
    client = TxnBufferClient(peer.url, BrokerConfig())
    try:
        with pytest.raises(TxnBufferClientError, match=r"lost|closed"):
            await client.end_on_partition(TOPIC, TxnID(1, 2), commit=False)
        await client.end_on_partition(TOPIC, TxnID(1, 2), commit=False)
    finally:
        await client.close()
    assert calls == 2


async def test_a_failed_lookup_is_an_error_to_retry(peers: list[Peer]) -> None:
    def failing(cmd: pb.BaseCommand) -> pb.BaseCommand:
        reply = lookup_reply(cmd, "", pb.CommandLookupTopicResponse.Failed)
        reply.lookupTopicResponse.error = E.ServiceNotReady
        return reply

    peer = await start(peers, failing)
    client = TxnBufferClient(peer.url, BrokerConfig())
    try:
        with pytest.raises(TxnBufferClientError, match=r"lookup of .*ServiceNotReady"):
            await client.end_on_partition(TOPIC, TxnID(0, 1), commit=True)
    finally:
        await client.close()


async def test_the_credentials_are_read_when_sent(peers: list[Peer], tmp_path: Path) -> None:
    """A token in a file is read for each CONNECT and each AUTH_CHALLENGE answer, as Pulsar's token supplier reads
    it: a token rotated in its file reaches the live link at the next challenge (before: the token read when the
    client was made, until the broker restarted); a change of the setting itself (update-dynamic-config) too."""
    token = tmp_path / "token"
    token.write_text("first")
    pending: list[pb.BaseCommand] = []

    def challenging(cmd: pb.BaseCommand) -> pb.BaseCommand:
        if cmd.type == T.LOOKUP:
            return lookup_reply(cmd, peer.url, pb.CommandLookupTopicResponse.Connect)
        if cmd.type == T.END_TXN_ON_PARTITION:  # challenged first, answered after the AUTH_RESPONSE
            pending.append(cmd)
            challenge = pb.BaseCommand(type=T.AUTH_CHALLENGE)
            challenge.authChallenge.challenge.auth_method_name = "token"
            challenge.authChallenge.challenge.auth_data = b"refresh"
            return challenge
        assert cmd.type == T.AUTH_RESPONSE, cmd
        return end_reply(pending.pop())

    peer = await start(peers, challenging)
    config = BrokerConfig(brokerClientAuthenticationPlugin="org.apache.pulsar.client.impl.auth.AuthenticationToken",
                          brokerClientAuthenticationParameters=f"file://{token}")
    client = TxnBufferClient(peer.url, config)
    try:
        token.write_text("second")
        await client.end_on_partition(TOPIC, TxnID(0, 1), commit=True)
        token.write_text("third")
        await client.end_on_partition(TOPIC, TxnID(0, 2), commit=True)
        config.brokerClientAuthenticationParameters = "token:fourth"
        await client.end_on_partition(TOPIC, TxnID(0, 3), commit=True)
    finally:
        await client.close()
    assert [(c.auth_method_name, c.auth_data) for c in peer.connects] == [("token", b"second")]
    responses = [c.authResponse.response for c in peer.seen if c.type == T.AUTH_RESPONSE]
    assert [(r.auth_method_name, r.auth_data) for r in responses] == [
        ("token", b"second"), ("token", b"third"), ("token", b"fourth")]
