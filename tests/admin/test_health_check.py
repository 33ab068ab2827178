"""/admin/v2/brokers/health through the binary protocol, as Pulsar's HealthChecker: a producer and a reader of the
broker's heartbeat topic (persistent://pulsar/<brokerId>/healthcheck), connected to the broker's own port; the topic
made whatever the auto-creation rule, deleted when the broker stops; the log earlier versions wrote deleted at
start. (Cluster mode, where each broker owns its heartbeat namespace: tests/cluster/test_lookup.py.)"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import requests

from broker.embedded import BrokerThread
from broker.service.broker_service import OLD_HEALTH_LEDGER
from broker.service.consumer import Consumer
from broker.topic_name import TopicName
from managed_ledger.api import AddCallback
from tests.admin.conftest import Admin
from tests.security.conftest import SUPER_USER, token
from tests.security.pki import make_pki

TOKEN_PROVIDER = "org.apache.pulsar.broker.authentication.AuthenticationProviderToken"


def heartbeat(broker: BrokerThread) -> TopicName:
    return TopicName.parse(f"persistent://pulsar/{broker.server.advertised_urls().broker_id}/healthcheck")


def test_health_check_sends_and_reads_back_a_message_of_the_heartbeat_topic(tmp_path: Path) -> None:
    # allowAutoTopicCreation off: the check makes its topic all the same (Pulsar's getTopic(topic, true)).
    with BrokerThread(data_dir=tmp_path, allowAutoTopicCreation=False) as broker:
        admin = Admin(broker.web_url)
        service = broker.server.service
        own = broker.server.advertised_urls().broker_id
        for query in ("", "?topicVersion=V2", "?topicVersion=V1", f"?brokerId={own}"):  # (V1: the V2 topic too)
            reply = admin.get(f"/admin/v2/brokers/health{query}")
            assert (reply.status, reply.body) == (200, b"ok")
        # Another broker's id: no such broker here (in cluster mode the 307 to it: tests/cluster/test_lookup.py).
        reply = admin.get("/admin/v2/brokers/health?brokerId=127.0.0.1:1")
        assert (reply.status, reply.reason) == (404, "Broker id '127.0.0.1:1' not found in available brokers.")
        assert admin.get("/admin/v2/brokers/health?topicVersion=V3").status == 404

        async def probes() -> list[None]:  # (concurrent checks: each its own reader)
            return await asyncio.gather(*(service.health_check() for _ in range(5)))

        broker.run_coroutine(probes())
        name = heartbeat(broker)
        stats = admin.ok("GET", f"/admin/v2/persistent/{name.namespace}/healthcheck/stats")
        # Each check's message, and nothing left of its producer, reader or subscription, nor of its connection.
        assert stats["msgInCounter"] == 4 + 5
        assert stats["publishers"] == [] and stats["subscriptions"] == {}
        assert broker.run_coroutine(_connections(broker)) == 0
        # The namespace exists without policies of its own, and is not listed (as Pulsar's).
        assert admin.get(f"/admin/v2/namespaces/{name.namespace}").status == 404
        assert name.namespace not in admin.ok("GET", "/admin/v2/namespaces/pulsar")
    with BrokerThread(data_dir=tmp_path) as broker:  # the broker deleted the topic when it stopped
        assert not broker.server.service.topic_exists(heartbeat(broker))


async def _connections(broker: BrokerThread) -> int:
    """The broker's client connections, once the last check's has gone (its close is not awaited by the server)."""
    connections = broker.server.connections
    async with asyncio.timeout(10):
        while connections:  # noqa: ASYNC110  (the server has no event for it)
            await asyncio.sleep(0.01)
    return len(connections)


def test_health_check_fails_with_the_reason_when_storage_fails_or_hangs(tmp_path: Path) -> None:
    with BrokerThread(data_dir=tmp_path) as broker:
        admin = Admin(broker.web_url)
        service = broker.server.service
        assert admin.get("/admin/v2/brokers/health").status == 200
        topic = service.topics[heartbeat(broker).full]
        ledger = topic.ledger

        def fail(data: list[bytes], callback: AddCallback) -> None:
            callback(None, OSError("No space left on device"))

        # (the topic's writes go to the ledger through its transaction buffer, which holds the method)
        ledger.add_entries = topic.txn_buffer.add_entries = fail  # type: ignore[method-assign]
        reply = admin.get("/admin/v2/brokers/health")
        assert reply.status == 500 and "No space left on device" in reply.reason, reply.body
        assert admin.get("/admin/v2/brokers/ready").status == 200

        def hang(data: list[bytes], callback: AddCallback) -> None:
            pass  # (never answers)

        ledger.add_entries = topic.txn_buffer.add_entries = hang  # type: ignore[method-assign]
        service.health_check_timeout_s = 0.5
        reply = admin.get("/admin/v2/brokers/health")
        assert reply.status == 500 and "timed out" in reply.reason


def test_health_check_fails_when_the_broker_stops_dispatching(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # Storage writes and reads as ever, but no consumer is given messages (their connections never writable): the
    # check, which reads its message back through a reader, fails; a check of storage alone would pass.
    with BrokerThread(data_dir=tmp_path) as broker:
        admin = Admin(broker.web_url)
        broker.server.service.health_check_timeout_s = 0.5
        assert admin.get("/admin/v2/brokers/health").status == 200
        monkeypatch.setattr(Consumer, "writable", property(lambda self: False))
        reply = admin.get("/admin/v2/brokers/health")
        assert reply.status == 500 and "timed out" in reply.reason
        monkeypatch.undo()
        assert admin.get("/admin/v2/brokers/health").status == 200


def test_the_log_of_an_earlier_versions_health_check_is_deleted_at_start(tmp_path: Path) -> None:
    with BrokerThread(data_dir=tmp_path) as broker:
        service = broker.server.service

        async def old_log() -> None:
            ledger = await service.ledger_factory.open(OLD_HEALTH_LEDGER, service.ledger_config)
            await ledger.add_entry_async(b"health 1")
            await ledger.close()

        broker.run_coroutine(old_log())
        assert service.ledger_factory.exists(OLD_HEALTH_LEDGER)
    with BrokerThread(data_dir=tmp_path) as broker:
        assert not broker.server.service.ledger_factory.exists(OLD_HEALTH_LEDGER)
        assert Admin(broker.web_url).get("/admin/v2/brokers/health").status == 200


def test_health_check_connects_with_the_broker_client_credentials(tmp_path: Path) -> None:
    # Authentication and authorization on: the check's client is the broker client (a super user here), as
    # Pulsar's internal client; without those credentials the broker refuses it, and the check says so.
    pki = make_pki(tmp_path)
    settings: dict[str, Any] = {
        "managedLedgerStorage": "memory", "authenticationEnabled": True, "authenticationProviders": TOKEN_PROVIDER,
        "tokenSecretKey": f"file://{pki.secret_key}", "authorizationEnabled": True, "superUserRoles": SUPER_USER,
        "brokerClientAuthenticationPlugin": "org.apache.pulsar.client.impl.auth.AuthenticationToken",
        "brokerClientAuthenticationParameters": f"token:{token(SUPER_USER)}"}
    headers = {"Authorization": f"Bearer {token(SUPER_USER)}"}
    with BrokerThread(**settings) as broker:
        reply = requests.get(f"{broker.web_url}/admin/v2/brokers/health", headers=headers, timeout=30)
        assert (reply.status_code, reply.text) == (200, "ok")
    settings.update(brokerClientAuthenticationPlugin="", brokerClientAuthenticationParameters="")
    with BrokerThread(**settings) as broker:
        reply = requests.get(f"{broker.web_url}/admin/v2/brokers/health", headers=headers, timeout=30)
        assert reply.status_code == 500 and "Authentication" in reply.json()["reason"], reply.text
