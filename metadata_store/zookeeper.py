"""The ZooKeeper backend (``zk:host:port[,host:port][/chroot]``, Pulsar's ``metadataStoreUrl``), over kazoo.

Values and versions are ZooKeeper's own: a put is ``create`` (create-only, sequential, or the first
write of a node), or ``setData`` with the expected version (-1 when None); missing parents are created
(persistent, empty) as kazoo's ``makepath`` does. The chroot is created when missing, as Pulsar's
``initializeCluster`` does, so every path of this store is under it.

Watches. ZooKeeper 3.6 added persistent recursive watches (Pulsar's store sets one on "/"), but kazoo
(2.11, the latest) has no API for them, so this store uses ZooKeeper's classic one-shot watches and
re-arms each one as it fires: a ``get`` or ``exists`` watches the node (CREATED, MODIFIED, DELETED,
and CHILDREN_CHANGED on its parent when it comes or goes, as Pulsar's store derives it), a
``get_children`` watches its children (CHILDREN_CHANGED) and the node itself, and a ``put`` watches
the node it wrote, each watch set before the call returns. A store is therefore told of changes to
what it has read or written, from then on; the in-process backends tell of every change, which the
contract allows (notifications are hints). Except for nodes that are not there in a directory whose
children are watched: a node deleted there, or read there and not found, keeps no watch of its own
(its coming is told as the directory's CHILDREN_CHANGED). Otherwise every name a broker ever read
(each topic, cursor and partitioned topic that came and went) would keep a watch for good, here and
on the ZooKeeper servers: a growth without bound with topic churn, which Pulsar's one persistent
recursive watch does not have. A watch is re-armed before its notification is
delivered, and a re-read arms it again, so a listener that re-reads sees every later change. kazoo
drops all watches when the connection drops: they are re-armed on reconnection, and RECONNECTED /
SESSION_REESTABLISHED tell listeners to re-read what changed meanwhile.

Session events come from one small state machine (``SessionTracker``) fed with kazoo's connection
states, on the event loop:

    CONNECTED --SUSPENDED--> DISCONNECTED                   CONNECTION_LOST
    DISCONNECTED --CONNECTED, same session--> CONNECTED     RECONNECTED
    DISCONNECTED --LOST (expired), or no reconnection within 5/6 of the session timeout--> LOST
                                                            SESSION_LOST
    LOST --CONNECTED (a new session, or the old one after all)--> CONNECTED
                                                            SESSION_REESTABLISHED

The timer is Pulsar's (``ZKSessionWatcher``): a client cut off from every server never hears that
its session expired, yet the servers delete its ephemeral nodes after the session timeout, so an
owner must stop acting as one before that. Every operation is bounded by ``operation_timeout_s``
(the session timeout by default) and raises MetadataStoreError past it; a write that timed out may
still have been applied.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import BadVersionError as KzBadVersionError
from kazoo.exceptions import (
    KazooException,
    NoChildrenForEphemeralsError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
)
from kazoo.protocol.states import EventType, WatchedEvent, ZnodeStat
from kazoo.retry import KazooRetry

from metadata_store import paths
from metadata_store.api import (
    AlreadyExistsError,
    BadVersionError,
    GetResult,
    MetadataStoreError,
    NotFoundError,
    Notification,
    NotificationType,
    SessionEvent,
    Stat,
)
from metadata_store.kazoo_async import awaitable
from metadata_store.stats import StoreStats, measured

log = logging.getLogger(__name__)

ZK_SCHEME = "zk:"  # Pulsar's prefix; a URL without a known scheme is taken as ZooKeeper's too, as Pulsar does
# Pulsar's zooKeeperSessionTimeoutMillis default.
SESSION_TIMEOUT_S = 30.0
# How long opening waits for a first session.
CONNECT_TIMEOUT_S = 15.0
# Pulsar's ZKSessionWatcher: disconnected for 5/6 of the session timeout is taken for a lost session.
SESSION_LOST_FRACTION = 5 / 6
# Reconnection back-off cap: well inside the session timeout, so a restarted server is found in time.
MAX_RECONNECT_DELAY_S = 1.0
# ZooKeeper's jute.maxbuffer default (1 MiB - 1) bounds a request; keep 1 KiB of it for headers.
MAX_REQUEST_BYTES = 0xFFFFF - 1024
# ZooKeeper's ephemeralOwner of a container node (Pulsar creates parents as containers): not ephemeral.
_CONTAINER_OWNER = -(1 << 63)


# ---- the URL ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ZkAddress:
    hosts: str  # "host:port[,host:port]"
    chroot: str  # "" or an absolute path

    @property
    def connect_string(self) -> str:
        return self.hosts + self.chroot


def parse_zk_url(url: str) -> ZkAddress:
    """``zk:host:port[,host:port][/chroot]`` (or the same without ``zk:``) -> hosts and chroot."""
    rest = url.removeprefix(ZK_SCHEME)
    if rest.startswith("//"):  # zk://host:port is a common slip; Pulsar's form has no slashes
        rest = rest[2:]
    hosts, slash, chroot = rest.partition("/")
    chroot = slash + chroot
    if chroot == "/":
        chroot = ""
    if chroot:
        try:
            paths.check(chroot)
        except MetadataStoreError as e:
            raise MetadataStoreError(f"bad chroot in ZooKeeper URL {url!r}: {e}") from None
    if not hosts:
        raise MetadataStoreError(f"no ZooKeeper host in {url!r} (expected zk:host:port[,host:port][/chroot])")
    for host in hosts.split(","):
        name, colon, port = host.rpartition(":")
        if not colon:
            name, port = host, "2181"  # ZooKeeper's default port, as its own client assumes
        if not name or not port.isdigit() or not 0 < int(port) < 65536:
            raise MetadataStoreError(f"bad ZooKeeper host {host!r} in {url!r} (expected host:port)")
    return ZkAddress(hosts, chroot)


# ---- session events --------------------------------------------------------------------------------------------


class SessionState(enum.Enum):
    CONNECTING = "connecting"  # before the first session
    CONNECTED = "connected"
    DISCONNECTED = "disconnected"
    LOST = "lost"


class SessionTracker:
    """kazoo's connection states in, the contract's SessionEvents out. No I/O, no clock."""

    def __init__(self) -> None:
        self.state = SessionState.CONNECTING
        self.session_id: int | None = None

    def connected(self, session_id: int | None) -> list[SessionEvent]:
        previous, known = self.state, self.session_id
        self.state, self.session_id = SessionState.CONNECTED, session_id
        if previous is SessionState.CONNECTING:
            return []
        if previous is SessionState.LOST:
            return [SessionEvent.SESSION_REESTABLISHED]
        if session_id != known:  # a new session without a LOST seen first
            return [SessionEvent.SESSION_LOST, SessionEvent.SESSION_REESTABLISHED]
        if previous is SessionState.DISCONNECTED:
            return [SessionEvent.RECONNECTED]
        return []

    def suspended(self) -> list[SessionEvent]:
        if self.state is not SessionState.CONNECTED:
            return []
        self.state = SessionState.DISCONNECTED
        return [SessionEvent.CONNECTION_LOST]

    def lost(self) -> list[SessionEvent]:
        """kazoo's LOST: the session expired (or the client was closed)."""
        if self.state in (SessionState.LOST, SessionState.CONNECTING):
            return []
        events = [SessionEvent.CONNECTION_LOST] if self.state is SessionState.CONNECTED else []
        self.state = SessionState.LOST
        return [*events, SessionEvent.SESSION_LOST]

    def disconnected_too_long(self) -> list[SessionEvent]:
        if self.state is not SessionState.DISCONNECTED:
            return []
        self.state = SessionState.LOST
        return [SessionEvent.SESSION_LOST]


