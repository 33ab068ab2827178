"""Admin REST: resource quotas (``pulsar-admin resource-quotas``), as Pulsar 4.0.7's ResourceQuotas resource:
the default quota and a bundle's, their JSON, where they are stored (Pulsar's ``/loadbalance/resource-quota``
nodes, read back through the metadata store, and nodes written as Pulsar writes them read here), every refusal, and
the super-user check with authorization on."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from broker.embedded import BrokerThread
from broker.metadata.layout import RESOURCE_QUOTA_ROOT, ResourceQuota
from broker.metadata.store import INITIAL_RESOURCE_QUOTA
from tests.admin.conftest import Admin
from tests.security.conftest import SUPER_USER, token
from tests.security.pki import make_pki
from tests.waiting import wait_for

ROOT = "/admin/v2/resource-quotas"
# BundlesQuotas.INITIAL_QUOTA as Pulsar 4.0.7 answers it (its Jackson: the fields in declaration order, doubles).
PULSAR_INITIAL = {"msgRateIn": 40.0, "msgRateOut": 120.0, "bandwidthIn": 100000.0, "bandwidthOut": 300000.0,
                  "memory": 80.0, "dynamic": True}
QUOTA = {"msgRateIn": 1.5, "msgRateOut": 2.0, "bandwidthIn": 3.0, "bandwidthOut": 4.0, "memory": 5.0,
         "dynamic": False}
FIRST = "0x00000000_0x40000000"
SECOND = "0x40000000_0x80000000"
TOKEN_PROVIDER = "org.apache.pulsar.broker.authentication.AuthenticationProviderToken"


@pytest.fixture(scope="module")
def pulsar_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerThread]:
    with BrokerThread(data_dir=tmp_path_factory.mktemp("resource-quotas"), managedLedgerStorage="memory") as b:
        yield b


@pytest.fixture
def fresh_default(admin: Admin) -> Iterator[None]:
    """Tests that set the default quota set it back to Pulsar's initial one after."""
    yield
    assert admin.post(ROOT, PULSAR_INITIAL).status == 204


def stored(broker: BrokerThread, key: str) -> Any:
    """The JSON of the node ``/loadbalance/resource-quota/<key>``, read from the metadata store (None: no node)."""
    store = broker.server.service.metadata.cache.store
    node = broker.run_coroutine(store.get(f"{RESOURCE_QUOTA_ROOT}/{key}"))
    return None if node is None else json.loads(node.value)


def put_node(broker: BrokerThread, key: str, value: bytes) -> None:
    """Write the node as another broker (Pulsar's) would, past this broker's metadata operations."""
    store = broker.server.service.metadata.cache.store
    broker.run_coroutine(store.put(f"{RESOURCE_QUOTA_ROOT}/{key}", value, None))


def test_the_initial_quota_is_pulsars(admin: Admin) -> None:
    assert INITIAL_RESOURCE_QUOTA.to_json() == PULSAR_INITIAL
    reply = admin.get(ROOT)
    assert reply.status == 200 and reply.headers["Content-Type"].startswith("application/json")
    assert reply.json == PULSAR_INITIAL
    assert list(reply.json) == list(PULSAR_INITIAL)  # (Pulsar's order)
    assert admin.get(f"{ROOT}/{admin.new_namespace()}/{FIRST}").json == PULSAR_INITIAL


@pytest.mark.usefixtures("fresh_default")
def test_default_quota_round_trip_and_stored_as_pulsar_stores_it(admin: Admin, pulsar_broker: BrokerThread) -> None:
    assert admin.post(ROOT, QUOTA).status == 204
    assert admin.get(ROOT).json == QUOTA
    # Pulsar's node and JSON: Jackson's ResourceQuota, doubles as doubles
    assert stored(pulsar_broker, "default") == QUOTA
    raw = pulsar_broker.run_coroutine(
        pulsar_broker.server.service.metadata.cache.store.get(f"{RESOURCE_QUOTA_ROOT}/default"))
    assert raw is not None and raw.value == (b'{"msgRateIn":1.5,"msgRateOut":2.0,"bandwidthIn":3.0,'
                                             b'"bandwidthOut":4.0,"memory":5.0,"dynamic":false}')
    # A bundle without a quota of its own answers the default one.
    ns = admin.new_namespace()
    assert admin.get(f"{ROOT}/{ns}/{SECOND}").json == QUOTA
    # The whole quota is replaced: what is not given is the constructor's (0, dynamic).
    assert admin.post(ROOT, {"memory": 7}).status == 204
    assert admin.get(ROOT).json == {**ResourceQuota().to_json(), "memory": 7.0}


