"""Connections to bookies: one v2 protocol connection per bookie, requests matched to responses by key.

v2 responses carry no request id, so a response is matched by (op, ledgerId, entryId); requests with the same key on
one connection wait in FIFO order (the bookie answers same-key requests in order). Any connection failure fails every
request waiting on it with `BookieUnavailableError`; the next request opens a new connection.

Cheap per request, as the publish path sends one per entry and bookie: requests made in one loop iteration go out in
one write, and a request is a future (no task, no timeout context each); one timer per connection fails the requests
not answered within the timeout, oldest first.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections import deque
from collections.abc import Callable
from typing import cast

from managed_ledger.bookkeeper.protocol import (
    AddRequest,
    AddResponse,
    OpCode,
    ProtocolError,
    Request,
    Response,
    ResponseDecoder,
    encode_request,
)

# How long a request may wait for its response before the bookie is treated as failed (BookKeeper's readTimeout
# default is 5 s, Pulsar sets 30 s; a loaded 2-core test machine needs some slack).
REQUEST_TIMEOUT_S = 10.0
CONNECT_TIMEOUT_S = 10.0

Key = tuple[int, int, int]  # (op, ledgerId, entryId)


class BookieUnavailableError(ConnectionError):
    """The bookie could not be reached, the connection broke, or it did not answer in time."""


_ADD_KEY = struct.Struct(">qq")  # ledgerId, entryId: the first 16 bytes of a packaged entry


def _key(request: Request) -> Key:
    if isinstance(request, AddRequest):
        ledger_id, entry_id = _ADD_KEY.unpack_from(request.entry)
        return (OpCode.ADD_ENTRY, ledger_id, entry_id)
    return (OpCode.READ_ENTRY, request.ledger_id, request.entry_id)


class BookieConnection(asyncio.Protocol):
    def __init__(self, bookie_id: str, timeout: Callable[[], float] = lambda: REQUEST_TIMEOUT_S) -> None:
        self.bookie_id = bookie_id
        self._decoder = ResponseDecoder()
        self._transport: asyncio.Transport | None = None
        self._pending: dict[Key, deque[asyncio.Future[Response]]] = {}
        self.closed = False
        self._timeout = timeout
        self._out: list[bytes] = []  # requests of this loop iteration, written together
        self._flush_scheduled = False
        self._sent: deque[tuple[float, asyncio.Future[Response]]] = deque()  # (deadline, future), in send order
        self._sweeper: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # (No isinstance check: uvloop's TCPTransport, the broker's, is not a subclass of asyncio.Transport.)
        self._transport = cast("asyncio.Transport", transport)

    def data_received(self, data: bytes) -> None:
        try:
            responses = self._decoder.feed(data)
        except ProtocolError as e:
            self._fail(BookieUnavailableError(f"bookie {self.bookie_id} broke the protocol: {e}"))
            return
        for response in responses:
            op = OpCode.ADD_ENTRY if isinstance(response, AddResponse) else OpCode.READ_ENTRY
            waiters = self._pending.get((op, response.ledger_id, response.entry_id))
            if not waiters:
                continue  # an answer nobody waits for any more (timed out)
            future = waiters.popleft()
            if not waiters:
                del self._pending[(op, response.ledger_id, response.entry_id)]
            if not future.done():
                future.set_result(response)

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(BookieUnavailableError(f"connection to bookie {self.bookie_id} lost: {exc or 'closed'}"))

    def _fail(self, error: Exception) -> None:
        self.closed = True
        if self._transport is not None:
            self._transport.abort()
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        self._out.clear()
        self._sent.clear()
        pending, self._pending = self._pending, {}
        for waiters in pending.values():
            for future in waiters:
                if not future.done():
                    future.set_exception(error)

    def send(self, request: Request) -> asyncio.Future[Response]:
        """Start a request: its future gets the response, or BookieUnavailableError (the connection failed, or no
        answer within the timeout)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Response] = loop.create_future()
        if self.closed or self._transport is None:
            future.set_exception(BookieUnavailableError(f"connection to bookie {self.bookie_id} is closed"))
            return future
        self._pending.setdefault(_key(request), deque()).append(future)
        self._out.append(encode_request(request))
        if not self._flush_scheduled:
            self._flush_scheduled = True
            loop.call_soon(self._flush)
        sent = self._sent
        while sent and sent[0][1].done():  # (answered: forget them as we go)
            sent.popleft()
        timeout = self._timeout()
        sent.append((loop.time() + timeout, future))
        if self._sweeper is None:
            self._sweeper = loop.call_later(timeout, self._sweep)
        return future

    def _flush(self) -> None:
        self._flush_scheduled = False
        out = self._out
        if out and self._transport is not None and not self.closed:
            self._transport.write(out[0] if len(out) == 1 else b"".join(out))
        out.clear()

    def _sweep(self) -> None:
        """Fail the requests past their deadline; come back at the next deadline."""
        self._sweeper = None
        if self.closed:
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        sent = self._sent
        while sent and (sent[0][1].done() or sent[0][0] <= now):
            _, future = sent.popleft()
            if not future.done():
                future.set_exception(BookieUnavailableError(
                    f"bookie {self.bookie_id} did not answer within {self._timeout():g}s"))
        if sent:
            self._sweeper = loop.call_later(max(sent[0][0] - now, 0.001), self._sweep)

    def close(self) -> None:
        self._fail(BookieUnavailableError(f"connection to bookie {self.bookie_id} closed by the client"))


