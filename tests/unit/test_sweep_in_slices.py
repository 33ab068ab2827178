"""periodic.sweep_in_slices: a sweep over many topics lets the loop serve others between its slices."""

from __future__ import annotations

import asyncio

from broker.service.periodic import sweep_in_slices


def test_other_callbacks_run_between_slices_and_every_item_is_visited() -> None:
    async def main() -> tuple[list[int], list[bool]]:
        other_ran = asyncio.Event()
        seen: list[int] = []
        other_ran_before: list[bool] = []

        async def other() -> None:
            other_ran.set()

        asyncio.get_running_loop().create_task(other())

        def step(item: int) -> None:
            other_ran_before.append(other_ran.is_set())
            seen.append(item)

        await sweep_in_slices(range(5), step, slice_s=0.0)  # (a slice of one item: yields after each)
        return seen, other_ran_before

    seen, other_ran_before = asyncio.run(main())
    assert seen == [0, 1, 2, 3, 4]
    assert other_ran_before == [False, True, True, True, True]


def test_coroutine_steps_are_awaited() -> None:
    async def main() -> list[int]:
        done: list[int] = []

        async def step(item: int) -> None:
            await asyncio.sleep(0)
            done.append(item)

        await sweep_in_slices([3, 1, 2], step)
        return done

    assert asyncio.run(main()) == [3, 1, 2]
