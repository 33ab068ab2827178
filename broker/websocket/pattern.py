"""The topics a pattern consumer (``/ws/v3/consumer/{subscription}?topicsPattern=...``) follows, as the Java client's
pattern consumer follows them: a topic-list watcher on the broker (WATCH_TOPIC_LIST, PIP-145) gives the persistent
topics of the pattern's namespace that match it now (partition-level names, each subscribed on its own), then each
topic made or deleted while the session runs (WATCH_TOPIC_UPDATE). The watcher's connection is made again when it is
lost, and the list it then gives is compared with the topics followed.

``PatternTopics`` only tells what changed (``changes``); the WebSocket service makes and ends the subscriptions.
"""

from __future__ import annotations

import asyncio
import logging

from broker.protocol import pulsar_api_pb2 as pb
from broker.protocol.frames import Frame
from broker.service.peer_link import LinkError, PeerConnection
from broker.service.remote_producer import RemoteSettings
from broker.websocket.client import CLIENT_VERSION, REQUEST_TIMEOUT_S

log = logging.getLogger(__name__)
T = pb.BaseCommand.Type
WATCHER_ID = 1
# A lost watcher is watched again for this long, backing off between attempts (as a session's link, service.py).
RETRY_FIRST_DELAY_S = 0.1
RETRY_MAX_DELAY_S = 5.0
RETRY_TIMEOUT_S = 30.0

Changes = tuple[list[str], list[str]]  # (topics made, topics deleted): partition-level names


class PatternTopics:
    """The topics of ``namespace`` matching ``pattern``, as the broker's watcher tells them."""

    def __init__(self, settings: RemoteSettings, namespace: str, pattern: str) -> None:
        self._settings = settings
        self.namespace = namespace
        self.pattern = pattern
        self.topics: set[str] = set()  # (as last told: the ones followed)
        self._updates: asyncio.Queue[Changes | BaseException] = asyncio.Queue()
        self._connection: PeerConnection | None = None

    async def start(self) -> list[str]:
        """Watch; the topics matching now (LinkError when the broker refuses the watcher)."""
        self.topics = set(await self._watch())
        return sorted(self.topics)

    async def _watch(self) -> list[str]:
        await self.close()
        connection = PeerConnection(self._settings.url, self._settings.credentials, self._settings.ssl_context,
                                    CLIENT_VERSION, REQUEST_TIMEOUT_S, on_command=self._on_command,
                                    on_lost=self._updates.put_nowait)
        await connection.connect()
        self._connection = connection
        cmd = pb.BaseCommand(type=T.WATCH_TOPIC_LIST)
        w = cmd.watchTopicList
        w.watcher_id, w.namespace, w.topics_pattern = WATCHER_ID, self.namespace, self.pattern
        return list((await connection.request(cmd, w)).watchTopicListSuccess.topic)

    def _on_command(self, frame: Frame) -> None:
        cmd = frame.command
        if cmd.type == T.WATCH_TOPIC_UPDATE and cmd.watchTopicUpdate.watcher_id == WATCHER_ID:
            u = cmd.watchTopicUpdate
            self._updates.put_nowait((list(u.new_topics), list(u.deleted_topics)))

    async def changes(self) -> Changes:
        """The next topics made and deleted. A lost watcher is watched again (what changed meanwhile is the
        difference of its new list); LinkError when that does not succeed within RETRY_TIMEOUT_S."""
        update = await self._updates.get()
        if not isinstance(update, BaseException):
            made = [t for t in update[0] if t not in self.topics]
            deleted = [t for t in update[1] if t in self.topics]
            self.topics.update(made)
            self.topics.difference_update(deleted)
            return made, deleted
        log.info("WebSocket pattern consumer of %s: the topic watcher was lost (%s); watching again", self.pattern,
                 update)
        loop = asyncio.get_running_loop()
        deadline, delay = loop.time() + RETRY_TIMEOUT_S, RETRY_FIRST_DELAY_S
        while True:
            try:
                now = set(await self._watch())
                break
            except LinkError as exc:
                if loop.time() + delay > deadline:
                    raise LinkError(f"the topic watcher could not be made again: {exc}") from None
            await asyncio.sleep(delay)
            delay = min(delay * 2, RETRY_MAX_DELAY_S)
        made, deleted = sorted(now - self.topics), sorted(self.topics - now)
        self.topics = now
        return made, deleted

    async def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            await connection.close()
