"""A job run every N seconds on the event loop, with one owner that starts and stops it.

Used for the broker's housekeeping (message TTL, backlog quotas) and the stats sampler. A failing
run is logged and the next one still happens: housekeeping must not die on one bad topic.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")

# A sweep over every loaded topic holds the loop for at most about this long at a time: it yields to
# the other callbacks (client requests, receipts) between slices. At 10,000 topics a whole retention
# sweep took ~1 s, one stall of the loop every 2 minutes.
SWEEP_SLICE_S = 0.005


async def sweep_in_slices(items: Iterable[T], step: Callable[[T], Awaitable[None] | None],
                          slice_s: float = SWEEP_SLICE_S) -> None:
    """Run ``step`` on each item (a snapshot the caller took), yielding to the event loop whenever a
    slice has run for ``slice_s``; ``step`` may be a plain function or a coroutine function. Whatever
    ``step`` looks at may have changed during a yield (a topic closed meanwhile): it checks."""
    clock = time.perf_counter
    started = clock()
    for item in items:
        result = step(item)
        if result is not None:
            await result
        if clock() - started >= slice_s:
            await asyncio.sleep(0)
            started = clock()


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
