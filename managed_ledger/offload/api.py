"""What a managed ledger asks of an offloader (Pulsar's LedgerOffloader), whichever store it copies to: the
``filesystem`` one (offload.filesystem) or the blob-store ones (offload.blobstore: S3 and its kin).

An offloader's calls block (files, HTTP): the managed ledger runs them in its pool. ``OffloadedSource`` is how the
managed ledger reads a copy from those threads.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Protocol
from uuid import UUID

from managed_ledger.offload.ledger_metadata import OffloadedLedgerMetadata


class OffloadedLedgerError(Exception):
    """An offloaded copy that is missing, unreadable, or not the ledger asked for."""


def check_range(ledger_id: int, first: int, last: int, last_entry_id: int) -> None:
    """A copy's reads are of entries in the ledger (Pulsar's read handles refuse others)."""
    if first < 0 or first > last or last > last_entry_id:
        raise OffloadedLedgerError(f"ledger {ledger_id}: entries {first}..{last} are not in 0..{last_entry_id}")


class CopyWriter(Protocol):
    """One ledger's copy under way: ``append`` its entries in order (as many calls as wanted), then ``finish``
    (the copy is in place, durable) or ``abort`` (nothing is left of it)."""

    def append(self, entries: Iterable[bytes]) -> None: ...

    def finish(self) -> None: ...

    def abort(self) -> None: ...


class OffloadedCopy(Protocol):
    """One offloaded ledger, open for reads."""

    ledger_id: int
    metadata: OffloadedLedgerMetadata

    def read(self, first: int, last: int) -> list[bytes]:
        """Entries ``first`` to ``last`` (inclusive); OffloadedLedgerError outside the ledger or when unreadable."""

    def close(self) -> None: ...


class Offloader(Protocol):
    """Copies closed ledgers to a tier, reads and deletes the copies. ``driver_metadata`` is what each ledger's
    OffloadContext records of it; ``open`` and ``delete`` are given the metadata the copy was made with."""

    @property
    def driver_name(self) -> str:
        """The driver's name as recorded in the OffloadContext, lower case."""

    def reads_driver(self, driver: str) -> bool:
        """Whether the copies a driver of that name (an OffloadContext's) made are this offloader's to read and
        delete."""

    def driver_metadata(self) -> dict[str, str]: ...

    def begin(self, managed_ledger: str, ledger_id: int, uuid: UUID,
              metadata: OffloadedLedgerMetadata) -> CopyWriter: ...

    def open(self, managed_ledger: str, ledger_id: int, uuid: UUID,
             driver_metadata: Mapping[str, str]) -> OffloadedCopy: ...

    def delete(self, managed_ledger: str, ledger_id: int, uuid: UUID, driver_metadata: Mapping[str, str]) -> None:
        """Remove the copy; nothing there is no error."""

    def scan(self) -> Iterator[StoredObject]:
        """Every object (file) the tier holds, whoever wrote it (Pulsar's scanLedgers); OSError when the store
        cannot be listed."""


@dataclass(frozen=True)
class StoredObject:
    """One object of a tier, as a scan finds it (Pulsar's OffloadedLedgerMetadata). ``ledger_id`` and ``uuid`` as
    its name gives them (None: not a copy's name); ``managed_ledger``: whose copy it is when the store says so
    without metadata (a filesystem copy's directory), else None."""

    name: str
    bucket: str
    uri: str
    size: int
    last_modified_ms: int
    user_metadata: Mapping[str, str]
    ledger_id: int | None
    uuid: str | None
    managed_ledger: str | None = None


class OffloadStatsSink(Protocol):
    """Where a managed ledger's offloads, reads of its copies and deletions of copies are counted (Pulsar's
    LedgerOffloaderStats; the broker's keeps brk_ledgeroffloader_*). Called from pool threads too."""

    def offloaded(self, managed_ledger: str, nbytes: int) -> None:
        """Entries written to a copy."""

    def source_read(self, managed_ledger: str, seconds: float) -> None:
        """A read of entries to copy, from the ledger's local copy."""

    def write_failed(self, managed_ledger: str) -> None:
        """Writing a copy failed (the tier's storage)."""

    def offload_failed(self, managed_ledger: str) -> None:
        """A ledger's copy failed."""

    def index_read(self, managed_ledger: str, seconds: float) -> None:
        """A copy opened for reads: its index and metadata read."""

    def copy_read(self, managed_ledger: str, nbytes: int, entries: int, seconds: float) -> None:
        """Entries read from a copy."""

    def copy_read_failed(self, managed_ledger: str) -> None: ...

    def copy_deleted(self, managed_ledger: str, ok: bool) -> None: ...


class OffloadedSource:
    """Reads of one offloaded ledger from the managed ledger's pool threads: opened at the first read, one read at a
    time (a copy's reader seeks)."""

    def __init__(self, offloader: Offloader, managed_ledger: str, ledger_id: int, uuid: UUID,
                 driver_metadata: Mapping[str, str], stats: OffloadStatsSink | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._offloader = offloader
        self._clock = clock
        self._last_used = clock()
        self._managed_ledger = managed_ledger
        self._ledger_id = ledger_id
        self._uuid = uuid
        self._driver_metadata = driver_metadata
        self._stats = stats
        self._lock = threading.Lock()
        self._ledger: OffloadedCopy | None = None
        self._closed = False

    def read(self, first: int, last: int) -> list[bytes]:
        stats, name = self._stats, self._managed_ledger
        with self._lock:
            if self._closed:
                raise OffloadedLedgerError(f"ledger {self._ledger_id}: its offloaded copy is closed")
            try:
                if self._ledger is None:
                    started = time.monotonic()
                    self._ledger = self._offloader.open(name, self._ledger_id, self._uuid, self._driver_metadata)
                    if stats is not None:
                        stats.index_read(name, time.monotonic() - started)
                started = time.monotonic()
                entries = self._ledger.read(first, last)
            except OffloadedLedgerError:
                if stats is not None:
                    stats.copy_read_failed(name)
                raise
            if stats is not None:
                stats.copy_read(name, sum(map(len, entries)), len(entries), time.monotonic() - started)
            self._last_used = self._clock()
            return entries

    def release_if_idle(self, idle_s: float) -> bool:
        """Close the open copy (its buffers, its files) when no read used it for ``idle_s``; the next read opens
        it again. A read under way keeps it (Pulsar's eviction of inactive offloaded ledgers skips those with
        pending reads). Never waits."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            if self._ledger is None or self._clock() - self._last_used < idle_s:
                return False
            self._ledger.close()
            self._ledger = None
            return True
        finally:
            self._lock.release()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._ledger is not None:
                self._ledger.close()
                self._ledger = None
