"""dispatcherPauseOnAckStatePersistent (PIP-299) over admin REST, as Pulsar 4.0.7 answers it (read from its
Namespaces, NamespacesBase, PersistentTopics and PersistentTopicsBase): an on/off switch with no body. POST turns it
on, DELETE turns it off (false is stored: a namespace's or topic's false wins over the level below), GET answers false
when unset; a topic's DELETE changes nothing where the topic has no policies of that kind, and its GET ignores
``applied``. What the policy does: tests/e2e/test_dispatcher_pause.py."""

from __future__ import annotations

from pathlib import Path

from broker.embedded import BrokerThread
from broker.metadata.policy_table import DISPATCHER_PAUSE_ON_ACK_STATE_PERSISTENT
from broker.topic_name import TopicName
from tests.admin.conftest import Admin, rest_path
from tests.waiting import wait_for

NS = "/admin/v2/namespaces"
POLICY = "dispatcherPauseOnAckStatePersistent"
FIELD = "dispatcherPauseOnAckStatePersistentEnabled"  # (Pulsar's Policies and TopicPolicies field)


def in_force(broker: BrokerThread, topic: str) -> bool:
    return broker.server.service.policies.get(TopicName.parse(topic), DISPATCHER_PAUSE_ON_ACK_STATE_PERSISTENT)


def test_namespace_switch(admin: Admin, pulsar_broker: BrokerThread) -> None:
    ns = admin.new_namespace()
    path = f"{NS}/{ns}/{POLICY}"
    topic = f"persistent://{ns}/t"
    assert admin.ok("GET", path) is False and FIELD not in admin.ok("GET", f"{NS}/{ns}")
    assert not in_force(pulsar_broker, topic)
    assert admin.post(path).status == 204
    assert admin.ok("GET", path) is True and admin.ok("GET", f"{NS}/{ns}")[FIELD] is True
    assert in_force(pulsar_broker, topic)
    # A body is not read (Pulsar's method takes none): whatever it says, POST turns it on.
    assert admin.call("POST", path, raw=b"{not json").status == 204
    assert admin.post(path, False).status == 204
    assert admin.ok("GET", path) is True
    # DELETE stores false, which wins over the broker's value.
    assert admin.delete(path).status == 204
    assert admin.ok("GET", path) is False and admin.ok("GET", f"{NS}/{ns}")[FIELD] is False
    assert not in_force(pulsar_broker, topic)


def test_namespace_refusals(admin: Admin) -> None:
    missing = f"{NS}/public/nosuch-pause/{POLICY}"
    reply = admin.get(missing)
    assert (reply.status, reply.reason) == (404, "Namespace policies does not exist")
    for method in ("POST", "DELETE"):
        reply = admin.call(method, missing)
        assert (reply.status, reply.reason) == (404, "Namespace does not exist"), method
    assert admin.get(f"{NS}/public/bad%20name/{POLICY}").status == 412
    # In a Policies body at creation: a Boolean.
    reply = admin.put(f"{NS}/public/pause-body-bad", {FIELD: "yes"})
    assert (reply.status, reply.reason) == (400, f"{FIELD} must be true or false")
    admin.ok("PUT", f"{NS}/public/pause-body", {FIELD: True})
    assert admin.ok("GET", f"{NS}/public/pause-body/{POLICY}") is True
    admin.ok("DELETE", f"{NS}/public/pause-body")


def test_topic_switch(admin: Admin, pulsar_broker: BrokerThread) -> None:
    ns = admin.new_namespace()
    topic = f"persistent://{ns}/t"
    admin.ok("PUT", f"/admin/v2/{rest_path(topic)}")
    path = f"/admin/v2/{rest_path(topic)}/{POLICY}"
    admin.ok("POST", f"{NS}/{ns}/{POLICY}")
    # Unset: false, ``applied`` or not (Pulsar's GET reads the topic's own policies alone).
    assert admin.ok("GET", path) is False and admin.ok("GET", path + "?applied=true") is False
    assert in_force(pulsar_broker, topic)  # (the namespace's)
    # A DELETE where the topic has no policies changes nothing (Pulsar skips the update): no TopicPolicies made.
    assert admin.delete(path).status == 204
    assert admin.get(f"/admin/v2/{rest_path(topic)}/subscriptionTypesEnabled").status == 204
    assert in_force(pulsar_broker, topic)
    assert admin.post(path).status == 204
    assert admin.ok("GET", path) is True and admin.ok("GET", path + "?isGlobal=true") is False
    assert admin.delete(path).status == 204  # the topic's false wins over its namespace's true
    assert admin.ok("GET", path) is False and not in_force(pulsar_broker, topic)
    # Global: its own value; the local false still wins.
    assert admin.post(path + "?isGlobal=true").status == 204
    assert admin.ok("GET", path + "?isGlobal=true") is True and not in_force(pulsar_broker, topic)
    admin.ok("DELETE", f"/admin/v2/{rest_path(topic)}/policies")
    assert in_force(pulsar_broker, topic)  # (all of the topic's gone: the namespace's again)


def test_topic_refusals(admin: Admin) -> None:
    ns = admin.new_namespace()
    reply = admin.post(f"/admin/v2/persistent/{ns}/missing/{POLICY}")
    assert (reply.status, reply.reason) == (404, f"Topic persistent://{ns}/missing not found")
    reply = admin.get(f"/admin/v2/persistent/{ns}/t-partition-0/{POLICY}")
    assert (reply.status, reply.reason) == (412, "Not allowed to set/get topic policy for a partition")


def test_the_broker_setting_is_dynamic(tmp_path: Path) -> None:
    """dispatcherPauseOnAckStatePersistentEnabled (dynamic in Pulsar too): the level below a namespace's and a
    topic's, changed while the broker runs."""
    with BrokerThread(data_dir=tmp_path) as broker:
        admin = Admin(broker.web_url)
        ns = admin.new_namespace()
        topic = f"persistent://{ns}/t"
        setting = "/admin/v2/brokers/configuration/dispatcherPauseOnAckStatePersistentEnabled"
        assert not in_force(broker, topic)
        admin.ok("POST", f"{setting}/true")
        assert wait_for(lambda: in_force(broker, topic), what="the setting in force")
        assert admin.ok("GET", f"{NS}/{ns}/{POLICY}") is False  # (the namespace's own value: unset)
        admin.ok("DELETE", f"{NS}/{ns}/{POLICY}")  # false at the namespace wins over the broker's true
        assert not in_force(broker, topic)
        admin.ok("DELETE", setting)
