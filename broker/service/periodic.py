"""A job run every N seconds on the event loop, with one owner that starts and stops it.

Used for the broker's housekeeping (message TTL, backlog quotas) and the stats sampler. A failing
run is logged and the next one still happens: housekeeping must not die on one bad topic.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)


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