# ---- the store -------------------------------------------------------------------------------------------------


def _ensure_chroot(address: ZkAddress, connect_timeout_s: float) -> None:
    """Create the chroot with a short-lived client on the servers' root (blocking)."""
    client = KazooClient(hosts=address.hosts, timeout=max(connect_timeout_s, 2.0))
    try:
        client.start(timeout=connect_timeout_s)
        client.ensure_path(address.chroot)
    finally:
        client.stop()
        client.close()


def _stop(client: KazooClient) -> None:
    client.stop()
    client.close()


class ZooKeeperMetadataStore:
    """Open with ``await ZooKeeperMetadataStore.open("zk:host:port/chroot")``."""

    def __init__(self, client: KazooClient, address: ZkAddress, loop: asyncio.AbstractEventLoop,
                 session_timeout_s: float, operation_timeout_s: float) -> None:
        self.address = address
        self.stats = StoreStats()  # (Pulsar's pulsar_metadata_store_* metrics)
        self.session_timeout_s = session_timeout_s
        self.operation_timeout_s = operation_timeout_s
        self._client = client
        self._loop = loop
        self._tracker = SessionTracker()
        self._lost_timer: asyncio.TimerHandle | None = None
        self._closed = False
        self._listeners: list[Callable[[Notification], None]] = []
        self._session_listeners: list[Callable[[SessionEvent], None]] = []
        # Paths watched for the node (data/exists) and for its children, and those with a watch armed now.
        self._watched: set[str] = set()
        self._watched_children: set[str] = set()
        self._armed: set[str] = set()
        self._armed_children: set[str] = set()
        # Each watched node's version as the last call that armed its watch answered it: a re-armed watch that
        # answers a later version than the event implied tells of a change no watch reported (_rearmed).
        self._versions: dict[str, int] = {}
        # One callable each, so kazoo's per-path watcher sets hold it once.
        self._data_watcher: Callable[[WatchedEvent], None] = self._on_data_watch
        self._child_watcher: Callable[[WatchedEvent], None] = self._on_child_watch

    @classmethod
    async def open(cls, url: str, *, session_timeout_s: float = SESSION_TIMEOUT_S,
                   operation_timeout_s: float | None = None,
                   connect_timeout_s: float = CONNECT_TIMEOUT_S) -> ZooKeeperMetadataStore:
        address = parse_zk_url(url)
        if session_timeout_s <= 0 or connect_timeout_s <= 0 or (operation_timeout_s or 1) <= 0:
            raise MetadataStoreError("ZooKeeper timeouts must be positive")
        loop = asyncio.get_running_loop()
        try:
            if address.chroot:
                await asyncio.to_thread(_ensure_chroot, address, connect_timeout_s)
        except Exception as e:
            raise MetadataStoreError(f"cannot create the chroot {address.chroot} on {address.hosts}: {e!r}") from e
        retry = KazooRetry(max_tries=-1, delay=0.05, backoff=2, max_delay=min(MAX_RECONNECT_DELAY_S,
                                                                               session_timeout_s / 4))
        client = KazooClient(hosts=address.connect_string, timeout=session_timeout_s, connection_retry=retry)
        store = cls(client, address, loop, session_timeout_s, operation_timeout_s or session_timeout_s)
        client.add_listener(store._on_kazoo_state)
        try:
            await asyncio.to_thread(client.start, connect_timeout_s)
        except Exception as e:
            await asyncio.to_thread(_stop, client)
            raise MetadataStoreError(f"cannot connect to ZooKeeper at {address.hosts}: {e!r}") from e
        return store

    def __repr__(self) -> str:
        return f"<ZooKeeperMetadataStore {self.address.connect_string} session={self.session_id:#x}>"

    @property
    def kazoo_client(self) -> KazooClient:
        """The session's client, for a ZooKeeper user in the same process that should not open a session of its own
        (the BookKeeper client of a broker whose store is at the ZooKeeper's root). Not to be stopped by it."""
        return self._client

    @property
    def session_id(self) -> int:
        client_id = self._client.client_id
        return int(client_id[0]) if client_id else 0

    # ---- the contract ------------------------------------------------------------------------------------------

    @measured("get")
    async def get(self, path: str, *, watch_missing: bool = True) -> GetResult | None:
        self._enter(path)
        unwatched = not watch_missing and path not in self._watched  # (no one else asked to watch it)
        while True:
            self._armed.add(path)
            self._watched.add(path)
            try:
                data, zstat = await self._call(path, self._client.get_async(path, watch=self._data_watcher))
                self._note_version(path, zstat)
                return GetResult(bytes(data), self._stat(path, zstat))
            except NotFoundError:
                if (unwatched or self._told_by_parent(path)) and path not in self._watched_children:
                    self._forget(path)  # (getData set no watch on the missing node; its directory tells)
                    return None
                # getData sets no watch on a missing node; exists does (it fires when the node is made).
                zstat = await self._call(path, self._client.exists_async(path, watch=self._data_watcher))
                if not self._note_version(path, zstat):
                    return None
                # made in between: read it

    async def get_children(self, path: str) -> list[str]:
        self._enter(path)
        if self._told_by_parent(path) and path not in self._watched:
            # Its directory tells of its coming and going: the children's watch alone, which ZooKeeper does not set
            # on a node that is not there. (An exists watch on it, armed just after a deletion, would stay on the
            # server until the node is made again: one more for every such node ever listed, as each topic's
            # schema versions are.)
            self._watched_children.add(path)
            self._armed_children.add(path)
            try:
                children = await self._call(path, self._client.get_children_async(path, watch=self._child_watcher))
            except NotFoundError:
                self._forget(path)
                return []
            return sorted(children)
        arm = self._arm(path)  # the node itself too: its creation re-arms the children's watch
        self._watched_children.add(path)
        self._armed_children.add(path)
        try:
            children = await self._call(path, self._client.get_children_async(path, watch=self._child_watcher))
        except NotFoundError:
            self._armed_children.discard(path)
            return []
        finally:
            await self._settle(path, arm)
        return sorted(children)

    async def exists(self, path: str, *, watch_missing: bool = True) -> bool:
        self._enter(path)
        if ((not watch_missing or self._told_by_parent(path)) and path not in self._watched
                and path not in self._watched_children):
            # (no watch on a node that is not there: its directory tells when it comes; one that is gets one)
            if await self._call(path, self._client.exists_async(path)) is None:
                return False
        self._armed.add(path)
        self._watched.add(path)
        zstat = await self._call(path, self._client.exists_async(path, watch=self._data_watcher))
        return self._note_version(path, zstat)

    @measured("put")
    async def put(self, path: str, value: bytes, expected_version: int | None, *,
                  ephemeral: bool = False, sequential: bool = False) -> Stat:
        self._enter(path)
        if path == paths.ROOT:
            raise MetadataStoreError("the root node cannot be written")
        if not isinstance(value, bytes | bytearray | memoryview):
            raise MetadataStoreError(f"a value is bytes, not {type(value).__name__}")
        if expected_version is not None and (type(expected_version) is not int or expected_version < -1):
            raise MetadataStoreError(f"expected_version must be None, -1 or a version >= 0: {expected_version}")
        if sequential and expected_version not in (None, -1):
            raise MetadataStoreError("a sequential put creates a new node: expected_version must be None or -1")
        data = bytes(value)
        if len(data) + len(path) > MAX_REQUEST_BYTES:
            # Sent anyway, the server would drop the connection (and the session's other calls with it).
            raise MetadataStoreError(f"{path}: a value of {len(data)} bytes is past ZooKeeper's request limit "
                                     f"(jute.maxbuffer, {MAX_REQUEST_BYTES} bytes with the path and headers)")
        if sequential or expected_version == -1:
            try:
                made, zstat = await self._create(path, data, ephemeral, sequential)
            except AlreadyExistsError:
                raise BadVersionError(f"{path} exists (create-only put)") from None
        elif expected_version is not None:
            made, zstat = path, await self._set(path, data, expected_version)
        else:
            while True:  # write whatever is there, or create it; a racing create means: write again
                try:
                    made, zstat = path, await self._set(path, data, -1)
                    break
                except NotFoundError:
                    pass
                try:
                    made, zstat = await self._create(path, data, ephemeral, False)
                    break
                except AlreadyExistsError:
                    continue
        return self._stat(made, zstat)

    @measured("del")
    async def delete(self, path: str, expected_version: int | None = None) -> None:
        self._enter(path)
        if path == paths.ROOT:
            raise MetadataStoreError("the root node cannot be deleted")
        if expected_version is not None and type(expected_version) is not int:
            raise MetadataStoreError(f"expected_version must be None or an int: {expected_version!r}")
        version = -1 if expected_version is None else expected_version
        await self._call(path, self._client.delete_async(path, version))

    async def delete_recursive(self, path: str) -> None:
        self._enter(path)
        try:
            children = await self._call(path, self._client.get_children_async(path))
        except NotFoundError:
            return
        await asyncio.gather(*(self.delete_recursive(paths.join(path, child)) for child in children))
        if path != paths.ROOT:
            with contextlib.suppress(NotFoundError):
                await self._call(path, self._client.delete_async(path, -1))

    async def multi(self, creates: Sequence[tuple[str, bytes]], deletes: Sequence[tuple[str, int]]) -> None:
        """All or nothing (ZooKeeper's multi): create each ``(path, value)`` (its parent must exist), in order, then
        delete each ``(path, version)`` (-1: any version), in order. AlreadyExistsError, BadVersionError or
        NotFoundError for the first operation that failed (then none took effect)."""
        first = (creates or deletes)[0][0]
        for path, _ in (*creates, *deletes):
            self._enter(path)
        transaction = self._client.transaction()
        for path, value in creates:
            transaction.create(path, bytes(value))
        for path, version in deletes:
            transaction.delete(path, version)
        results = await self._call(first, transaction.commit_async())
        failed = [r for r in results if isinstance(r, Exception) and not isinstance(r, RolledBackError)]
        if failed:
            error = failed[0]
            if isinstance(error, NodeExistsError):
                raise AlreadyExistsError(f"{first}...: a node to create exists")
            if isinstance(error, KzBadVersionError):
                raise BadVersionError(f"{first}...: a node to delete is not at the expected version")
            if isinstance(error, NoNodeError):
                raise NotFoundError(f"{first}...: a node to delete, or a parent of one to create, is missing")
            raise MetadataStoreError(f"ZooKeeper's multi failed on {first}...: {type(error).__name__} {error}")

    def register_listener(self, listener: Callable[[Notification], None]) -> None:
        self._listeners.append(listener)

    def register_session_listener(self, listener: Callable[[SessionEvent], None]) -> None:
        self._session_listeners.append(listener)

    async def close(self) -> None:
        """Ends the session: ZooKeeper deletes its ephemeral nodes at once."""
        if self._closed:
            return
        self._closed = True
        self._cancel_lost_timer()
        try:
            async with asyncio.timeout(self.operation_timeout_s):
                await asyncio.to_thread(_stop, self._client)
        except TimeoutError:
            log.warning("%r: closing the ZooKeeper session timed out; its ephemeral nodes go when it expires", self)

    # ---- calls -------------------------------------------------------------------------------------------------

    def _enter(self, path: str) -> None:
        if self._closed:
            raise MetadataStoreError(f"{self!r} is closed")
        paths.check(path)

    # A put returns with a watch set on the node it wrote, so the writer hears of every later change.
    # ZooKeeper answers one session's requests in order: an exists sent right behind a setData is
    # answered after it, and awaiting both costs no extra round trip. A create (with makepath, maybe
    # several requests; a sequential name known only from the answer) is followed by its exists.

    async def _set(self, path: str, data: bytes, version: int) -> ZnodeStat:
        write = self._client.set_async(path, data, version)
        arm = self._arm(path)
        try:
            return await self._call(path, write)
        finally:
            await self._settle(path, arm)

    async def _create(self, path: str, data: bytes, ephemeral: bool, sequential: bool) -> tuple[str, ZnodeStat]:
        made, zstat = await self._call(path, self._client.create_async(
            path, data, ephemeral=ephemeral, sequence=sequential, makepath=True, include_data=True))
        await self._settle(str(made), self._arm(str(made)))
        return str(made), zstat

    def _arm(self, path: str) -> Any:
        """Send an exists with a watch on ``path`` now; the caller awaits it with ``_settle``."""
        self._watched.add(path)
        self._armed.add(path)
        return self._client.exists_async(path, watch=self._data_watcher)

    async def _settle(self, path: str, arm: Any) -> None:
        with contextlib.suppress(MetadataStoreError):  # the call it rode behind says what went wrong
            self._note_version(path, await self._call(path, arm))

    def _note_version(self, path: str, zstat: ZnodeStat | None) -> bool:
        """Keep the version an arming call (get, exists) answered; whether the node exists."""
        if zstat is None:
            self._versions.pop(path, None)
            return False
        self._versions[path] = zstat.version
        return True

    async def _call(self, path: str, result: Any) -> Any:
        """Await a kazoo result within the operation timeout; kazoo's errors become the contract's."""
        try:
            async with asyncio.timeout(self.operation_timeout_s):
                return await awaitable(self._loop, result)
        except TimeoutError:
            raise MetadataStoreError(
                f"ZooKeeper did not answer within {self.operation_timeout_s:g}s ({path})") from None
        except NoNodeError:
            raise NotFoundError(path) from None
        except KzBadVersionError:
            raise BadVersionError(f"{path}: not at the expected version") from None
        except NodeExistsError:
            raise AlreadyExistsError(path) from None
        except NotEmptyError:
            raise MetadataStoreError(f"{path} has children: delete them first") from None
        except NoChildrenForEphemeralsError:
            raise MetadataStoreError(f"{path}: ephemeral nodes cannot have children") from None
        except KazooException as e:
            raise MetadataStoreError(f"ZooKeeper failed on {path}: {type(e).__name__} {e}") from e

    def _stat(self, path: str, zstat: ZnodeStat) -> Stat:
        owner = int(zstat.ephemeralOwner)
        ephemeral = owner not in (0, _CONTAINER_OWNER)
        return Stat(path, int(zstat.version), int(zstat.ctime), int(zstat.mtime), ephemeral,
                    ephemeral and owner == self.session_id)

    # ---- watches -----------------------------------------------------------------------------------------------

    def _told_by_parent(self, path: str) -> bool:
        """Whether the node's coming is told without a watch of its own: its directory's children are watched, so
        a node made there is told as the directory's CHILDREN_CHANGED."""
        return path != paths.ROOT and paths.parent(path) in self._watched_children

    def _forget(self, path: str) -> None:
        """Stop watching a node that is not there (deleted, or never made) whose directory's children are watched:
        keeping a watch on every name ever read or deleted would grow without bound with topic churn (ZooKeeper
        keeps each such watch on the server too). Its coming again is told as the directory's CHILDREN_CHANGED,
        and a read of it (get, exists) watches it again."""
        self._watched.discard(path)
        self._armed.discard(path)
        self._versions.pop(path, None)
        self._watched_children.discard(path)
        self._armed_children.discard(path)

    def _watch_node(self, path: str, existed: bool | None = None, expected: int | None = None) -> None:
        """Arm an exists watch on ``path`` unless one is armed. ``existed``: whether the node existed when the
        watch that fired was set off, ``expected``: its version then, if known. If the answer says otherwise, the
        node was deleted, created or changed again before the new watch was armed, a change no watch reports: it
        is told here instead."""
        self._watched.add(path)
        if path not in self._armed and not self._closed:
            self._armed.add(path)
            answer = self._client.exists_async(path, watch=self._data_watcher)
            answer.rawlink(lambda result: self._post_call(self._rearmed, path, existed, expected, result))

    def _post_call(self, handler: Callable[..., None], *args: Any) -> None:
        """Run handler(*args) on the loop (called from kazoo's threads)."""
        with contextlib.suppress(RuntimeError):  # the loop is closed
            self._loop.call_soon_threadsafe(handler, *args)

    def _rearmed(self, path: str, existed: bool | None, expected: int | None, result: Any) -> None:
        try:
            zstat = result.get_nowait()
        except Exception:  # (a lost connection: watches are re-armed, and caches re-read, on reconnection)
            return
        exists = self._note_version(path, zstat)
        if self._closed or existed is None:
            return
        if exists != existed:
            kind = NotificationType.CREATED if exists else NotificationType.DELETED
            notes = [Notification(kind, path)]
            if path != paths.ROOT:
                notes.append(Notification(NotificationType.CHILDREN_CHANGED, paths.parent(path)))
            self._deliver(notes)
        elif exists and expected is not None and zstat.version > expected:
            # Written again by another session before this watch was set: the change that fired the watch
            # left the node at ``expected``. (Only later versions count: an answer of this session's own
            # write may be handled before the event it fired, which then expects one version too many.)
            self._deliver([Notification(NotificationType.MODIFIED, path)])

    def _watch_children(self, path: str) -> None:
        if path not in self._armed_children and not self._closed:
            self._armed_children.add(path)
            self._client.get_children_async(path, watch=self._child_watcher)

    def _on_data_watch(self, event: WatchedEvent) -> None:  # on kazoo's thread
        self._post_call(self._data_event, event)

    def _on_child_watch(self, event: WatchedEvent) -> None:  # on kazoo's thread
        self._post_call(self._child_event, event)

    def _data_event(self, event: WatchedEvent) -> None:
        if self._closed or event.type == EventType.NONE or event.path is None:
            return  # a connection state change: watches are re-armed on reconnection
        path = event.path
        self._armed.discard(path)
        # The version the change that fired left: 0 for a new node, one past the armed one for a write.
        known = self._versions.get(path)
        expected = 0 if event.type == EventType.CREATED else (
            known + 1 if event.type == EventType.CHANGED and known is not None else None)
        # Before telling anyone, so no later change goes unseen (one before it is armed is told by _rearmed). A
        # deleted node whose directory tells of its coming again is watched no more (_forget).
        if event.type == EventType.DELETED and self._told_by_parent(path):
            self._forget(path)
        else:
            self._watch_node(path, existed=event.type != EventType.DELETED, expected=expected)
        parent = paths.parent(path) if path != paths.ROOT else None
        if event.type == EventType.CREATED:
            if path in self._watched_children:
                self._watch_children(path)
            notes = [Notification(NotificationType.CREATED, path)]
        elif event.type == EventType.CHANGED:
            notes = [Notification(NotificationType.MODIFIED, path)]
        elif event.type == EventType.DELETED:
            self._armed_children.discard(path)
            notes = [Notification(NotificationType.DELETED, path)]
        else:
            return
        if parent is not None and event.type != EventType.CHANGED:
            notes.append(Notification(NotificationType.CHILDREN_CHANGED, parent))
        self._deliver(notes)

    def _child_event(self, event: WatchedEvent) -> None:
        if self._closed or event.path is None:
            return
        path = event.path
        self._armed_children.discard(path)
        if event.type == EventType.CHILD:
            self._watch_children(path)
            self._deliver([Notification(NotificationType.CHILDREN_CHANGED, path)])
        elif event.type == EventType.DELETED and path not in self._watched and path != paths.ROOT:
            # A node listed without a watch of its own (get_children, in a listed directory): told here, and
            # forgotten; its directory tells of its coming again.
            self._forget(path)
            self._deliver([Notification(NotificationType.DELETED, path),
                           Notification(NotificationType.CHILDREN_CHANGED, paths.parent(path))])
        # DELETED otherwise: the node's own watch tells it; its creation re-arms this one

    def _rearm_all(self) -> None:
        """After a reconnection kazoo holds no watches: arm again everything watched."""
        self._armed.clear()
        self._armed_children.clear()
        for path in sorted(self._watched):
            self._watch_node(path)
        for path in sorted(self._watched_children):
            self._watch_children(path)

    def _deliver(self, notes: list[Notification]) -> None:
        for note in notes:
            for listener in list(self._listeners):
                try:
                    listener(note)
                except Exception:
                    log.exception("%r: a notification listener failed on %s", self, note)

    # ---- session -----------------------------------------------------------------------------------------------

    def _on_kazoo_state(self, state: KazooState) -> None:  # on kazoo's connection thread: must not block
        client_id = self._client.client_id
        session = int(client_id[0]) if client_id else None
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._on_state, state, session)

    def _on_state(self, state: KazooState, session: int | None) -> None:
        if self._closed:
            return
        if state == KazooState.SUSPENDED:
            events = self._tracker.suspended()
            if events:
                self._armed.clear()
                self._armed_children.clear()
                self._lost_timer = self._loop.call_later(self.session_timeout_s * SESSION_LOST_FRACTION,
                                                         self._disconnected_too_long)
        elif state == KazooState.LOST:
            self._cancel_lost_timer()
            self._armed.clear()
            self._armed_children.clear()
            events = self._tracker.lost()
        else:
            self._cancel_lost_timer()
            events = self._tracker.connected(session)
            if events:
                self._rearm_all()
        for event in events:
            log.info("%r: %s", self, event.name)
            self._deliver_session_event(event)

    def _disconnected_too_long(self) -> None:
        self._lost_timer = None
        if not self._closed:
            for event in self._tracker.disconnected_too_long():
                log.warning("%r: disconnected for %.1fs (5/6 of the session timeout): taking the session as lost",
                            self, self.session_timeout_s * SESSION_LOST_FRACTION)
                self._deliver_session_event(event)

    def _cancel_lost_timer(self) -> None:
        if self._lost_timer is not None:
            self._lost_timer.cancel()
            self._lost_timer = None

    def _deliver_session_event(self, event: SessionEvent) -> None:
        for listener in list(self._session_listeners):
            try:
                listener(event)
            except Exception:
                log.exception("%r: a session listener failed on %s", self, event)
