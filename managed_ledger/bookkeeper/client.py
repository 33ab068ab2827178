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
import enum
import random
import weakref
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from managed_ledger.bookkeeper.bookie import BookieClient, BookieUnavailableError
from managed_ledger.bookkeeper.bookkeeper_data_formats_pb2 import BookieServiceInfoFormat
from managed_ledger.bookkeeper.digest import (
    INVALID_ENTRY_ID,
    Digester,
    DigestError,
    DigestType,
    EntryFrame,
    master_key,
)
from managed_ledger.bookkeeper.metadata import (
    DEFAULT_LEDGERS_ROOT,
    MAX_SHORT_LEDGER_ID,
    LedgerMetadata,
    LedgerState,
    Segment,
    ledger_path,
    parse,
    sequential_suffix,
    serialize,
)
from managed_ledger.bookkeeper.protocol import (
    LAST_ADD_CONFIRMED,
    AddRequest,
    Flag,
    ReadRequest,
    ReadResponse,
    StatusCode,
)
from managed_ledger.bookkeeper.zk import AsyncZk, BadVersionError, NodeExistsError, NoNodeError, Zk

_MISSING = (StatusCode.ENOENTRY, StatusCode.ENOLEDGER)


class BookKeeperError(Exception):
    """Base of the client's errors."""


class LedgerFencedError(BookKeeperError):
    """Another client fenced (is recovering or recovered) the ledger: this writer may not add any more."""


class LedgerClosedError(BookKeeperError):
    """The ledger is closed (by this writer, or by someone who recovered it)."""


class NoSuchLedgerError(BookKeeperError):
    pass


class NotEnoughBookiesError(BookKeeperError):
    pass


class UnauthorizedError(BookKeeperError):
    """Wrong password for the ledger (or a bookie refused the master key)."""


class EntryReadError(BookKeeperError):
    """No bookie of the entry's write set returned it."""


class MetadataConflictError(BookKeeperError):
    """The ledger's metadata changed in a way this operation cannot accept (e.g. closed at another point)."""


# ---- the client --------------------------------------------------------------------------------------------------


class BookKeeper:
    """Entry point: `async with BookKeeper("127.0.0.1:2181") as bk: lh = await bk.create_ledger(3, 2, 2)`."""

    def __init__(self, zk: str | Zk, ledgers_root: str = DEFAULT_LEDGERS_ROOT) -> None:
        """`zk`: ZooKeeper's "host:port[,host:port...]", or a ready `Zk` (tests)."""
        self.zk: Zk = AsyncZk(zk) if isinstance(zk, str) else zk
        self.root = ledgers_root
        self.bookies = BookieClient()
        # Writers not closed yet: closing the client stops their tasks (their ledgers stay OPEN, as after a crash).
        self._writers: weakref.WeakSet[LedgerWriter] = weakref.WeakSet()

    async def start(self) -> None:
        await self.zk.start()

    async def close(self) -> None:
        for writer in list(self._writers):
            await writer.abandon()
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
        custom_metadata: Iterable[tuple[str, bytes]] = (),
    ) -> LedgerWriter:
        available = await self.writable_bookies()
        if len(available) < ensemble_size:
            raise NotEnoughBookiesError(f"{len(available)} writable bookies, ensemble of {ensemble_size} needed")
        ensemble = tuple(random.sample(available, ensemble_size))
        metadata = LedgerMetadata(ensemble_size, write_quorum, ack_quorum, (Segment(0, ensemble),),
                                  digest_type=digest_type, password=password, custom_metadata=tuple(custom_metadata))
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
        metadata = await _recover(self, ledger_id, metadata, version, password)
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
            errors.append(f"{bookie_id}: {_status_name(response.status)}")
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
            if result.status in _MISSING:
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


def _status_name(status: StatusCode | int) -> str:
    return status.name if isinstance(status, StatusCode) else f"rc={status}"


# ---- reading -----------------------------------------------------------------------------------------------------


class LedgerReader:
    """Reads entries up to `last_add_confirmed` (the last entry of a closed ledger)."""

    def __init__(self, bk: BookKeeper, ledger_id: int, metadata: LedgerMetadata, password: bytes,
                 last_add_confirmed: int) -> None:
        self.bk = bk
        self.ledger_id = ledger_id
        self.metadata = metadata
        self.last_add_confirmed = last_add_confirmed
        self._digester = Digester(metadata.digest_type, password)

    @property
    def length(self) -> int:
        return self.metadata.length

    async def read(self, first: int, last: int) -> list[bytes]:
        """Payloads of entries first..last (inclusive), which must be <= the LAC."""
        if first < 0 or last > self.last_add_confirmed or first > last:
            raise EntryReadError(f"entries {first}..{last} are outside 0..{self.last_add_confirmed}")
        frames = await asyncio.gather(*(self.bk.read_entry(self.ledger_id, self.metadata, self._digester, e)
                                        for e in range(first, last + 1)))
        return [f.payload for f in frames]


