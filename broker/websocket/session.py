"""What every WebSocket session of the service does the same way, whatever it carries (broker/websocket/service.py
makes the producers, consumers and readers):

- ``serve``: the upgrade, then the client's frames read (its pings answered: they count as frames) and the session's
  written in order (``Outbox``, bounded), each link to the broker kept (``_keep``: made again when lost, the session
  closed with 1011 when that does not succeed in time), the session limits (``webSocketSessionIdleTimeoutMillis``,
  ``webSocketPingDurationSeconds``); everything closed when either side ends, also when the client goes away during
  the upgrade;
- ``Growth``: the links a WebSocket makes while it runs (a pattern consumer's topics, a partitioned topic's added
  partitions), kept like the first ones and ended with the WebSocket.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any

from aiohttp import WSMsgType, web

from broker.service.peer_link import BrokerLink, LinkError
from broker.tasks import OwnedTasks

if TYPE_CHECKING:
    from broker.config import BrokerConfig

log = logging.getLogger(__name__)


async def serve(request: web.Request, cfg: BrokerConfig, sockets: set[web.WebSocketResponse], outbox: Outbox,
                links: Sequence[tuple[BrokerLink, Callable[[], Awaitable[None]]]],
                on_text: Callable[[str], Awaitable[None]], on_close: Callable[[], Awaitable[None]],
                on_open: Callable[[web.WebSocketResponse], None] | None = None) -> web.StreamResponse:
    """Upgrade, then read the client's frames and write the session's, until either side ends; a lost link to
    the broker is made again (its restart: the producer or the subscription again) while the session goes on.
    ``on_open``: told the WebSocket once upgraded (a pattern consumer's links come and go while it runs);
    ``sockets``: the service's open WebSockets (closed with it)."""
    # (pings answered here, not by aiohttp: a client's ping is a frame that keeps the session from idling)
    ws = web.WebSocketResponse(max_msg_size=cfg.webSocketMaxTextFrameSize, autoping=False)
    loop = asyncio.get_running_loop()
    try:
        await ws.prepare(request)
    except BaseException:  # (the client went away during the upgrade: what was made for it goes too)
        await on_close()
        for link, _ in links:
            await link.close()
        raise
    sockets.add(ws)
    seen = _Activity(loop)
    writer = loop.create_task(_write_out(ws, outbox, seen))
    keepers = [loop.create_task(_keep(link, restart, ws)) for link, restart in links]
    if cfg.webSocketSessionIdleTimeoutMillis > 0:
        keepers.append(loop.create_task(_close_when_idle(ws, seen, cfg.webSocketSessionIdleTimeoutMillis)))
    if cfg.webSocketPingDurationSeconds > 0:
        keepers.append(loop.create_task(_ping(ws, seen, cfg.webSocketPingDurationSeconds)))
    if on_open is not None:
        on_open(ws)
    try:
        async for msg in ws:
            seen.now()
            if msg.type == WSMsgType.PING:
                await ws.pong(msg.data)
                continue
            await outbox.room()  # (a client that does not read its frames is not read either)
            if msg.type == WSMsgType.TEXT:
                await on_text(msg.data)
            elif msg.type == WSMsgType.BINARY:
                await on_text(msg.data.decode("utf-8", "replace"))
    except CloseSession as close:
        await ws.close(code=close.code, message=close.reason.encode()[:120])
    except ConnectionResetError:
        pass
    finally:
        sockets.discard(ws)
        for keeper in keepers:
            keeper.cancel()
        await asyncio.gather(*keepers, return_exceptions=True)
        await on_close()
        outbox.end()
        await asyncio.gather(writer, return_exceptions=True)
        for link, _ in links:
            await link.close()
    return ws


# A lost link is made again for this long (the Java client's operation timeout), backing off between attempts as
# the Java client does (0.1 s doubling, at most 5 s here); then the session ends with 1011.
RECONNECT_TIMEOUT_S = 30.0
RECONNECT_FIRST_DELAY_S = 0.1
RECONNECT_MAX_DELAY_S = 5.0


async def _keep(link: BrokerLink, restart: Callable[[], Awaitable[None]], ws: web.WebSocketResponse) -> None:
    """Each time the link is lost: reconnect (the topic looked up again) and restart its producer or consumer;
    when that does not succeed in time, close the session (1011, the reason)."""
    broken = asyncio.Event()
    link.on_lost = lambda _: broken.set()
    if link.lost_already:  # (lost before the session was served)
        broken.set()
    loop = asyncio.get_running_loop()
    while True:
        await broken.wait()
        broken.clear()
        deadline = loop.time() + RECONNECT_TIMEOUT_S
        delay = RECONNECT_FIRST_DELAY_S
        while True:
            try:
                await link.reopen()
                await restart()
                break
            except (LinkError, OSError) as exc:
                if loop.time() + delay > deadline:
                    log.warning("WebSocket session on %s: the broker could not be reached again: %s", link.topic, exc)
                    await ws.close(code=1011, message=f"Connection to the broker lost: {exc}".encode()[:120])
                    return
            await asyncio.sleep(delay)  # (a retry's backoff, as the clients' reconnection)
            delay = min(delay * 2, RECONNECT_MAX_DELAY_S)


class _Activity:
    """When a session last read or wrote a frame (Jetty's idle time counts both)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.last = loop.time()

    def now(self) -> None:
        self.last = self._loop.time()


async def _close_when_idle(ws: web.WebSocketResponse, seen: _Activity, timeout_ms: int) -> None:
    """webSocketSessionIdleTimeoutMillis: a session with no frame either way for that long is closed with 1001 and
    Jetty's words, as Jetty closes it for Pulsar."""
    loop = asyncio.get_running_loop()
    while not ws.closed:
        idle_s = loop.time() - seen.last
        if idle_s * 1000 >= timeout_ms:  # (Jetty's words: the time idle, then the limit)
            await ws.close(code=1001, message=f"Idle timeout expired: {int(idle_s * 1000)}/{timeout_ms} ms".encode())
            return
        left = timeout_ms / 1000 - idle_s
        await asyncio.sleep(left)


async def _ping(ws: web.WebSocketResponse, seen: _Activity, every_s: int) -> None:
    """webSocketPingDurationSeconds: a ping to the client at that interval, with Pulsar's payload."""
    while not ws.closed:
        await asyncio.sleep(every_s)
        with contextlib.suppress(ConnectionResetError, RuntimeError):  # (the session ending meanwhile)
            await ws.ping(b"PING")
            seen.now()


class CloseSession(Exception):
    """Raised by a session's handling of the client's text: the WebSocket is closed with ``code`` and ``reason``."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code, self.reason = code, reason


async def _write_out(ws: web.WebSocketResponse, outbox: Outbox, seen: _Activity) -> None:
    """The session's frames to the client, in order (ends at the outbox's end: the session or its link ended)."""
    try:
        while True:
            text = await outbox.get()
            if text is None or ws.closed:
                return
            try:
                await ws.send_str(text)
            except ConnectionResetError:
                return
            seen.now()
    finally:
        outbox.end()  # (nothing more is written: nothing waits for room)


# Frames that may wait for a client that does not read them: a full receiver queue's deliveries and as many answers.
OUTBOX_LIMIT = 2000


class Outbox:
    """The frames a session writes to its client, in order. What waits is bounded: past OUTBOX_LIMIT the client's
    own frames are not read (``room``) until it has taken half, so a client that sends commands and reads no answer
    cannot make the broker hold its answers without end. (Deliveries are bounded by the receiver queue anyway.)"""

    def __init__(self) -> None:
        self._queue: asyncio.Queue[str | None] = asyncio.Queue()
        self._room = asyncio.Event()
        self._room.set()
        self._ended = False

    def put(self, text: str) -> None:
        if self._ended:
            return
        self._queue.put_nowait(text)
        if self._queue.qsize() > OUTBOX_LIMIT:
            self._room.clear()

    def end(self) -> None:
        self._ended = True
        self._queue.put_nowait(None)
        self._room.set()

    async def get(self) -> str | None:
        text = await self._queue.get()
        if self._queue.qsize() <= OUTBOX_LIMIT // 2:
            self._room.set()
        return text

    async def room(self) -> None:
        await self._room.wait()


class Growth:
    """The links a WebSocket makes while it runs (a pattern consumer's topics, the partitions added to a partitioned
    topic) and what follows the changes: each link kept as the first ones are (``_keep``: made again when lost), all
    ended with the WebSocket (``close``)."""

    def __init__(self, what: str) -> None:
        self._tasks = OwnedTasks(what)
        self._keepers: dict[BrokerLink, asyncio.Task[None]] = {}

    def runs(self, follow: Callable[[web.WebSocketResponse], Coroutine[Any, Any, None]]
             ) -> Callable[[web.WebSocketResponse], None]:
        """``_serve``'s on_open: ``follow`` the changes once the WebSocket is upgraded."""
        def on_open(ws: web.WebSocketResponse) -> None:
            self._tasks.spawn(follow(ws))
        return on_open

    def keep(self, link: BrokerLink, restart: Callable[[], Awaitable[None]], ws: web.WebSocketResponse) -> None:
        self._keepers[link] = asyncio.get_running_loop().create_task(_keep(link, restart, ws))

    async def add(self, link: BrokerLink, start: Callable[[], Awaitable[None]], restart: Callable[[], Awaitable[None]],
                  ws: web.WebSocketResponse) -> None:
        """Open a new link and make its producer or subscription (``start``); when that fails, its keeper makes
        them again (``restart``), or ends the WebSocket as for any lost link."""
        try:
            await link.open()
            await start()
        except (LinkError, OSError) as exc:
            link.lost(exc)
        self.keep(link, restart, ws)

    async def end(self, link: BrokerLink) -> None:
        keeper = self._keepers.pop(link, None)
        if keeper is not None:
            keeper.cancel()
            await asyncio.gather(keeper, return_exceptions=True)
        await link.close()

    async def close(self) -> None:
        await self._tasks.close()
        for link in list(self._keepers):
            await self.end(link)
