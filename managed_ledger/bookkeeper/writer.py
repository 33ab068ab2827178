"""A ledger's writer: adds acknowledged in entry order, ensemble changes, close (see `client` for the rules)."""

from __future__ import annotations

import asyncio
import enum
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING, Any

from managed_ledger.bookkeeper.digest import INVALID_ENTRY_ID, Digester, master_key
from managed_ledger.bookkeeper.errors import (
    BookKeeperError,
    LedgerClosedError,
    LedgerFencedError,
    MetadataConflictError,
    NotEnoughBookiesError,
    status_name,
)
from managed_ledger.bookkeeper.metadata import LedgerMetadata, LedgerState
from managed_ledger.bookkeeper.placement import IsolationGroups
from managed_ledger.bookkeeper.protocol import AddFrames, Flag, Response, StatusCode
from managed_ledger.bookkeeper.reader import LedgerReader

if TYPE_CHECKING:
    from managed_ledger.bookkeeper.client import BookKeeper


class WriterState(enum.Enum):
    OPEN = "open"
    CLOSING = "closing"
    CLOSED = "closed"
    FAILED = "failed"


@dataclass(eq=False)
class _PendingAdd:
    entry_id: int
    frame: bytes  # the ADD request as sent (the same bytes to every bookie of its write set)
    payload_length: int
    done: AddDone  # called once: (entry id, None) when acknowledged in order, or (-1, the error)
    write_set: Sequence[str]  # its bookies, kept current through ensemble changes
    acked: set[str] = field(default_factory=set)  # always within write_set


# Told the outcome of one add: (its entry id, None) once acknowledged in entry order, or (-1, the error).
AddDone = Callable[[int, "BaseException | None"], None]


