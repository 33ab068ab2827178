"""One owner for a set of background tasks (STYLE principle 11: no fire-and-forget tasks).

An object that starts tasks of its own (a connection's command handlers, a topic's cursor and
replicator closes, a topic's replicated-subscription moves) holds an ``OwnedTasks``:

- ``spawn(coro)`` starts a task and keeps a strong reference until it ends (the event loop keeps
  only a weak one, so an unreferenced task may vanish mid-flight);
- a task that ends with an exception other than cancellation is logged at once, naming the owner
  (instead of asyncio's "exception was never retrieved" whenever the task is collected);
- ``cancel()`` cancels those under way, ``wait()`` awaits them (their errors already logged), and
  ``close()`` does both, in that order.

``SingleFlight`` (one run of a piece of work per key, awaited by every concurrent caller: a topic load,
a bundle acquisition, a ledger open) is defined in ``managed_ledger/single_flight.py``, the lowest floor
that uses it, and taken from here by the broker.

``all_done(coros)`` runs pieces of work side by side and awaits every one, then raises the first failure: for work
that must not be left half-done when a sibling fails (the bundles of a namespace being unloaded).

``woken(event, timeout_s)`` is the wait of a task that looks at something periodically and sooner when told to.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Coroutine, Iterable
from typing import Any, TypeVar

from managed_ledger.single_flight import SingleFlight

__all__ = ["OwnedTasks", "SingleFlight", "all_done", "woken"]

R = TypeVar("R")

log = logging.getLogger(__name__)


async def all_done(work: Iterable[Awaitable[R]]) -> list[R]:
    """Await every piece of ``work`` side by side (none is cancelled when another fails); their results in order,
    or the first failure once all have ended."""
    results = await asyncio.gather(*work, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results  # type: ignore[return-value]


async def woken(event: asyncio.Event, timeout_s: float) -> None:
    """Until ``event`` is set or ``timeout_s`` have passed; then ``event`` is cleared for the next wait."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout_s):
            await event.wait()
    event.clear()


class OwnedTasks:
    def __init__(self, owner: str) -> None:
        self.owner = owner  # named in the log line of a task that fails
        self._tasks: set[asyncio.Task[None]] = set()

    def spawn(self, coro: Coroutine[Any, Any, None], *, loop: asyncio.AbstractEventLoop | None = None,
              name: str | None = None) -> asyncio.Task[None]:
        """Start ``coro`` as a task owned here (on ``loop``, by default the running one)."""
        task = (loop or asyncio.get_running_loop()).create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.error("%s: task %s failed", self.owner, task.get_name(), exc_info=exc)

    def cancel(self) -> None:
        """Cancel the tasks under way (they end at their next await)."""
        for task in list(self._tasks):
            task.cancel()

    async def wait(self) -> None:
        """Await the tasks under way now; their exceptions are not raised here (``_done`` logs them)."""
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def close(self) -> None:
        self.cancel()
        await self.wait()

    def __len__(self) -> int:
        return len(self._tasks)

    def __bool__(self) -> bool:
        return bool(self._tasks)
