"""broker.tasks.SingleFlight: one run per key for concurrent callers; a waiter's cancellation leaves the work
to the others; an exception reaches every waiter and frees the key; close cancels and awaits."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import pytest

from broker.tasks import SingleFlight


class Work:
    """Work that counts its runs and ends when told (with a result or an exception)."""

    def __init__(self) -> None:
        self.runs = 0
        self.started = asyncio.Event()
        self.outcome: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    async def __call__(self) -> str:
        self.runs += 1
        self.started.set()
        return await self.outcome


async def test_concurrent_callers_share_one_run_and_the_key_is_free_after() -> None:
    flight: SingleFlight[str, str] = SingleFlight("test")
    work = Work()
    callers = [asyncio.create_task(flight.run("k", work)) for _ in range(3)]
    await work.started.wait()
    assert "k" in flight and len(flight) == 1 and list(flight) == ["k"]
    work.outcome.set_result("done")
    assert await asyncio.gather(*callers) == ["done"] * 3
    assert work.runs == 1
    assert "k" not in flight and not flight
    again = Work()
    again.outcome.set_result("again")
    assert await flight.run("k", again) == "again"  # (a new run once the last one has ended)
    assert again.runs == 1


async def test_different_keys_run_apart() -> None:
    flight: SingleFlight[str, str] = SingleFlight("test")
    a, b = Work(), Work()
    ta, tb = asyncio.create_task(flight.run("a", a)), asyncio.create_task(flight.run("b", b))
    await a.started.wait()
    await b.started.wait()
    assert len(flight) == 2
    b.outcome.set_result("b")
    assert await tb == "b"
    assert "a" in flight and not ta.done()
    a.outcome.set_result("a")
    assert await ta == "a"


@pytest.mark.parametrize("cancelled", [0, 1])  # the caller that started the work, or one that joined it
async def test_a_cancelled_waiter_leaves_the_work_to_the_others(cancelled: int) -> None:
    flight: SingleFlight[str, str] = SingleFlight("test")
    work = Work()
    callers = [asyncio.create_task(flight.run("k", work)) for _ in range(2)]
    await work.started.wait()
    callers[cancelled].cancel()
    with pytest.raises(asyncio.CancelledError):
        await callers[cancelled]
    assert "k" in flight
    work.outcome.set_result("done")
    assert await callers[1 - cancelled] == "done"
    assert work.runs == 1


async def test_the_work_ends_even_when_every_waiter_has_gone() -> None:
    flight: SingleFlight[str, str] = SingleFlight("test")
    work = Work()
    caller = asyncio.create_task(flight.run("k", work))
    await work.started.wait()
    caller.cancel()
    await asyncio.gather(caller, return_exceptions=True)
    joined = flight.get("k")
    assert joined is not None
    work.outcome.set_result("done")
    assert await joined == "done"
    assert flight.get("k") is None


async def test_an_exception_reaches_every_waiter_then_the_key_is_free() -> None:
    flight: SingleFlight[str, str] = SingleFlight("test")
    work = Work()
    seen: list[bool] = []

    async def caller() -> str:
        try:
            return await flight.run("k", work)
        except RuntimeError:
            seen.append("k" in flight)  # (already free when a waiter wakes)
            raise

    callers = [asyncio.create_task(caller()) for _ in range(3)]
    await work.started.wait()
    work.outcome.set_exception(RuntimeError("boom"))
    results = await asyncio.gather(*callers, return_exceptions=True)
    assert all(isinstance(r, RuntimeError) and str(r) == "boom" for r in results)
    assert seen == [False] * 3
    assert work.runs == 1


async def test_a_failure_nobody_waits_for_is_not_reported_as_never_retrieved() -> None:
    reported: list[dict[str, Any]] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    try:
        flight: SingleFlight[str, str] = SingleFlight("test")
        work = Work()
        caller = asyncio.create_task(flight.run("k", work))
        await work.started.wait()
        caller.cancel()
        await asyncio.gather(caller, return_exceptions=True)
        work.outcome.set_exception(RuntimeError("boom"))
        await flight.wait()
        del caller, work
        gc.collect()
        await asyncio.sleep(0)  # (a report would be posted to the loop)
    finally:
        loop.set_exception_handler(None)
    assert reported == []


async def test_close_cancels_the_work_and_awaits_it() -> None:
    flight: SingleFlight[str, str] = SingleFlight("test")
    work = Work()
    caller = asyncio.create_task(flight.run("k", work))
    await work.started.wait()
    await flight.close()
    assert not flight
    with pytest.raises(asyncio.CancelledError):
        await caller


async def test_wait_lets_the_work_finish() -> None:
    flight: SingleFlight[str, str] = SingleFlight("test")
    work = Work()
    caller = asyncio.create_task(flight.run("k", work))
    await work.started.wait()
    asyncio.get_running_loop().call_soon(work.outcome.set_result, "done")
    await flight.wait()
    assert not flight
    assert await caller == "done"
