"""In-process stand-ins for ZooKeeper and bookies, to test the client's edge cases without Java.

`FakeZk` keeps znodes in a dict with versions, sequential names and kazoo's errors. `FakeBookie` is a real asyncio
TCP server speaking the v2 protocol through our own codec, with the bookie-side rules the client depends on (master
key recorded by the first add/fence, EFENCED for plain adds after a fence, the last entry for a read of -1) and knobs
to misbehave: hold responses, answer with an error code, stay silent, or send garbage. `FakeCluster` is the three
together: a FakeZk, fake bookies registered in it, and our BookKeeper client on them (`running()` for a fixture).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import cast

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError

from managed_ledger.bookkeeper.client import BookKeeper
from managed_ledger.bookkeeper.protocol import (
    LAST_ADD_CONFIRMED,
    AddRequest,
    AddResponse,
    Flag,
    ReadRequest,
    ReadResponse,
    Request,
    RequestDecoder,
    StatusCode,
    encode_response,
)
from managed_ledger.bookkeeper.zk import ZnodeStat


@dataclass
class _Znode:
    data: bytes
    version: int = 0
    ctime: int = field(default_factory=lambda: int(time.time() * 1000))
    sequence: int = 0


class FakeZk:
    def __init__(self) -> None:
        self.nodes: dict[str, _Znode] = {"/": _Znode(b"")}

    async def start(self) -> None:
        pass

    async def close(self) -> None:
        pass

    def _node(self, path: str) -> _Znode:
        try:
            return self.nodes[path]
        except KeyError:
            raise NoNodeError(path) from None

    async def get(self, path: str) -> tuple[bytes, ZnodeStat]:
        node = self._node(path)
        return node.data, ZnodeStat(node.version, node.ctime)

    async def exists(self, path: str) -> ZnodeStat | None:
        node = self.nodes.get(path)
        return None if node is None else ZnodeStat(node.version, node.ctime)

    async def children(self, path: str) -> list[str]:
        self._node(path)
        prefix = path.rstrip("/") + "/"
        return [p[len(prefix) :] for p in self.nodes if p.startswith(prefix) and "/" not in p[len(prefix) :]]

    async def create(self, path: str, data: bytes = b"", *, ephemeral: bool = False, sequence: bool = False,
                     makepath: bool = False) -> str:
        parent = path.rsplit("/", 1)[0] or "/"
        if parent not in self.nodes:
            if not makepath:
                raise NoNodeError(parent)
            await self.create(parent, makepath=True)
        if sequence:
            path += f"{self.nodes[parent].sequence:010d}"
        self.nodes[parent].sequence += 1  # ZooKeeper's cversion counts every child created
        if path in self.nodes:
            raise NodeExistsError(path)
        self.nodes[path] = _Znode(data)
        return path

    async def set(self, path: str, data: bytes, version: int) -> ZnodeStat:
        node = self._node(path)
        if version != -1 and version != node.version:
            raise BadVersionError(path)
        node.data, node.version = data, node.version + 1
        return ZnodeStat(node.version, node.ctime)

    async def delete(self, path: str, version: int = -1) -> None:
        node = self._node(path)
        if version != -1 and version != node.version:
            raise BadVersionError(path)
        if await self.children(path):
            raise NotEmptyError(path)
        del self.nodes[path]


class FakeBookie(asyncio.Protocol):
    """One bookie; `respond` decides each answer (default: the bookie rules), `None` = stay silent."""

    def __init__(self) -> None:
        self.entries: dict[tuple[int, int], bytes] = {}
        self.fenced: set[int] = set()
        self.keys: dict[int, bytes] = {}
        self.requests: list[Request] = []
        self.respond: Callable[[Request], bytes | None] = self.default_response
        self.held: list[bytes] = []
        self.hold: Callable[[Request], bool] = lambda request: False
        self._server: asyncio.Server | None = None
        self._transports: list[asyncio.Transport] = []
        self.bookie_id = ""

    def fail_adds(self) -> None:
        """From now on every request is an add, answered EIO (a bookie whose disk fails)."""

        def fail(request: Request) -> bytes | None:
            assert isinstance(request, AddRequest)
            return encode_response(AddResponse(StatusCode.EIO, request.ledger_id, request.entry_id))

        self.respond = fail

    async def start(self) -> str:
        self._server = await asyncio.get_running_loop().create_server(lambda: _BookieSide(self), "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.bookie_id = f"127.0.0.1:{port}"
        return self.bookie_id

    async def stop(self) -> None:
        """Like a crash: close the listener and every connection."""
        if self._server is not None:
            self._server.close()
        for transport in self._transports:
            transport.abort()
        if self._server is not None:
            await self._server.wait_closed()

    def release(self) -> None:
        """Send the held responses, newest first (out of order on purpose)."""
        held, self.held = self.held, []
        for frame in reversed(held):
            for transport in self._transports:
                transport.write(frame)

    def default_response(self, request: Request) -> bytes | None:
        if isinstance(request, AddRequest):
            ledger, entry = request.ledger_id, request.entry_id
            if self.keys.setdefault(ledger, request.master_key) != request.master_key:
                return encode_response(AddResponse(StatusCode.EUA, ledger, entry))
            if ledger in self.fenced and not request.flags & Flag.RECOVERY_ADD:
                return encode_response(AddResponse(StatusCode.EFENCED, ledger, entry))
            self.entries[(ledger, entry)] = request.entry
            return encode_response(AddResponse(StatusCode.EOK, ledger, entry))
        assert isinstance(request, ReadRequest)
        ledger, entry = request.ledger_id, request.entry_id
        if request.flags & Flag.DO_FENCING:
            assert request.master_key is not None
            if self.keys.setdefault(ledger, request.master_key) != request.master_key:
                return encode_response(ReadResponse(StatusCode.EUA, ledger, entry, b""))
            self.fenced.add(ledger)
        if entry == LAST_ADD_CONFIRMED:
            ids = [e for (lid, e) in self.entries if lid == ledger]
            if not ids:
                return encode_response(ReadResponse(StatusCode.ENOENTRY, ledger, entry, b""))
            return encode_response(ReadResponse(StatusCode.EOK, ledger, entry, self.entries[(ledger, max(ids))]))
        if (ledger, entry) not in self.entries:
            return encode_response(ReadResponse(StatusCode.ENOENTRY, ledger, entry, b""))
        return encode_response(ReadResponse(StatusCode.EOK, ledger, entry, self.entries[(ledger, entry)]))


class _BookieSide(asyncio.Protocol):
    def __init__(self, bookie: FakeBookie) -> None:
        self.bookie = bookie
        self.decoder = RequestDecoder()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # (a stream transport; uvloop's are not subclasses of asyncio.Transport, so no isinstance check)
        self.transport = cast(asyncio.Transport, transport)
        self.bookie._transports.append(self.transport)

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        for request in self.decoder.feed(data):
            self.bookie.requests.append(request)
            frame = self.bookie.respond(request)
            if frame is None:
                continue
            if self.bookie.hold(request):
                self.bookie.held.append(frame)
            else:
                self.transport.write(frame)


class FakeCluster:
    """A FakeZk, fake bookies registered in it (writable: /ledgers/available/<id>) and a BookKeeper client on them."""

    def __init__(self) -> None:
        self.zk = FakeZk()
        self.bookies: dict[str, FakeBookie] = {}
        self.bk = BookKeeper(self.zk)

    async def add_bookie(self) -> FakeBookie:
        bookie = FakeBookie()
        self.bookies[await bookie.start()] = bookie
        await self.zk.create(f"/ledgers/available/{bookie.bookie_id}", makepath=True)
        return bookie

    @classmethod
    @contextlib.asynccontextmanager
    async def running(cls, bookies: int = 3) -> AsyncIterator[FakeCluster]:
        """Started with ``bookies`` bookies (and the read-only registration folder, empty); stopped after."""
        cluster = cls()
        for _ in range(bookies):
            await cluster.add_bookie()
        await cluster.zk.create("/ledgers/available/readonly")
        await cluster.bk.start()
        try:
            yield cluster
        finally:
            await cluster.bk.close()
            for bookie in cluster.bookies.values():
                await bookie.stop()
