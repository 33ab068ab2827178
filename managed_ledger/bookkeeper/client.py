"""An asyncio BookKeeper client: create, write, read, close and recover ledgers on real bookies.

Metadata lives in ZooKeeper in BookKeeper's own format and layout (`metadata`), so BookKeeper's tools and Java clients
(Pulsar's brokers) read what this client writes, and the other way round. Every metadata change is a compare-and-set
loop on the znode version: re-read on conflict and decide again on the fresh copy (BookKeeper's MetadataUpdateLoop).

Writing (`LedgerWriter`): entry e goes to the write set, ensemble indices (e + i) % E for i < Qw, and is acknowledged
once Qa bookies of that set confirmed it. Acknowledgements reach the application strictly in entry order; the LAC
(last add confirmed) only advances over a contiguous acknowledged prefix, and every entry carries the LAC at the
time it was sent, which is how readers learn how far they may read. A bookie failing a write is replaced by an
ensemble change: a new segment from LAC + 1 with a replacement bookie (CAS only while the ledger is OPEN and the
failed bookie still in its last segment), then every unacknowledged entry is sent to the replacement.
A fenced answer (another client recovered the ledger) fails the writer for good.

Recovery open (`open_ledger(recover=True)`), what a new owner does before trusting a ledger: CAS OPEN -> IN_RECOVERY,
fence the last ensemble (a fencing read of entry -1 on every bookie; from then on the old writer's adds fail), take
the highest LAC the bookies report, read forward from there while entries exist (re-adding each with the recovery
flag, so it reaches a full write quorum), then CAS IN_RECOVERY -> CLOSED at the last entry found.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import weakref
from collections.abc import Callable, Iterable

from managed_ledger.bookkeeper.bookie import BookieClient, BookieUnavailableError
from managed_ledger.bookkeeper.bookkeeper_data_formats_pb2 import BookieServiceInfoFormat
from managed_ledger.bookkeeper.digest import INVALID_ENTRY_ID, Digester, DigestError, DigestType, EntryFrame, master_key
from managed_ledger.bookkeeper.errors import (
    BookKeeperError,
    EntryReadError,
    LedgerClosedError,
    LedgerFencedError,
    MetadataConflictError,
    NoSuchLedgerError,
    NotEnoughBookiesError,
    UnauthorizedError,
    status_name,
)
from managed_ledger.bookkeeper.metadata import (
    DEFAULT_LEDGERS_ROOT,
    MAX_SHORT_LEDGER_ID,
    LedgerMetadata,
    Segment,
    ledger_path,
    parse,
    sequential_suffix,
    serialize,
)
from managed_ledger.bookkeeper.placement import (
    PLACEMENT_POLICY_CONFIG_KEY,
    PULSAR_DEFAULT_PLACEMENT,
    IsolationGroups,
    PlacementPolicy,
    isolation_excluded,
    new_ensemble,
    replacement_bookie,
)
from managed_ledger.bookkeeper.protocol import LAST_ADD_CONFIRMED, Flag, ReadRequest, ReadResponse, StatusCode
from managed_ledger.bookkeeper.racks import BookieRacks
from managed_ledger.bookkeeper.reader import LedgerReader
from managed_ledger.bookkeeper.recovery import MISSING, recover_ledger
from managed_ledger.bookkeeper.writer import LedgerWriter, WriterState
from managed_ledger.bookkeeper.zk import AsyncZk, BadVersionError, NodeExistsError, NoNodeError, Zk

__all__ = [
    "BookKeeper",
    "BookKeeperError",
    "EntryReadError",
    "LedgerClosedError",
    "LedgerFencedError",
    "LedgerReader",
    "LedgerWriter",
    "MetadataConflictError",
    "NoSuchLedgerError",
    "NotEnoughBookiesError",
    "UnauthorizedError",
    "WriterState",
]


# ---- the client --------------------------------------------------------------------------------------------------


class BookKeeper:
    """Entry point: `async with BookKeeper("127.0.0.1:2181") as bk: lh = await bk.create_ledger(3, 2, 2)`."""

    def __init__(self, zk: str | Zk, ledgers_root: str = DEFAULT_LEDGERS_ROOT, *,
                 placement: PlacementPolicy = PULSAR_DEFAULT_PLACEMENT, rng: random.Random | None = None,
                 isolation: IsolationGroups | None = None) -> None:
        """`zk`: ZooKeeper's "host:port[,host:port...]", or a ready `Zk` (tests). `placement`: how ensembles are
        chosen (rack-aware by default, as Pulsar's brokers: see `placement`); `racks` holds the racks in force
        (none until set or followed: ensembles are then random picks of writable bookies). `rng`: the placements'
        randomness (tests seed it). `isolation`: the bookie isolation groups of every ledger created without groups
        of its own (Pulsar's bookkeeperClientIsolationGroups; None: every writable bookie)."""
        self.zk: Zk = AsyncZk(zk) if isinstance(zk, str) else zk
        self.root = ledgers_root
        self.bookies = BookieClient()
        self.placement = placement
        self.racks = BookieRacks()
        self.rng = rng if rng is not None else random.Random()
        self.isolation = isolation
        # Writers not closed yet: closing the client stops their tasks (their ledgers stay OPEN, as after a crash).
        self._writers: weakref.WeakSet[LedgerWriter] = weakref.WeakSet()

    async def start(self) -> None:
        await self.zk.start()

    async def close(self) -> None:
        for writer in list(self._writers):
            await writer.abandon()
        await self.racks.close()
        await self.bookies.close()
        await self.zk.close()

    async def __aenter__(self) -> BookKeeper:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- discovery and ids --

    async def writable_bookies(self) -> list[str]:
        """Bookie ids registered writable: children of <root>/available except the `readonly` folder."""
        available = f"{self.root}/available"
        ids = [c for c in await self.zk.children(available) if c != "readonly"]
        for bookie_id in ids:
            if bookie_id not in self.bookies.addresses:
                with contextlib.suppress(NoNodeError):
                    data, _ = await self.zk.get(f"{available}/{bookie_id}")
                    address = _rpc_address(data)
                    if address is not None:
                        self.bookies.addresses[bookie_id] = address
        return ids

    async def read_only_bookies(self) -> list[str]:
        """Bookie ids registered read-only: children of <root>/available/readonly. A bookie whose ledger disks are
        over its ``diskUsageThreshold`` (with ``readOnlyModeEnabled``, the default) moves its registration there and
        answers adds with EREADONLY; it is never chosen for an ensemble (see `writable_bookies`)."""
        try:
            return await self.zk.children(f"{self.root}/available/readonly")
        except NoNodeError:
            return []

    # -- placement --

    def _rack_aware(self, isolated: bool = False) -> bool:
        """Whether ensembles are placed by rack: the policy is on (always, for a ledger with isolation groups:
        Pulsar's IsolatedBookieEnsemblePlacementPolicy is a RackawareEnsemblePlacementPolicy) and some bookie has a
        rack (or the minimum is enforced, which then fails with no racks, as Pulsar's does); otherwise random
        picks."""
        return (self.placement.rack_aware or isolated) and (bool(self.racks.map) or self.placement.enforce_min_racks)

    def isolated_bookies(self, writable: list[str], ensemble_size: int,
                         isolation: IsolationGroups | None) -> list[str]:
        """The `writable` bookies a ledger of `ensemble_size` with `isolation` groups (None: the client's) may use:
        those IsolatedBookieEnsemblePlacementPolicy does not exclude (see `placement.isolation_excluded`), from the
        racks-info groups in force."""
        groups = isolation if isolation is not None else self.isolation
        if groups is None:
            return writable
        excluded = isolation_excluded(groups, self.racks.configuration, writable, ensemble_size)
        return [b for b in writable if b not in excluded] if excluded else writable

    def rack_of(self, bookie_id: str) -> str:
        address = self.bookies.addresses.get(bookie_id)
        return self.racks.map.rack_of(bookie_id, None if address is None else f"{address[0]}:{address[1]}")

    def replacements(self, ensemble: tuple[str, ...], failed: set[str], candidates: list[str], *,
                     isolated: bool = False) -> dict[str, str]:
        """A writable bookie from `candidates` (bookies not in `ensemble`, none failed, none its isolation groups
        exclude) for each failed bookie of `ensemble`, each chosen as the placement policy says (one after the
        other, as BookKeeper's ensemble change replaces them); raises NotEnoughBookiesError."""
        to_replace = [b for b in ensemble if b in failed]
        if not self._rack_aware(isolated):
            if len(candidates) < len(to_replace):
                raise NotEnoughBookiesError(f"no bookie to replace {', '.join(to_replace)}")
            return dict(zip(to_replace, self.rng.sample(candidates, len(to_replace)), strict=True))
        replacement: dict[str, str] = {}
        current = list(ensemble)
        for bookie in to_replace:
            left = [b for b in candidates if b not in replacement.values()]
            chosen = replacement_bookie(left, self.rack_of, current, bookie, self.placement, self.rng)
            replacement[bookie] = chosen
            current[current.index(bookie)] = chosen
        return replacement

    async def new_ledger_id(self) -> int:
        """BookKeeper's id scheme: an ephemeral sequential znode's number, long ids once idgen-long exists."""
        if await self.zk.exists(f"{self.root}/idgen-long") is not None:
            return await self._new_long_ledger_id()
        path = await self.zk.create(f"{self.root}/idgen/ID-", ephemeral=True, sequence=True, makepath=True)
        with contextlib.suppress(NoNodeError):
            await self.zk.delete(path)
        ledger_id = sequential_suffix(path)
        if ledger_id < 0 or ledger_id >= MAX_SHORT_LEDGER_ID:
            return await self._new_long_ledger_id()
        return ledger_id

    async def _new_long_ledger_id(self) -> int:
        base = f"{self.root}/idgen-long"
        while True:
            hobs = []
            with contextlib.suppress(NoNodeError):
                hobs = [sequential_suffix(c, "HOB-") for c in await self.zk.children(base) if c.startswith("HOB-")]
            hob = max(hobs, default=0)
            if hob == 0:
                hob = 1
                with contextlib.suppress(NodeExistsError):
                    await self.zk.create(f"{base}/HOB-{hob:010d}", makepath=True)
            path = await self.zk.create(f"{base}/HOB-{hob:010d}/ID-", ephemeral=True, sequence=True)
            with contextlib.suppress(NoNodeError):
                await self.zk.delete(path)
            low = sequential_suffix(path)
            if 0 <= low < MAX_SHORT_LEDGER_ID:
                return (hob << 32) | low
            with contextlib.suppress(NodeExistsError):  # this high half is used up: start the next one
                await self.zk.create(f"{base}/HOB-{hob + 1:010d}")

    # -- metadata --

    async def read_metadata(self, ledger_id: int) -> tuple[LedgerMetadata, int]:
        try:
            data, stat = await self.zk.get(ledger_path(ledger_id, self.root))
        except NoNodeError:
            raise NoSuchLedgerError(f"ledger {ledger_id} does not exist") from None
        return parse(data, stat.ctime), stat.version

    async def update_metadata(
        self, ledger_id: int, metadata: LedgerMetadata, version: int,
        needs_update: Callable[[LedgerMetadata], bool], transform: Callable[[LedgerMetadata], LedgerMetadata],
    ) -> tuple[LedgerMetadata, int]:
        """CAS loop: while `needs_update(current)`, write `transform(current)`; on conflict re-read, decide again."""
        while needs_update(metadata):
            updated = transform(metadata)
            try:
                stat = await self.zk.set(ledger_path(ledger_id, self.root), serialize(updated), version)
            except BadVersionError:
                metadata, version = await self.read_metadata(ledger_id)
                continue
            except NoNodeError:
                raise NoSuchLedgerError(f"ledger {ledger_id} was deleted") from None
            return updated, stat.version
        return metadata, version

    # -- ledgers --

    async def create_ledger(
        self, ensemble_size: int, write_quorum: int, ack_quorum: int, *,
        digest_type: DigestType = DigestType.CRC32C, password: bytes = b"",
        custom_metadata: Iterable[tuple[str, bytes]] = (), isolation: IsolationGroups | None = None,
    ) -> LedgerWriter:
        """`isolation`: the ledger's own bookie isolation groups (a namespace's bookie affinity group), recorded in
        its custom metadata as Pulsar's brokers record them (EnsemblePlacementPolicyConfig), so that its ensemble
        changes keep to them; None: the client's groups, if any."""
        custom_metadata = tuple(custom_metadata)
        if isolation is not None:
            custom_metadata = (*custom_metadata, (PLACEMENT_POLICY_CONFIG_KEY, isolation.encode()))
        groups = isolation if isolation is not None else self.isolation
        available = self.isolated_bookies(await self.writable_bookies(), ensemble_size, groups)
        if self._rack_aware(groups is not None):
            ensemble = tuple(new_ensemble(available, self.rack_of, ensemble_size, write_quorum, self.placement,
                                          self.rng))
        else:
            if len(available) < ensemble_size:
                raise NotEnoughBookiesError(f"{len(available)} writable bookies, ensemble of {ensemble_size} needed")
            ensemble = tuple(self.rng.sample(available, ensemble_size))
        metadata = LedgerMetadata(ensemble_size, write_quorum, ack_quorum, (Segment(0, ensemble),),
                                  digest_type=digest_type, password=password, custom_metadata=custom_metadata)
        while True:
            ledger_id = await self.new_ledger_id()
            try:
                await self.zk.create(ledger_path(ledger_id, self.root), serialize(metadata), makepath=True)
            except NodeExistsError:
                continue  # taken by another client's generator: take a new id
            writer = LedgerWriter(self, ledger_id, metadata, 0, password)
            self._writers.add(writer)
            return writer

    async def open_ledger(self, ledger_id: int, password: bytes = b"", *, recover: bool = True) -> LedgerReader:
        """Open for reading. With `recover` (what a new owner does): fence the ledger and close it where it ends."""
        metadata, version = await self.read_metadata(ledger_id)
        if metadata.password != password:
            raise UnauthorizedError(f"wrong password for ledger {ledger_id}")
        if metadata.is_closed:
            return LedgerReader(self, ledger_id, metadata, password, metadata.last_entry_id)
        if not recover:
            lac, _ = await self._read_last_add_confirmed(ledger_id, metadata, password, fence=False)
            return LedgerReader(self, ledger_id, metadata, password, lac)
        metadata = await recover_ledger(self, ledger_id, metadata, version, password)
        return LedgerReader(self, ledger_id, metadata, password, metadata.last_entry_id)

    async def delete_ledger(self, ledger_id: int) -> None:
        """Delete the metadata znode (bookies garbage-collect the data later) and the empty parent znodes."""
        path = ledger_path(ledger_id, self.root)
        try:
            await self.zk.delete(path)
        except NoNodeError:
            raise NoSuchLedgerError(f"ledger {ledger_id} does not exist") from None
        parent = path.rsplit("/", 1)[0]
        while parent != self.root:
            try:
                await self.zk.delete(parent)
            except Exception:  # not empty (or gone): stop climbing
                return
            parent = parent.rsplit("/", 1)[0]

    # -- reads shared by readers, writers and recovery --

    async def read_entry(self, ledger_id: int, metadata: LedgerMetadata, digester: Digester, entry_id: int,
                         flags: Flag = Flag.NONE, key: bytes | None = None) -> EntryFrame:
        """Try the entry's write set in order; a bookie without it or failing sends us to the next one."""
        errors = []
        for bookie_id in metadata.write_set(entry_id):
            try:
                response = await self.bookies.request(bookie_id, ReadRequest(ledger_id, entry_id, flags, key))
            except BookieUnavailableError as e:
                errors.append(str(e))
                continue
            assert isinstance(response, ReadResponse)
            if response.status == StatusCode.EOK:
                try:
                    return digester.verify(response.entry, ledger_id, entry_id)
                except DigestError as e:
                    errors.append(f"{bookie_id}: {e}")
                    continue
            errors.append(f"{bookie_id}: {status_name(response.status)}")
        raise EntryReadError(f"ledger {ledger_id} entry {entry_id}: {'; '.join(errors)}")

    async def _read_last_add_confirmed(self, ledger_id: int, metadata: LedgerMetadata, password: bytes,
                                       fence: bool) -> tuple[int, int]:
        """(LAC, length at the entry holding it) from a READ of entry -1 on every bookie of the last segment.

        With `fence`, the read also fences the ledger on each bookie. Enough answers are needed to be sure no write
        quorum can still acknowledge the old writer: in every write quorum at least Qw - Qa + 1 bookies must have
        answered OK / no-such-entry / no-such-ledger.
        """
        digester = Digester(metadata.digest_type, password)
        key = master_key(password)
        ensemble = metadata.last_ensemble.ensemble
        flags = Flag.DO_FENCING if fence else Flag.NONE
        results = await asyncio.gather(
            *(self.bookies.request(b, ReadRequest(ledger_id, LAST_ADD_CONFIRMED, flags, key if fence else None))
              for b in ensemble),
            return_exceptions=True,
        )
        answered = [False] * len(ensemble)
        best = (INVALID_ENTRY_ID, 0)
        for index, result in enumerate(results):
            if isinstance(result, BookieUnavailableError):
                continue
            if isinstance(result, BaseException):
                raise result
            assert isinstance(result, ReadResponse)
            if result.status == StatusCode.EUA:
                raise UnauthorizedError(f"bookie {ensemble[index]} refused the master key of ledger {ledger_id}")
            if result.status in MISSING:
                answered[index] = True
            elif result.status == StatusCode.EOK:
                try:
                    frame = digester.verify(result.entry, ledger_id, None)
                except DigestError:
                    continue  # BookKeeper ignores such an answer
                answered[index] = True
                best = max(best, (frame.last_add_confirmed, frame.length))
        needed = metadata.write_quorum - metadata.ack_quorum + 1
        size = metadata.ensemble_size
        for start in range(size):
            if sum(answered[(start + j) % size] for j in range(metadata.write_quorum)) < needed:
                raise BookKeeperError(f"ledger {ledger_id}: too few bookies answered the LAC read "
                                      f"(answered {answered}, {needed} per write quorum needed)")
        return best


def _rpc_address(registration: bytes) -> tuple[str, int] | None:
    """The `bookie-rpc` endpoint a bookie publishes in its registration znode, if any."""
    if not registration:
        return None
    info = BookieServiceInfoFormat()
    try:
        info.ParseFromString(registration)
    except Exception:
        return None
    for endpoint in info.endpoints:
        if endpoint.protocol == "bookie-rpc":
            return endpoint.host, endpoint.port
    return None
