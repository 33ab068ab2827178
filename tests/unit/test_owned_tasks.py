"""broker.tasks.OwnedTasks: tasks are kept while they run, failures are logged, close cancels and awaits."""

from __future__ import annotations

import asyncio
import logging

import pytest

from broker.tasks import OwnedTasks


async def test_a_task_is_held_while_it_runs_and_dropped_when_it_ends() -> None:
    tasks = OwnedTasks("test")
    release = asyncio.Event()
    done: list[int] = []

    async def job() -> None:
        await release.wait()
        done.append(1)

    task = tasks.spawn(job(), name="job")
    assert len(tasks) == 1 and tasks
    release.set()
    await task  # (the owner's done callback was added first, so it has run by now)
    assert done == [1]
    assert len(tasks) == 0 and not tasks


async def test_close_cancels_and_awaits_the_tasks_under_way() -> None:
    tasks = OwnedTasks("test")
    started = asyncio.Event()
    cleaned_up: list[str] = []

    async def job() -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            cleaned_up.append("job")

    task = tasks.spawn(job())
    await started.wait()
    await tasks.close()
    assert task.cancelled()
    assert cleaned_up == ["job"]  # close() returned only after the task had finished
    assert not tasks


async def test_wait_awaits_without_cancelling_and_raises_nothing() -> None:
    tasks = OwnedTasks("test")
    release = asyncio.Event()

    async def ok() -> None:
        await release.wait()

    async def fails() -> None:
        await release.wait()
        raise RuntimeError("boom")

    first, second = tasks.spawn(ok()), tasks.spawn(fails())
    asyncio.get_running_loop().call_soon(release.set)
    await tasks.wait()
    assert first.done() and not first.cancelled()
    assert isinstance(second.exception(), RuntimeError)


async def test_an_unexpected_exception_is_logged_naming_the_owner(caplog: pytest.LogCaptureFixture) -> None:
    tasks = OwnedTasks("topic persistent://t/n/x")

    async def fails() -> None:
        raise RuntimeError("boom")

    task = tasks.spawn(fails(), name="close-cursor")
    with caplog.at_level(logging.ERROR, logger="broker.tasks"):
        await asyncio.gather(task, return_exceptions=True)
    [record] = [r for r in caplog.records if r.name == "broker.tasks"]
    assert record.getMessage() == "topic persistent://t/n/x: task close-cursor failed"
    assert record.exc_info is not None and isinstance(record.exc_info[1], RuntimeError)


async def test_cancelled_tasks_are_not_logged(caplog: pytest.LogCaptureFixture) -> None:
    tasks = OwnedTasks("test")

    async def forever() -> None:
        await asyncio.Event().wait()

    tasks.spawn(forever())
    with caplog.at_level(logging.ERROR, logger="broker.tasks"):
        await tasks.close()
    assert not [r for r in caplog.records if r.name == "broker.tasks"]


async def test_spawn_on_a_given_loop() -> None:
    tasks = OwnedTasks("test")
    loop = asyncio.get_running_loop()

    async def job() -> None:
        pass

    task = tasks.spawn(job(), loop=loop)
    assert task.get_loop() is loop
    await tasks.wait()
