"""A job run every N seconds on the event loop, with one owner that starts and stops it.

Used for the broker's housekeeping (message TTL, backlog quotas) and the stats sampler. A failing
run is logged and the next one still happens: housekeeping must not die on one bad topic.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")
# A sweep over every loaded topic gives the event loop back once it has run this long: at 10,000 topics one
# sweep (the backlog quota check, say) is a few hundred milliseconds of CPU, and clients must be served meanwhile.
SWEEP_SLICE_S = 0.01
_ITEMS_PER_CHECK = 8  # (the clock is read every few items: a fraction of a millisecond of work)


async def sliced(items: Iterable[T]) -> AsyncIterator[T]:
    """``items`` one by one, giving the loop back after every SWEEP_SLICE_S of the caller's work between
    them. An item may have changed meanwhile (a topic closed): the caller checks, as it would anyway."""
    started = time.perf_counter()
    for i, item in enumerate(items):
        if i % _ITEMS_PER_CHECK == 0 and time.perf_counter() - started > SWEEP_SLICE_S:
            await asyncio.sleep(0)
            started = time.perf_counter()
        yield item


class PeriodicTask:
    def __init__(self, name: str, interval_s: float, job: Callable[[], Awaitable[None]]) -> None:
        if interval_s <= 0:
            raise ValueError(f"{name}: interval must be > 0, got {interval_s}")
        self.name = name
        self.interval_s = interval_s
        self.job = job
        self._task: asyncio.Task[None] | None = None
        self.runs = 0

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        """Idempotent; needs a running loop."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=self.name)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                await self.job()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("%s failed; next run in %.1f s", self.name, self.interval_s)
            self.runs += 1

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
