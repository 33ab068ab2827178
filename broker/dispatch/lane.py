"""A dispatcher lane: a serial queue of callables drained by the owning event loop.

Work posted to a lane runs in posting order and never re-entrantly: a callable that posts more
work only appends; the drain loop picks it up after the current item returns. Flow updates,
consumer add/remove and read completions of one dispatcher are ordered through one lane, which is
what keeps permit accounting exact when a consumer disconnects while its FLOW is still queued.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Any


class Lane:
    __slots__ = ("_closed", "_draining", "_items", "_loop", "_scheduled")

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._loop = loop or asyncio.get_running_loop()
        self._items: deque[tuple[Callable[..., Any], tuple[Any, ...]]] = deque()
        self._scheduled = False
        self._draining = False
        self._closed = False

    def post(self, fn: Callable[..., Any], *args: Any) -> None:
        """Queue ``fn(*args)``. After ``close()`` the item is kept but never run."""
        self._items.append((fn, args))
        if not self._scheduled and not self._draining and not self._closed:
            self._scheduled = True
            self._loop.call_soon(self._drain)

    @property
    def pending(self) -> int:
        return len(self._items)

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        self._closed = True

    def _drain(self) -> None:
        self._scheduled = False
        if self._closed:
            return
        self._draining = True
        items = self._items
        try:
            while items and not self._closed:
                fn, args = items.popleft()
                fn(*args)
        finally:
            self._draining = False
            if items and not self._closed and not self._scheduled:
                # An item raised: keep the rest ordered and run them on the next turn.
                self._scheduled = True
                self._loop.call_soon(self._drain)
