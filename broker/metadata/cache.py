"""What the broker keeps of the metadata store in memory, so that its reads stay synchronous.

``MetadataCache`` holds one table per record kind (``broker.metadata.layout``): key -> decoded
value. It is filled at start (``load``), and kept fresh in three ways:

- our own writes (``modify``): compare-and-set on the node (read its version, put with that
  ``expected_version``, on ``BadVersionError`` read again, at most ``CAS_ATTEMPTS`` times), then the
  table takes the value written;
- notifications (another broker's writes, or ours coming back): the record's node is re-read by
  one refresher task, one path at a time;
- ``RECONNECTED`` / ``SESSION_REESTABLISHED``: everything is re-read (notifications are hints and
  may have been missed while disconnected).

A re-read that raced with our own write of the same node is dropped (our write's value is the
newer one, and its notification brings a later re-read anyway): every local write is numbered,
and a re-read keeps its result only when no local write of that node happened since it began.

Every change of a table bumps ``generation`` and calls the listeners (``Derived`` values
recompute on the next read).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import Any

from broker.metadata import layout as L
from broker.tasks import OwnedTasks
from metadata_store.api import (
    BadVersionError,
    MetadataStore,
    Notification,
    NotificationType,
    SessionEvent,
)
from metadata_store.api import NotFoundError as NodeNotFoundError

log = logging.getLogger(__name__)

# Compare-and-set rounds before a write gives up (each lost round means another writer won; a
# handful of brokers changing one namespace at once settle well within this).
CAS_ATTEMPTS = 20

Table = dict[str, Any]
_KEEP = object()  # a change function's answer: write nothing, change nothing


class ConcurrentChangeError(Exception):
    """A compare-and-set write lost ``CAS_ATTEMPTS`` rounds in a row to other writers."""


class MetadataCache:
    def __init__(self) -> None:
        self._store: MetadataStore | None = None
        # (The tables are updated in place: their users keep references to them.)
        self.tables: dict[str, Table] = {kind.name: {} for kind in L.KINDS}
        self.generation = 0
        self.listeners: list[Callable[[], None]] = []
        self._tasks = OwnedTasks("metadata cache")
        self._write_seq = 0
        self._written: dict[str, int] = {}  # unit path -> number of our last write of it
        # To re-read: unit path -> (kind, key); "<kind> below <directory>" -> (kind, None)
        self._pending: dict[str, tuple[L.Kind, str | None]] = {}
        self._reload_all = False
        self._refresher: asyncio.Task[None] | None = None
        self._closed = False

    def table(self, kind: L.Kind) -> Table:
        return self.tables[kind.name]

    # -- start and stop --------------------------------------------------------------------------------
    @property
    def store(self) -> MetadataStore:
        if self._store is None:
            raise RuntimeError("the metadata cache is not loaded yet")
        return self._store

    async def load(self, store: MetadataStore) -> None:
        """Read every record from ``store``, then follow its notifications and session events."""
        self._store = store
        for name, fresh in (await self._read_all()).items():
            self.tables[name].clear()
            self.tables[name].update(fresh)
        self._changed()
        self.store.register_listener(self._on_notification)
        self.store.register_session_listener(self._on_session_event)

    async def close(self) -> None:
        self._closed = True
        await self._tasks.close()

    async def settled(self) -> None:
        """Wait until the notifications received so far are applied (tests, orderly stops)."""
        while self._refresher is not None and not self._refresher.done():
            await asyncio.shield(self._refresher)

    async def read_through(self, kind: L.Kind, key: str) -> Any:
        """Read one record from the store now, for a key asked for before its notification came (another broker's
        record, just written), as Pulsar's metadata cache loads a key it does not hold. Returns the value read
        (None: no record), which the table keeps unless a write of ours came in meanwhile."""
        return await self._refresh_unit(kind, key, watch_missing=False)

    # -- reading nodes ---------------------------------------------------------------------------------
    async def _read_unit(self, kind: L.Kind, key: str, watch_missing: bool = True) -> Any:
        """The decoded value of a record as the store has it now (None: there is none). ``watch_missing=False``
        (a read through for a key asked about): a record not there is not watched for its coming, which its
        directory's listing tells; else every name ever asked about (each lookup of a topic that has no
        partitioned metadata) would keep a ZooKeeper watch for good."""
        path = kind.path(key)
        if kind.versioned:
            names = await self.store.get_children(path)
            results = await asyncio.gather(*(self.store.get(f"{path}/{n}") for n in names))
            versions = [kind.decode(r.value) for r in results if r is not None]
            return [v for v in versions if v is not None] or None
        result = await self.store.get(path, watch_missing=watch_missing)
        return None if result is None else kind.decode(result.value)

    async def _keys_below(self, kind: L.Kind, directory: str) -> list[str]:
        """The keys of the records of ``kind`` below ``directory`` (its root or a key's prefix)."""
        if kind.only:
            return [kind.only]  # (whether it is there: its read says, and watches for its coming)
        if directory == kind.root or not directory.startswith(kind.root + "/"):
            prefix: list[str] = []
        else:
            prefix = directory[len(kind.root) + 1:].split("/")
        paths = [[*prefix]]
        for _ in range(kind.depth - len(prefix)):
            children = await asyncio.gather(*(self.store.get_children("/".join([kind.root, *p])) for p in paths))
            paths = [[*p, c] for p, names in zip(paths, children, strict=True) for c in names]
        keys = []
        for parts in paths:
            try:
                keys.append(kind.parts_to_key(parts))
            except Exception:  # (a node of a shape we never write, or a record of another kind below one root)
                path = "/".join([kind.root, *parts])
                if L.classify(path) is None and not any(L.directory_of(k, path) for k in L.KINDS if k is not kind):
                    log.warning("metadata: ignoring %s/%s: not a %s record", kind.root, "/".join(parts), kind.name)
        return keys

    async def _read_below(self, kind: L.Kind, directory: str) -> Table:
        keys = await self._keys_below(kind, directory)
        values = await asyncio.gather(*(self._read_unit(kind, k) for k in keys))
        return {k: v for k, v in zip(keys, values, strict=True) if v is not None}

    async def _read_all(self) -> dict[str, Table]:
        tables = await asyncio.gather(*(self._read_below(kind, kind.root) for kind in L.KINDS))
        return {kind.name: t for kind, t in zip(L.KINDS, tables, strict=True)}

    # -- writing: compare-and-set ------------------------------------------------------------------------
    async def modify(self, kind: L.Kind, key: str, change: Callable[[Any], Any]) -> Any:
        """Read-modify-write of one record: ``change(current or None)`` returns the new value, None
        to delete it, or ``KEEP`` to leave it (it may raise to refuse; nothing is changed then).
        Returns the value now in force."""
        path = kind.path(key)
        for _ in range(CAS_ATTEMPTS):
            current = await self.store.get(path)
            value = None if current is None else kind.decode(current.value)
            new = change(value)
            if new is _KEEP:
                return value
            try:
                if new is None:
                    if current is None:
                        return None
                    await self.store.delete(path, current.stat.version)
                else:
                    await self.store.put(path, kind.encode(new), -1 if current is None else current.stat.version)
            except (BadVersionError, NodeNotFoundError):
                continue  # someone else wrote (or deleted) it first: read again
            self._wrote(kind, key, new)
            return new
        raise ConcurrentChangeError(f"{path}: changed by others {CAS_ATTEMPTS} times in a row")

    async def create(self, kind: L.Kind, key: str, value: Any) -> bool:
        """Create a record that must not exist; False when it does."""
        try:
            await self.store.put(kind.path(key), kind.encode(value), -1)
        except BadVersionError:
            return False
        self._wrote(kind, key, value)
        return True

    async def delete(self, kind: L.Kind, key: str, *, recursive: bool = False) -> None:
        """Delete a record whatever its version (nothing there is no error)."""
        path = kind.path(key)
        if recursive or kind.versioned:
            await self.store.delete_recursive(path)
        else:
            try:
                await self.store.delete(path)
            except NodeNotFoundError:
                pass
        self._wrote(kind, key, None)

    async def add_version(self, kind: L.Kind, key: str, record: Any) -> int:
        """Append a version to a versioned record (schemas): the next free number, made with a
        create-only put so that two writers never take the same one."""
        path = kind.path(key)
        for _ in range(CAS_ATTEMPTS):
            version = len(await self.store.get_children(path))
            try:
                await self.store.put(f"{path}/{L.schema_version_name(version)}", kind.encode(record), -1)
            except BadVersionError:
                continue
            self._wrote(kind, key, await self._read_unit(kind, key))
            return version
        raise ConcurrentChangeError(f"{path}: versions added by others {CAS_ATTEMPTS} times in a row")

    def _wrote(self, kind: L.Kind, key: str, value: Any) -> None:
        self._write_seq += 1
        self._written[kind.path(key)] = self._write_seq
        self._set(kind, key, value)
        self._changed()

    def _set(self, kind: L.Kind, key: str, value: Any) -> None:
        if value is None:
            self.table(kind).pop(key, None)
        else:
            self.table(kind)[key] = value

    def _changed(self) -> None:
        self.generation += 1
        for listener in self.listeners:
            listener()

    # -- keeping fresh ---------------------------------------------------------------------------------
    def _on_notification(self, notification: Notification) -> None:
        """Re-read the record a changed node belongs to; when a directory above records got or
        lost children (or was created), list it again for records that came or went.

        (A ZooKeeper store tells of changes to the nodes it read and of children of the nodes it
        listed: a record another broker creates is first seen as its directory's CHILDREN_CHANGED.)
        """
        if self._closed:
            return
        path, kind_of_change = notification.path, notification.type
        found = L.classify(path)
        if found is not None and (kind_of_change != NotificationType.CHILDREN_CHANGED or found[0].versioned):
            kind, key = found
            self._pending[kind.path(key)] = (kind, key)
        if kind_of_change in (NotificationType.CHILDREN_CHANGED, NotificationType.CREATED):
            for kind in L.KINDS:
                if L.directory_of(kind, path):
                    self._pending[f"{kind.name} below {path}"] = (kind, None)
        if self._pending:
            self._start_refresher()

    def _on_session_event(self, event: SessionEvent) -> None:
        if self._closed:
            return
        if event in (SessionEvent.RECONNECTED, SessionEvent.SESSION_REESTABLISHED):
            log.info("metadata store %s: re-reading everything the broker keeps", event.value)
            self._reload_all = True
            self._start_refresher()

    def _start_refresher(self) -> None:
        if self._refresher is None or self._refresher.done():
            self._refresher = self._tasks.spawn(self._refresh(), name="metadata-refresh")

    async def _refresh(self) -> None:
        while (self._pending or self._reload_all) and not self._closed:
            try:
                if self._reload_all:
                    self._reload_all = False
                    self._pending.clear()
                    await self._reload()
                    continue
                item, (kind, key) = next(iter(self._pending.items()))
                del self._pending[item]
                if key is not None:
                    await self._refresh_unit(kind, key)
                else:
                    await self._refresh_directory(kind, item.split(" below ", 1)[1])
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # (the store is unreachable: its RECONNECTED brings a full re-read)
                log.warning("metadata: re-reading after a notification failed: %s", exc)

    async def _refresh_unit(self, kind: L.Kind, key: str, watch_missing: bool = True) -> Any:
        began = self._write_seq
        value = await self._read_unit(kind, key, watch_missing)
        if self._written.get(kind.path(key), 0) > began:
            return value  # our own write of this record came in meanwhile: it is newer
        if self.table(kind).get(key) != value:
            self._set(kind, key, value)
            self._changed()
        return value

    async def _refresh_directory(self, kind: L.Kind, directory: str) -> None:
        """List the records of ``kind`` below ``directory`` again: read the new ones, drop the
        vanished ones (the others have their own notifications)."""
        began = self._write_seq
        listed = set(await self._keys_below(kind, directory))
        if L.directory_of(kind, directory) and directory.startswith(kind.root + "/"):
            prefix = directory[len(kind.root) + 1:].split("/")
        else:
            prefix = []
        table = self.table(kind)
        cached = {k for k in table if kind.key_to_parts(k)[: len(prefix)] == prefix}
        new = sorted(listed - cached)
        values = await asyncio.gather(*(self._read_unit(kind, k) for k in new))
        fresh = {k: v for k, v in zip(new, values, strict=True) if v is not None}
        # (The cached records still listed are kept as they are: _merge leaves keys not named.)
        if self._merge(kind, fresh, (cached - listed) | set(new), began):
            self._changed()

    def _merge(self, kind: L.Kind, fresh: Table, replaced: Iterable[str], began: int) -> bool:
        """Put ``fresh`` in place of the entries ``replaced``, except those we wrote since ``began``."""
        table = self.table(kind)
        changed = False
        for key in set(replaced) | set(fresh):
            if self._written.get(kind.path(key), 0) > began:
                continue
            value = fresh.get(key)
            if table.get(key) != value:
                self._set(kind, key, value)
                changed = True
        return changed

    async def _reload(self) -> None:
        began = self._write_seq
        tables = await self._read_all()
        changed = False
        for kind in L.KINDS:
            changed |= self._merge(kind, tables[kind.name], list(self.table(kind)), began)
        if changed:
            self._changed()


KEEP: Any = _KEEP
