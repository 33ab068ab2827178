"""Admin REST v2 over real HTTP: clusters, tenants, namespaces and their policies, with errors."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pulsar
import pytest

from broker.embedded import BrokerThread
from broker.topic_name import TopicName
from tests.admin.conftest import Admin

NS = "/admin/v2/namespaces"


def test_clusters_tenants_and_brokers(admin: Admin) -> None:
    assert admin.ok("GET", "/admin/v2/clusters") == ["standalone"]
    assert admin.get("/admin/v2/clusters/nowhere").status == 404
    brokers = admin.ok("GET", "/admin/v2/brokers/standalone")
    assert len(brokers) == 1 and ":" in brokers[0]
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    assert admin.put(f"/admin/v2/tenants/{tenant}", {"allowedClusters": ["standalone"]}).status == 204
    assert admin.put(f"/admin/v2/tenants/{tenant}", {"allowedClusters": ["standalone"]}).status == 409
    assert admin.ok("GET", f"/admin/v2/tenants/{tenant}")["allowedClusters"] == ["standalone"]
    assert admin.put("/admin/v2/tenants/bad-cluster-t", {"allowedClusters": ["mars"]}).status == 412
    # Bodies of the wrong shape are a 400 (they were a 500, or "abc" stored as ["a", "b", "c"]); no clusters a 412.
    for body in ({"adminRoles": 5}, {"adminRoles": "abc"}, {"allowedClusters": "standalone"},
                 {"allowedClusters": [1]}):
        assert admin.put("/admin/v2/tenants/bad-body-t", body).status == 400, body
    assert admin.put("/admin/v2/tenants/bad-body-t", {"allowedClusters": []}).status == 412
    assert admin.get("/admin/v2/tenants/bad-body-t").status == 404
    # Pulsar's name rule (ASCII letters, digits and -=._): others are a 412, as Pulsar answers.
    for name in ("%E2%98%83", "%25", "a%22b", "a%23b", "a'b", "caf%C3%A9"):
        assert admin.put(f"/admin/v2/tenants/{name}", {}).status == 412, name
        assert admin.put(f"{NS}/public/{name}").status == 412, name
    assert admin.get("/admin/v2/tenants/no-such-tenant").status == 404
    assert admin.put(f"{NS}/{tenant}/ns1").status == 204
    assert admin.delete(f"/admin/v2/tenants/{tenant}").status == 409  # still has a namespace
    assert admin.delete(f"{NS}/{tenant}/ns1").status == 204
    assert admin.delete(f"/admin/v2/tenants/{tenant}").status == 204
    null_roles = f"t-{uuid.uuid4().hex[:8]}"
    roles_null = {"adminRoles": None, "allowedClusters": ["standalone"]}
    assert admin.put(f"/admin/v2/tenants/{null_roles}", roles_null).status == 204  # null: none
    assert "adminRoles" not in admin.ok("GET", f"/admin/v2/tenants/{null_roles}")  # (as Pulsar answers it)


def test_namespace_lifecycle_and_errors(admin: Admin) -> None:
    ns = admin.new_namespace()
    tenant, local = ns.split("/")
    assert ns in admin.ok("GET", f"{NS}/{tenant}")
    assert admin.put(f"{NS}/{ns}").status == 409
    reply = admin.put(f"{NS}/no-such-tenant/x")
    assert reply.status == 404 and reply.reason == "Tenant does not exist"
    reply = admin.get(f"{NS}/{tenant}/no-such-ns")
    assert reply.status == 404 and "Namespace" in reply.reason
    reply = admin.put(f"{NS}/{tenant}/bad%20name")
    assert (reply.status, reply.reason) == (412, "Namespace name is not valid")
    assert admin.call("PUT", f"{NS}/{tenant}/junk-{local}", raw=b"{not json").status == 400
    policies = admin.ok("GET", f"{NS}/{ns}")
    assert policies["replication_clusters"] == ["standalone"] and policies["backlog_quota_map"] == {}
    assert admin.delete(f"{NS}/{ns}").status == 204
    assert admin.get(f"{NS}/{ns}").status == 404


def test_namespace_created_with_policies_body(admin: Admin) -> None:
    ns = f"public/withpol-{uuid.uuid4().hex[:8]}"
    body = {"message_ttl_in_seconds": 120, "retention_policies": {"retentionTimeInMinutes": 5, "retentionSizeInMB": 10}}
    assert admin.put(f"{NS}/{ns}", body).status == 204
    assert admin.ok("GET", f"{NS}/{ns}/messageTTL") == 120
    assert admin.ok("GET", f"{NS}/{ns}")["retention_policies"]["retentionSizeInMB"] == 10
    bad = admin.put(f"{NS}/public/badpol-{uuid.uuid4().hex[:8]}", {"message_ttl_in_seconds": -1})
    assert bad.status == 412 and "TTL" in bad.reason


def test_namespace_created_with_properties_body(admin: Admin) -> None:
    """Policies' properties are a map of strings (Pulsar's Policies.properties, Map<String, String>): a body whose
    properties are no JSON object of strings is refused (400, as Pulsar's JSON binding refuses it), not stored for
    the property calls to fail on later."""
    ns = f"public/withprops-{uuid.uuid4().hex[:8]}"
    not_properties: list[object] = [1, "x", ["a"], {"a": {}}]
    for properties in not_properties:
        bad = admin.put(f"{NS}/{ns}", {"properties": properties})
        assert bad.status == 400 and "properties" in bad.reason, (properties, bad.status, bad.body)
    assert admin.get(f"{NS}/{ns}").status == 404
    assert admin.put(f"{NS}/{ns}", {"properties": {"a": "1"}}).status == 204
    assert admin.ok("GET", f"{NS}/{ns}/properties") == {"a": "1"}
    assert admin.delete(f"{NS}/{ns}/property/a").status == 204
    assert admin.ok("GET", f"{NS}/{ns}/properties") == {}


def test_retention_ttl_and_auto_topic_creation_policies(admin: Admin) -> None:
    ns = admin.new_namespace()
    assert admin.get(f"{NS}/{ns}/retention").unset  # not set
    assert admin.post(f"{NS}/{ns}/retention", {"retentionTimeInMinutes": 60, "retentionSizeInMB": 100}).status == 204
    assert admin.ok("GET", f"{NS}/{ns}/retention") == {"retentionTimeInMinutes": 60, "retentionSizeInMB": 100}
    reply = admin.post(f"{NS}/{ns}/retention", {"retentionTimeInMinutes": 0, "retentionSizeInMB": 5})
    assert reply.status == 400 and "retention" in reply.reason.lower()  # (Pulsar's checkArgument)
    assert admin.post(f"{NS}/{ns}/retention", {"retentionTimeInMinutes": "soon"}).status == 400

    assert admin.get(f"{NS}/{ns}/messageTTL").unset
    assert admin.post(f"{NS}/{ns}/messageTTL", 300).status == 204
    assert admin.ok("GET", f"{NS}/{ns}/messageTTL") == 300
    assert admin.post(f"{NS}/{ns}/messageTTL", -5).status == 412
    assert admin.post(f"{NS}/{ns}/messageTTL", "300").status == 400
    assert admin.delete(f"{NS}/{ns}/messageTTL").status == 204
    assert admin.get(f"{NS}/{ns}/messageTTL").unset

    override = {"allowAutoTopicCreation": True, "topicType": "partitioned", "defaultNumPartitions": 2}
    assert admin.post(f"{NS}/{ns}/autoTopicCreation", override).status == 204
    assert admin.ok("GET", f"{NS}/{ns}/autoTopicCreation") == override
    bad = admin.post(f"{NS}/{ns}/autoTopicCreation", {"allowAutoTopicCreation": True, "topicType": "weird"})
    assert bad.status == 412 and "Unknown topic type" in bad.reason
    assert admin.ok("GET", f"{NS}/{ns}")["autoTopicCreationOverride"] == override
    assert admin.delete(f"{NS}/{ns}/autoTopicCreation").status == 204
    assert admin.get(f"{NS}/{ns}/autoTopicCreation").unset


def test_backlog_quota_policies(admin: Admin) -> None:
    ns = admin.new_namespace()
    assert admin.ok("GET", f"{NS}/{ns}/backlogQuotaMap") == {}
    quota = {"limitSize": 1 << 20, "limitTime": -1, "policy": "producer_exception"}
    assert admin.post(f"{NS}/{ns}/backlogQuota", quota).status == 204
    age = {"limitTime": 3600, "policy": "consumer_backlog_eviction"}
    assert admin.post(f"{NS}/{ns}/backlogQuota?backlogQuotaType=message_age", age).status == 204
    got = admin.ok("GET", f"{NS}/{ns}/backlogQuotaMap")
    assert got["destination_storage"] == {"limit": 1 << 20, "limitSize": 1 << 20, "limitTime": -1,
                                          "policy": "producer_exception"}
    assert got["message_age"]["limitTime"] == 3600 and got["message_age"]["policy"] == "consumer_backlog_eviction"
    assert admin.ok("GET", f"{NS}/{ns}/backlogQuota")["policy"] == "producer_exception"
    assert admin.post(f"{NS}/{ns}/backlogQuota", {"limitSize": 1, "policy": "nope"}).status == 400
    assert admin.post(f"{NS}/{ns}/backlogQuota?backlogQuotaType=bogus", quota).status == 400
    # a quota at or above the retention size is refused, and vice versa
    assert admin.post(f"{NS}/{ns}/retention", {"retentionTimeInMinutes": -1, "retentionSizeInMB": 1}).status == 412
    assert admin.delete(f"{NS}/{ns}/backlogQuota").status == 204
    assert admin.delete(f"{NS}/{ns}/backlogQuota?backlogQuotaType=message_age").status == 204
    assert admin.ok("GET", f"{NS}/{ns}/backlogQuotaMap") == {}
    assert admin.post(f"{NS}/{ns}/retention", {"retentionTimeInMinutes": -1, "retentionSizeInMB": 1}).status == 204
    reply = admin.post(f"{NS}/{ns}/backlogQuota", {"limitSize": 2 << 20, "policy": "producer_request_hold"})
    assert reply.status == 412 and "retention" in reply.reason


def test_policies_survive_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with BrokerThread(data_dir=data) as broker:
        admin = Admin(broker.web_url)
        admin.ok("PUT", f"{NS}/public/kept")
        admin.ok("POST", f"{NS}/public/kept/messageTTL", 42)
        admin.ok("POST", f"{NS}/public/kept/retention", {"retentionTimeInMinutes": 10, "retentionSizeInMB": 20})
        admin.ok("POST", f"{NS}/public/kept/backlogQuota", {"limitSize": 1000, "policy": "producer_request_hold"})
        admin.ok("POST", f"{NS}/public/kept/autoTopicCreation", {"allowAutoTopicCreation": False})
    with BrokerThread(data_dir=data) as broker:
        admin = Admin(broker.web_url)
        policies = admin.ok("GET", f"{NS}/public/kept")
        assert policies["message_ttl_in_seconds"] == 42
        assert policies["retention_policies"] == {"retentionTimeInMinutes": 10, "retentionSizeInMB": 20}
        assert policies["backlog_quota_map"]["destination_storage"]["limitSize"] == 1000
        assert policies["autoTopicCreationOverride"] == {"allowAutoTopicCreation": False}
        # the namespace refuses auto-creation; an admin create still works
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=5)
        try:
            with pytest.raises(pulsar.TopicNotFound):
                client.create_producer("persistent://public/kept/auto")
            admin.ok("PUT", "/admin/v2/persistent/public/kept/explicit")
            client.create_producer("persistent://public/kept/explicit").send(b"x")
        finally:
            client.close()


def test_topic_in_missing_namespace_is_refused(admin: Admin, client: pulsar.Client) -> None:
    with pytest.raises(pulsar.TopicNotFound):
        client.create_producer("persistent://public/never-created/t")
    assert admin.get("/admin/v2/namespaces/public/never-created").status == 404


def test_delete_namespace_with_topics_needs_force(admin: Admin, client: pulsar.Client) -> None:
    ns = admin.new_namespace()
    admin.ok("PUT", f"/admin/v2/persistent/{ns}/p/partitions", 2)
    client.create_producer(f"persistent://{ns}/t").send(b"x")
    assert admin.delete(f"{NS}/{ns}").status == 409
    assert admin.delete(f"{NS}/{ns}?force=true").status == 204
    assert admin.get(f"{NS}/{ns}").status == 404


def test_retention_change_reaches_a_loaded_topic(admin: Admin, pulsar_broker: BrokerThread) -> None:
    ns = admin.new_namespace()
    topic = f"persistent://{ns}/retained"
    client = pulsar.Client(pulsar_broker.service_url, operation_timeout_seconds=10)
    try:
        client.create_producer(topic).send(b"x")
        service = pulsar_broker.server.service
        loaded = service.topics[topic]
        assert loaded.ledger.config.retention_time_s == 0
        policy = {"retentionTimeInMinutes": 60, "retentionSizeInMB": 100}
        assert admin.post(f"{NS}/{ns}/retention", policy).status == 204  # reaches it at once
        assert loaded.ledger.config.retention_time_s == 3600
        assert loaded.ledger.config.retention_size_bytes == 100 * 1024 * 1024
        # (The housekeeping task keeps doing it, for time-based retention without traffic.)
        pulsar_broker.run_coroutine(service.housekeeping.apply_retention())
        assert loaded.ledger.config.retention_time_s == 3600
    finally:
        client.close()


def test_a_topic_loaded_after_a_retention_change_gets_it(admin: Admin, pulsar_broker: BrokerThread) -> None:
    """The managed-ledger configs of loading topics are made once per set of policy values and
    shared (frozen); a topic that loads after a change gets the new values, the others keep theirs."""
    ns, other = admin.new_namespace(), admin.new_namespace()
    service = pulsar_broker.server.service
    before, elsewhere = TopicName.parse(f"persistent://{ns}/before"), TopicName.parse(f"persistent://{other}/t")
    assert service.ledger_config_for(before) is service.ledger_config_for(elsewhere)  # (the same values)
    assert service.ledger_config_for(before).retention_time_s == 0
    policy = {"retentionTimeInMinutes": 60, "retentionSizeInMB": 100}
    assert admin.post(f"{NS}/{ns}/retention", policy).status == 204
    after = service.ledger_config_for(TopicName.parse(f"persistent://{ns}/after"))
    assert (after.retention_time_s, after.retention_size_bytes) == (3600, 100 * 1024 * 1024)
    assert service.ledger_config_for(elsewhere).retention_time_s == 0
    assert admin.post(f"{NS}/{ns}/persistence", {"bookkeeperEnsemble": 1, "bookkeeperWriteQuorum": 1,
                                                  "bookkeeperAckQuorum": 1, "managedLedgerMaxMarkDeleteRate": 2.5},
                      ).status == 204
    assert service.ledger_config_for(before).mark_delete_rate == 2.5
    assert service.ledger_config_for(elsewhere).mark_delete_rate is None


def test_schema_validation_enforced_and_auto_update(admin: Admin, client: pulsar.Client) -> None:
    ns = admin.new_namespace()
    for policy, unset in (("schemaValidationEnforced", False), ("isAllowAutoUpdateSchema", True)):
        assert admin.ok("GET", f"{NS}/{ns}/{policy}") is unset
        assert admin.post(f"{NS}/{ns}/{policy}", "no").status == 400
    # schemaValidationEnforced: once a topic has a schema, producers without one are refused.
    admin.ok("POST", f"{NS}/{ns}/schemaValidationEnforced", True)
    typed = f"persistent://{ns}/typed"
    client.create_producer(typed).close()  # no schema yet: fine
    client.create_producer(typed, schema=pulsar.schema.StringSchema()).close()
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(typed)
    # isAllowAutoUpdateSchema=false: producers cannot add schema versions; the admin API can.
    admin.ok("POST", f"{NS}/{ns}/isAllowAutoUpdateSchema", False)
    fixed = f"persistent://{ns}/fixed"
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(fixed, schema=pulsar.schema.StringSchema())
    stored = admin.ok("GET", f"/admin/v2/schemas/{ns}/typed/schema")  # what the client's StringSchema is
    reply = admin.post(f"/admin/v2/schemas/{ns}/fixed/schema",
                       {"type": stored["type"], "schema": stored["data"], "properties": stored["properties"]})
    assert reply.status == 200
    producer = client.create_producer(fixed, schema=pulsar.schema.StringSchema())
    producer.send("typed")
    producer.close()


A = {"name": "a", "type": "string"}


def evolving(*fields: dict[str, Any]) -> Any:
    """The Avro schema of a record named Evolving with these fields (Avro resolves records of one name)."""
    return pulsar.schema.AvroSchema(None, {"type": "record", "name": "Evolving", "fields": list(fields)})


def test_schema_auto_update_compatibility_strategy(admin: Admin, client: pulsar.Client) -> None:
    """``.../schemaAutoUpdateCompatibilityStrategy`` (pulsar-admin namespaces get/set-schema-autoupdate-strategy):
    Pulsar's older schema policy, a Policies field of its own, in force where the namespace's
    schemaCompatibilityStrategy is UNDEFINED (AutoUpdateDisabled: no new schema version at all)."""
    ns = admin.new_namespace()
    path = f"{NS}/{ns}/schemaAutoUpdateCompatibilityStrategy"
    unset = admin.get(path)
    assert (unset.status, unset.body) == (204, b"")  # (Pulsar's method is synchronous: null is a 204)
    assert "schema_auto_update_compatibility_strategy" not in admin.ok("GET", f"{NS}/{ns}")  # (null: left out)
    for name in ("Backward", "Forward", "Full", "AlwaysCompatible", "BackwardTransitive", "ForwardTransitive",
                 "FullTransitive", "AutoUpdateDisabled"):
        assert admin.put(path, name).status == 204
        assert admin.ok("GET", path) == name
    assert admin.ok("GET", f"{NS}/{ns}")["schema_auto_update_compatibility_strategy"] == "AutoUpdateDisabled"
    assert admin.ok("GET", f"{NS}/{ns}/schemaCompatibilityStrategy") == "UNDEFINED"  # (its own field, unchanged)
    # in force: AutoUpdateDisabled refuses any new version (ALWAYS_INCOMPATIBLE; the broker's FULL would take this
    # one), AlwaysCompatible takes one FULL refuses; the admin's check names the strategy
    topic = f"persistent://{ns}/evolving"
    client.create_producer(topic, schema=evolving(A)).close()  # (a first schema is always taken)
    added = evolving(A, {"name": "b", "type": "int", "default": 0})  # (FULL takes it)
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(topic, schema=added)
    stored = admin.ok("GET", f"/admin/v2/schemas/{ns}/evolving/schema")
    check = admin.post(f"/admin/v2/schemas/{ns}/evolving/compatibility",
                       {"type": stored["type"], "schema": stored["data"], "properties": {}})
    assert check.json["schemaCompatibilityStrategy"] == "ALWAYS_INCOMPATIBLE"
    admin.ok("PUT", path, "AlwaysCompatible")
    required = evolving(A, {"name": "c", "type": "int"})  # (no default: FULL refuses it)
    client.create_producer(topic, schema=required).close()
    # a namespace strategy that is defined wins over it
    admin.ok("PUT", f"{NS}/{ns}/schemaCompatibilityStrategy", "ALWAYS_INCOMPATIBLE")
    check = admin.post(f"/admin/v2/schemas/{ns}/evolving/compatibility",
                       {"type": stored["type"], "schema": stored["data"], "properties": {}})
    assert check.json["schemaCompatibilityStrategy"] == "ALWAYS_INCOMPATIBLE"
    # refused: a name Pulsar does not know (its JSON reading takes it as null, removing the policy), a number, an
    # object; the namespace unknown or its name invalid. No POST; a DELETE is a bundle's (Pulsar's answers).
    for body in ("Bogus", "backward", 5, {"a": 1}):
        reply = admin.put(path, body)
        assert reply.status == 400 and "Unknown schema auto-update compatibility strategy" in reply.reason, body
    assert admin.ok("GET", path) == "AlwaysCompatible"
    for method in ("GET", "PUT"):
        reply = admin.call(method, f"{NS}/public/nowhere-{ns[-8:]}/schemaAutoUpdateCompatibilityStrategy", "Full")
        assert (reply.status, reply.reason) == (404, "Namespace does not exist")
    reply = admin.get(f"{NS}/public/bad%20name/schemaAutoUpdateCompatibilityStrategy")
    assert (reply.status, reply.reason) == (412, "Namespace name is not valid")
    assert admin.post(path, "Full").status == 405
    reply = admin.delete(path)
    assert (reply.status, reply.reason) == (412, "Invalid bundle range: schemaAutoUpdateCompatibilityStrategy")
    # PUT null removes it (as Pulsar's JSON null)
    assert admin.put(path, None).status == 204
    assert admin.get(path).status == 204
    assert "schema_auto_update_compatibility_strategy" not in admin.ok("GET", f"{NS}/{ns}")
    # given in a namespace's Policies when it is created, checked as the PUT checks it
    made = f"public/made-{ns[-8:]}"
    admin.ok("PUT", f"{NS}/{made}", {"schema_auto_update_compatibility_strategy": "Forward"})
    assert admin.ok("GET", f"{NS}/{made}/schemaAutoUpdateCompatibilityStrategy") == "Forward"
    reply = admin.put(f"{NS}/public/bad-{ns[-8:]}", {"schema_auto_update_compatibility_strategy": "Sideways"})
    assert reply.status == 400 and "Sideways" in reply.reason


def test_max_topics_per_namespace(admin: Admin, client: pulsar.Client) -> None:
    # Partitions count one by one as soon as a partitioned topic is declared; the topic past the
    # limit is refused over the wire (NotAllowedError) and over REST (409, or 412 for partitions).
    ns = admin.new_namespace()
    path = f"/admin/v2/namespaces/{ns}/maxTopicsPerNamespace"
    assert admin.ok("GET", path) == 0
    assert admin.post(path, -1).status == 412
    assert admin.post(path, 4).status == 204
    assert admin.ok("GET", path) == 4
    assert admin.ok("GET", f"/admin/v2/namespaces/{ns}")["max_topics_per_namespace"] == 4
    base = f"persistent://{ns}"
    admin.ok("PUT", f"/admin/v2/persistent/{ns}/parted/partitions", 2)
    client.create_producer(f"{base}/parted").close()  # (its partitions were counted already)
    client.create_producer(f"{base}/one").close()
    client.subscribe(f"{base}/two", "s").close()
    with pytest.raises(pulsar.NotAllowedError):
        client.create_producer(f"{base}/three")
    with pytest.raises(pulsar.NotAllowedError):
        client.subscribe(f"{base}/three", "s")
    reply = admin.put(f"/admin/v2/persistent/{ns}/three")
    assert (reply.status, reply.json["reason"]) == (409, "Exceed maximum number of topics in namespace.")
    reply = admin.put(f"/admin/v2/persistent/{ns}/more/partitions", 1)
    assert (reply.status, reply.json["reason"]) == (412, "Exceed maximum number of topics in namespace.")
    client.create_producer(f"non-persistent://{ns}/live").close()  # only persistent topics count
    client.create_producer(f"{base}/one").close()  # an existing one is always fine
    # Deleting a topic makes room; removing the policy lifts the limit.
    admin.ok("DELETE", f"/admin/v2/persistent/{ns}/one")
    client.create_producer(f"{base}/three").close()
    assert admin.delete(path).status == 204
    assert admin.ok("GET", path) == 0
    client.create_producer(f"{base}/four").close()


def test_max_topics_per_namespace_from_the_broker_and_auto_partitioned() -> None:
    with BrokerThread(maxTopicsPerNamespace=3, allowAutoTopicCreationType="partitioned",
                      defaultNumPartitions=2) as broker:
        admin = Admin(broker.web_url)
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=5)
        try:
            client.create_producer("persistent://public/default/a").close()  # 2 partitions
            with pytest.raises(pulsar.NotAllowedError):  # 2 more would make 4
                client.create_producer("persistent://public/default/b")
            assert admin.ok("GET", "/admin/v2/persistent/public/default/partitioned") == [
                "persistent://public/default/a"]
            # A namespace's own 0 means no limit there, whatever the broker's.
            admin.ok("POST", "/admin/v2/namespaces/public/default/maxTopicsPerNamespace", 0)
            client.create_producer("persistent://public/default/b").close()
        finally:
            client.close()
