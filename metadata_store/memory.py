"""The in-process backend (``memory:<name>``): for unit tests, and what ``local`` builds on.

Stores opened with the same name share one tree, each as a session of its own, as Pulsar's
``LocalMemoryMetadataStore`` shares its maps by URL: two brokers of one test process see each
other's writes, notifications and ephemeral nodes. A store opened without a name has a tree of its
own. Named trees live as long as the process.

``TreeStore`` is the part both in-process backends share: reads, listeners, posting notifications
to the store's event loop, the session's ephemeral nodes, close. A backend only says how a planned
change is committed (``_commit``): here, applied at once under the tree's lock.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable

from metadata_store import paths
from metadata_store.api import (
    GetResult,
    MetadataStoreError,
    Notification,
    SessionEvent,
    Stat,
)
from metadata_store.stats import StoreStats, measured
from metadata_store.tree import PERSISTENT, NodeTree, Op, new_session_id

log = logging.getLogger(__name__)

Plan = Callable[[], tuple[list[Op], str | None]]  # the ops of a change, and the path whose Stat it returns

_named_trees: dict[str, NodeTree] = {}
_named_lock = threading.Lock()


def _now_ms() -> int:
    return int(time.time() * 1000)


class TreeStore:
    """A MetadataStore session over a NodeTree. Subclasses implement ``_commit``."""

    def __init__(self, tree: NodeTree, description: str) -> None:
        self._tree = tree
        self.stats = StoreStats()  # (Pulsar's pulsar_metadata_store_* metrics)
        self._description = description
        self._session = new_session_id()
        self._listeners: list[Callable[[Notification], None]] = []
        self._session_listeners: list[Callable[[SessionEvent], None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        tree.attach(self._session, self._post)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._description} session={self._session}>"

    # ---- the contract ------------------------------------------------------------------------------------------

    @measured("get")
    async def get(self, path: str, *, watch_missing: bool = True) -> GetResult | None:
        self._enter(path)
        with self._tree.lock:
            node = self._tree.nodes.get(path)
            if node is None:
                return None
            return GetResult(node.value, _stat(self._tree, path, self._session))

    async def get_children(self, path: str) -> list[str]:
        self._enter(path)
        with self._tree.lock:
            return self._tree.children(path)

    async def exists(self, path: str, *, watch_missing: bool = True) -> bool:
        self._enter(path)  # (every change is told here: nothing to watch)
        with self._tree.lock:
            return path in self._tree.nodes

    @measured("put")
    async def put(self, path: str, value: bytes, expected_version: int | None, *,
                  ephemeral: bool = False, sequential: bool = False) -> Stat:
        self._enter(path)
        if not isinstance(value, bytes | bytearray | memoryview):
            raise MetadataStoreError(f"a value is bytes, not {type(value).__name__}")
        data = bytes(value)
        owner = self._session if ephemeral else PERSISTENT

        def plan() -> tuple[list[Op], str | None]:
            return self._tree.plan_put(path, data, expected_version, owner=owner, sequential=sequential,
                                       now_ms=_now_ms())

        stat = await self._commit(plan)
        assert stat is not None
        return stat

    @measured("del")
    async def delete(self, path: str, expected_version: int | None = None) -> None:
        self._enter(path)
        await self._commit(lambda: (self._tree.plan_delete(path, expected_version), None))

    async def delete_recursive(self, path: str) -> None:
        self._enter(path)
        await self._commit(lambda: (self._tree.plan_delete_recursive(path), None))

    def register_listener(self, listener: Callable[[Notification], None]) -> None:
        self._bind_loop_if_running()
        self._listeners.append(listener)

    def register_session_listener(self, listener: Callable[[SessionEvent], None]) -> None:
        self._bind_loop_if_running()
        self._session_listeners.append(listener)

    async def close(self) -> None:
        if self._closed:
            return
        self._bind_loop_if_running()
        try:
            await self._commit(lambda: (self._tree.plan_expire(self._session), None))
        finally:
            self._closed = True
            self._tree.detach(self._session)
            await self._close_backend()

    # ---- for subclasses ----------------------------------------------------------------------------------------

    async def _commit(self, plan: Plan) -> Stat | None:
        """Plan and make one change atomically; the Stat of the path the plan names."""
        raise NotImplementedError

    async def _close_backend(self) -> None:
        """Release what the backend holds (files, locks) after the session ended."""

    def _apply(self, ops: list[Op], path: str | None) -> tuple[list[Notification], Stat | None]:
        """Apply planned ops (under the tree's lock) and read the resulting Stat."""
        notes = self._tree.apply(ops)
        return notes, None if path is None else _stat(self._tree, path, self._session)

    # ---- loop and delivery -------------------------------------------------------------------------------------

    def _enter(self, path: str) -> None:
        if self._closed:
            raise MetadataStoreError(f"{self!r} is closed")
        paths.check(path)
        if self._loop is None:
            self._loop = asyncio.get_running_loop()

    def _bind_loop_if_running(self) -> None:
        if self._loop is None:
            try:
                self._loop = asyncio.get_running_loop()
            except RuntimeError:
                pass  # bound by the first operation

    def _post(self, notes: list[Notification]) -> None:
        """Called by whichever session changed the tree, on any thread: deliver on our loop."""
        loop = self._loop
        if loop is None or loop.is_closed() or self._closed or not self._listeners:
            return
        loop.call_soon_threadsafe(self._deliver, notes)

    def _deliver(self, notes: list[Notification]) -> None:
        for note in notes:
            for listener in list(self._listeners):
                if self._closed:
                    return
                try:
                    listener(note)
                except Exception:
                    log.exception("%r: a notification listener failed on %s", self, note)

    def post_session_event(self, event: SessionEvent) -> None:
        loop = self._loop
        if loop is None or loop.is_closed() or self._closed:
            return
        loop.call_soon_threadsafe(self._deliver_session_event, event)

    def _deliver_session_event(self, event: SessionEvent) -> None:
        for listener in list(self._session_listeners):
            try:
                listener(event)
            except Exception:
                log.exception("%r: a session listener failed on %s", self, event)


def _stat(tree: NodeTree, path: str, session: int) -> Stat:
    stat = tree.stat(path, session)
    assert stat is not None, path
    return stat


class MemoryMetadataStore(TreeStore):
    def __init__(self, name: str | None = None) -> None:
        if name is None:
            tree = NodeTree()
        else:
            with _named_lock:
                tree = _named_trees.setdefault(name, NodeTree())
        super().__init__(tree, f"memory:{name}" if name is not None else "memory (private)")

    async def _commit(self, plan: Plan) -> Stat | None:
        with self._tree.lock:
            ops, path = plan()
            notes, stat = self._apply(ops, path)
        self._tree.broadcast(notes)
        return stat

    def expire_session(self) -> None:
        """For unit tests of session loss: this session's ephemeral nodes vanish (others are told),
        the session listeners get SESSION_LOST then SESSION_REESTABLISHED, and the store goes on as a
        new session, as a ZooKeeper client does after its session expired."""
        self._enter(paths.ROOT)
        with self._tree.lock:
            notes = self._tree.apply(self._tree.plan_expire(self._session))
            self._tree.detach(self._session)
            self._session = new_session_id()
            self._tree.attach(self._session, self._post)
        self._tree.broadcast(notes)
        self.post_session_event(SessionEvent.SESSION_LOST)
        self.post_session_event(SessionEvent.SESSION_REESTABLISHED)
