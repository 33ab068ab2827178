"""Admin REST: /admin/v2/bookies (Pulsar 4.0.7's admin.v2.Bookies) on a single broker with file storage: the racks
are stored all the same; there are no bookies to list."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest

from broker.admin.bookies import RACK_INVALID
from broker.embedded import BrokerThread
from broker.topic_name import TopicName
from tests.admin.conftest import Admin

RACKS = "/admin/v2/bookies/racks-info"


@pytest.fixture(scope="module")
def pulsar_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerThread]:
    with BrokerThread(data_dir=tmp_path_factory.mktemp("bookies")) as b:
        yield b


def bookie() -> str:
    return f"10.{uuid.uuid4().int % 250}.0.1:{3000 + uuid.uuid4().int % 1000}"


def test_racks_info_round_trip(admin: Admin) -> None:
    a, b = bookie(), bookie()
    assert admin.call("POST", f"{RACKS}/{a}?group=g1", {"rack": "rack-1", "hostname": "bk-a"}).status == 204
    assert admin.call("POST", f"{RACKS}/{b}?group=g1", {"rack": "/rack-2/"}).status == 204
    assert admin.ok("GET", f"{RACKS}/{a}") == {"rack": "rack-1", "hostname": "bk-a"}
    assert admin.ok("GET", f"{RACKS}/{b}") == {"rack": "/rack-2/"}  # (stored as given)
    assert admin.ok("GET", RACKS)["g1"] == {a: {"rack": "rack-1", "hostname": "bk-a"}, b: {"rack": "/rack-2/"}}
    # Updating a bookie in another group moves it there (BookiesRackConfiguration.updateBookie).
    assert admin.call("POST", f"{RACKS}/{a}?group=g2", {"rack": "rack-3"}).status == 204
    everything = admin.ok("GET", RACKS)
    assert everything["g2"][a] == {"rack": "rack-3"} and a not in everything["g1"]
    # Deleting the last bookie of a group drops the group.
    assert admin.delete(f"{RACKS}/{a}").status == 204
    assert "g2" not in admin.ok("GET", RACKS)
    reply = admin.get(f"{RACKS}/{a}")
    assert (reply.status, reply.reason) == (404, f"Bookie rack placement configuration not found: {a}")
    reply = admin.delete(f"{RACKS}/{a}")
    assert (reply.status, reply.reason) == (404, f"Bookie rack placement configuration not found: {a}")
    assert admin.delete(f"{RACKS}/{b}").status == 204


def test_racks_info_refusals_in_pulsars_words(admin: Admin) -> None:
    b = bookie()
    reply = admin.call("POST", f"{RACKS}/{b}", {"rack": "r"})
    assert (reply.status, reply.reason) == (412, "Bookie 'group' parameters is missing")
    # Rack-aware placement (the default): no "/" inside a rack name.
    reply = admin.call("POST", f"{RACKS}/{b}?group=g", {"rack": "region/rack"})
    assert (reply.status, reply.reason) == (412, RACK_INVALID)
    assert RACK_INVALID.startswith("Bookie 'rack' parameter is invalid, When `RackawareEnsemblePlacementPolicy`")
    assert admin.call("POST", f"{RACKS}/{b}?group=g", raw=b"[1]").status == 400
    assert admin.call("POST", f"{RACKS}/{b}?group=g", {"rack": 5}).status == 400
    assert admin.get(f"{RACKS}/{b}").status == 404


def test_all_bookies_without_bookkeeper_says_why(admin: Admin) -> None:
    reply = admin.get("/admin/v2/bookies/all")
    assert reply.status == 412 and "managedLedgerStorage=file" in reply.reason and "no bookies" in reply.reason


AFFINITY_GROUP = {"bookkeeperAffinityGroupPrimary": "g1,g2", "bookkeeperAffinityGroupSecondary": "g3"}


def test_bookie_affinity_group_round_trip(admin: Admin, pulsar_broker: BrokerThread) -> None:
    """NamespacesBase.internal{Set,Get,Delete}BookieAffinityGroup: kept in the namespace's LocalPolicies
    (bookieAffinityGroup), 204 when none; the namespace's topics' new ledgers get it (getManagedLedgerConfig)."""
    ns = f"public/affinity-{uuid.uuid4().hex[:8]}"
    path = f"/admin/v2/namespaces/{ns}/persistence/bookieAffinity"
    assert admin.put(f"/admin/v2/namespaces/{ns}").status == 204
    assert admin.get(path).status == 204
    service = pulsar_broker.server.service
    topic = TopicName.parse(f"persistent://{ns}/t")

    async def affinity() -> tuple[str, str] | None:
        return service.ledger_config_for(topic).bookie_affinity

    assert pulsar_broker.run_coroutine(affinity()) is None
    assert admin.post(path, AFFINITY_GROUP).status == 204
    assert admin.ok("GET", path) == AFFINITY_GROUP

    def local_policies() -> dict[str, object]:
        store = service.metadata_store
        assert store is not None
        got = pulsar_broker.run_coroutine(store.get(f"/admin/local-policies/{ns}"))
        assert got is not None
        doc = json.loads(got.value)
        assert isinstance(doc, dict)
        return doc

    local = local_policies()
    assert local["bookieAffinityGroup"] == AFFINITY_GROUP and "bundles" in local
    assert pulsar_broker.run_coroutine(affinity()) == ("g1,g2", "g3")
    # Only a primary group.
    assert admin.post(path, {"bookkeeperAffinityGroupPrimary": "g9"}).status == 204
    assert admin.ok("GET", path) == {"bookkeeperAffinityGroupPrimary": "g9"}
    assert pulsar_broker.run_coroutine(affinity()) == ("g9", "")
    assert admin.delete(path).status == 204
    assert admin.get(path).status == 204
    assert "bookieAffinityGroup" not in local_policies()
    assert pulsar_broker.run_coroutine(affinity()) is None


def test_bookie_affinity_group_refusals(admin: Admin) -> None:
    missing = "/admin/v2/namespaces/public/no-such-ns/persistence/bookieAffinity"
    for method in ("GET", "POST", "DELETE"):
        reply = admin.call(method, missing, AFFINITY_GROUP if method == "POST" else None)
        assert (reply.status, reply.reason) == (404, "Namespace does not exist"), method
    ns = f"public/affinity-{uuid.uuid4().hex[:8]}"
    assert admin.put(f"/admin/v2/namespaces/{ns}").status == 204
    path = f"/admin/v2/namespaces/{ns}/persistence/bookieAffinity"
    assert admin.call("POST", path, raw=b"[1]").status == 400
    assert admin.call("POST", path, {"bookkeeperAffinityGroupPrimary": 5}).status == 400
    assert admin.get(path).status == 204