# ---- writing -----------------------------------------------------------------------------------------------------


class WriterState(enum.Enum):
    OPEN = "open"
    CLOSING = "closing"
    CLOSED = "closed"
    FAILED = "failed"


@dataclass(eq=False)
class _PendingAdd:
    entry_id: int
    entry: bytes  # packaged, as sent
    payload_length: int
    future: asyncio.Future[int]
    acked: set[str] = field(default_factory=set)


class LedgerWriter:
    """The one writer of a ledger it created (or a recovering reader re-adding entries, `recovery=True`)."""

    def __init__(self, bk: BookKeeper, ledger_id: int, metadata: LedgerMetadata, version: int, password: bytes,
                 *, recovery: bool = False, last_add_confirmed: int = INVALID_ENTRY_ID, length: int = 0) -> None:
        self.bk = bk
        self.ledger_id = ledger_id
        self.metadata = metadata
        self.version = version
        self.state = WriterState.OPEN
        self.last_add_confirmed = last_add_confirmed
        self.last_add_pushed = last_add_confirmed
        self.length = length
        self._recovery = recovery
        self._flags = Flag.RECOVERY_ADD | Flag.HIGH_PRIORITY if recovery else Flag.NONE
        self._digester = Digester(metadata.digest_type, password)
        self._key = master_key(password)
        self._password = password
        self._pending: deque[_PendingAdd] = deque()
        self._tasks: set[asyncio.Task[None]] = set()
        self._failed_bookies: set[str] = set()
        self._ensemble_change: asyncio.Task[None] | None = None
        self._error: BookKeeperError | None = None

    # -- adds --

    async def add_entry(self, payload: bytes) -> int:
        """Append one entry; returns its id once Qa bookies hold it and every earlier entry is acknowledged."""
        return await self.add_entry_nowait(payload)

    def add_entry_nowait(self, payload: bytes) -> asyncio.Future[int]:
        """Start an append; the future completes as `add_entry` does (in entry order)."""
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        if self.state is not WriterState.OPEN:
            future.set_exception(self._error or LedgerClosedError(f"ledger {self.ledger_id} is {self.state.value}"))
            return future
        self.last_add_pushed += 1
        self.length += len(payload)
        entry = self._digester.package(self.ledger_id, self.last_add_pushed, self.last_add_confirmed, self.length,
                                       payload)
        op = _PendingAdd(self.last_add_pushed, entry, len(payload), future)
        self._pending.append(op)
        for bookie_id in self.metadata.write_set(op.entry_id):
            self._send(op, bookie_id)
        return future

    def _send(self, op: _PendingAdd, bookie_id: str) -> None:
        task = asyncio.create_task(self._add_to(op, bookie_id))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _add_to(self, op: _PendingAdd, bookie_id: str) -> None:
        try:
            response = await self.bk.bookies.request(bookie_id, AddRequest(self._key, op.entry, self._flags))
        except BookieUnavailableError:
            self._on_add_result(op, bookie_id, None)
            return
        self._on_add_result(op, bookie_id, response.status)

    def _on_add_result(self, op: _PendingAdd, bookie_id: str, status: StatusCode | int | None) -> None:
        if bookie_id not in self.metadata.write_set(op.entry_id):
            return  # this bookie was replaced meanwhile
        if status == StatusCode.EOK:
            if not op.future.done():
                op.acked.add(bookie_id)
                self._complete_in_order()
        elif status in (StatusCode.EFENCED, StatusCode.EUA):
            self._fail(LedgerFencedError(f"ledger {self.ledger_id} was fenced ({_status_name(status)} from "
                                         f"{bookie_id}): another client recovered it"))
        else:
            # Also after the entry reached Qa elsewhere (then it stays with fewer copies, as in BookKeeper): the
            # bookie is replaced for the entries to come.
            self._bookie_failed(bookie_id)

    def _complete_in_order(self) -> None:
        if self._ensemble_change is not None:
            return  # completions wait until the new ensemble is in place
        while self._pending:
            head = self._pending[0]
            write_set = self.metadata.write_set(head.entry_id)
            if len(head.acked.intersection(write_set)) < self.metadata.ack_quorum:
                return
            self._pending.popleft()
            self.last_add_confirmed = head.entry_id
            if not head.future.done():
                head.future.set_result(head.entry_id)

    def _fail(self, error: BookKeeperError) -> None:
        """Unrecoverable: error out every pending add; the writer takes no more."""
        if self.state in (WriterState.FAILED, WriterState.CLOSED):
            return
        self.state = WriterState.FAILED
        self._error = error
        pending, self._pending = self._pending, deque()
        for op in pending:
            self.length -= op.payload_length
            if not op.future.done():
                op.future.set_exception(error)

    # -- ensemble change --

    def _bookie_failed(self, bookie_id: str) -> None:
        self._failed_bookies.add(bookie_id)
        if self._ensemble_change is None and self.state in (WriterState.OPEN, WriterState.CLOSING):
            self._ensemble_change = asyncio.create_task(self._change_ensemble())

    async def _change_ensemble(self) -> None:
        try:
            while self._failed_bookies.intersection(self.metadata.last_ensemble.ensemble):
                await self._replace_failed_bookies()
        except BookKeeperError as e:
            self._fail(e)
        except BaseException as e:
            self._fail(BookKeeperError(f"ensemble change of ledger {self.ledger_id} failed: {e!r}"))
            if isinstance(e, asyncio.CancelledError):
                raise
        finally:
            self._ensemble_change = None
        self._complete_in_order()

    async def _replace_failed_bookies(self) -> None:
        failed = set(self._failed_bookies)
        current = self.metadata.last_ensemble.ensemble
        candidates = [b for b in await self.bk.writable_bookies() if b not in current and b not in failed]
        to_replace = [b for b in current if b in failed]
        if len(candidates) < len(to_replace):
            raise NotEnoughBookiesError(f"ledger {self.ledger_id}: no bookie to replace {', '.join(to_replace)}")
        replacement = dict(zip(to_replace, random.sample(candidates, len(to_replace)), strict=True))
        first_entry = self.last_add_confirmed + 1
        expected_state = LedgerState.IN_RECOVERY if self._recovery else LedgerState.OPEN

        def needs_update(md: LedgerMetadata) -> bool:
            return md.state == expected_state and bool(failed.intersection(md.last_ensemble.ensemble))

        def transform(md: LedgerMetadata) -> LedgerMetadata:
            ensemble = tuple(replacement.get(b, b) for b in md.last_ensemble.ensemble)
            return md.with_ensemble_from(first_entry, ensemble)

        if self._recovery:
            # A recovering reader keeps its new segments in memory; they are written with the close.
            updated, version = transform(self.metadata), self.version
        else:
            updated, version = await self.bk.update_metadata(self.ledger_id, self.metadata, self.version,
                                                             needs_update, transform)
        if updated.state != expected_state:
            if updated.state == LedgerState.CLOSED:
                raise LedgerClosedError(f"ledger {self.ledger_id} was closed by another client")
            raise LedgerFencedError(f"ledger {self.ledger_id} is being recovered by another client")
        self.metadata, self.version = updated, version
        self._failed_bookies -= failed
        # Every unacknowledged entry goes to the bookies that now hold its place in the write set.
        for op in self._pending:
            write_set = updated.write_set(op.entry_id)
            op.acked.intersection_update(write_set)
            for bookie_id in write_set:
                if bookie_id in replacement.values() and bookie_id not in op.acked:
                    self._send(op, bookie_id)

    # -- close --

    async def close(self) -> None:
        """Wait for pending adds, then CAS the metadata to CLOSED at the LAC."""
        if self.state is WriterState.CLOSED:
            return
        if self.state is WriterState.FAILED:
            await self._cancel_tasks()
            return
        self.state = WriterState.CLOSING
        if self._pending:
            await asyncio.gather(*(op.future for op in list(self._pending)), return_exceptions=True)
        if self.state is WriterState.FAILED:
            await self._cancel_tasks()
            assert self._error is not None
            raise self._error
        last, length = self.last_add_confirmed, self.length
        expected_state = LedgerState.IN_RECOVERY if self._recovery else LedgerState.OPEN

        def needs_update(md: LedgerMetadata) -> bool:
            if md.state == LedgerState.CLOSED:
                if (md.last_entry_id, md.length) != (last, length):
                    raise MetadataConflictError(f"ledger {self.ledger_id} was closed at {md.last_entry_id} by "
                                                f"another client, this writer is at {last}")
                return False
            if md.state != expected_state:
                raise LedgerFencedError(f"ledger {self.ledger_id} is being recovered by another client")
            return True

        def transform(md: LedgerMetadata) -> LedgerMetadata:
            if self._recovery:  # ensemble changes made during recovery live only in memory until now
                md = replace(md, segments=self.metadata.segments)
            return md.closed(last, length)

        try:
            self.metadata, self.version = await self.bk.update_metadata(self.ledger_id, self.metadata, self.version,
                                                                        needs_update, transform)
        finally:
            self.state = WriterState.CLOSED
            await self._cancel_tasks()

    async def abandon(self) -> None:
        """Stop without closing the ledger (as a crashed writer would): pending adds fail, tasks end."""
        self._fail(LedgerClosedError(f"the client writing ledger {self.ledger_id} was closed"))
        await self._cancel_tasks()

    async def _cancel_tasks(self) -> None:
        self.bk._writers.discard(self)
        tasks = list(self._tasks)
        if self._ensemble_change is not None:
            tasks.append(self._ensemble_change)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def read(self, first: int, last: int) -> list[bytes]:
        """Payloads of this ledger's entries first..last, up to the LAC."""
        return await LedgerReader(self.bk, self.ledger_id, self.metadata, self._password,
                                  self.last_add_confirmed).read(first, last)