def test_bundle_quota_round_trip_reset_and_stored_at_the_bundles_node(admin: Admin,
                                                                      pulsar_broker: BrokerThread) -> None:
    ns = admin.new_namespace()
    path = f"{ROOT}/{ns}/{FIRST}"
    assert admin.post(path, QUOTA).status == 204
    assert admin.get(path).json == QUOTA
    assert stored(pulsar_broker, f"{ns}/{FIRST}") == QUOTA
    assert admin.get(f"{ROOT}/{ns}/{SECOND}").json == PULSAR_INITIAL  # (its neighbour has none)
    # Replaced whole, as Pulsar's setWithCreate does.
    assert admin.post(path, {"msgRateOut": 9}).status == 204
    assert admin.get(path).json == {**ResourceQuota().to_json(), "msgRateOut": 9.0}
    assert admin.delete(path).status == 204
    assert stored(pulsar_broker, f"{ns}/{FIRST}") is None
    assert admin.get(path).json == PULSAR_INITIAL
    # Nothing to reset: Pulsar's metadata store's NotFoundException, 404 with its words.
    again = admin.delete(path)
    assert again.status == 404
    assert again.reason == f"path {RESOURCE_QUOTA_ROOT}/{ns}/{FIRST} not found."


def test_a_range_is_stored_under_its_canonical_name(admin: Admin, pulsar_broker: BrokerThread) -> None:
    """Pulsar reads a range with Long.decode and stores the quota at NamespaceBundle.toString()."""
    ns = admin.new_namespace()
    assert admin.post(f"{ROOT}/{ns}/0x0_0x40000000", {"msgRateIn": 3}).status == 204
    assert stored(pulsar_broker, f"{ns}/{FIRST}")["msgRateIn"] == 3.0
    assert admin.get(f"{ROOT}/{ns}/{FIRST}").json["msgRateIn"] == 3.0
    assert admin.delete(f"{ROOT}/{ns}/0x00000000_1073741824").status == 204


def test_body_read_as_pulsars_jackson_reads_it(admin: Admin) -> None:
    """Numbers as numbers or their text, unknown fields ignored, ``dynamic`` from Java's spellings and integers;
    null is Java's default for the field's primitive."""
    path = f"{ROOT}/{admin.new_namespace()}/{FIRST}"
    for body, expected in (
        ({"msgRateIn": "7", "unknown": [1]}, {"msgRateIn": 7.0}),
        ({"bandwidthIn": -5, "dynamic": "FALSE"}, {"bandwidthIn": -5.0, "dynamic": False}),
        ({"dynamic": 2, "memory": " 1e3 "}, {"memory": 1000.0}),
        ({"dynamic": 0}, {"dynamic": False}),
        ({"dynamic": None, "msgRateOut": None}, {"dynamic": False}),
        ({}, {}),
    ):
        assert admin.post(path, body).status == 204, body
        assert admin.get(path).json == {**ResourceQuota().to_json(), **expected}, body


@pytest.mark.parametrize("body, words", [
    ([1], "is a JSON object"),
    ("text", "is a JSON object"),
    ({"msgRateIn": "abc"}, "msgRateIn must be a number"),
    ({"msgRateOut": True}, "msgRateOut must be a number"),
    ({"bandwidthIn": [1]}, "bandwidthIn must be a number"),
    ({"memory": {}}, "memory must be a number"),
    ({"msgRateIn": "NaN"}, "msgRateIn must be a number"),
    ({"msgRateIn": "1e400"}, "msgRateIn must be a finite number"),
    ({"dynamic": "yes"}, "dynamic must be true or false"),
    ({"dynamic": 1.5}, "dynamic must be true or false"),
])
def test_a_body_that_is_no_resource_quota_is_400(admin: Admin, body: Any, words: str) -> None:
    ns = admin.new_namespace()
    for path in (ROOT, f"{ROOT}/{ns}/{FIRST}"):
        reply = admin.post(path, body)
        assert reply.status == 400 and words in reply.reason, (path, reply.status, reply.body)
    assert admin.get(ROOT).json == PULSAR_INITIAL


@pytest.mark.parametrize("raw", [b"", b"null", b"{not json", b"NaN", b'{"msgRateIn": 1e400}'])
def test_no_body_or_no_json_is_400(admin: Admin, raw: bytes) -> None:
    """Pulsar 4.0.7 writes ``null`` into the node for a POST without a body (then fails every later POST of it with
    500): ours refuses it."""
    for path in (ROOT, f"{ROOT}/{admin.new_namespace()}/{FIRST}"):
        reply = admin.call("POST", path, raw=raw)
        assert reply.status == 400 and reply.reason, (path, reply.status, reply.body)
    assert admin.get(ROOT).json == PULSAR_INITIAL


