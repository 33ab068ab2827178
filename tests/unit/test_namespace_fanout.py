"""The namespace-wide operations that ask each bundle's owner (clearBacklog, unsubscribe, unload, the non-persistent
topic lists), against a real aiohttp 'owner' on loopback for the bundles another broker owns (a fake ownership says
which): the bundles are done side by side through broker/admin/owner_calls.py, as Pulsar's waitForAll over its admin
client's calls, so every bundle's call is made even when one fails, the first failure in bundle order answers, and a
broker that does not answer (hung: it accepts the connection and says nothing, as a SIGSTOPped broker) costs one
bounded wait, not CALL_TIMEOUT_S (60 s) per bundle one after another."""

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
from broker.admin.namespace_ops import NamespaceOperationsResource
from broker.admin.peers import PeerAdmin
from broker.admin.topics import TopicsResource
from broker.cluster.bundles import NamespaceBundle, NamespaceBundles
from broker.config import BrokerConfig
from tests.unit.test_peer_admin import serve

NS = "t/ns"
BUNDLES = NamespaceBundles.equal(NS, 4)
# How long a test may take at most: the old code waited 60 s per bundle of a hung broker.
TEST_BOUND_S = 20.0
# The fan-out's bound in these tests (Pulsar's and ours: 60 s).
SHORT_BOUND_S = 0.5


@dataclass
class Owner:
    """The other broker: answers each bundle's call (``statuses`` by bundle range; 204 else), or never (``hang``)."""
    url: str = ""
    statuses: dict[str, int] = field(default_factory=dict)
    unowned: set[str] = field(default_factory=set)  # bundles whose topic list is a 204 (nobody owns them)
    hang: bool = False
    asked: list[str] = field(default_factory=list)
    release: asyncio.Event = field(default_factory=asyncio.Event)


@pytest.fixture
async def owner() -> AsyncIterator[Owner]:
    state = Owner()

    async def bundle_call(request: web.Request) -> web.Response:
        bundle = request.match_info["bundle"]
        state.asked.append(bundle)
        if state.hang:
            await state.release.wait()
        status = state.statuses.get(bundle, 204)
        if status >= 400:
            return web.json_response({"reason": f"bundle {bundle}: {status}"}, status=status)
        if request.method == "GET" and bundle in state.unowned:
            return web.Response(status=204)
        if request.method == "GET":
            return web.json_response([f"non-persistent://{NS}/on-{bundle}"])
        return web.Response(status=status)

    app = web.Application()
    app.router.add_route("*", "/admin/v2/namespaces/t/ns/{bundle}/{action:.*}", bundle_call)
    app.router.add_get("/admin/v2/non-persistent/t/ns/{bundle}", bundle_call)
    runner, state.url = await serve(app)
    try:
        yield state
    finally:
        state.release.set()
        await runner.cleanup()


def web_service(owner: Owner, local: set[int]) -> Any:
    """The bundles whose index is in ``local`` are this broker's, the others ``owner``'s."""
    owned = {BUNDLES.bundles[i] for i in local}

    async def owner_of(bundle: NamespaceBundle) -> SimpleNamespace:
        return SimpleNamespace(http_url=owner.url, http_url_tls="", disabled=False)

    ownership = SimpleNamespace(distributed=True, is_owned=lambda b: b in owned, owner_of=owner_of, is_leader=False)
    metadata = SimpleNamespace(namespace_bundles=lambda ns: BUNDLES)
    service = SimpleNamespace(ownership=ownership, metadata=metadata, topics_of_namespace=lambda ns, mode: [])
    return SimpleNamespace(service=service, metadata=metadata, peers=PeerAdmin(BrokerConfig()))


def request(method: str, path: str) -> web.Request:
    return make_mocked_request(method, path)