def _settle(future: asyncio.Future[int], entry_id: int, error: BaseException | None) -> None:
    if not future.done():
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(entry_id)


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
        self._frames = AddFrames(master_key(password), self._flags)
        self._password = password
        self._pending: deque[_PendingAdd] = deque()  # in entry order, consecutive ids
        self._waiters: dict[str, Callable[[int, Response | None, Exception | None], None]] = {}  # per bookie
        self._write_sets: tuple[LedgerMetadata | None, int, list[tuple[str, ...]]] = (None, 0, [])
        self._failed_bookies: set[str] = set()
        self._ensemble_change: asyncio.Task[None] | None = None
        self._error: BookKeeperError | None = None
        self._drained: asyncio.Future[None] | None = None  # close() waits for _pending to empty

    # -- adds --

    async def add_entry(self, payload: bytes) -> int:
        """Append one entry; returns its id once Qa bookies hold it and every earlier entry is acknowledged."""
        return await self.add_entry_nowait(payload)

    def add_entry_nowait(self, payload: bytes) -> asyncio.Future[int]:
        """Start an append; the future completes as `add_entry` does (in entry order)."""
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.add_entry_then(payload, partial(_settle, future))
        return future

    def add_entry_then(self, payload: bytes, done: AddDone) -> None:
        """Start an append; ``done`` is called as `add_entry` returns (in entry order), or with the error (on a
        later loop iteration if the writer is not open now). No future, no loop callback: the publish path."""
        if self.state is not WriterState.OPEN:
            error = self._error or LedgerClosedError(f"ledger {self.ledger_id} is {self.state.value}")
            asyncio.get_running_loop().call_soon(done, -1, error)
            return
        self.last_add_pushed += 1
        self.length += len(payload)
        entry_id = self.last_add_pushed
        head = self._digester.head(self.ledger_id, entry_id, self.last_add_confirmed, self.length, payload)
        op = _PendingAdd(entry_id, self._frames.frame(head, payload), len(payload), done, self._write_set(entry_id))
        self._pending.append(op)
        for bookie_id in op.write_set:
            self._send(op, bookie_id)

    def _write_set(self, entry_id: int) -> Sequence[str]:
        """`metadata.write_set`, from the write sets of the last segment computed once per ensemble."""
        metadata, first, sets = self._write_sets
        if metadata is not self.metadata:
            metadata = self.metadata
            ensemble = metadata.last_ensemble.ensemble
            size = metadata.ensemble_size
            sets = [tuple(ensemble[(e + i) % size] for i in range(metadata.write_quorum)) for e in range(size)]
            self._write_sets = metadata, metadata.last_ensemble.first_entry_id, sets
            first = metadata.last_ensemble.first_entry_id
        if entry_id < first:
            return metadata.write_set(entry_id)
        return sets[entry_id % len(sets)]

    def _send(self, op: _PendingAdd, bookie_id: str) -> None:
        waiter = self._waiters.get(bookie_id)
        if waiter is None:
            waiter = self._waiters[bookie_id] = partial(self._add_answered, bookie_id)
        self.bk.bookies.send_add(bookie_id, self.ledger_id, op.entry_id, op.frame, waiter)

    def _add_answered(self, bookie_id: str, entry_id: int, response: Response | None, error: Exception | None
                      ) -> None:
        # (Any failure of the request, BookieUnavailableError above all, is the bookie's: it is replaced.)
        status = None if response is None else response.status
        pending = self._pending
        index = entry_id - pending[0].entry_id if pending else -1
        if 0 <= index < len(pending):
            self._on_add_result(pending[index], bookie_id, status)
        elif status != StatusCode.EOK and self.state in (WriterState.OPEN, WriterState.CLOSING):
            # An entry acknowledged (by Qa others) or failed already: only a failure still counts.
            self._on_add_result(None, bookie_id, status)

    def _on_add_result(self, op: _PendingAdd | None, bookie_id: str, status: StatusCode | int | None) -> None:
        if op is not None and bookie_id not in op.write_set:
            return  # this bookie was replaced meanwhile
        if status == StatusCode.EOK:
            if op is not None:  # (in _pending: not acknowledged yet)
                op.acked.add(bookie_id)
                self._complete_in_order()
        elif status in (StatusCode.EFENCED, StatusCode.EUA):
            self._fail(LedgerFencedError(f"ledger {self.ledger_id} was fenced ({status_name(status)} from "
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
            if len(head.acked) < self.metadata.ack_quorum:
                return
            self._pending.popleft()
            self.last_add_confirmed = head.entry_id
            head.done(head.entry_id, None)
        if self._drained is not None:
            self._drained.set_result(None)
            self._drained = None

    def _fail(self, error: BookKeeperError) -> None:
        """Unrecoverable: error out every pending add; the writer takes no more."""
        if self.state in (WriterState.FAILED, WriterState.CLOSED):
            return
        self.state = WriterState.FAILED
        self._error = error
        pending, self._pending = self._pending, deque()
        for op in pending:
            self.length -= op.payload_length
            op.done(-1, error)
        if self._drained is not None:
            self._drained.set_result(None)
            self._drained = None

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
        # (The ledger's isolation groups, from its custom metadata, else the client's: Pulsar's
        # IsolatedBookieEnsemblePlacementPolicy.replaceBookie excludes the same bookies as newEnsemble.)
        isolation = IsolationGroups.of_ledger(self.metadata.custom_metadata) or self.bk.isolation
        writable = self.bk.isolated_bookies(await self.bk.writable_bookies(), self.metadata.ensemble_size, isolation)
        candidates = [b for b in writable if b not in current and b not in failed]
        try:
            replacement = self.bk.replacements(current, failed, candidates, isolated=isolation is not None)
        except NotEnoughBookiesError as exc:
            raise NotEnoughBookiesError(f"ledger {self.ledger_id}: {exc}") from None
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
            write_set = op.write_set = updated.write_set(op.entry_id)
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
            if self._drained is None:
                self._drained = asyncio.get_running_loop().create_future()
            await asyncio.shield(self._drained)  # until every pending add is acknowledged, or the writer failed
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

    async def close_failed(self, last_entry_id: int, length: int) -> None:
        """After an add failed for good (not fenced): close the ledger at ``last_entry_id`` (at most the LAC: the
        end of what the caller acknowledged to its own clients), as BookKeeper's handle closes itself at its LAC
        after an unrecoverable add error. LedgerFencedError if another client is recovering or closed it."""
        if self.state is not WriterState.FAILED:
            raise BookKeeperError(f"ledger {self.ledger_id}: close_failed on a {self.state.value} writer")
        if last_entry_id > self.last_add_confirmed:
            raise ValueError(f"ledger {self.ledger_id}: cannot close at {last_entry_id}, past the LAC "
                             f"{self.last_add_confirmed}")
        await self._cancel_tasks()

        def needs_update(md: LedgerMetadata) -> bool:
            if md.state == LedgerState.CLOSED:
                if (md.last_entry_id, md.length) != (last_entry_id, length):
                    raise LedgerFencedError(f"ledger {self.ledger_id} was closed at {md.last_entry_id} by another "
                                            "client")
                return False
            if md.state != LedgerState.OPEN:
                raise LedgerFencedError(f"ledger {self.ledger_id} is being recovered by another client")
            return True

        self.metadata, self.version = await self.bk.update_metadata(
            self.ledger_id, self.metadata, self.version, needs_update, lambda md: md.closed(last_entry_id, length))
        self.state = WriterState.CLOSED
        self.last_add_confirmed, self.length = last_entry_id, length

    async def abandon(self) -> None:
        """Stop without closing the ledger (as a crashed writer would): pending adds fail, tasks end."""
        self._fail(LedgerClosedError(f"the client writing ledger {self.ledger_id} was closed"))
        await self._cancel_tasks()

    async def _cancel_tasks(self) -> None:
        self.bk._writers.discard(self)
        # (Requests still in flight are answered to a writer that ignores them: its _pending is empty.)
        tasks: list[asyncio.Future[Any]] = []
        if self._ensemble_change is not None:
            tasks.append(self._ensemble_change)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def read(self, first: int, last: int) -> list[bytes]:
        """Payloads of this ledger's entries first..last, up to the LAC."""
        return await LedgerReader(self.bk, self.ledger_id, self.metadata, self._password,
                                  self.last_add_confirmed).read(first, last)
