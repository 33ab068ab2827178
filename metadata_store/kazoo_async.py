"""kazoo's asynchronous results as asyncio futures.

kazoo (the maintained Python ZooKeeper client) does its I/O on a thread of its own; each ``*_async``
call returns a result object completed on that thread. ``awaitable`` links such a result to an
asyncio future that is completed on the event loop (``call_soon_threadsafe``), so callers only ever
await, and kazoo's exceptions (NoNodeError, BadVersionError, ConnectionLoss...) arrive as they are.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any


def awaitable(loop: asyncio.AbstractEventLoop, result: Any) -> asyncio.Future[Any]:
    """A future on ``loop`` that completes as kazoo's ``result`` (an ``IAsyncResult``) does."""
    future: asyncio.Future[Any] = loop.create_future()

    def transfer() -> None:
        if future.done():  # cancelled meanwhile (a timeout): the result is dropped
            return
        try:
            future.set_result(result.get_nowait())
        except Exception as e:
            future.set_exception(e)

    def completed(_: Any) -> None:  # on kazoo's thread
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            loop.call_soon_threadsafe(transfer)

    result.rawlink(completed)
    return future
