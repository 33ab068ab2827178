"""The one polling helper of the tests: await a condition that has no event to wait on, with a timeout.

``eventually`` is for coroutines (broker or ledger internals on the test's own loop); ``wait_for`` is its
blocking twin for threads that watch a broker from outside (REST, an official client, a broker thread),
and returns the condition's first truthy value. Both fail with ``AssertionError("timed out ... <what>")``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Literal, TypeVar

WAIT_S = 10.0  # in-process internals
BLOCKING_WAIT_S = 15.0  # across threads, HTTP or a client library: more slack

T = TypeVar("T")


async def eventually(condition: Callable[[], object], what: str, interval: float = 0.005,
                     within_s: float = WAIT_S) -> None:
    """Until ``condition()`` holds; ``within_s``: longer than WAIT_S only where the contract under test allows it."""
    try:
        async with asyncio.timeout(within_s):
            while not condition():  # noqa: ASYNC110 - internals have no events to await
                await asyncio.sleep(interval)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


def wait_for(condition: Callable[[], T | Literal[False] | None], timeout: float = BLOCKING_WAIT_S,
             what: str = "condition") -> T:
    """Poll ``condition`` (backing off from 10 ms to 200 ms) until it returns something truthy; return that."""
    deadline = time.monotonic() + timeout
    delay = 0.01
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(delay)
        delay = min(delay * 2, 0.2)
