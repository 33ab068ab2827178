"""A sweep over every topic gives the event loop back as it goes (``periodic.sliced``)."""

from __future__ import annotations

import asyncio

import pytest

from broker.service import periodic


async def test_a_long_sweep_lets_other_tasks_run_and_misses_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(periodic, "SWEEP_SLICE_S", 0.0)  # every check finds the slice used up
    turns = 0
    stop = False

    async def other_task() -> None:
        nonlocal turns
        while not stop:
            turns += 1
            await asyncio.sleep(0)

    other = asyncio.create_task(other_task())
    await asyncio.sleep(0)
    seen = []
    started_turns = turns
    async for item in periodic.sliced(range(64)):
        seen.append(item)
    stop = True
    await other
    assert seen == list(range(64))
    # The loop was given back at every check (every 8 items after the first): the other task ran meanwhile.
    assert turns - started_turns >= 64 // 8 - 1


async def test_a_sweep_within_its_slice_does_not_yield(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(periodic, "SWEEP_SLICE_S", 3600.0)  # the slice is never used up
    turns = 0

    async def other_task() -> None:
        nonlocal turns
        turns += 1

    task = asyncio.create_task(other_task())
    items = [item async for item in periodic.sliced(range(64))]
    assert items == list(range(64)) and turns == 0  # (the loop was not given back)
    await task
