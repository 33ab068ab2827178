"""A ledger's writer: adds acknowledged in entry order, ensemble changes, close (see `client` for the rules)."""

from __future__ import annotations

import asyncio
import enum
import random
from collections import deque
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
from managed_ledger.bookkeeper.protocol import AddRequest, Flag, Response, StatusCode
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
    entry: bytes  # packaged, as sent
    payload_length: int
    future: asyncio.Future[int]
    write_set: list[str]  # its bookies, kept current through ensemble changes
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
        self._requests: set[asyncio.Future[Response]] = set()  # add requests in flight
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
        op = _PendingAdd(self.last_add_pushed, entry, len(payload), future,
                         self.metadata.write_set(self.last_add_pushed))
        self._pending.append(op)
        for bookie_id in op.write_set:
            self._send(op, bookie_id)
        return future

    def _send(self, op: _PendingAdd, bookie_id: str) -> None:
        request = self.bk.bookies.send(bookie_id, AddRequest(self._key, op.entry, self._flags))
        self._requests.add(request)
        request.add_done_callback(partial(self._add_done, op, bookie_id))

    def _add_done(self, op: _PendingAdd, bookie_id: str, request: asyncio.Future[Response]) -> None:
        self._requests.discard(request)
        if request.cancelled():
            return  # the writer stopped
        exc = request.exception()
        # (Any failure of the request, BookieUnavailableError above all, is the bookie's: it is replaced.)
        self._on_add_result(op, bookie_id, None if exc is not None else request.result().status)

    def _on_add_result(self, op: _PendingAdd, bookie_id: str, status: StatusCode | int | None) -> None:
        if bookie_id not in op.write_set:
            return  # this bookie was replaced meanwhile
        if status == StatusCode.EOK:
            if not op.future.done():
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
            if len(head.acked.intersection(head.write_set)) < self.metadata.ack_quorum:
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
        tasks: list[asyncio.Future[Any]] = list(self._requests)
        if self._ensemble_change is not None:
            tasks.append(self._ensemble_change)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def read(self, first: int, last: int) -> list[bytes]:
        """Payloads of this ledger's entries first..last, up to the LAC."""
        return await LedgerReader(self.bk, self.ledger_id, self.metadata, self._password,
                                  self.last_add_confirmed).read(first, last)
