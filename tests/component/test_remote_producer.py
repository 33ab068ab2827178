"""The replicator's remote producer against a scripted broker: the link's loss is always
reported, nothing is written to a connection that is gone (it raises instead, so the replicator
reconnects rather than dying), and closing never waits on a broker that stopped reading."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from broker.protocol import commands
from broker.protocol import pulsar_api_pb2 as pb
from broker.service import peer_link
from broker.service.peer_link import RemoteError
from broker.service.remote_producer import RemoteProducer, RemoteSettings
from tests.scripted_broker import commands_from
from tests.waiting import eventually

T = pb.BaseCommand.Type


async def scripted_broker(after_producer: Callable[[asyncio.StreamWriter], Awaitable[None]],
                          heard: list[pb.BaseCommand] | None = None) -> tuple[asyncio.Server, str]:
    """A broker (and its pulsar:// URL) that answers CONNECT, LOOKUP (connect here) and PRODUCER,
    then does ``after_producer`` and stops reading; with ``heard``, it goes on reading and keeps there every
    command but those (CONNECTs too)."""
    url: list[str] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        _WRITERS.setdefault(server, []).append(writer)
        async for cmd in commands_from(reader):
            if cmd.type == T.CONNECT:
                writer.write(commands.connected("scripted", 20, 5 * 1024 * 1024))
                if heard is not None:
                    heard.append(cmd)
            elif cmd.type == T.LOOKUP:
                writer.write(commands.lookup_connect(cmd.lookupTopic.request_id, url[0]))
            elif cmd.type == T.PRODUCER:
                p = cmd.producer
                writer.write(commands.producer_success(p.request_id, p.producer_name, -1, b""))
                await after_producer(writer)
                if heard is None:
                    return
            elif heard is not None:
                heard.append(cmd)

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    url.append(f"pulsar://127.0.0.1:{server.sockets[0].getsockname()[1]}")
    return server, url[0]


# The connections each scripted broker accepted (``stop`` closes them).
_WRITERS: dict[asyncio.Server, list[asyncio.StreamWriter]] = {}


async def stop(server: asyncio.Server) -> None:
    """Close a scripted broker and the connections it still holds (from Python 3.12 on, Server.wait_closed waits
    for every connection, and a script that sleeps keeps its own open)."""
    server.close()
    for writer in _WRITERS.pop(server, []):
        writer.close()
    await server.wait_closed()


def producer_to(url: str, on_lost: Callable[[BaseException], None] = lambda exc: None) -> RemoteProducer:
    return RemoteProducer(RemoteSettings(url, None), "persistent://t/ns/x", "pulsar.repl.a",
                          lambda seq: None, on_lost)


async def idle(writer: asyncio.StreamWriter) -> None:
    await asyncio.sleep(3600)


async def test_a_lost_link_is_reported_and_never_written_to() -> None:
    closed = asyncio.Event()

    async def hang_up(writer: asyncio.StreamWriter) -> None:  # the link goes away right after
        await writer.drain()
        writer.close()
        closed.set()

    server, url = await scripted_broker(hang_up)
    lost: asyncio.Future[BaseException] = asyncio.get_running_loop().create_future()

    def on_lost(exc: BaseException) -> None:
        if not lost.done():
            lost.set_result(exc)

    producer = producer_to(url, on_lost)
    try:
        await producer.connect()
        await asyncio.wait_for(closed.wait(), 10)
        assert isinstance(await asyncio.wait_for(lost, 10), RemoteError)
        with pytest.raises(RemoteError):
            producer.send(0, 1, b"payload", is_chunk=False)
    finally:
        await producer.close()
        await stop(server)


async def test_closing_does_not_wait_for_a_remote_that_stopped_reading(monkeypatch: pytest.MonkeyPatch) -> None:
    # The remote broker makes the producer, then stops reading the connection (as a broker does
    # that paused it for a rate limit): the unsent bytes can never drain, and closing gives up on
    # them after CLOSE_TIMEOUT_S rather than wait for ever (which would hang a topic's unload).
    monkeypatch.setattr(peer_link, "CLOSE_TIMEOUT_S", 0.2)
    stalled = asyncio.Event()

    async def stop_reading(writer: asyncio.StreamWriter) -> None:
        stalled.set()
        await asyncio.sleep(3600)

    server, url = await scripted_broker(stop_reading)
    producer = producer_to(url)
    try:
        await producer.connect()
        await asyncio.wait_for(stalled.wait(), 10)
        for seq in range(64):  # 64 MiB: far more than the sockets' buffers hold
            producer.send(seq, 1, b"x" * (1 << 20), is_chunk=False)
        async with asyncio.timeout(10):
            await producer.close()
    finally:
        await stop(server)


async def test_a_service_url_with_several_hosts() -> None:
    # Pulsar's service URLs may name several brokers (pulsar://host1:6650,host2:6650, accepted in
    # a cluster's brokerServiceUrl): the producer tries them in turn, here past one that refuses.
    refusing = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    refused_port = refusing.sockets[0].getsockname()[1]
    refusing.close()
    await refusing.wait_closed()
    server, url = await scripted_broker(idle)
    producer = producer_to(f"pulsar://127.0.0.1:{refused_port},{url.removeprefix('pulsar://')}")
    try:
        await asyncio.wait_for(producer.connect(), 10)
        producer.send(0, 1, b"payload", is_chunk=False)
    finally:
        await producer.close()
        await stop(server)


@pytest.mark.parametrize("url", ["pulsar://127.0.0.1:99999", "http://127.0.0.1:6650", "pulsar://:6650"])
async def test_an_unusable_service_url_is_a_remote_error(url: str) -> None:
    producer = producer_to(url)
    with pytest.raises(RemoteError):
        await producer.connect()
    await producer.close()


async def test_a_close_cancelled_midway_still_closes_the_connection() -> None:
    # The replicator's close cancels its loop, which may be inside the producer's close at that
    # moment: the connection is closed all the same (left open, the remote broker would keep the
    # producer pulsar.repl.<cluster> and refuse the next replicator's as busy).
    server, url = await scripted_broker(idle)
    producer = producer_to(url)
    try:
        await producer.connect()
        connection = producer._link._connection
        assert connection is not None
        writer = connection._writer
        assert writer is not None
        closing = asyncio.ensure_future(producer.close())
        await asyncio.sleep(0)  # (inside close, waiting for its reader task to end)
        closing.cancel()
        await asyncio.gather(closing, return_exceptions=True)
        assert writer.is_closing()
    finally:
        await producer.close()
        await stop(server)


async def test_a_challenge_is_answered_with_the_token_as_it_is_now(tmp_path: Path) -> None:
    """The remote broker's AUTH_CHALLENGE on a live link (its credentials expired) is answered with the token read
    from its file again, as Pulsar's token supplier does: rotated in the file, the fresh token keeps the link (before:
    the token of the link's start, refused, and the link lost until the replicator reconnected)."""
    token = tmp_path / "token"
    token.write_text("at-connect")

    async def challenge(writer: asyncio.StreamWriter) -> None:
        token.write_text("rotated")
        c = pb.BaseCommand(type=T.AUTH_CHALLENGE)
        c.authChallenge.challenge.auth_method_name, c.authChallenge.challenge.auth_data = "token", b"refresh"
        writer.write(commands.frame(c))

    heard: list[pb.BaseCommand] = []
    server, url = await scripted_broker(challenge, heard)
    producer = RemoteProducer(RemoteSettings(url, None, "token", f"file://{token}"), "persistent://t/ns/x",
                              "pulsar.repl.a", lambda seq: None, lambda exc: None)
    try:
        await producer.connect()
        await eventually(lambda: any(c.type == T.AUTH_RESPONSE for c in heard), "the challenge answered")
    finally:
        await producer.close()
        await stop(server)
    connect, response = heard[0].connect, heard[1].authResponse.response
    assert (heard[0].type, connect.auth_method_name, connect.auth_data) == (T.CONNECT, "token", b"at-connect")
    assert (response.auth_method_name, response.auth_data) == ("token", b"rotated")
