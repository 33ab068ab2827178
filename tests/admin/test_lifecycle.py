"""Background tasks of the admin side have owners that stop them: the broker's housekeeping
(message TTL, backlog quotas) and the web service's stats sampler; PeriodicTask survives a
failing run."""

from __future__ import annotations

import asyncio

import pytest

from broker.embedded import Broker
from broker.service.periodic import PeriodicTask
from broker.topic_name import TopicName

WAIT_S = 5.0


async def test_periodic_task_keeps_running_after_a_failure_and_stops() -> None:
    calls = 0
    second_run = asyncio.Event()

    async def job() -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("one bad run")
        second_run.set()

    task = PeriodicTask("test-job", 0.01, job)
    task.start()
    task.start()  # idempotent
    await asyncio.wait_for(second_run.wait(), WAIT_S)
    assert task.running
    await task.stop()
    assert not task.running
    assert not [t for t in asyncio.all_tasks() if t.get_name() == "test-job"]
    with pytest.raises(ValueError):
        PeriodicTask("bad", 0, job)


async def test_housekeeping_and_sampler_are_cancelled_and_awaited_on_stop() -> None:
    async with Broker(messageExpiryCheckIntervalInMinutes=1 / 60, backlogQuotaCheckIntervalInSeconds=1,
                      statsUpdateFrequencyInSecs=1) as broker:
        assert broker.server is not None
        service = broker.server.service
        assert not any(t.running for t in service.housekeeping.tasks)  # nothing to do before a topic loads
        await service.get_topic(TopicName.parse("housekeeping"), create=True)
        owned = [*service.housekeeping.tasks, broker.server.web._sampling]
        assert len(owned) >= 3 and all(t.running for t in owned)  # housekeeping jobs + the stats sampler
    assert not any(t.running for t in owned)
    names = {"message-expiry", "backlog-quota-check", "stats-sampler"}
    assert not [t for t in asyncio.all_tasks() if t.get_name() in names]
