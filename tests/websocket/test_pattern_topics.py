"""The pattern consumer's topics (broker/websocket/pattern.py) against a scripted broker: the watcher's pushes, and a
watcher lost and made again, its new list compared with the topics followed. The real watcher runs in
tests/websocket/test_websocket.py and against Pulsar in test_pulsar_websocket_answers.py."""

from __future__ import annotations

import asyncio

from broker.protocol import commands
from broker.protocol import pulsar_api_pb2 as pb
from broker.service.remote_producer import RemoteSettings
from broker.websocket.pattern import WATCHER_ID, PatternTopics
from tests.scripted_broker import commands_from

T = pb.BaseCommand.Type
NS = "persistent://public/default"
A, B, C, D = (f"{NS}/p-{n}" for n in "abcd")


async def test_pushes_and_a_lost_watcher() -> None:
    lists = [[A, B], [B, C]]  # (what each WATCH_TOPIC_LIST is answered)
    writers: list[asyncio.StreamWriter] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        try:
            async for cmd in commands_from(reader):
                if cmd.type == T.CONNECT:
                    writer.write(commands.connected("scripted", 20, 5 * 1024 * 1024))
                elif cmd.type == T.WATCH_TOPIC_LIST:
                    w = cmd.watchTopicList
                    assert (w.namespace, w.topics_pattern) == ("public/default", f"{NS}/p-.*")
                    writer.write(commands.watch_topic_list_success(w.request_id, w.watcher_id, lists.pop(0), "h"))
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    topics = PatternTopics(RemoteSettings(f"pulsar://127.0.0.1:{server.sockets[0].getsockname()[1]}", None),
                           "public/default", f"{NS}/p-.*")
    try:
        assert await topics.start() == [A, B]
        writers[0].write(commands.watch_topic_update(WATCHER_ID, [D], [], "h2"))
        assert await asyncio.wait_for(topics.changes(), 10) == ([D], [])
        writers[0].write(commands.watch_topic_update(WATCHER_ID, [D], [C], "h3"))  # (C unknown: nothing to end)
        assert await asyncio.wait_for(topics.changes(), 10) == ([], [])
        writers[0].close()  # the watcher's connection lost: watched again, its list [B, C] compared with [A, B, D]
        assert await asyncio.wait_for(topics.changes(), 10) == ([C], [A, D])
        assert topics.topics == {B, C} and len(writers) == 2
    finally:
        await topics.close()
        server.close()
        await server.wait_closed()
