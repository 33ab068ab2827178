"""Connections to bookies: one v2 protocol connection per bookie, requests matched to responses by key.

v2 responses carry no request id, so a response is matched by (op, ledgerId, entryId); requests with the same key on
one connection wait in FIFO order (the bookie answers same-key requests in order). Any connection failure fails every
request waiting on it with `BookieUnavailableError`; the next request opens a new connection.

Cheap per request, as the publish path sends one per entry and bookie: requests made in one loop iteration go out in
one write; an add is a ready frame and a waiter called with its answer (`send_add`: no future, no task, no loop
callback each; `send` wraps the same in a future for everything else); the timeout is kept per loop iteration's
batch: one timer per connection fails the requests of a batch not answered within the timeout, oldest first.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections import deque
from collections.abc import Callable
from functools import partial
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
# Called once per request: (entryId, the response, None) or (entryId, None, the BookieUnavailableError).
Waiter = Callable[[int, Response | None, Exception | None], None]
# One request: its waiter in a tuple made for it. The tuple's identity tells requests apart where the key and the
# waiter do not (an add's waiter is one per bookie, so a re-sent entry has both the same); compared by `is` only.
Ticket = tuple[Waiter]


class BookieUnavailableError(ConnectionError):
    """The bookie could not be reached, the connection broke, or it did not answer in time."""


_ADD_KEY = struct.Struct(">qq")  # ledgerId, entryId: the first 16 bytes of a packaged entry
_ADD = int(OpCode.ADD_ENTRY)
_READ = int(OpCode.READ_ENTRY)


def _key(request: Request) -> Key:
    if isinstance(request, AddRequest):
        ledger_id, entry_id = _ADD_KEY.unpack_from(request.entry)
        return (_ADD, ledger_id, entry_id)
    return (_READ, request.ledger_id, request.entry_id)


def _resolve(future: asyncio.Future[Response], _entry_id: int, response: Response | None,
             error: Exception | None) -> None:
    if not future.done():
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(cast("Response", response))


class BookieConnection(asyncio.Protocol):
    def __init__(self, bookie_id: str, timeout: Callable[[], float] = lambda: REQUEST_TIMEOUT_S) -> None:
        self.bookie_id = bookie_id
        self._decoder = ResponseDecoder()
        self._transport: asyncio.Transport | None = None
        # Waiting requests by key: a ticket, or a list of them (oldest first) when keys repeat.
        self._pending: dict[Key, Ticket | list[Ticket]] = {}
        self.closed = False
        self._timeout = timeout
        self._out: list[bytes] = []  # requests of this loop iteration, written together
        self._out_tickets: list[tuple[Key, Ticket]] = []  # and who waits for them
        self._flush_scheduled = False
        # Written batches in write order: (deadline, [(key, ticket)]); the first one's answered prefix ends at
        # _sent_checked.
        self._sent: deque[tuple[float, list[tuple[Key, Ticket]]]] = deque()
        self._sent_checked = 0
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
        pending = self._pending
        for response in responses:
            key = (_ADD if type(response) is AddResponse else _READ, response.ledger_id, response.entry_id)
            found = pending.pop(key, None)
            if found is None:
                continue  # an answer nobody waits for any more (timed out)
            if type(found) is list:
                ticket = found.pop(0)
                if found:
                    pending[key] = found[0] if len(found) == 1 else found
            else:
                ticket = cast("Ticket", found)
            ticket[0](response.entry_id, response, None)

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
        self._out_tickets.clear()
        self._sent.clear()
        pending, self._pending = self._pending, {}
        for key, tickets in pending.items():
            for ticket in tickets if type(tickets) is list else (cast("Ticket", tickets),):
                ticket[0](key[2], None, error)

    def send(self, request: Request) -> asyncio.Future[Response]:
        """Start a request: its future gets the response, or BookieUnavailableError (the connection failed, or no
        answer within the timeout)."""
        future: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        if self.closed or self._transport is None:
            future.set_exception(BookieUnavailableError(f"connection to bookie {self.bookie_id} is closed"))
            return future
        self.start(_key(request), encode_request(request), partial(_resolve, future))
        return future

    def send_add(self, ledger_id: int, entry_id: int, frame: bytes, waiter: Waiter) -> None:
        """Start an ADD of a ready frame (`protocol.encode_add`); ``waiter`` gets its answer, or the error on the
        next loop iteration (never from inside this call)."""
        if self.closed or self._transport is None:
            error = BookieUnavailableError(f"connection to bookie {self.bookie_id} is closed")
            asyncio.get_running_loop().call_soon(waiter, entry_id, None, error)
            return
        self.start((_ADD, ledger_id, entry_id), frame, waiter)

    def start(self, key: Key, frame: bytes, waiter: Waiter) -> None:
        """Queue a frame for this loop iteration's write; ``waiter`` gets the response with this key."""
        ticket: Ticket = (waiter,)
        pending = self._pending
        waiting = pending.get(key)
        if waiting is None:
            pending[key] = ticket
        elif type(waiting) is list:
            waiting.append(ticket)
        else:
            pending[key] = [waiting, ticket]  # type: ignore[list-item]
        self._out.append(frame)
        self._out_tickets.append((key, ticket))
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        out = self._out
        if not out or self._transport is None or self.closed:
            return
        self._transport.write(out[0] if len(out) == 1 else b"".join(out))
        out.clear()
        batch, self._out_tickets = self._out_tickets, []
        self._forget_answered()
        loop = asyncio.get_running_loop()
        timeout = self._timeout()
        self._sent.append((loop.time() + timeout, batch))
        if self._sweeper is None:
            self._sweeper = loop.call_later(timeout, self._sweep)

    def _waiting(self, key: Key, ticket: Ticket) -> bool:
        waiting = self._pending.get(key)
        return waiting is ticket or (type(waiting) is list and any(t is ticket for t in waiting))

    def _forget_answered(self) -> None:
        """Drop the written batches whose requests were all answered (from the oldest on)."""
        sent = self._sent
        while sent:
            batch = sent[0][1]
            i = self._sent_checked
            while i < len(batch) and not self._waiting(*batch[i]):
                i += 1
            if i < len(batch):
                self._sent_checked = i
                return
            sent.popleft()
            self._sent_checked = 0

    def _sweep(self) -> None:
        """Fail the requests past their deadline; come back at the next deadline."""
        self._sweeper = None
        if self.closed:
            return
        self._forget_answered()
        loop = asyncio.get_running_loop()
        now = loop.time()
        sent = self._sent
        while sent and sent[0][0] <= now:
            _, batch = sent.popleft()
            self._sent_checked = 0
            for key, ticket in batch:
                if not self._waiting(key, ticket):
                    continue
                waiting = self._pending.pop(key)
                if type(waiting) is list:
                    del waiting[next(i for i, t in enumerate(waiting) if t is ticket)]
                    if waiting:
                        self._pending[key] = waiting[0] if len(waiting) == 1 else waiting
                ticket[0](key[2], None, BookieUnavailableError(
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
        self._connecting: set[asyncio.Task[None]] = set()  # adds waiting for their connection

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

    def send_add(self, bookie_id: str, ledger_id: int, entry_id: int, frame: bytes, waiter: Waiter) -> None:
        """Start an ADD of a ready frame (connecting first if needed); ``waiter`` gets the response, or a
        `BookieUnavailableError` on any failure, never from inside this call."""
        pending = self._connections.get(bookie_id)
        if pending is not None and pending.done() and not pending.cancelled() and pending.exception() is None:
            connection = pending.result()
            if not connection.closed:
                connection.send_add(ledger_id, entry_id, frame, waiter)
                return
        task = asyncio.ensure_future(self._send_add_connected(bookie_id, ledger_id, entry_id, frame, waiter))
        self._connecting.add(task)
        task.add_done_callback(self._connecting.discard)

    async def _send_add_connected(self, bookie_id: str, ledger_id: int, entry_id: int, frame: bytes,
                                  waiter: Waiter) -> None:
        try:
            connection = await self.connection(bookie_id)
        except BookieUnavailableError as e:
            waiter(entry_id, None, e)
            return
        connection.send_add(ledger_id, entry_id, frame, waiter)

    async def _send_connected(self, bookie_id: str, request: Request) -> Response:
        connection = await self.connection(bookie_id)
        return await connection.send(request)

    async def request(self, bookie_id: str, request: Request) -> Response:
        """Send one request and await its response; any failure is a `BookieUnavailableError`."""
        return await self.send(bookie_id, request)

    async def close(self) -> None:
        for task in list(self._connecting):
            task.cancel()
        connections, self._connections = self._connections, {}
        for pending in connections.values():
            if not pending.done():
                pending.cancel()
                with contextlib.suppress(asyncio.CancelledError, BookieUnavailableError):
                    await pending
            elif pending.exception() is None:
                pending.result().close()
