"""A dispatcher lane: a serial queue of callables drained by the owning event loop.

Work posted to a lane runs in posting order and never re-entrantly: a callable that posts more
work only appends; the drain loop picks it up after the current item returns.

What goes through it, and why only that (the choice, kept on purpose): a FLOW's settlement.
The connection records a FLOW at once (``permits += n``, ``pending_flow += n``) and posts the
settlement, which later subtracts ``pending_flow``, checks that this exact consumer object is
still a member, and only then adds ``n`` to the dispatcher's total. Consumer add/remove and read
completions run directly on the loop, not through the lane. Both run on the one loop that owns
the dispatcher, so none of them interleaves with another mid-way, and the permit invariant

    total_permits == sum(c.permits - c.pending_flow for c in consumers)

holds by construction whatever the order: joining adds ``permits - pending_flow``, leaving
subtracts exactly that, a read spends permits on the consumer and the total alike, and a
settlement for a consumer that left, or was replaced by an equal but not identical one, changes
nothing. Routing add/remove and completions through the lane too would buy no ordering that
matters here, and would cost a loop turn per read and membership that lags SUBSCRIBE (the
subscription's admission checks read it at once). The evidence is a test, not an argument:
tests/component/test_lane_ordering.py holds read completions back and runs every order of a
queued settlement, remove, equal-but-not-identical replacement and read completion, for Shared,
Key_Shared and Failover (and random long interleavings), checking the invariant after each step.
Non-persistent dispatchers apply FLOW at once (no read to order it with; see nonpersistent.py).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Any

# A lane's queue until its first post: shared, never appended to (an empty deque is ~770 bytes; a subscription
# whose consumers rarely send FLOW keeps none).
_NOTHING_QUEUED: deque[tuple[Callable[..., Any], tuple[Any, ...]]] = deque()


class Lane:
    __slots__ = ("_closed", "_draining", "_items", "_loop", "_scheduled")

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._loop = loop or asyncio.get_running_loop()
        self._items = _NOTHING_QUEUED
        self._scheduled = False
        self._draining = False
        self._closed = False

    def post(self, fn: Callable[..., Any], *args: Any) -> None:
        """Queue ``fn(*args)``. After ``close()`` the item is kept but never run."""
        if self._items is _NOTHING_QUEUED:
            self._items = deque()
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
            if not items:
                self._items = _NOTHING_QUEUED  # (its memory goes back until the next post)
            elif not self._closed and not self._scheduled:
                # An item raised: keep the rest ordered and run them on the next turn.
                self._scheduled = True
                self._loop.call_soon(self._drain)
