"""The broker's metadata in a metadata store: the old metadata.json imported once, and brokers on
a REAL ZooKeeper writing Pulsar's znodes (read back with a plain kazoo client) and seeing each
other's changes by notification, without restart."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from kazoo.client import KazooClient

from broker.config import ConfigError
from broker.embedded import BrokerThread
from cluster.local import ProcessInfo
from tests.admin.conftest import Admin
from tests.reliability.broker_process import start_broker_with_web
from tests.waiting import wait_for

NS = "/admin/v2/namespaces"
ZK_CONNECT_TIMEOUT_S = 10.0


def test_the_old_metadata_json_is_imported_once(tmp_path: Path) -> None:
    legacy = tmp_path / "metadata.json"
    legacy.write_text(json.dumps({
        "clusters": {"standalone": {}},
        "tenants": {"public": {"adminRoles": [], "allowedClusters": ["standalone"]},
                    "acme": {"adminRoles": ["boss"], "allowedClusters": ["standalone"]}},
        "namespaces": {"public/default": {}, "acme/ns": {"message_ttl_in_seconds": 77}},
        "partitioned_topics": {"persistent://acme/ns/orders": 3},
        "topic_policies": {"persistent://acme/ns/orders": {"maxProducerPerTopic": 2}},
        "schemas": {}, "compactions": {}, "terminated": {}, "topic_properties": {}, "saved_at": 1.0,
    }))
    for start in (1, 2):  # the second start reads the store only (the file is renamed)
        with BrokerThread(data_dir=tmp_path) as broker:
            admin = Admin(broker.web_url)
            assert admin.ok("GET", f"{NS}/acme/ns/messageTTL") == 77, start
            assert admin.ok("GET", "/admin/v2/persistent/acme/ns/orders/partitions")["partitions"] == 3
            assert admin.ok("GET", "/admin/v2/persistent/acme/ns/orders/maxProducers") == 2
            assert admin.ok("GET", "/admin/v2/tenants/acme")["adminRoles"] == ["boss"]
            if start == 1:
                admin.ok("POST", f"{NS}/acme/ns/messageTTL", 77)
        assert not legacy.exists() and (tmp_path / "metadata.json.imported").exists()
        assert (tmp_path / "metadata").is_dir()


def test_a_bad_metadata_store_url_is_a_clear_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"metadataStoreUrl='etcd://x:2379': .*not supported"):
        BrokerThread(data_dir=tmp_path, metadataStoreUrl="etcd://x:2379").start()


# -- ZooKeeper --------------------------------------------------------------------------------------------

def znode(zk: KazooClient, path: str) -> Any:
    data, _ = zk.get(path)
    return json.loads(data)


def test_brokers_share_pulsars_znodes_in_zookeeper(zk_server: ProcessInfo, tmp_path: Path) -> None:
    zookeeper = zk_server.address  # (the session's real ZooKeeper; a chroot of this test's own)
    chroot = f"/pulsar-py-{uuid.uuid4().hex[:8]}"
    url = f"zk:{zookeeper}{chroot}"
    zk = KazooClient(hosts=zookeeper + chroot)  # (connected once the broker made the chroot)
    try:
        with BrokerThread(data_dir=tmp_path / "a", metadataStoreUrl=url) as a:
            admin = Admin(a.web_url)
            zk.start(timeout=ZK_CONNECT_TIMEOUT_S)
            admin.ok("PUT", "/admin/v2/tenants/acme", {"adminRoles": ["boss"], "allowedClusters": ["standalone"]})
            admin.ok("PUT", f"{NS}/acme/ns")
            admin.ok("POST", f"{NS}/acme/ns/messageTTL", 60)
            admin.ok("POST", f"{NS}/acme/ns/retention", {"retentionTimeInMinutes": 10, "retentionSizeInMB": 5})
            admin.ok("PUT", "/admin/v2/persistent/acme/ns/my%20orders/partitions", 3)
            admin.ok("POST", "/admin/v2/persistent/acme/ns/my%20orders/maxProducers", 4)

            # What a Pulsar broker (or zkCli) reads: Pulsar's paths, Pulsar's JSON.
            # (the cluster's URLs, written by its first broker as Pulsar's metadata set-up writes them)
            assert znode(zk, "/admin/clusters/standalone") == {
                "serviceUrl": a.web_url, "brokerServiceUrl": a.service_url}
            assert znode(zk, "/admin/policies/acme") == {"adminRoles": ["boss"], "allowedClusters": ["standalone"]}
            policies = znode(zk, "/admin/policies/acme/ns")
            assert policies["message_ttl_in_seconds"] == 60
            assert policies["retention_policies"] == {"retentionTimeInMinutes": 10, "retentionSizeInMB": 5}
            assert zk.get_children("/admin/policies/public") == ["default"]
            assert znode(zk, "/admin/partitioned-topics/acme/ns/persistent/my+orders") == {
                "partitions": 3, "deleted": False}
            assert znode(zk, "/admin/topic-policies/local/acme/ns/persistent/my+orders") == {"maxProducerPerTopic": 4}

            # A second broker process on the same ZooKeeper sees all of it, and later changes
            # made through the first arrive by notification (no restart).
            conf = tmp_path / "b.conf"
            conf.write_text(f"metadataStoreUrl={url}\nmanagedLedgerStorage=memory\n")
            proc, _, web_port = start_broker_with_web(tmp_path / "b", conf)
            try:
                other = Admin(f"http://127.0.0.1:{web_port}")
                assert other.ok("GET", f"{NS}/acme/ns/messageTTL") == 60
                assert other.ok("GET", "/admin/v2/persistent/acme/ns/my%20orders/partitions")["partitions"] == 3
                admin.ok("POST", f"{NS}/acme/ns/messageTTL", 120)
                wait_for(lambda: other.ok("GET", f"{NS}/acme/ns/messageTTL") == 120)
                admin.ok("POST", "/admin/v2/persistent/acme/ns/my%20orders/maxProducers", 7)
                wait_for(lambda: other.ok("GET", "/admin/v2/persistent/acme/ns/my%20orders/maxProducers") == 7)
                # ... and the other way round.
                other.ok("PUT", f"{NS}/acme/second")
                wait_for(lambda: "acme/second" in admin.ok("GET", f"{NS}/acme"))
                # A namespace a broker is deleting (its policies marked deleted first, as a Pulsar broker
                # marks them: written here as one would) takes no topic at the others.
                policies = znode(zk, "/admin/policies/acme/second")
                zk.set("/admin/policies/acme/second", json.dumps({**policies, "deleted": True}).encode())
                wait_for(lambda: admin.get(f"{NS}/acme/second").json["deleted"] is True)
                create = admin.put("/admin/v2/persistent/acme/second/t")
                chain = [a.web_url]
                while create.status == 307 and len(chain) < 5:
                    owner = urlsplit(create.headers["Location"])
                    chain.append(create.headers["Location"])
                    create = Admin(f"{owner.scheme}://{owner.netloc}").put(f"{owner.path}?{owner.query}")
                # (Pulsar's checkLocalOrGetPeerReplicationCluster: 404 "Namespace is deleted")
                assert create.status == 404, (web_port, chain)
                other.ok("DELETE", f"{NS}/acme/second")  # (a delete that finds the mark goes on)
                other.ok("DELETE", "/admin/v2/persistent/acme/ns/my%20orders/partitions")
                wait_for(lambda: admin.get("/admin/v2/persistent/acme/ns/my%20orders/partitions").status == 404)
                assert not zk.exists("/admin/partitioned-topics/acme/ns/persistent/my+orders")
            finally:
                proc.terminate()
                proc.wait(timeout=30)
    finally:
        zk.stop()
        zk.close()
