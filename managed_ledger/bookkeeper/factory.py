"""Opens managed ledgers stored on Apache BookKeeper, with their metadata in a metadata store (Pulsar's layout).

Opening is Pulsar's takeover (``ManagedLedgerImpl.initialize`` / ``initializeBookKeeper``), safe while a previous
owner may still be running:

1. read the managed ledger's znode (its ledger list and version); create it empty if missing;
2. open the last ledger *with recovery*: this fences it on the bookies (the previous owner's next add fails) and
   closes it where its acknowledged entries end; its entries and size go into the list (a ledger that no longer
   exists is dropped);
3. drop ledgers without entries (deleted in BookKeeper after the write below);
4. create a new ledger, append it, and compare-and-set the znode with the version read in 1 (the previous owner's
   next write of the list then fails with BadVersion);
5. recover every cursor (``cursor.CursorStore``): its znode, and the last state in its cursor ledger, fenced too.

``list_names`` is synchronous: it answers from the names this factory knows, which are those opened or created
through it plus, once the factory has started, those found under the root in Pulsar's four-level layout
(``tenant/namespace/domain/topic``), kept up to date from the metadata store's notifications (another broker's
topics come and go); ``add_names_listener`` hears of each change. ``exists_fresh`` reads the store for a name not
known (yet: its notification may be on its way).

Before that first scan, a factory given ``migrate_names`` moves the znodes an older version stored under names that
are not Pulsar's to Pulsar's, once per store (``_move_legacy_names``).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Callable
from functools import partial

from managed_ledger.api import (
    LedgerNotFoundError,
    ManagedLedgerConfig,
    ManagedLedgerError,
    ManagedLedgerFactory,
    StoredCursorState,
    StoredLedger,
    StoredLedgerRow,
    StoredManagedLedgerInfo,
)
from managed_ledger.bookkeeper import ml_formats
from managed_ledger.bookkeeper.availability import BookieAvailability
from managed_ledger.bookkeeper.client import BookKeeper
from managed_ledger.bookkeeper.errors import BookKeeperError, NoSuchLedgerError
from managed_ledger.bookkeeper.ledger import DEFAULT_ADD_RETRY_WINDOW_S, BookKeeperManagedLedger, offload_records
from managed_ledger.bookkeeper.placement import isolation_of
from managed_ledger.ledger_base import settled
from managed_ledger.ledger_map import LedgerMap
from managed_ledger.offload.api import Offloader, OffloadStatsSink
from managed_ledger.offload.state import LedgerOffload
from managed_ledger.offload.tiered import delete_copies, ledgers_with_copies, offloader_in
from managed_ledger.position import Position
from managed_ledger.read_cache import ReadCache
from managed_ledger.single_flight import SingleFlight
from metadata_store.api import (
    BadVersionError,
    MetadataStore,
    MetadataStoreError,
    NotFoundError,
    Notification,
    NotificationType,
)
from metadata_store.factory import open_metadata_store

log = logging.getLogger(__name__)

Clock = Callable[[], float]

# Pulsar's managedLedgerDefaultEnsembleSize / WriteQuorum / AckQuorum defaults are 2/2/2; with three bookies a test
# cluster uses 3/2/2 (entries striped over all three, two copies each).
DEFAULT_ENSEMBLE_SIZE = 2
DEFAULT_WRITE_QUORUM = 2
DEFAULT_ACK_QUORUM = 2
# Pulsar's managedLedgerDefaultMarkDeleteRateLimit: one persisted mark-delete per second per cursor.
DEFAULT_CURSOR_PERSIST_INTERVAL_S = 1.0
# Pulsar's managedLedger password is empty (ServiceConfiguration / BookKeeperClientFactoryImpl), digest CRC32C.
PASSWORD = b""
# Depth of Pulsar's managed-ledger names under the root: tenant/namespace/domain/topic.
PULSAR_NAME_DEPTH = 4
# A level whose re-read was raced by another notification of it this many times is taken as last read (a later
# notification reads it again).
RESCAN_ATTEMPTS = 5


# Pulsar's bookkeeperMetadataServiceUri schemes that name a ZooKeeper (zk, zk+hierarchical, zk+longhierarchical,
# zk+null: the layout is read from <root>/LAYOUT, which the client follows as written).
_ZK_SCHEME_PREFIX = "zk"
_NOT_ZOOKEEPER = ("memory:", "local:", "rocksdb:", "etcd:", "oxia:")


def bookkeeper_zookeeper(metadata_service_uri: str, metadata_store_url: str) -> tuple[str, str]:
    """(ZooKeeper connect string, ledgers root) of BookKeeper's metadata, from Pulsar's two keys: the
    ``bookkeeperMetadataServiceUri`` (``zk+hierarchical://h1:2181;h2:2181/ledgers``), else the ZooKeeper of the
    ``metadataStoreUrl`` with ``/ledgers``. ValueError says what is wrong."""
    uri = metadata_service_uri.strip()
    if uri:
        scheme, sep, rest = uri.partition("://")
        if not sep or not scheme.startswith(_ZK_SCHEME_PREFIX):
            raise ValueError(f"bookkeeperMetadataServiceUri={uri!r}: expected zk+hierarchical://host:port/ledgers")
        hosts, slash, root = rest.partition("/")
        if not hosts:
            raise ValueError(f"bookkeeperMetadataServiceUri={uri!r} names no ZooKeeper server")
        return hosts.replace(";", ","), "/" + root.strip("/") if slash and root.strip("/") else "/ledgers"
    url = metadata_store_url.strip()
    if not url or url.startswith(_NOT_ZOOKEEPER):
        raise ValueError("needs a ZooKeeper: set bookkeeperMetadataServiceUri, or a zk: metadataStoreUrl")
    return url.removeprefix("zk:").removeprefix("//"), "/ledgers"


def ml_metadata_store_url(metadata_store_url: str, bookkeeper_zk: str) -> str:
    """Where managed-ledger znodes go: the metadata store when it is a ZooKeeper (as Pulsar), else BookKeeper's."""
    url = metadata_store_url.strip()
    if url and not url.startswith(_NOT_ZOOKEEPER):
        return url if url.startswith("zk:") else f"zk:{url}"
    return f"zk:{bookkeeper_zk}"


def _holds_ledger_list(value: bytes) -> bool:
    """Whether a znode's value is a managed ledger's list of ledgers, not a cursor's (read as one, a cursor's value
    has none: its fields are of other types)."""
    try:
        return bool(value) and bool(ml_formats.decode_ledger_info(value).ledgers)
    except ml_formats.MetadataFormatError:
        return False


class BookKeeperManagedLedgerFactory(ManagedLedgerFactory):
    """Managed ledgers on ``bk`` (a started or unstarted ``BookKeeper`` client), metadata in ``store``: an open
    ``MetadataStore``, a callable returning one when the factory starts (a broker's own store, opened after the
    factory is built: one ZooKeeper session for both), or a ``metadataStoreUrl`` the factory opens when it starts
    and closes with itself.

    root: where managed-ledger znodes live (Pulsar's ``/managed-ledgers``).
    ensemble_size, write_quorum, ack_quorum: of every ledger this factory creates (Pulsar's
    managedLedgerDefaultEnsembleSize / WriteQuorum / AckQuorum).
    cache_size_bytes: the read cache shared by all managed ledgers of the factory.
    owns_client: close ``bk`` (and so its ZooKeeper connection) with the factory.
    session_timeout_s: of the ZooKeeper session the factory opens for a ``metadataStoreUrl`` (None: the store's
    default), Pulsar's metadataStoreSessionTimeoutMillis.
    formats: how ManagedLedgerInfo, ManagedCursorInfo and PositionInfo are written (compression, long-array acks).
    add_retry_window_s: after a failed add, how long creating the next ledger is retried before the pending adds
    fail (they succeed, in order, on the new ledger when it comes in time); each add is held at most this long
    from its arrival (the broker passes managedLedgerDiskFullAddHoldSeconds: see docs/exhaustion.md).
    storage_check_interval_s: how often ``availability`` reads which bookies are writable.
    migrate_names, names_marker: the name today of a managed ledger an older version stored under the argument, and
    the znode (in ``store``) that says the names are today's. Without it, the factory's start moves each managed
    ledger whose name ``migrate_names`` changes (``_move_legacy_names``), then makes it. None: nothing moved.
    """

    def __init__(self, bk: BookKeeper, store: MetadataStore | str | Callable[[], MetadataStore], *,
                 root: str = ml_formats.MANAGED_LEDGERS_ROOT,
                 ensemble_size: int = DEFAULT_ENSEMBLE_SIZE, write_quorum: int = DEFAULT_WRITE_QUORUM,
                 ack_quorum: int = DEFAULT_ACK_QUORUM, clock: Clock = time.time,
                 cache_size_bytes: int = ManagedLedgerConfig.cache_size_bytes,
                 cursor_persist_interval_s: float = DEFAULT_CURSOR_PERSIST_INTERVAL_S,
                 owns_client: bool = True, add_retry_window_s: float = DEFAULT_ADD_RETRY_WINDOW_S,
                 session_timeout_s: float | None = None, formats: ml_formats.MetadataFormats = ml_formats.PLAIN,
                 storage_check_interval_s: float = 1.0, migrate_names: Callable[[str], str] | None = None,
                 names_marker: str | None = None) -> None:
        super().__init__()
        self._migrate_names, self._names_marker = migrate_names, names_marker
        if not ensemble_size >= write_quorum >= ack_quorum >= 1:
            raise ValueError(f"need ensemble >= write quorum >= ack quorum >= 1, got "
                             f"{ensemble_size}/{write_quorum}/{ack_quorum}")
        # offloader (the base's, None until the broker sets it): where closed ledgers are offloaded to, and read from
        # once their BookKeeper copy is deleted (a Pulsar broker's too). offload_stats: where offloads are counted.
        self.offload_stats: OffloadStatsSink | None = None
        self.bk = bk
        self._store = store
        self.root = root.rstrip("/")
        self.ensemble_size, self.write_quorum, self.ack_quorum = ensemble_size, write_quorum, ack_quorum
        self.password = PASSWORD
        self.clock = clock
        self.cache = ReadCache(cache_size_bytes)
        self.cursor_persist_interval_s = cursor_persist_interval_s
        self.add_retry_window_s = add_retry_window_s
        self.availability = BookieAvailability(bk, ensemble_size, storage_check_interval_s)
        self.session_timeout_s = session_timeout_s
        self.formats = formats
        self._owns_client = owns_client
        self._owns_store = False
        self._names: set[str] = set()
        self._open: dict[str, BookKeeperManagedLedger] = {}
        self._opening: SingleFlight[str, BookKeeperManagedLedger] = SingleFlight("managed-ledger open")
        self._instance_ids = itertools.count(1)
        self._started: asyncio.Future[None] | None = None
        self._closed = False
        self._rescans: dict[str, asyncio.Task[None]] = {}  # levels being re-read after a notification
        self._rescan_again: set[str] = set()  # levels notified again while being re-read
        # While levels are being re-read: when each name was last added or removed (here, or by another re-read), by
        # a count of such changes. A re-read leaves alone the names changed after it began (see _rescan).
        self._changes = 0
        self._changed_at: dict[str, int] = {}

    @property
    def store(self) -> MetadataStore:
        if isinstance(self._store, str) or callable(self._store):
            raise ManagedLedgerError("the managed-ledger factory is not started (no metadata store yet)")
        return self._store

    # -- start ------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect the client and learn the stored names (idempotent; open and delete call it)."""
        if self._started is None:
            self._started = asyncio.get_running_loop().create_future()
            try:
                if isinstance(self._store, str):
                    self._store = await open_metadata_store(self._store, session_timeout_s=self.session_timeout_s)
                    self._owns_store = True
                elif callable(self._store):
                    self._store = self._store()
                if self._owns_client:
                    await self.bk.start()
                await self._move_legacy_names()
                await self._scan(self.root, 0)
                self.store.register_listener(self._on_notification)
                self.availability.start()
            except BaseException as exc:
                self._started.set_exception(exc)
                self._started.exception()
                self._started = None
                raise
            self._started.set_result(None)
        await asyncio.shield(self._started)

    async def _scan(self, path: str, depth: int, found: set[str] | None = None) -> None:
        """The names under ``path`` (``depth`` levels below the root) into ``found``, else into the known names.
        Reading the children arms the store's watches on them: ``_on_notification`` hears of the next change."""
        if depth == PULSAR_NAME_DEPTH:
            if found is None:
                self._names.add(path[len(self.root) + 1:])
            else:
                found.add(path[len(self.root) + 1:])
            return
        for child in await self.store.get_children(path):
            await self._scan(f"{path}/{child}", depth + 1, found)

    async def _move_legacy_names(self) -> None:
        """Names of an older version (see ``migrate_names``) moved to today's, once per store (``names_marker``):
        each such managed ledger's znode and its cursors' are made under the new name and removed from the old in
        one ZooKeeper multi, so a crash leaves each one at the one name or the other. Those an older version
        stored are: at Pulsar's depth, a name ``migrate_names`` changes (a raw local name with a character Pulsar's
        Codec.encode escapes); deeper, a node that holds a ledger list (a raw local name with "/": cursors hold no
        ledger list). An empty node with children is no managed ledger (one never opened has no cursor): a parent
        the older version made by the way for a name with "/"; it is removed once its children have moved. One
        that cannot move (its new name taken, a store that has no multi) stays where it is, logged, and the marker
        is not made: the next start tries again."""
        rename, marker = self._migrate_names, self._names_marker
        if rename is None or marker is None or await self.store.exists(marker, watch_missing=False):
            return
        found: list[tuple[int, str]] = []  # (depth, name)
        parents: list[tuple[int, str, int]] = []  # (depth, path, version)

        async def walk(path: str, depth: int) -> None:
            try:
                children = await self.store.get_children(path)
            except NotFoundError:
                return
            if depth >= PULSAR_NAME_DEPTH:
                got = await self.store.get(path, watch_missing=False)
                if got is None:
                    return
                name = path[len(self.root) + 1:]
                if not got.value and children:
                    parents.append((depth, path, got.stat.version))
                elif rename(name) != name and (depth == PULSAR_NAME_DEPTH or _holds_ledger_list(got.value)):
                    found.append((depth, name))  # (a compacted view's, deeper, keeps the name its record holds)
            for child in children:
                await walk(f"{path}/{child}", depth + 1)

        await walk(self.root, 0)
        moved = failed = 0
        for _, name in sorted(found, reverse=True):  # (deepest first: a managed ledger goes before its parent's)
            if await self._move_legacy(name, rename(name)):
                moved += 1
            else:
                failed += 1
        for _, path, version in sorted(parents, reverse=True):
            with contextlib.suppress(MetadataStoreError):  # (children left, or changed meanwhile: it stays)
                if not await self.store.get_children(path):
                    await self.store.delete(path, version)
                    log.info("removed %s, an empty parent an older version made for names with '/'", path)
        if moved:
            log.info("moved %d managed ledgers from an older version's names to Pulsar's", moved)
        if not failed:
            with contextlib.suppress(BadVersionError):  # (another broker made it meanwhile)
                await self.store.put(marker, b"2", -1)

    async def _move_legacy(self, old: str, new: str) -> bool:
        """``old``'s znode and its children (cursors) to ``new`` in one multi; False, logged, if it cannot."""
        source, target = ml_formats.ledger_path(self.root, old), ml_formats.ledger_path(self.root, new)
        multi = getattr(self.store, "multi", None)
        try:
            got = await self.store.get(source, watch_missing=False)
            if got is None:
                return True  # (moved by another broker meanwhile)
            if multi is None:
                log.error("managed ledger %s not moved to %s: the metadata store has no multi", old, new)
                return False
            if await self.store.exists(target, watch_missing=False):
                raise MetadataStoreError(f"{new} exists; both kept as they are")
            cursors = []
            for child in await self.store.get_children(source):
                if await self.store.get_children(f"{source}/{child}"):
                    raise MetadataStoreError(f"its child {child} has children")
                cursor = await self.store.get(f"{source}/{child}", watch_missing=False)
                if cursor is not None:
                    cursors.append((child, cursor))
            await multi([(target, got.value), *((f"{target}/{c}", g.value) for c, g in cursors)],
                        [*((f"{source}/{c}", g.stat.version) for c, g in cursors), (source, got.stat.version)])
        except MetadataStoreError as exc:  # (changed meanwhile, or the store failed: the next start tries again)
            with contextlib.suppress(MetadataStoreError):
                if not await self.store.exists(source, watch_missing=False):
                    return True  # (another broker starting at the same time moved it)
            log.error("managed ledger %s not moved to %s: %s", old, new, exc)
            return False
        log.info("managed ledger %s moved to %s (Pulsar's name)", old, new)
        return True

    def _add_name(self, name: str) -> None:
        self._note_change(name)
        if name not in self._names:
            self._names.add(name)
            self._names_changed(name)

    def _discard_name(self, name: str) -> None:
        self._note_change(name)
        if name in self._names:
            self._names.discard(name)
            self._names_changed(name)

    def _note_change(self, name: str) -> None:
        """Mark ``name`` as changed now, for the re-reads under way (none under way: nothing to mark)."""
        if self._rescans:
            self._changes += 1
            self._changed_at[name] = self._changes

    def _on_notification(self, notification: Notification) -> None:
        """Children of a level above the managed ledgers changed, or such a level was created (another broker
        created or deleted a managed ledger, or the first of a namespace): rescan that level. Hints only, as every
        watch: the rescan reads what is there."""
        path = notification.path
        if notification.type not in (NotificationType.CHILDREN_CHANGED, NotificationType.CREATED) or self._closed:
            return
        if path != self.root and not path.startswith(self.root + "/"):
            return
        depth = 0 if path == self.root else path[len(self.root) + 1:].count("/") + 1
        if depth >= PULSAR_NAME_DEPTH:
            return  # (a managed ledger's own children are its cursors)
        running = self._rescans.get(path)
        if running is not None and not running.done():
            self._rescan_again.add(path)  # (read again when the read under way ends: it may have missed this)
            return
        # (A re-read that has ended but whose task is still listed, its done callback not run yet, has read the level
        # before this change: a new one reads it. Taking this for a re-read under way lost the change for good.)
        self._start_rescan(path, depth)

    def _start_rescan(self, path: str, depth: int) -> None:
        task = asyncio.get_running_loop().create_task(self._rescan(path, depth))
        self._rescans[path] = task
        task.add_done_callback(lambda done: self._rescan_ended(path, depth, done))

    def _rescan_ended(self, path: str, depth: int, task: asyncio.Task[None]) -> None:
        if self._rescans.get(path) is task:
            del self._rescans[path]
        if path in self._rescan_again and not self._closed and path not in self._rescans:
            # Notified again during its last attempt's read (RESCAN_ATTEMPTS reads, each raced): what that read
            # missed has no watch left to tell of it, so read once more.
            self._start_rescan(path, depth)

    async def _rescan(self, path: str, depth: int) -> None:
        """Re-read the names under ``path`` and apply what changed, except to names changed after the read began: a
        local create, open or delete, or another re-read (of a deeper level, notified later) that read them after
        this one may have. Without that, a slow re-read of a wide level (many namespaces) dropped a name that a
        re-read of its own level had just added, and the broker forgot another broker's topic until the next change
        there. A change that happens after a read is notified again (the read armed the watch), so skipping a name
        loses nothing."""
        prefix = path[len(self.root) + 1:] + "/" if path != self.root else ""
        try:
            for _ in range(RESCAN_ATTEMPTS):
                self._rescan_again.discard(path)
                began = self._changes
                found: set[str] = set()
                try:
                    await self._scan(path, depth, found)
                except MetadataStoreError as exc:
                    log.warning("managed-ledger names under %s not re-read: %s", path, exc)
                    self._rescan_again.discard(path)  # (the store's next notification, once it is back, reads it)
                    return
                if path not in self._rescan_again:
                    break  # (else another notification of this level raced the read: again)
            changed_at = self._changed_at
            for name in sorted(found - self._names):
                if changed_at.get(name, began) <= began:
                    self._add_name(name)
            for name in sorted(n for n in self._names if n.startswith(prefix) and n not in found):
                if (changed_at.get(name, began) <= began and name not in self._open
                        and name not in self._opening):  # (being created here: not yet visible)
                    self._discard_name(name)
        finally:
            if all(task.done() or task is asyncio.current_task() for task in self._rescans.values()):
                self._changed_at.clear()  # (no other re-read under way: nobody began before these changes)

    def _next_instance_id(self) -> int:
        return next(self._instance_ids)

    # -- the factory interface ------------------------------------------------------------------

    def resize_cache(self, max_bytes: int) -> None:
        self.cache.resize(max_bytes)

    async def open(self, name: str, config: ManagedLedgerConfig | None = None) -> BookKeeperManagedLedger:
        if self._closed:
            raise ManagedLedgerError("managed-ledger factory is closed")
        await self.start()
        ledger = await settled(self._open, name)
        if ledger is not None:
            return ledger
        return await self._opening.run(name, lambda: self._take_over(name, config or ManagedLedgerConfig()))

    async def _take_over(self, name: str, config: ManagedLedgerConfig) -> BookKeeperManagedLedger:
        try:
            ledger = await self._take_over_once(name, config)
        except (BookKeeperError, MetadataStoreError, ml_formats.MetadataFormatError) as exc:
            raise ManagedLedgerError(f"managed ledger {name} cannot be opened: {exc}") from exc
        self._open[name] = ledger
        self._add_name(name)
        return ledger

    async def _take_over_once(self, name: str, config: ManagedLedgerConfig) -> BookKeeperManagedLedger:
        path = ml_formats.ledger_path(self.root, name)
        got = await self.store.get(path)
        if got is None:
            try:
                version = (await self.store.put(path, b"", -1)).version  # Pulsar's createIfMissing
            except BadVersionError:  # (created meanwhile: by ``create``, here or at another broker)
                got = await self.store.get(path)
                if got is None:
                    raise ManagedLedgerError(f"managed ledger {name} was deleted while it was opened") from None
            info = ml_formats.StoredManagedLedger()
        if got is not None:
            version, info = got.stat.version, ml_formats.decode_ledger_info(got.value)
        now = self.clock()
        ledgers = list(info.ledgers)
        recovered = None
        if ledgers:
            last = ledgers[-1]
            try:
                recovered = await self.bk.open_ledger(last.ledger_id, self.password, recover=True)
                ledgers[-1] = ml_formats.StoredLedger(last.ledger_id, recovered.last_add_confirmed + 1,
                                                      recovered.length, int(now * 1000))
            except NoSuchLedgerError:
                log.warning("%s: its last ledger %d does not exist: dropped", name, last.ledger_id)
                ledgers.pop()
        empty = [ledger.ledger_id for ledger in ledgers if not ledger.entries]
        writer = await self.bk.create_ledger(self.ensemble_size, self.write_quorum, self.ack_quorum,
                                             password=self.password,
                                             custom_metadata=ml_formats.ledger_custom_metadata(name),
                                             isolation=isolation_of(config))
        ledger_map = LedgerMap()
        last_confirmed = Position(writer.ledger_id, -1)
        for stored in ledgers:
            if not stored.entries:
                continue
            closed_at = stored.timestamp_ms / 1000 if stored.timestamp_ms else now
            ledger_map.add_stored_ledger(stored.ledger_id, closed_at, closed_at, stored.entries, stored.size or 0)
            last_confirmed = Position(stored.ledger_id, stored.entries - 1)
        ledger_map.open_ledger(writer.ledger_id, now)
        ledger = BookKeeperManagedLedger(self, name, config, ledger_map, info, version, writer, last_confirmed)
        if recovered is not None:
            ledger._handles[recovered.ledger_id] = recovered
        try:
            await ledger._write_info()
        except BadVersionError:
            await writer.abandon()
            with contextlib.suppress(BookKeeperError):
                await self.bk.delete_ledger(writer.ledger_id)
            raise ManagedLedgerError(f"managed ledger {name} was opened by another owner at the same time") from None
        for ledger_id in empty:
            with contextlib.suppress(BookKeeperError):
                await self.bk.delete_ledger(ledger_id)
        await ledger._recover_cursors()
        ledger._opened()
        return ledger

    async def create(self, name: str) -> bool:
        """Its znode, empty (Pulsar's TopicResources.createPersistentTopicAsync: an empty value, create only; the
        first open then finds a managed ledger without ledgers). One already there is left as it is (Pulsar's
        AdminResource.tryCreatePartitionAsync takes AlreadyExists / BadVersion as done)."""
        if self._closed:
            raise ManagedLedgerError("managed-ledger factory is closed")
        await self.start()
        if name in self._names:
            return False
        try:
            await self.store.put(ml_formats.ledger_path(self.root, name), b"", -1)
        except BadVersionError:
            created = False
        except MetadataStoreError as exc:
            raise ManagedLedgerError(f"managed ledger {name} cannot be created: {exc}") from exc
        else:
            created = True
        self._add_name(name)
        return created

    async def delete(self, name: str, config: ManagedLedgerConfig | None = None) -> None:
        await self.start()
        ledger = await settled(self._open, name)
        if ledger is not None:
            await ledger.delete()
            return
        path = ml_formats.ledger_path(self.root, name)
        got = await self.store.get(path)
        if got is None:
            raise LedgerNotFoundError(f"no managed ledger named {name!r}")
        info = ml_formats.decode_ledger_info(got.value)
        ledger_ids = [stored.ledger_id for stored in info.ledgers]
        for child in await self.store.get_children(path):
            cursor = await self.store.get(f"{path}/{child}")
            if cursor is not None and cursor.value:  # (a bare parent node is no cursor: see cursor.recover_all)
                cursor_ledger = ml_formats.decode_cursor_info(cursor.value).cursors_ledger_id
                if cursor_ledger != -1:
                    ledger_ids.append(cursor_ledger)
        await self._delete_stored(name, ledger_ids, offload_records(info), offloader_in(config, self.offloader))

    async def _delete_stored(self, name: str, ledger_ids: list[int], offloaded: list[LedgerOffload],
                             offloader: Offloader | None) -> None:
        """Remove a managed ledger's znodes, then its offloaded copies (by ``offloader``) and its ledgers (best
        effort: an orphan is only wasted space)."""
        await self.store.delete_recursive(ml_formats.ledger_path(self.root, name))
        self._discard_name(name)
        await delete_copies(offloader, name, offloaded,
                            partial(asyncio.get_running_loop().run_in_executor, None), self.offload_stats)
        gone = {o.ledger_id for o in offloaded if o.local_deleted}
        ledger_ids = [i for i in ledger_ids if i not in gone]
        for ledger_id in ledger_ids:
            try:
                await self.bk.delete_ledger(ledger_id)
            except NoSuchLedgerError:
                pass
            except BookKeeperError as exc:
                log.warning("%s: ledger %d not deleted: %s", name, ledger_id, exc)

    async def stored_ledgers(self, name: str) -> dict[int, StoredLedger] | None:
        await self.start()
        ledger = await settled(self._open, name)  # (one closing: what it leaves stored)
        if ledger is not None:
            return ledger.stored_ledgers()
        got = await self.store.get(ml_formats.ledger_path(self.root, name))
        if got is None:
            return None
        info = ml_formats.decode_ledger_info(got.value)
        return ledgers_with_copies(((stored.ledger_id, stored.entries or 0) for stored in info.ledgers),
                                   offload_records(info))

    async def stored_info(self, name: str) -> StoredManagedLedgerInfo | None:
        """Pulsar's getManagedLedgerInfo: the managed ledger's znode and its cursors' as stored, with their versions
        and times (an open managed ledger's current state may be ahead of them, as in Pulsar)."""
        await self.start()
        path = ml_formats.ledger_path(self.root, name)
        got = await self.store.get(path, watch_missing=False)
        if got is None:
            return None
        info = ml_formats.decode_ledger_info(got.value)
        uuids = {o.ledger_id: str(o.uuid) for o in offload_records(info)}
        ledgers = [StoredLedgerRow(stored.ledger_id, stored.entries, stored.size, stored.timestamp_ms,
                                   uuids.get(stored.ledger_id)) for stored in info.ledgers]
        cursors: dict[str, StoredCursorState] = {}
        for child in sorted(await self.store.get_children(path)):
            cursor = await self.store.get(f"{path}/{child}", watch_missing=False)
            if cursor is None or not cursor.value:  # (deleted meanwhile; a bare parent node is no cursor)
                continue
            stored = ml_formats.decode_cursor_info(cursor.value)
            cursors[ml_formats.url_decode(child)] = StoredCursorState(
                cursor.stat.version, cursor.stat.creation_time_ms, cursor.stat.modification_time_ms,
                stored.cursors_ledger_id, stored.record)
        return StoredManagedLedgerInfo(got.stat.version, got.stat.creation_time_ms, got.stat.modification_time_ms,
                                       ledgers, cursors, dict(info.properties), info.terminated)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self._opening.close()
        rescans = list(self._rescans.values())
        for task in rescans:
            task.cancel()
        await asyncio.gather(*rescans, return_exceptions=True)
        await self.availability.stop()
        for ledger in list(self._open.values()):
            await ledger.close()
            await ledger.wait_ended()  # (one closing already: its close finishes first)
        if self._owns_client and self._started is not None:
            await self.bk.close()
        if self._owns_store:
            await self.store.close()

    def list_names(self) -> list[str]:
        return sorted(self._names)

    def exists(self, name: str) -> bool:
        return name in self._names

    async def exists_fresh(self, name: str) -> bool:
        """``exists``, reading the metadata store when the name is not known: another broker may have just created
        it, the store's notification not here yet (Pulsar's TopicResources.persistentTopicExists asks the store).
        One found is known from then on, as a notification would have made it (``list_names``, the names
        listeners). A store that cannot be read: the known names' answer."""
        if name in self._names:
            return True
        await self.start()
        try:
            found = await self.store.exists(ml_formats.ledger_path(self.root, name), watch_missing=False)
        except MetadataStoreError as exc:
            log.warning("managed ledger %s not looked up in the metadata store: %s", name, exc)
            return name in self._names
        if found and name not in self._names:
            self._add_name(name)  # (a re-read of its level under way, which may have read before it was made, keeps it)
        return name in self._names

    def _forget(self, ledger: BookKeeperManagedLedger) -> None:
        if self._open.get(ledger.name) is ledger:
            del self._open[ledger.name]
        ledger._ended.set()