def test_refusals_in_pulsars_order_and_words(admin: Admin) -> None:
    ns = admin.new_namespace()
    for method, body in (("GET", None), ("POST", {}), ("DELETE", None)):
        def call(path: str, method: str = method, body: Any = body) -> tuple[int, str]:
            reply = admin.call(method, path, body)
            return reply.status, reply.reason

        assert call(f"{ROOT}/public/bad%20name/{FIRST}") == (412, "Namespace name is not valid")
        assert call(f"{ROOT}/public/nosuch/{FIRST}") == (404, "Namespace does not exist")
        assert call(f"{ROOT}/nosuchtenant/ns/{FIRST}") == (404, "Namespace does not exist")
        assert call(f"{ROOT}/public/nosuch/bogus") == (404, "Namespace does not exist")  # (the namespace first)
        assert call(f"{ROOT}/{ns}/bogus") == (412, "Invalid bundle range: bogus")
        assert call(f"{ROOT}/{ns}/0x10000000_0x40000000") == (
            412, f"Cannot find bundle {ns}/0x10000000_0x40000000 in the bundles list")
        assert call(f"{ROOT}/{ns}/0x00000000_0x30000000") == (
            412, f"Invalid upper boundary for bundle {ns}/0x00000000_0x30000000. Expected upper boundary of "
                 f"{ns}/{FIRST}")
    # The body is read first (Jersey binds it before the method runs).
    assert admin.call("POST", f"{ROOT}/public/nosuch/bogus", raw=b"nonsense").status == 400
    # Methods Pulsar has not: 405.
    for method, path in (("PUT", ROOT), ("DELETE", ROOT), ("PUT", f"{ROOT}/{ns}/{FIRST}")):
        assert admin.call(method, path, {}).status == 405, (method, path)
    assert admin.get(f"{ROOT}/{ns}").status == 404


def test_a_split_bundle_keeps_its_quota_and_its_children_have_none(admin: Admin) -> None:
    """As in Pulsar: a quota is the bundle's by its range; nothing moves it at a split (nor at a namespace's
    deletion)."""
    ns = admin.new_namespace()
    assert admin.post(f"{ROOT}/{ns}/{FIRST}", QUOTA).status == 204
    assert admin.put(f"/admin/v2/namespaces/{ns}/{FIRST}/split?splitAlgorithmName=range_equally_divide").status == 204
    assert admin.get(f"{ROOT}/{ns}/0x00000000_0x20000000").json == PULSAR_INITIAL
    gone = admin.get(f"{ROOT}/{ns}/{FIRST}")
    assert gone.status == 412 and gone.reason.startswith(f"Invalid upper boundary for bundle {ns}/{FIRST}")


@pytest.mark.usefixtures("fresh_default")
def test_nodes_written_by_pulsar_are_read(admin: Admin, pulsar_broker: BrokerThread) -> None:
    """What a Pulsar broker on the same ZooKeeper writes (its SimpleLoadManagerImpl writes measured quotas): its JSON
    with fields we do not know, a ``null`` node (Pulsar's POST without a body), a tenant named "default" whose
    bundles' quotas are below the default quota's node."""
    ns = admin.new_namespace()
    put_node(pulsar_broker, f"{ns}/{SECOND}",
             b'{"msgRateIn":10.0,"msgRateOut":20.0,"bandwidthIn":30.0,"bandwidthOut":40.0,"memory":50.0,'
             b'"dynamic":true,"future":1}')
    wait_for(lambda: admin.get(f"{ROOT}/{ns}/{SECOND}").json["msgRateIn"] == 10.0, 10, "Pulsar's node read")
    assert admin.get(f"{ROOT}/{ns}/{SECOND}").json == {"msgRateIn": 10.0, "msgRateOut": 20.0, "bandwidthIn": 30.0,
                                                       "bandwidthOut": 40.0, "memory": 50.0, "dynamic": True}
    put_node(pulsar_broker, "default", b'{"msgRateIn":8}')
    wait_for(lambda: admin.get(ROOT).json["msgRateIn"] == 8.0, 10, "Pulsar's default node read")
    put_node(pulsar_broker, "default", b"null")
    wait_for(lambda: admin.get(ROOT).json == PULSAR_INITIAL, 10, "a null node read as none")
    assert admin.post(ROOT, QUOTA).status == 204  # (over the null node: Pulsar's own POST fails there)
    assert admin.get(ROOT).json == QUOTA
    put_node(pulsar_broker, f"{ns}/{SECOND}", b"null")
    wait_for(lambda: admin.get(f"{ROOT}/{ns}/{SECOND}").json == QUOTA, 10, "a null bundle node read as none")
    assert admin.delete(f"{ROOT}/{ns}/{SECOND}").status == 204  # (the node is there: deleted, as Pulsar's)
    # A tenant named "default": its bundles' nodes below the default quota's node, each read as its own.
    assert admin.put("/admin/v2/tenants/default", {"allowedClusters": ["standalone"]}).status == 204
    assert admin.put("/admin/v2/namespaces/default/ns").status == 204
    assert admin.post(f"{ROOT}/default/ns/{FIRST}", {"memory": 1}).status == 204
    assert stored(pulsar_broker, "default") == QUOTA
    assert stored(pulsar_broker, f"default/ns/{FIRST}")["memory"] == 1.0
    assert admin.get(ROOT).json == QUOTA
    assert admin.get(f"{ROOT}/default/ns/{FIRST}").json["memory"] == 1.0
    assert admin.get(f"{ROOT}/default/ns/{SECOND}").json == QUOTA