class BookieClient:
    """One connection per bookie, opened on first use and reopened after a failure."""

    def __init__(self, resolve: dict[str, tuple[str, int]] | None = None) -> None:
        # bookie id -> (host, port) from the bookies' registrations; ids absent here are parsed as host:port.
        self.addresses: dict[str, tuple[str, int]] = dict(resolve or {})
        self._connections: dict[str, asyncio.Future[BookieConnection]] = {}
        self.request_timeout = REQUEST_TIMEOUT_S

    def _address(self, bookie_id: str) -> tuple[str, int]:
        if bookie_id in self.addresses:
            return self.addresses[bookie_id]
        host, _, port = bookie_id.rpartition(":")
        return host, int(port)

    async def _connect(self, bookie_id: str) -> BookieConnection:
        host, port = self._address(bookie_id)
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                _, protocol = await loop.create_connection(
                    lambda: BookieConnection(bookie_id, lambda: self.request_timeout), host, port)
        except (OSError, TimeoutError) as e:
            raise BookieUnavailableError(f"cannot connect to bookie {bookie_id}: {e}") from e
        return protocol

    async def connection(self, bookie_id: str) -> BookieConnection:
        pending = self._connections.get(bookie_id)
        if pending is not None and pending.done() and (pending.exception() is not None or pending.result().closed):
            pending = None
        if pending is None:
            pending = asyncio.ensure_future(self._connect(bookie_id))
            self._connections[bookie_id] = pending
        return await asyncio.shield(pending)

    def send(self, bookie_id: str, request: Request) -> asyncio.Future[Response]:
        """Start one request (connecting first if needed); the future gets the response, or a
        `BookieUnavailableError` on any failure, a timeout included."""
        pending = self._connections.get(bookie_id)
        if pending is not None and pending.done() and not pending.cancelled() and pending.exception() is None:
            connection = pending.result()
            if not connection.closed:
                return connection.send(request)
        return asyncio.ensure_future(self._send_connected(bookie_id, request))

    async def _send_connected(self, bookie_id: str, request: Request) -> Response:
        connection = await self.connection(bookie_id)
        return await connection.send(request)

    async def request(self, bookie_id: str, request: Request) -> Response:
        """Send one request and await its response; any failure is a `BookieUnavailableError`."""
        return await self.send(bookie_id, request)

    async def close(self) -> None:
        connections, self._connections = self._connections, {}
        for pending in connections.values():
            if not pending.done():
                pending.cancel()
                with contextlib.suppress(asyncio.CancelledError, BookieUnavailableError):
                    await pending
            elif pending.exception() is None:
                pending.result().close()
