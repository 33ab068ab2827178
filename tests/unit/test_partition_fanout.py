"""broker/admin/partition_fanout.py: the calls on each partition of a partitioned topic, against a real aiohttp
'owner' on loopback for the partitions another broker owns (a fake ownership says which): made side by side with a
bound (as Pulsar's waitForAll over its admin client's 16 connections per broker), every partition's call made even
when one fails, the first failure in partition order answering, and a broker that does not answer costing a bounded
time, not one timeout per partition."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, cast

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from broker.admin import owner_calls
from broker.admin.common import HttpError
from broker.admin.context import AdminContext
from broker.admin.owner_calls import FANOUT_CONCURRENCY
from broker.admin.partition_fanout import PartitionFanout
from broker.admin.peers import PeerAdmin
from broker.config import BrokerConfig
from broker.topic_name import TopicName
from tests.unit.test_peer_admin import serve

BASE = TopicName.parse("persistent://t/ns/fan")
# How long the 'owner' waits for the fan-out to have FANOUT_CONCURRENCY calls under way at once, before it gives up
# (and records that they came one by one).
FULL_WAIT_S = 5.0


@dataclass
class Owner:
    """The other broker: answers each partition's call by its index (``statuses``), records what it was asked."""
    url: str = ""
    statuses: dict[int, int] = field(default_factory=dict)
    hang: bool = False
    asked: list[int] = field(default_factory=list)
    in_flight: int = 0
    most_in_flight: int = 0
    one_by_one: bool = False
    full: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    wait_full: bool = False
    after: dict[int, asyncio.Event] = field(default_factory=dict)  # partition -> what its answer waits for


@pytest.fixture
async def owner() -> AsyncIterator[Owner]:
    state = Owner()

    async def partition(request: web.Request) -> web.Response:
        index = TopicName.parse(f"persistent://t/ns/{request.match_info['topic']}").partition_index
        state.asked.append(index)
        state.in_flight += 1
        state.most_in_flight = max(state.most_in_flight, state.in_flight)
        try:
            if state.hang:
                await state.release.wait()
            if index in state.after:
                async with asyncio.timeout(FULL_WAIT_S):
                    await state.after[index].wait()
            if state.wait_full:
                if state.in_flight >= FANOUT_CONCURRENCY:
                    state.full.set()
                try:
                    async with asyncio.timeout(FULL_WAIT_S):
                        await state.full.wait()
                except TimeoutError:
                    state.one_by_one = True
                    state.full.set()
            status = state.statuses.get(index, 200)
            if status != 200:
                return web.json_response({"reason": f"partition {index}: {status}"}, status=status)
            return web.json_response({"partition": index})
        finally:
            state.in_flight -= 1

    app = web.Application()
    app.router.add_route("*", "/admin/v2/persistent/t/ns/{topic}/{action:.*}", partition)
    runner, state.url = await serve(app)
    try:
        yield state
    finally:
        state.release.set()
        await runner.cleanup()


def fanout(owner: Owner, local: set[int], config: BrokerConfig | None = None, lookup: Any = None) -> PartitionFanout:
    """Partitions whose index is in ``local`` are this broker's; the others ``owner``'s (as ``lookup`` says, if
    given)."""
    ownership = SimpleNamespace(
        distributed=True, bundle_of=lambda name: name, is_owned=lambda name: name.partition_index in local,
        lookup=lookup or _lookup(owner))
    ctx = cast(AdminContext, SimpleNamespace(service=SimpleNamespace(ownership=ownership)))
    return PartitionFanout(ctx, PeerAdmin(config or BrokerConfig()), lambda name: 0, lambda name: True)


def _lookup(owner: Owner) -> Any:
    async def lookup(name: TopicName, authoritative: bool, listener: str | None) -> SimpleNamespace:
        return SimpleNamespace(http_url=owner.url, http_url_tls="")
    return lookup


def request() -> web.Request:
    return make_mocked_request("PUT", f"/admin/v2/persistent/t/ns/{BASE.local_name}/compaction")


async def test_the_partitions_are_called_side_by_side_with_a_bound(owner: Owner) -> None:
    """40 partitions at the other broker: 16 calls under way at once, never more. They were made one after
    another: with 100 partitions there, 100 round trips in a row."""
    owner.wait_full = True
    parts = [BASE.partition(i) for i in range(40)]
    fan = fanout(owner, local=set())

    async def local(p: TopicName) -> None:
        raise AssertionError("no partition is local here")

    try:
        answers = await fan.on_owners(request(), parts, "PUT", "compaction", local)
    finally:
        await fan.peers.close()
    assert answers == {p: {"partition": p.partition_index} for p in parts}
    assert not owner.one_by_one and owner.most_in_flight == FANOUT_CONCURRENCY
    assert sorted(owner.asked) == list(range(40))


