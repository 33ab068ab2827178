"""Awaiting a condition that has no event to wait on (broker or ledger internals), with a timeout."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

WAIT_S = 10.0


async def eventually(condition: Callable[[], object], what: str, interval: float = 0.005) -> None:
    try:
        async with asyncio.timeout(WAIT_S):
            while not condition():  # noqa: ASYNC110 - internals have no events to await
                await asyncio.sleep(interval)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None
