"""Inline-or-posted completion of storage callbacks, with a per-loop nesting limit.

A read served from memory can call its callback at once, on the caller's stack. That is the
fast path, but a dispatcher whose callback issues the next read would then recurse once per
read. So inline completion is allowed only while fewer than ``limit`` completions are already
on the stack (a depth counter shared by everything on one event loop: the factory owns it).
Past the limit the completion is posted with ``loop.call_soon``; the stack unwinds and the
loop runs it next. A file implementation completing from a worker thread posts the same way
with ``call_soon_threadsafe``.

Completions of one ordering domain (one cursor's reads, one ledger's adds) must never
overtake each other: once one is posted, later ones queue behind it even if the stack is
shallow by then. Each domain has its own ``OrderedCompleter``.

Work that finishes elsewhere (a disk read on a worker thread) first ``reserve()``s its place in
the order; completions issued after it (say, a cache hit) queue behind the reservation, and the
reservation's ``fill`` (called on the loop, when the result is back) releases them in order.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from typing import TypeVar

_log = logging.getLogger(__name__)

Completion = Callable[[], None]
_T = TypeVar("_T")


class _Slot:
    """A reserved place in a domain's order; ``fn`` is None until the result is back."""

    __slots__ = ("fn",)

    def __init__(self) -> None:
        self.fn: Completion | None = None


class NestingCounter:
    """Depth of storage completions currently running inline on this loop's stack."""

    __slots__ = ("depth", "max_depth")

    def __init__(self) -> None:
        self.depth = 0
        self.max_depth = 0  # high-water mark, for tests and debugging


# A domain's queue until its first post: shared, never appended to (an empty deque is ~770 bytes, and most domains,
# a cursor or a ledger of a quiet topic, never post anything).
_NOTHING_POSTED: deque[Completion | _Slot] = deque()


class OrderedCompleter:
    """Runs completions of one ordering domain: inline while allowed, else posted, in order."""

    __slots__ = ("_counter", "_limit", "_loop", "_posted", "_scheduled")

    def __init__(self, counter: NestingCounter, limit: int) -> None:
        if limit < 0:
            raise ValueError("nesting limit must be >= 0")
        self._counter = counter
        self._limit = limit
        self._posted = _NOTHING_POSTED
        self._scheduled = False
        self._loop: asyncio.AbstractEventLoop | None = None

    def complete(self, fn: Completion) -> None:
        """Run fn now if the stack allows it and nothing of this domain is queued; else post it."""
        if not self._posted and self._counter.depth < self._limit:
            self._invoke(fn)
            return
        self._post(fn)
        self._schedule()

    def inline_allowed(self) -> bool:
        """Whether a completion issued now would run at once (``complete``'s test)."""
        return not self._posted and self._counter.depth < self._limit

    def run_inline(self, fn: Callable[[_T], None], arg: _T) -> None:
        """Run ``fn(arg)`` now as an inline completion (counted in the nesting depth, errors reported
        as ``complete``'s): for a caller that found ``inline_allowed`` and did nothing since."""
        counter = self._counter
        counter.depth += 1
        if counter.depth > counter.max_depth:
            counter.max_depth = counter.depth
        try:
            fn(arg)
        except Exception as exc:
            _report(exc)
        finally:
            counter.depth -= 1

    def reserve(self) -> Callable[[Completion], None]:
        """Take the next place in this domain's order for a completion that is not known yet.

        Returns ``fill(fn)``: call it on the loop (exactly once) when the result is there; fn
        then runs in its place, after everything completed before the reservation.
        """
        slot = _Slot()
        self._post(slot)

        def fill(fn: Completion) -> None:
            slot.fn = fn
            if self._posted[0] is slot:
                self._schedule()

        return fill

    @property
    def pending(self) -> int:
        """Completions posted or reserved but not yet run."""
        return len(self._posted)

    def _post(self, item: Completion | _Slot) -> None:
        if self._posted is _NOTHING_POSTED:
            self._posted = deque()
        self._posted.append(item)

    def _schedule(self) -> None:
        if self._scheduled:
            return
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        self._scheduled = True
        self._loop.call_soon(self._drain)

    def _drain(self) -> None:
        self._scheduled = False
        posted = self._posted
        # Run only what was queued when this drain started: completions posted by these
        # callbacks wait for the next loop iteration, so a chain of reads cannot starve the loop.
        for _ in range(len(posted)):
            head = posted[0]
            if isinstance(head, _Slot):
                if head.fn is None:
                    return  # waiting for a result; its fill() schedules the next drain
                fn = head.fn
            else:
                fn = head
            posted.popleft()
            self._invoke(fn)
        if posted and not (isinstance(posted[0], _Slot) and posted[0].fn is None):
            self._schedule()

    def _invoke(self, fn: Completion) -> None:
        counter = self._counter
        counter.depth += 1
        if counter.depth > counter.max_depth:
            counter.max_depth = counter.depth
        try:
            fn()
        except Exception as exc:  # a broken callback must not break the storage layer's state
            _report(exc)
        finally:
            counter.depth -= 1


def _report(exc: Exception) -> None:
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        _log.error("managed-ledger callback raised", exc_info=exc)
        return
    loop.call_exception_handler({"message": "managed-ledger callback raised", "exception": exc})
