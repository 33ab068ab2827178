"""A free-space floor for the file ledger's data directory (BookKeeper's ``diskUsageThreshold``).

A bookie turns read-only before its disk is completely full, so that what must still be written
(metadata, cursor positions, compaction) fits, and turns writable again below a low-water mark.
The file ledger does the same with its data directory: new entries are refused while the file
system holding it is at or above ``usage_threshold`` full, or has less than ``min_free_bytes``
available; they are accepted again once usage is below ``lwm_threshold`` (and the free bytes are
back above the minimum). Cursor positions, metadata and segment headers are still written under
the floor: that is what the reserve is for.

The check is cheap: ``writable()`` reads the clock, and calls ``statvfs`` at most once per
``check_interval_s``, or at once after a write failed for lack of space (ENOSPC, EDQUOT), which
also refuses writes until the next check finds room. Everything here runs on the event loop.
"""

from __future__ import annotations

import errno
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

log = logging.getLogger(__name__)

# Errors that mean "no room": the disk (or the user's quota) is full.
NO_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


@dataclass(frozen=True, slots=True)
class DiskSpacePolicy:
    """When the data directory's file system is too full for new entries."""

    # BookKeeper's diskUsageThreshold default: refuse at 95% used. 1.0 or more: no usage limit.
    usage_threshold: float = 0.95
    # BookKeeper's diskUsageLwmThreshold default: writable again below 90% used.
    lwm_threshold: float = 0.90
    # BookKeeper's diskUsageWarnThreshold idea: health and metrics warn from here (no refusal).
    warn_threshold: float = 0.90
    # Refuse below this many available bytes whatever the ratio (a 95% floor on a small disk is a
    # few MB; cursor files and metadata must still fit). 0: no minimum.
    min_free_bytes: int = 0
    # BookKeeper's diskCheckInterval is 10 s; statvfs costs about a microsecond, so check every second.
    check_interval_s: float = 1.0
    # How long a refused add is held (stored if room returns in time) before it fails: the
    # official clients' default sendTimeout, 30 s, so a client's own timeout fires first (see
    # FileManagedLedger._hold). 0: fail at once.
    add_hold_s: float = 30.0


@dataclass(frozen=True, slots=True)
class DiskUsage:
    total_bytes: int
    free_bytes: int  # available to an unprivileged writer (f_bavail)

    @property
    def usage(self) -> float:
        """The fraction in use, as ``df`` counts it (blocks reserved for root count as used)."""
        if self.total_bytes <= 0:
            return 0.0
        return 1.0 - self.free_bytes / self.total_bytes


def statvfs_usage(path: str) -> DiskUsage:
    st = os.statvfs(path)
    return DiskUsage(st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize)


class StorageGuard(Protocol):
    """What health checks and metrics read of a store's "can it take new entries" state: the file
    ledger's free-space floor (`DiskSpaceGuard`) or, on BookKeeper, whether enough bookies are
    writable (`managed_ledger.bookkeeper.availability.BookieAvailability`)."""

    write_disabled: bool
    reason: str
    last: DiskUsage | None
    refused_total: int
    no_space_errors_total: int

    def writable(self) -> bool: ...

    @property
    def warning(self) -> bool: ...

    @property
    def bookie_counts(self) -> tuple[int, int] | None:
        """(writable, read-only) bookies on BookKeeper storage; None elsewhere."""
        ...


class DiskSpaceGuard:
    """Whether new entries may be written to ``path``'s file system (see the module docstring)."""

    def __init__(self, path: str, policy: DiskSpacePolicy, *,
                 measure: Callable[[str], DiskUsage] = statvfs_usage,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.path = path
        self.policy = policy
        self._measure = measure
        self._clock = clock
        self._next_check = float("-inf")
        self.last: DiskUsage | None = None
        self.write_disabled = False
        self.reason = ""  # why writes are refused (empty while writable)
        self.refused_total = 0  # adds refused by the floor
        self.no_space_errors_total = 0  # writes that failed with ENOSPC / EDQUOT

    def writable(self) -> bool:
        """True if new entries may be written (statvfs at most once per check interval)."""
        if self._clock() >= self._next_check:
            self.check()
        return not self.write_disabled

    @property
    def bookie_counts(self) -> tuple[int, int] | None:
        return None

    def refuse(self) -> str:
        """Count one refused add; the reason to give its sender."""
        self.refused_total += 1
        return self.reason

    @property
    def warning(self) -> bool:
        """Usage is at or above the warn threshold (writes may still be accepted)."""
        last = self.last
        return self.write_disabled or (last is not None and last.usage >= self.policy.warn_threshold)

    def check(self) -> DiskUsage | None:
        """Measure now and update the state."""
        self._next_check = self._clock() + self.policy.check_interval_s
        try:
            usage = self._measure(self.path)
        except OSError as exc:  # (the directory vanished, an I/O error): leave the state as it was
            log.warning("disk space check of %s failed: %s", self.path, exc)
            return None
        self.last = usage
        policy = self.policy
        over_min = policy.min_free_bytes > 0 and usage.free_bytes < policy.min_free_bytes
        if self.write_disabled:
            limit = min(policy.lwm_threshold, policy.usage_threshold)
            full = usage.usage >= limit if policy.usage_threshold < 1.0 else usage.free_bytes <= 0
        else:
            full = policy.usage_threshold < 1.0 and usage.usage >= policy.usage_threshold
        if full or over_min:
            self._disable(self._describe(usage))
        elif self.write_disabled:
            self.write_disabled = False
            self.reason = ""
            log.warning("storage accepts writes again: %s", self._describe(usage))
        return usage

    def write_failed(self, exc: BaseException) -> None:
        """A write failed: if for lack of space, refuse new entries until a check finds room."""
        if not isinstance(exc, OSError) or exc.errno not in NO_SPACE_ERRNOS:
            cause = exc.__cause__
            if isinstance(cause, OSError) and cause.errno in NO_SPACE_ERRNOS:
                exc = cause
            else:
                return
        self.no_space_errors_total += 1
        # Refuse until the next check in any case (ENOSPC can come with a few free blocks left: a
        # write larger than them, or blocks the file system keeps for itself).
        self._next_check = self._clock() + self.policy.check_interval_s
        usage: DiskUsage | None = None
        try:
            usage = self.last = self._measure(self.path)
        except OSError:
            pass
        self._disable(f"a write failed: {os.strerror(errno.ENOSPC)}"
                      + (f"; {self._describe(usage)}" if usage is not None else ""))

    def _disable(self, reason: str) -> None:
        if not self.write_disabled:
            log.error("storage refuses new entries: %s", reason)
        self.write_disabled = True
        self.reason = reason

    def _describe(self, usage: DiskUsage) -> str:
        policy = self.policy
        text = (f"data directory {self.path} is {usage.usage:.1%} full, {usage.free_bytes // (1024 * 1024)} MB free "
                f"(managedLedgerDiskUsageThreshold={policy.usage_threshold:g}")
        if policy.min_free_bytes > 0:
            text += f", managedLedgerMinFreeDiskSpaceMB={policy.min_free_bytes // (1024 * 1024)}"
        return text + ")"