# ---- recovery ----------------------------------------------------------------------------------------------------


async def _recover(bk: BookKeeper, ledger_id: int, metadata: LedgerMetadata, version: int,
                   password: bytes) -> LedgerMetadata:
    """Fence an OPEN (or IN_RECOVERY) ledger and close it at its last recoverable entry; returns the metadata."""
    metadata, version = await bk.update_metadata(
        ledger_id, metadata, version, lambda md: md.state == LedgerState.OPEN,
        lambda md: md.with_state(LedgerState.IN_RECOVERY))
    if metadata.is_closed:
        return metadata  # closed by its writer or another recoverer meanwhile
    lac, _ = await bk._read_last_add_confirmed(ledger_id, metadata, password, fence=True)
    lac = max(lac, metadata.last_ensemble.first_entry_id - 1)
    digester = Digester(metadata.digest_type, password)
    key = master_key(password)
    length = 0
    if lac >= 0:
        length = (await bk.read_entry(ledger_id, metadata, digester, lac)).length
    writer = LedgerWriter(bk, ledger_id, metadata, version, password, recovery=True, last_add_confirmed=lac,
                          length=length)
    needed_missing = metadata.write_quorum - metadata.ack_quorum + 1
    entry_id = lac + 1
    while True:
        frame = await _recovery_read(bk, ledger_id, writer.metadata, digester, key, entry_id, needed_missing)
        if frame is None:
            break
        # Re-add it with the recovery flag (fenced bookies accept it), so it reaches a full write quorum.
        await writer.add_entry(frame.payload)
        entry_id += 1
    await writer.close()
    return writer.metadata


