"""Batched persistence of durable cursor states, shared by the storage implementations that write them somewhere.

Acks are hot, so writes are rate-limited per cursor: at most one per interval (the ledger's mark-delete rate,
else the factory's default: Pulsar's managedLedgerDefaultMarkDeleteRateLimit = 1/s). The limit has a leading
edge, as Pulsar's RateLimiter lets the first acquire through: the first change after a quiet interval is written
at once (on the next loop turn, so changes of the same turn share the write); changes within the interval after a
write wait for its end, and one trailing write then saves the last of them, so the last state is never left
unwritten. A write hands the cursor's whole state to the ledger's ``_write_cursor_state`` (a file replaced
atomically, an entry of a BookKeeper cursor ledger), which calls back when it is durable. One write per cursor is
in flight at a time; changes made meanwhile go into the next one. ``write_now()`` skips the limit (a consumer
closing, a seek); ``flush()`` skips it and waits for a write that includes everything acknowledged before it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Protocol

from managed_ledger.api import ManagedLedgerConfig, ManagedLedgerError
from managed_ledger.cursor_base import CursorRecord
from managed_ledger.stats import AddStats

log = logging.getLogger(__name__)


class PersistingLedger(Protocol):
    """What CursorPersistence needs from its managed ledger."""

    add_stats: AddStats  # (counts the mark-delete writes: Pulsar's MarkDeleteRate)

    @property
    def name(self) -> str: ...

    @property
    def config(self) -> ManagedLedgerConfig: ...

    def _stored_record(self, name: str) -> CursorRecord | None: ...

    def _write_cursor_state(self, name: str, record: CursorRecord,
                            done: Callable[[BaseException | None], None]) -> None:
        """Serialize ``record`` now (on the loop) and make it durable; ``done(None)`` or ``done(error)`` after."""
        ...


@dataclass(eq=False)
class _State:
    """Persistence bookkeeping of one durable cursor (loop-owned)."""

    version: int = 0  # bumped by every change
    persisted: int = 0  # version the file on disk holds
    in_flight: bool = False
    timer: asyncio.Handle | None = None  # (uvloop's call_later(0) gives a plain Handle)
    waiters: list[tuple[int, asyncio.Future[None]]] = field(default_factory=list)
    forgotten: bool = False
    last_write: float = float("-inf")  # loop time the last write started
    urgent: bool = False  # write_now() asked while a write was in flight: the next one starts at once


class CursorPersistence:
    """Writes the durable cursor states of one managed ledger (see the module docstring)."""

    def __init__(self, ledger: PersistingLedger, interval_s: float) -> None:
        self._ledger = ledger
        self._default_interval = interval_s
        self._states: dict[str, _State] = {}

    @property
    def _interval(self) -> float:
        """The longest a change waits before it is written: the ledger's mark-delete rate, else
        the factory's default."""
        rate = self._ledger.config.mark_delete_rate
        if rate is None:
            return self._default_interval
        return 1.0 / rate if rate > 0 else 0.0

    def track(self, name: str, *, dirty: bool) -> None:
        """Start persisting a durable cursor; dirty: its state is not on disk yet."""
        self._states[name] = _State()
        if dirty:
            self.changed(name)

    def changed(self, name: str) -> None:
        state = self._states.get(name)
        if state is None or state.forgotten:
            return
        state.version += 1
        if not state.in_flight and state.timer is None:
            self._arm(name, state, self._wait(state))

    def write_now(self, name: str) -> None:
        """Write the cursor's unsaved changes without waiting for the rate limit (nothing when it has none)."""
        state = self._states.get(name)
        if state is None or state.forgotten or state.version <= state.persisted:
            return
        if state.in_flight:
            state.urgent = True
        else:
            self._cancel(state)
            self._arm(name, state, 0.0)

    def _wait(self, state: _State) -> float:
        """How long a write must wait for the rate limit: none after a quiet interval (the leading edge)."""
        return max(0.0, state.last_write + self._interval - asyncio.get_running_loop().time())

    def _arm(self, name: str, state: _State, delay: float) -> None:
        state.timer = asyncio.get_running_loop().call_later(delay, self._write, name, state)

    def is_dirty(self, name: str) -> bool:
        state = self._states.get(name)
        return state is not None and state.version > state.persisted

    async def flush(self, name: str) -> None:
        """Wait until the state as of now is on disk (ManagedLedgerError if writing failed)."""
        state = self._states.get(name)
        if state is None or state.persisted >= state.version:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        state.waiters.append((state.version, future))
        if not state.in_flight:
            self._write(name, state)
        await future

    async def flush_all(self) -> None:
        """Flush every cursor; failures are logged (used by close)."""
        for name in list(self._states):
            try:
                await self.flush(name)
            except ManagedLedgerError as exc:
                log.error("cursor %s/%s: state not saved: %s", self._ledger.name, name, exc)

    def forget(self, name: str) -> None:
        """Stop persisting (cursor deleted): no write of it starts any more; flush waiters return."""
        state = self._states.pop(name, None)
        if state is None:
            return
        state.forgotten = True
        self._cancel(state)
        for _, future in state.waiters:
            if not future.done():
                future.set_result(None)
        state.waiters.clear()

    def stop(self) -> None:
        """Cancel the timers (the ledger is closing; flush_all ran before)."""
        for state in self._states.values():
            self._cancel(state)
            state.forgotten = True

    @staticmethod
    def _cancel(state: _State) -> None:
        if state.timer is not None:
            state.timer.cancel()
            state.timer = None

    def _write(self, name: str, state: _State) -> None:
        self._cancel(state)
        if state.forgotten or state.in_flight:
            return
        record = self._ledger._stored_record(name)
        if record is None:
            return
        version = state.version
        state.in_flight = True
        state.urgent = False
        state.last_write = asyncio.get_running_loop().time()
        self._ledger.add_stats.mark_delete_ops += 1
        self._ledger._write_cursor_state(name, record, partial(self._written, name, state, version))

    def _written(self, name: str, state: _State, version: int, exc: BaseException | None) -> None:
        state.in_flight = False
        if exc is None:
            state.persisted = max(state.persisted, version)
        else:
            log.warning("cursor %s/%s: writing its state failed (will retry): %s", self._ledger.name, name, exc)
        remaining: list[tuple[int, asyncio.Future[None]]] = []
        for wanted, future in state.waiters:
            if future.done():
                continue
            if wanted <= state.persisted:
                future.set_result(None)
            elif exc is not None and wanted <= version:
                future.set_exception(ManagedLedgerError(f"cursor state of {name} not saved: {exc}"))
            else:
                remaining.append((wanted, future))
        state.waiters = remaining
        if state.forgotten or state.version <= state.persisted:
            return
        if state.waiters:
            self._write(name, state)  # someone is flushing: no delay
        elif state.timer is None:
            self._arm(name, state, 0.0 if state.urgent else self._wait(state))