async def test_every_partition_is_called_and_the_first_failure_in_partition_order_answers(owner: Owner) -> None:
    """0-3 at the other broker (2: 404, 3: 409), 4-7 here (6: 412, ended before 3's answer came): every partition is
    called (Pulsar waits for all of its calls), and 3's 409 answers. The old loop stopped at 3: 4-7 never called."""
    owner.statuses = {2: 404, 3: 409}
    refused_here = asyncio.Event()
    owner.after = {3: refused_here}
    parts = [BASE.partition(i) for i in range(8)]
    fan = fanout(owner, local={4, 5, 6, 7})
    done_here: list[int] = []

    async def local(p: TopicName) -> str:
        done_here.append(p.partition_index)
        if p.partition_index == 6:
            refused_here.set()
            raise HttpError(412, "partition 6: 412")
        return "here"

    try:
        with pytest.raises(HttpError) as failed:
            await fan.on_owners(request(), parts, "PUT", "compaction", local)
        assert failed.value.status_code == 409 and "partition 3: 409" in str(failed.value.text)
        assert sorted(owner.asked) == [0, 1, 2, 3] and sorted(done_here) == [4, 5, 6, 7]

        # Only 404s: left out, or (missing_ok=False) the first one answers once all are done.
        owner.statuses, owner.asked, done_here[:] = {1: 404, 2: 404}, [], []
        answers = await fan.on_owners(request(), parts[:4], "PUT", "compaction", local)
        assert sorted(p.partition_index for p in answers) == [0, 3]
        with pytest.raises(HttpError) as missing:
            await fan.on_owners(request(), parts[:6], "PUT", "compaction", local, missing_ok=False)
        assert missing.value.status_code == 404 and "partition 1: 404" in str(missing.value.text)
        assert sorted(owner.asked) == [0, 0, 1, 1, 2, 2, 3, 3]
        assert sorted(done_here) == [4, 5]

        # tally: the refusals (409) counted, a 404 neither done nor refused, another failure answers.
        owner.statuses = {1: 409, 2: 404}
        assert await fan.tally(request(), parts[:6], local) == (4, 1)  # (0, 3, 4, 5 done; 1 refused)
        owner.statuses = {1: 409, 2: 500}
        with pytest.raises(HttpError) as failed:
            await fan.tally(request(), parts[:6], local)
        assert failed.value.status_code == 500
    finally:
        await fan.peers.close()


async def test_a_broker_that_does_not_answer_costs_one_bounded_wait(owner: Owner,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """32 partitions at a broker that never answers: a 503 once FANOUT_TIMEOUT_S has passed, for all of them
    together. It was one CALL_TIMEOUT_S (60 s) per partition, one after another: 32 minutes."""
    monkeypatch.setattr(owner_calls, "FANOUT_TIMEOUT_S", 0.5)
    owner.hang = True
    parts = [BASE.partition(i) for i in range(32)]
    fan = fanout(owner, local=set())

    async def local(p: TopicName) -> None:
        raise AssertionError("no partition is local here")

    started = time.monotonic()
    try:
        async with asyncio.timeout(20):
            with pytest.raises(HttpError) as failed:
                await fan.on_owners(request(), parts, "PUT", "compaction", local)
    finally:
        await fan.peers.close()
    assert failed.value.status_code == 503 and "no answer within 0.5 s" in str(failed.value.text)
    assert "fan-partition-0/compaction" in str(failed.value.text)  # (the first partition's, in partition order)
    assert time.monotonic() - started < 15


async def test_an_owner_lookup_that_does_not_answer_is_within_the_same_bound(owner: Owner,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The lookup of each partition's owner (the metadata store or the leader may be asked, and may not answer) is
    part of the call, as in Pulsar, where the admin client's request includes it: a 503 once the fan-out's bound has
    passed. The lookup was outside the bound, so the request waited as long as the lookup did (here: for ever)."""
    monkeypatch.setattr(owner_calls, "FANOUT_TIMEOUT_S", 0.5)
    never = asyncio.Event()

    async def hung_lookup(name: TopicName, authoritative: bool, listener: str | None) -> SimpleNamespace:
        await never.wait()
        raise AssertionError("the lookup never answers")

    fan = fanout(owner, local={0}, lookup=hung_lookup)
    done: list[TopicName] = []

    async def local(p: TopicName) -> None:
        done.append(p)

    try:
        async with asyncio.timeout(20):
            with pytest.raises(HttpError) as failed:
                await fan.on_owners(request(), [BASE.partition(i) for i in range(3)], "PUT", "compaction", local)
    finally:
        await fan.peers.close()
    assert failed.value.status_code == 503
    assert f"looking up the owner of {BASE.partition(1).full}: no answer within 0.5 s" in str(failed.value.text)
    assert done == [BASE.partition(0)] and owner.asked == []
