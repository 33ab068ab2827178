"""POST /admin/v2/namespaces/grantPermissionsOnTopics and .../revokePermissionsOnTopics without authentication, and
their parts: the options read into typed values, the one namespace, the store's one write for all of them. As Apache
Pulsar 4.0.7's NamespacesBase.internalGrantPermissionOnTopicsAsync / internalRevokePermissionOnTopicsAsync (javap, and a
standalone's answers: tests/admin/test_pulsar_shapes.py). With authentication and authorization on (who may call,
each refusal in order, bad input): tests/security/test_permissions_on_topics.py."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator

import pytest

from broker.admin.common import HttpError
from broker.admin.permissions import (
    GRANT_ON_TOPICS,
    REVOKE_ON_TOPICS,
    TopicPermissionOption,
    one_namespace,
    parse_topic_permission_options,
)
from broker.auth.refusals import TENANT_NOT_FOUND
from broker.embedded import BrokerThread
from broker.metadata.store import BrokerMetadata, TenantInfo, TopicGrant, TopicRole
from broker.topic_name import TopicName
from metadata_store.memory import MemoryMetadataStore
from tests.admin.conftest import Admin
from tests.security.test_permissions_on_topics import grant, refused


@pytest.fixture(scope="module")
def open_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerThread]:
    """No authentication; ACL changes on topics that do not exist allowed (a single topic's, not these)."""
    with BrokerThread(data_dir=tmp_path_factory.mktemp("open"), managedLedgerStorage="memory",
                      allowAclChangesOnNonExistentTopics=True) as broker:
        yield broker


# -- without authentication --------------------------------------------------------------------------------------------
def test_without_authentication_the_tenant_and_topics_are_still_checked(open_broker: BrokerThread) -> None:
    """The tenant is read (404) and every topic must exist, whatever allowAclChangesOnNonExistentTopics (Pulsar's
    batch does not read it; a single topic's grant does)."""
    admin = Admin(open_broker.web_url)
    ns = admin.new_namespace()
    missing = f"persistent://{ns}/missing"
    refused(admin.call("POST", GRANT_ON_TOPICS, [grant("persistent://nope/ns/t", "a", "produce")]), 404,
            TENANT_NOT_FOUND)
    refused(admin.call("POST", GRANT_ON_TOPICS, [grant(missing, "a", "produce")]), 404, f"Topic {missing} not found")
    assert admin.call("POST", f"/admin/v2/persistent/{ns}/missing/permissions/a", ["produce"]).status == 204
    admin.ok("PUT", f"/admin/v2/persistent/{ns}/t")
    admin.ok("POST", GRANT_ON_TOPICS, [grant(f"persistent://{ns}/t", "a", "consume")])
    assert admin.ok("GET", f"/admin/v2/persistent/{ns}/t/permissions") == {"a": ["consume"]}


def test_the_literal_routes_are_these_and_no_tenants(open_broker: BrokerThread) -> None:
    """Another method on these paths is another route's: a GET lists the namespaces of a tenant of that name (as
    Pulsar's, 404 "Tenant not found"), a PUT has no route (405)."""
    admin = Admin(open_broker.web_url)
    refused(admin.call("GET", GRANT_ON_TOPICS), 404, "Tenant not found")
    assert admin.call("PUT", REVOKE_ON_TOPICS, []).status == 405


# -- the parts ---------------------------------------------------------------------------------------------------------
def test_options_are_read_into_typed_values() -> None:
    body = [{"topic": "acme/ns/t", "role": "r", "actions": ["produce", "consume", "produce"]},
            {"topic": "non-persistent://acme/ns/n", "role": "s", "actions": []}]
    assert parse_topic_permission_options(body, grant=True) == [
        TopicPermissionOption(TopicName.parse("persistent://acme/ns/t"), "r", ("consume", "produce")),
        TopicPermissionOption(TopicName.parse("non-persistent://acme/ns/n"), "s", ())]
    # (a revoke's actions are not read)
    assert parse_topic_permission_options([{"topic": "t", "role": "r", "actions": "x"}], grant=False) == [
        TopicPermissionOption(TopicName.parse("t"), "r")]
    # Both domains of a namespace are one namespace.
    assert one_namespace(option.topic for option in parse_topic_permission_options(body, grant=True)) == "acme/ns"
    with pytest.raises(HttpError):
        one_namespace([])


@pytest.fixture
async def metadata() -> AsyncIterator[tuple[BrokerMetadata, MemoryMetadataStore]]:
    store = MemoryMetadataStore(f"test-{uuid.uuid4().hex}")
    m = BrokerMetadata("standalone")
    await m.start(store)
    await m.create_tenant("acme", TenantInfo((), ("standalone",)))
    await m.create_namespace("acme/ns", {})
    yield m, store
    await m.close()
    await store.close()


async def test_the_store_writes_all_grants_at_once(metadata: tuple[BrokerMetadata, MemoryMetadataStore]) -> None:
    """One write of the namespace's policies for all the options (Pulsar's one setPoliciesAsync), in order; a
    topic left without grants is dropped."""
    m, store = metadata
    path = "/admin/policies/acme/ns"

    async def version() -> int:
        found = await store.get(path)
        assert found is not None
        return found.stat.version

    before = await version()
    a, b = "persistent://acme/ns/a", "persistent://acme/ns/b"
    await m.grant_topic_permissions("acme/ns", [TopicGrant(a, "r", ("produce",)), TopicGrant(b, "r", ("consume",)),
                                                TopicGrant(a, "r", ("consume",)), TopicGrant(a, "s", ())])
    assert await version() == before + 1
    assert m.policy("acme/ns", "auth_policies")["destination_auth"] == {a: {"r": ["consume"], "s": []},
                                                                        b: {"r": ["consume"]}}
    await m.revoke_topic_permissions("acme/ns", [TopicRole(b, "r"), TopicRole(a, "s"), TopicRole(a, "never")])
    assert await version() == before + 2
    assert m.policy("acme/ns", "auth_policies")["destination_auth"] == {a: {"r": ["consume"]}}
