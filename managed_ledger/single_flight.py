"""Single flight: one run of a piece of work per key, awaited by every concurrent caller.

Opening a managed ledger, loading a topic or a transaction coordinator, taking a bundle's ownership and
connecting to another broker are each done once for a key, however many callers ask at the same time:

- ``run(key, work)``: the first caller starts ``work()`` as a task of its own; callers that come while it
  runs await that same task; all get its result;
- a waiter that is cancelled (its client went away) stops waiting, nothing more: the work goes on for the
  others (it runs in its own task and each waiter awaits it through ``asyncio.shield``);
- an exception of the work is raised to every waiter; by then the key is free again, so the next call
  starts afresh (the key is removed by the task's first done callback, which runs before any waiter wakes);
- ``get(key)`` is the work under way for ``key`` (to await, like a waiter), or None;
- the owner ends the work still under way on close: ``cancel()`` then ``wait()``, or ``close()`` for both
  (``wait()`` alone lets it finish).

It lives on the lowest floor that needs it (the managed-ledger factories); the broker takes it from
``broker.tasks``, beside ``OwnedTasks``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Hashable, Iterator
from functools import partial
from typing import Any, Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class SingleFlight(Generic[K, V]):
    def __init__(self, owner: str) -> None:
        self.owner = owner  # named in the tasks' names
        self._flights: dict[K, asyncio.Task[V]] = {}

    async def run(self, key: K, work: Callable[[], Coroutine[Any, Any, V]]) -> V:
        """The result of the work under way for ``key``, or of ``work()`` started now."""
        task = self._flights.get(key)
        if task is None:
            task = asyncio.get_running_loop().create_task(work(), name=f"{self.owner}: {key}")
            self._flights[key] = task
            task.add_done_callback(partial(self._landed, key))
        return await asyncio.shield(task)

    def get(self, key: K) -> Awaitable[V] | None:
        """The work under way for ``key`` (awaiting it is waiting as ``run`` does), or None."""
        task = self._flights.get(key)
        return None if task is None else asyncio.shield(task)

    def _landed(self, key: K, task: asyncio.Task[V]) -> None:
        if self._flights.get(key) is task:
            del self._flights[key]
        if not task.cancelled():
            task.exception()  # retrieved: the waiters raise it themselves (and with none left, nobody asked)

    def cancel(self) -> None:
        """Cancel the work under way (its waiters get CancelledError)."""
        for task in list(self._flights.values()):
            task.cancel()

    async def wait(self) -> None:
        """Await the work under way now, without cancelling it; its exceptions are for its waiters."""
        if self._flights:
            await asyncio.wait(list(self._flights.values()))

    async def close(self) -> None:
        self.cancel()
        await self.wait()

    def __contains__(self, key: object) -> bool:
        return key in self._flights

    def __iter__(self) -> Iterator[K]:
        return iter(list(self._flights))

    def __len__(self) -> int:
        return len(self._flights)

    def __bool__(self) -> bool:
        return bool(self._flights)
