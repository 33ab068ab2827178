"""A minimal ``metadata_store.MetadataStore`` over the BookKeeper client's ZooKeeper connection (``zk.AsyncZk``).

What the BookKeeper managed ledger needs of a metadata store (versioned get/put, children, delete), with Pulsar's
semantics: a put creates missing parents; ``expected_version`` -1 creates only, a number compares-and-sets. It has no
watches and no session events: it is the stop-gap until ``metadata_store``'s own ZooKeeper backend is wired in, and
the managed ledger only ever talks to the ``MetadataStore`` protocol, so swapping it is one line in the factory's
builder.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from managed_ledger.bookkeeper.zk import BadVersionError as ZkBadVersion
from managed_ledger.bookkeeper.zk import NodeExistsError, NoNodeError, NotEmptyError, Zk
from metadata_store.api import (
    BadVersionError,
    GetResult,
    MetadataStoreError,
    NotFoundError,
    Notification,
    SessionEvent,
    Stat,
)


class ZkMetadataStore:
    def __init__(self, zk: Zk) -> None:
        self._zk = zk

    async def get(self, path: str) -> GetResult | None:
        try:
            data, stat = await self._zk.get(path)
        except NoNodeError:
            return None
        return GetResult(data, _stat(path, stat.version, stat.ctime))

    async def get_children(self, path: str) -> list[str]:
        try:
            return sorted(await self._zk.children(path))
        except NoNodeError:
            return []

    async def exists(self, path: str) -> bool:
        return await self._zk.exists(path) is not None

    async def put(self, path: str, value: bytes, expected_version: int | None, *,
                  ephemeral: bool = False, sequential: bool = False) -> Stat:
        if ephemeral or sequential:
            raise MetadataStoreError("ZkMetadataStore: ephemeral and sequential nodes are not supported")
        if expected_version == -1:
            try:
                await self._zk.create(path, value, makepath=True)
            except NodeExistsError:
                raise BadVersionError(f"{path} exists (create-only put)") from None
            return _stat(path, 0, 0)
        if expected_version is None:
            try:
                zstat = await self._zk.set(path, value, -1)
            except NoNodeError:
                with contextlib.suppress(NodeExistsError):
                    await self._zk.create(path, value, makepath=True)
                    return _stat(path, 0, 0)
                zstat = await self._zk.set(path, value, -1)  # created meanwhile by someone else
            return _stat(path, zstat.version, zstat.ctime)
        try:
            zstat = await self._zk.set(path, value, expected_version)
        except NoNodeError:
            raise NotFoundError(f"{path} does not exist") from None
        except ZkBadVersion:
            raise BadVersionError(f"{path} is not at version {expected_version}") from None
        return _stat(path, zstat.version, zstat.ctime)

    async def delete(self, path: str, expected_version: int | None = None) -> None:
        try:
            await self._zk.delete(path, -1 if expected_version is None else expected_version)
        except NoNodeError:
            raise NotFoundError(f"{path} does not exist") from None
        except ZkBadVersion:
            raise BadVersionError(f"{path} is not at version {expected_version}") from None
        except NotEmptyError:
            raise MetadataStoreError(f"{path} has children") from None

    async def delete_recursive(self, path: str) -> None:
        for child in await self.get_children(path):
            await self.delete_recursive(f"{path}/{child}")
        with contextlib.suppress(NotFoundError):
            await self.delete(path)

    def register_listener(self, listener: Callable[[Notification], None]) -> None:
        raise MetadataStoreError("ZkMetadataStore has no watches")

    def register_session_listener(self, listener: Callable[[SessionEvent], None]) -> None:
        raise MetadataStoreError("ZkMetadataStore has no session events")

    async def close(self) -> None:
        """The ZooKeeper connection belongs to the BookKeeper client, which closes it."""


def _stat(path: str, version: int, ctime: int) -> Stat:
    return Stat(path, version, ctime, ctime, False, False)
