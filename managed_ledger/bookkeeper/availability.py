"""Whether BookKeeper storage can take new entries: enough writable bookies for an ensemble.

A bookie whose ledger disks fill past its ``diskUsageThreshold`` turns read-only (BookKeeper's
``readOnlyModeEnabled``, on by default): it moves its registration from ``<root>/available/<id>``
to ``<root>/available/readonly/<id>`` and answers adds with EREADONLY, still serving reads. It
turns writable again by itself once usage is below ``diskUsageLwmThreshold``. While fewer bookies
are writable than an ensemble needs, no ledger can be created and no failed bookie replaced: the
managed ledgers hold their adds and fail them after the hold time (see ``ledger``), and this
guard tells health checks and metrics why, as the file ledger's free-space floor does
(``managed_ledger.disk_space``).

The guard reads the two registration folders every ``check_interval_s`` (two ZooKeeper reads) and
at once when a ledger could not get an ensemble (``no_ensemble``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

from managed_ledger.disk_space import DiskUsage

if TYPE_CHECKING:
    from managed_ledger.bookkeeper.client import BookKeeper

log = logging.getLogger(__name__)


class BookieAvailability:
    """A `StorageGuard` for BookKeeper storage (see the module docstring)."""

    def __init__(self, bk: BookKeeper, ensemble_size: int, check_interval_s: float = 1.0) -> None:
        self.bk = bk
        self.ensemble_size = ensemble_size
        self.check_interval_s = check_interval_s
        self.write_disabled = False
        self.reason = ""
        self.last: DiskUsage | None = None  # (bookies' disks are theirs: no usage here)
        self.refused_total = 0  # runs of adds held for want of an ensemble
        self.no_space_errors_total = 0
        self.writable_count: int | None = None
        self.read_only_count: int | None = None
        self._task: asyncio.Task[None] | None = None

    def writable(self) -> bool:
        return not self.write_disabled

    @property
    def warning(self) -> bool:
        """Some bookie is read-only (BookKeeper's own warning is per bookie, ``diskUsageWarnThreshold``)."""
        return self.write_disabled or bool(self.read_only_count)

    @property
    def bookie_counts(self) -> tuple[int, int] | None:
        if self.writable_count is None or self.read_only_count is None:
            return None
        return self.writable_count, self.read_only_count

    def refuse(self) -> str:
        """Count one held run of adds; the reason to give."""
        self.refused_total += 1
        return self.reason

    def no_ensemble(self, error: BaseException) -> None:
        """A ledger could not be created or its failed bookie replaced: refuse until a check finds enough."""
        self._disable(f"no writable ensemble: {error}")

    async def check(self) -> None:
        """Read the registrations now and update the state."""
        writable = await self.bk.writable_bookies()
        read_only = await self.bk.read_only_bookies()
        self.writable_count, self.read_only_count = len(writable), len(read_only)
        if len(writable) < self.ensemble_size:
            self._disable(f"{len(writable)} writable bookies, {self.ensemble_size} needed for an ensemble "
                          f"({len(read_only)} read-only: their disks are over diskUsageThreshold or they were "
                          "set read-only)")
        elif self.write_disabled:
            self.write_disabled = False
            self.reason = ""
            log.warning("storage accepts writes again: %d writable bookies (%d read-only)", len(writable),
                        len(read_only))

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        while True:
            try:
                await self.check()
            except Exception as exc:  # (ZooKeeper away, a bookie's znode gone meanwhile): the state stays as it was
                log.debug("bookie availability check failed: %s", exc)
            await asyncio.sleep(self.check_interval_s)

    def _disable(self, reason: str) -> None:
        if not self.write_disabled:
            log.error("storage refuses new entries: %s", reason)
        self.write_disabled = True
        self.reason = reason
