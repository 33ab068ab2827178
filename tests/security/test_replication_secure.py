"""Geo-replication towards a cluster that requires TLS and authentication: the replicator uses
the broker's brokerClient* settings, or the cluster data's overrides."""

from __future__ import annotations

import pulsar

from broker.embedded import BrokerThread
from broker.topic_name import TopicName
from tests.admin.conftest import Admin
from tests.security.conftest import SUPER_USER, SecureAdmin, secure_settings, token
from tests.security.pki import Pki
from tests.waiting import wait_for

TOKEN_PLUGIN = "org.apache.pulsar.client.impl.auth.AuthenticationToken"


def test_replication_over_tls_with_a_token(pki: Pki) -> None:
    topic = "persistent://geo/ns/secure"
    with BrokerThread(**secure_settings(pki, clusterName="remote")) as remote, \
            BrokerThread(clusterName="local", brokerClientTlsEnabled=True,
                         brokerClientTrustCertsFilePath=str(pki.ca_cert),
                         brokerClientAuthenticationPlugin=TOKEN_PLUGIN,
                         brokerClientAuthenticationParameters=f"token:{token(SUPER_USER)}") as local:
        remote_admin = SecureAdmin.bearer(remote.web_url_tls, pki, SUPER_USER)
        remote_admin.ok("PUT", "/admin/v2/clusters/local", {})
        remote_admin.ok("PUT", "/admin/v2/tenants/geo", {"allowedClusters": ["local", "remote"]})
        remote_admin.ok("PUT", "/admin/v2/namespaces/geo/ns")
        admin = Admin(local.web_url)
        # First a wrong token in the cluster data (which overrides the broker's settings): refused.
        cluster = {"brokerServiceUrl": remote.service_url, "brokerServiceUrlTls": remote.service_url_tls}
        admin.ok("PUT", "/admin/v2/clusters/remote", {**cluster, "authenticationPlugin": "token",
                                                      "authenticationParameters": "token:not-a-jwt"})
        admin.ok("PUT", "/admin/v2/tenants/geo", {"allowedClusters": ["local", "remote"]})
        admin.ok("PUT", "/admin/v2/namespaces/geo/ns")
        admin.ok("POST", "/admin/v2/namespaces/geo/ns/replication", ["local", "remote"])
        client = pulsar.Client(local.service_url, operation_timeout_seconds=10)
        remote_client = pulsar.Client(remote.service_url_tls, tls_trust_certs_file_path=str(pki.ca_cert),
                                      authentication=pulsar.AuthenticationToken(token(SUPER_USER)),
                                      operation_timeout_seconds=10)
        try:
            consumer = remote_client.subscribe(topic, "s")
            producer = client.create_producer(topic, batching_enabled=False)
            producer.send(b"over tls")
            replicator = local.server.service.topics[TopicName.parse(topic).full].replicators["remote"]
            wait_for(lambda: "AuthenticationError" in replicator.last_error, what="the bad token to be refused")
            # The broker's own settings (TLS, the super user's token) once the override goes.
            admin.ok("POST", "/admin/v2/clusters/remote", cluster)
            msg = consumer.receive(15_000)
            assert msg.data() == b"over tls"
            stats = admin.stats(topic)["replication"]["remote"]
            assert str(stats["outboundConnection"]).startswith("pulsar+ssl://")
        finally:
            client.close()
            remote_client.close()


def test_a_partitioned_topic_is_made_on_a_tls_cluster_with_its_cluster_datas_tls_settings(pki: Pki) -> None:
    """The admin calls to another cluster (here: making a partitioned topic there) use its cluster data's TLS
    settings and credentials, as Pulsar's BrokerService.getClusterPulsarAdmin does: this broker has none of its
    own."""
    with BrokerThread(**secure_settings(pki, clusterName="remote")) as remote, \
            BrokerThread(clusterName="local") as local:
        remote_admin = SecureAdmin.bearer(remote.web_url_tls, pki, SUPER_USER)
        remote_admin.ok("PUT", "/admin/v2/clusters/local", {})
        remote_admin.ok("PUT", "/admin/v2/tenants/geo", {"allowedClusters": ["local", "remote"]})
        remote_admin.ok("PUT", "/admin/v2/namespaces/geo/ns")
        admin = Admin(local.web_url)
        admin.ok("PUT", "/admin/v2/clusters/remote", {
            "serviceUrl": "http://127.0.0.1:1", "serviceUrlTls": remote.web_url_tls,
            "brokerServiceUrl": remote.service_url, "brokerServiceUrlTls": remote.service_url_tls,
            "brokerClientTlsEnabled": True, "brokerClientTrustCertsFilePath": str(pki.ca_cert),
            "authenticationPlugin": TOKEN_PLUGIN, "authenticationParameters": f"token:{token(SUPER_USER)}"})
        admin.ok("PUT", "/admin/v2/tenants/geo", {"allowedClusters": ["local", "remote"]})
        admin.ok("PUT", "/admin/v2/namespaces/geo/ns")
        admin.ok("POST", "/admin/v2/namespaces/geo/ns/replication", ["local", "remote"])
        path = "/admin/v2/persistent/geo/ns/parted/partitions"

        def there() -> int:
            reply = remote_admin.call("GET", path)
            return int(reply.json["partitions"]) if reply.status == 200 else 0

        admin.ok("PUT", path, 2)  # (made there in the background)
        wait_for(lambda: there() == 2, what="the partitioned topic to be made on the remote cluster")
        admin.ok("POST", path, 3)  # (awaited: grown there, or that is the answer)
        assert there() == 3