async def test_a_hung_broker_costs_one_bounded_wait_for_a_namespace_operation(
        owner: Owner, monkeypatch: pytest.MonkeyPatch) -> None:
    """clearBacklog over 4 bundles, 3 at a broker that never answers: a 503 once the fan-out's bound has passed.
    The bundles were asked one after another with 60 s each: 3 minutes here (the test gives up after 20 s)."""
    monkeypatch.setattr(owner_calls, "FANOUT_TIMEOUT_S", SHORT_BOUND_S)
    owner.hang = True
    web_ = web_service(owner, local={0})
    ops = NamespaceOperationsResource(web_)
    done: list[NamespaceBundle | None] = []

    async def clear(ns: str, bundle: NamespaceBundle | None) -> None:
        done.append(bundle)

    started = time.monotonic()
    try:
        async with asyncio.timeout(TEST_BOUND_S):
            with pytest.raises(HttpError) as failed:
                await ops.each_bundle(request("POST", f"/admin/v2/namespaces/{NS}/clearBacklog"), NS, None, "POST",
                                      "clearBacklog", clear)
    finally:
        await web_.peers.close()
    assert failed.value.status_code == 503 and f"no answer within {SHORT_BOUND_S:g} s" in str(failed.value.text)
    assert f"{BUNDLES.bundles[1].range_name}/clearBacklog" in str(failed.value.text)  # (the first, in bundle order)
    assert sorted(owner.asked) == sorted(b.range_name for b in BUNDLES.bundles[1:])  # (all asked together)
    assert done == [BUNDLES.bundles[0]]
    assert time.monotonic() - started < TEST_BOUND_S / 2


async def test_an_owner_lookup_that_does_not_answer_is_within_the_same_bound(
        owner: Owner, monkeypatch: pytest.MonkeyPatch) -> None:
    """The lookup of a bundle's owner (in the metadata store, which may not answer) is within the fan-out's bound
    too, for the namespace operations and the non-persistent topic list: a 503 naming the bundle once the bound has
    passed. It was outside it: the request waited as long as the lookup did (here: for ever)."""
    monkeypatch.setattr(owner_calls, "FANOUT_TIMEOUT_S", SHORT_BOUND_S)
    web_ = web_service(owner, local={0})
    never = asyncio.Event()

    async def hung_owner_of(bundle: NamespaceBundle) -> None:
        await never.wait()

    web_.service.ownership.owner_of = hung_owner_of
    ops = NamespaceOperationsResource(web_)
    topics = cast(TopicsResource, SimpleNamespace(service=web_.service, web=web_))
    try:
        async with asyncio.timeout(TEST_BOUND_S):
            with pytest.raises(HttpError) as cleared:
                await ops.each_bundle(request("POST", f"/admin/v2/namespaces/{NS}/clearBacklog"), NS, None, "POST",
                                      "clearBacklog", _nothing)
            with pytest.raises(HttpError) as listed:
                await TopicsResource.topics_of_namespace(topics, request("GET", f"/admin/v2/non-persistent/{NS}"),
                                                         NS, 1)
    finally:
        await web_.peers.close()
    first = f"looking up the owner of {NS}/{BUNDLES.bundles[1].range_name}: no answer within {SHORT_BOUND_S:g} s"
    for failed in (cleared, listed):
        assert failed.value.status_code == 503 and first in str(failed.value.text)
    assert owner.asked == []


async def test_every_bundle_is_asked_and_the_first_failure_in_bundle_order_answers(owner: Owner) -> None:
    """unsubscribe over 4 bundles: bundle 1 refuses (412, a connected consumer), bundle 3 fails (500). Pulsar's
    waitForAll: every bundle's call is made, the first failure in list order answers. The old code stopped at bundle
    1, leaving bundles 2 and 3 undone."""
    b = BUNDLES.bundles
    owner.statuses = {b[1].range_name: 412, b[3].range_name: 500}
    web_ = web_service(owner, local={0})
    ops = NamespaceOperationsResource(web_)
    try:
        with pytest.raises(HttpError) as failed:
            await ops.each_bundle(request("POST", f"/admin/v2/namespaces/{NS}/unsubscribe/s"), NS, None, "POST",
                                  "unsubscribe/s", _nothing)
    finally:
        await web_.peers.close()
    assert failed.value.status_code == 412 and f"bundle {b[1].range_name}" in str(failed.value.text)
    assert sorted(owner.asked) == sorted(x.range_name for x in b[1:])