def test_quotas_survive_a_restart(tmp_path: Path) -> None:
    with BrokerThread(data_dir=tmp_path, managedLedgerStorage="memory") as broker:
        admin = Admin(broker.web_url)
        ns = admin.new_namespace()
        assert admin.post(f"{ROOT}/{ns}/{FIRST}", QUOTA).status == 204
        assert admin.post(ROOT, {"memory": 3}).status == 204
    with BrokerThread(data_dir=tmp_path, managedLedgerStorage="memory") as broker:
        admin = Admin(broker.web_url)
        assert admin.get(f"{ROOT}/{ns}/{FIRST}").json == QUOTA
        assert admin.get(ROOT).json["memory"] == 3.0


def test_super_users_only_checked_where_pulsar_checks(tmp_path: Path) -> None:
    """With authorization on: ResourceQuotasBase's validateSuperUserAccessAsync (401, its words), after the body
    (400) and the namespace's name (412), before the namespace (404)."""
    pki = make_pki(tmp_path)
    settings: dict[str, Any] = {
        "managedLedgerStorage": "memory", "authenticationEnabled": True, "authenticationProviders": TOKEN_PROVIDER,
        "tokenSecretKey": f"file://{pki.secret_key}", "authorizationEnabled": True, "superUserRoles": SUPER_USER}
    root = {"Authorization": f"Bearer {token(SUPER_USER)}"}
    stranger = {"Authorization": f"Bearer {token('stranger')}"}
    with BrokerThread(data_dir=tmp_path / "broker", **settings) as broker:
        def call(method: str, path: str, headers: dict[str, str], body: Any = None,
                 raw: bytes | None = None) -> tuple[int, str]:
            data = raw if raw is not None else None if body is None else json.dumps(body).encode()
            reply = requests.request(method, broker.web_url + path, headers={
                **headers, "Content-Type": "application/json"}, data=data, timeout=30)
            return reply.status_code, reply.json().get("reason", "") if reply.content else ""

        ns = f"public/ns-{uuid.uuid4().hex[:8]}"
        assert call("PUT", f"/admin/v2/namespaces/{ns}", root)[0] == 204
        bundle = f"{ROOT}/{ns}/{FIRST}"
        assert call("GET", ROOT, {}) == (401, "Authentication required")
        refused = (401, "This operation requires super-user access")
        for method, path, body in (("GET", ROOT, None), ("POST", ROOT, QUOTA), ("GET", bundle, None),
                                   ("POST", bundle, QUOTA), ("DELETE", bundle, None),
                                   ("GET", f"{ROOT}/public/nosuch/{FIRST}", None)):
            assert call(method, path, stranger, body) == refused, (method, path)
        assert call("POST", ROOT, stranger, raw=b"nonsense")[0] == 400
        assert call("POST", bundle, stranger, raw=b"[]")[0] == 400
        assert call("GET", f"{ROOT}/public/bad%20name/{FIRST}", stranger) == (412, "Namespace name is not valid")
        assert call("POST", bundle, root, QUOTA)[0] == 204
        assert call("GET", bundle, root) == (200, "")
        assert call("POST", ROOT, root, QUOTA)[0] == 204
        assert call("DELETE", bundle, root)[0] == 204
