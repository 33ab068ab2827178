"""ZooKeeper for asyncio, over kazoo.

kazoo is the maintained, widely used Python ZooKeeper client (sessions, reconnection, multi, sequential and ephemeral
znodes); it runs its I/O on its own thread. Its ``*_async`` calls return kazoo results that complete on that thread;
`AsyncZk` turns each into an asyncio future completed on the event loop (``metadata_store.kazoo_async``, which the
metadata store's ZooKeeper backend uses too), so callers only ever await. (aiozk, the asyncio-native alternative,
is far less used and maintained.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError

from metadata_store.kazoo_async import awaitable

__all__ = ["AsyncZk", "BadVersionError", "NoNodeError", "NodeExistsError", "NotEmptyError", "Zk", "ZnodeStat"]

T = TypeVar("T")
# ZooKeeper session timeout: a client that loses its session loses its ephemeral znodes (ledger-id znodes only).
SESSION_TIMEOUT_S = 10.0
CONNECT_TIMEOUT_S = 15.0


@dataclass(frozen=True)
class ZnodeStat:
    version: int
    ctime: int  # ms since the epoch


class Zk(Protocol):
    """What the BookKeeper client needs from ZooKeeper (AsyncZk; an in-memory fake in unit tests).

    Errors are kazoo's: NoNodeError, NodeExistsError, BadVersionError, NotEmptyError.
    """

    async def start(self) -> None: ...
    async def close(self) -> None: ...
    async def get(self, path: str) -> tuple[bytes, ZnodeStat]: ...
    async def exists(self, path: str) -> ZnodeStat | None: ...
    async def children(self, path: str) -> list[str]: ...
    async def create(self, path: str, data: bytes = b"", *, ephemeral: bool = False, sequence: bool = False,
                     makepath: bool = False) -> str: ...
    async def set(self, path: str, data: bytes, version: int) -> ZnodeStat: ...
    async def delete(self, path: str, version: int = -1) -> None: ...


class AsyncZk:
    """`hosts`: ZooKeeper's "host:port[,...]", connected with a session of its own (`session_timeout_s`: Pulsar's
    metadataStoreSessionTimeoutMillis, which a broker passes on), unless `shared` returns a started kazoo client
    when `start` runs: then that client's session is used (not stopped by `close`), so a broker whose metadata store
    is on the same ZooKeeper keeps one session, as Pulsar's does."""

    def __init__(self, hosts: str, *, session_timeout_s: float = SESSION_TIMEOUT_S,
                 shared: Callable[[], KazooClient | None] | None = None) -> None:
        if session_timeout_s <= 0:
            raise ValueError(f"ZooKeeper session timeout must be positive, got {session_timeout_s}")
        self._hosts = hosts
        self._session_timeout_s = session_timeout_s
        self._shared = shared
        self._client: KazooClient | None = None
        self._owned = False
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def shares_session(self) -> bool:
        """Started on a client someone else owns (see `shared`)."""
        return self._client is not None and not self._owned

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        client = self._shared() if self._shared is not None else None
        if client is not None:
            self._client, self._owned = client, False
            return
        self._client, self._owned = KazooClient(hosts=self._hosts, timeout=self._session_timeout_s), True
        await asyncio.to_thread(self._client.start, CONNECT_TIMEOUT_S)

    async def close(self) -> None:
        client = self._client
        if client is None or not self._owned:
            return

        def stop() -> None:
            client.stop()
            client.close()

        await asyncio.to_thread(stop)

    @property
    def _zk(self) -> KazooClient:
        assert self._client is not None, "AsyncZk.start() first"
        return self._client

    def _await(self, result: Any) -> asyncio.Future[Any]:
        loop = self._loop
        assert loop is not None, "AsyncZk.start() first"
        return awaitable(loop, result)

    async def get(self, path: str) -> tuple[bytes, ZnodeStat]:
        data, stat = await self._await(self._zk.get_async(path))
        return bytes(data), ZnodeStat(stat.version, stat.ctime)

    async def exists(self, path: str) -> ZnodeStat | None:
        stat = await self._await(self._zk.exists_async(path))
        return None if stat is None else ZnodeStat(stat.version, stat.ctime)

    async def children(self, path: str) -> list[str]:
        return list(await self._await(self._zk.get_children_async(path)))

    async def create(self, path: str, data: bytes = b"", *, ephemeral: bool = False, sequence: bool = False,
                     makepath: bool = False) -> str:
        """Create a znode (and its missing parents with `makepath`); returns its path (with a sequence suffix)."""
        created = await self._await(self._zk.create_async(path, data, ephemeral=ephemeral, sequence=sequence,
                                                               makepath=makepath))
        return str(created)

    async def set(self, path: str, data: bytes, version: int) -> ZnodeStat:
        """Compare-and-set: raises BadVersionError when the znode is no longer at `version`."""
        stat = await self._await(self._zk.set_async(path, data, version))
        return ZnodeStat(stat.version, stat.ctime)

    async def delete(self, path: str, version: int = -1) -> None:
        await self._await(self._zk.delete_async(path, version))