async def test_a_hung_broker_costs_one_bounded_wait_for_the_non_persistent_topic_list(
        owner: Owner, monkeypatch: pytest.MonkeyPatch) -> None:
    """GET .../non-persistent/{ns} in cluster mode asks each other broker's bundles (getListInBundle): one bounded
    wait when that broker is hung (it was 60 s per bundle, one after another); the lists joined when it answers."""
    web_ = web_service(owner, local={0})
    topics = cast(TopicsResource, SimpleNamespace(service=web_.service, web=web_))
    get = request("GET", f"/admin/v2/non-persistent/{NS}")
    try:
        listed = await TopicsResource.topics_of_namespace(topics, get, NS, 1)
        assert listed == sorted(f"non-persistent://{NS}/on-{x.range_name}" for x in BUNDLES.bundles[1:])

        monkeypatch.setattr(owner_calls, "FANOUT_TIMEOUT_S", SHORT_BOUND_S)
        owner.hang = True
        started = time.monotonic()
        async with asyncio.timeout(TEST_BOUND_S):
            with pytest.raises(HttpError) as failed:
                await TopicsResource.topics_of_namespace(topics, get, NS, 1)
    finally:
        await web_.peers.close()
    assert failed.value.status_code == 503 and BUNDLES.bundles[1].range_name in str(failed.value.text)
    assert time.monotonic() - started < TEST_BOUND_S / 2


async def test_the_topic_list_of_a_bundle_nobody_owns_is_204(owner: Owner) -> None:
    """GET .../non-persistent/{ns}/{bundle} of a bundle no broker owns: 204 with no body, as Pulsar's
    NonPersistentTopics.getListFromBundle answers when isBundleOwnedByAnyBroker is false (it was 200 [])."""
    web_ = web_service(owner, local=set())
    bundle = BUNDLES.bundles[1]

    async def nobody(b: NamespaceBundle) -> None:
        return None

    web_.service.ownership.owner_of = nobody
    web_.service.peer_cluster_of = lambda ns, allow_deleted=False: None
    web_.namespaces = SimpleNamespace(namespace=lambda request: NS)
    web_.bundles = SimpleNamespace(ops=SimpleNamespace(bundle=lambda ns, name: bundle))
    topics = cast(TopicsResource, SimpleNamespace(service=web_.service, web=web_))
    path = f"/admin/v2/non-persistent/{NS}/{bundle.range_name}"
    get = make_mocked_request("GET", path, match_info={"tenant": "t", "ns": "ns", "bundle": bundle.range_name})
    try:
        answer = await TopicsResource.list_in_bundle(topics, get)
    finally:
        await web_.peers.close()
    assert (answer.status, answer.body) == (204, None)


async def test_an_owner_answering_204_lists_no_topics_of_that_bundle(owner: Owner) -> None:
    """The namespace-wide non-persistent list reads an owner's 204 (the bundle is owned by nobody by the time it is
    asked) as no topics, the other bundles' lists kept."""
    owner.unowned = {BUNDLES.bundles[2].range_name}
    web_ = web_service(owner, local={0})
    topics = cast(TopicsResource, SimpleNamespace(service=web_.service, web=web_))
    try:
        listed = await TopicsResource.topics_of_namespace(topics, request("GET", f"/admin/v2/non-persistent/{NS}"),
                                                          NS, 1)
    finally:
        await web_.peers.close()
    assert listed == sorted(f"non-persistent://{NS}/on-{BUNDLES.bundles[i].range_name}" for i in (1, 3))


async def _nothing(ns: str, bundle: NamespaceBundle | None) -> None:
    return None