async def _recovery_read(bk: BookKeeper, ledger_id: int, metadata: LedgerMetadata, digester: Digester, key: bytes,
                         entry_id: int, needed_missing: int) -> EntryFrame | None:
    """The entry, or None once enough bookies of its write set (Qw - Qa + 1) say they do not have it.

    A single "no such entry" is not enough: the entry may have reached Qa other bookies and been acknowledged.
    """
    write_set = metadata.write_set(entry_id)
    request = ReadRequest(ledger_id, entry_id, Flag.DO_FENCING | Flag.HIGH_PRIORITY, key)
    results = await asyncio.gather(*(bk.bookies.request(b, request) for b in write_set), return_exceptions=True)
    missing = 0
    for result in results:
        if isinstance(result, BookieUnavailableError):
            continue
        if isinstance(result, BaseException):
            raise result
        assert isinstance(result, ReadResponse)
        if result.status == StatusCode.EOK:
            with contextlib.suppress(DigestError):
                return digester.verify(result.entry, ledger_id, entry_id)
        elif result.status in _MISSING:
            missing += 1
    if missing >= needed_missing:
        return None
    raise BookKeeperError(f"ledger {ledger_id} entry {entry_id}: cannot tell whether it exists "
                          f"({missing} of {len(write_set)} bookies said missing, {needed_missing} needed)")
