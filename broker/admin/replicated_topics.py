"""A partitioned topic made or grown in a namespace replicated to other clusters is made or grown there too, as in
Apache Pulsar 4.0: without it, the replicators of its partitions would publish to topics named ``...-partition-<i>``
that the other cluster does not know as partitions, and its consumers of the partitioned topic would miss them.

- **Create** (``PUT .../partitions``, unless ``createLocalTopicOnly=true``): once made here, the same partitioned
  topic (count and properties) is made on each other cluster of the namespace's replication clusters, in the
  background, with ``createLocalTopicOnly=true`` there (Pulsar's AdminResource.
  internalCreatePartitionedTopicToReplicatedClustersInBackground, when ``createTopicToRemoteClusterForReplication``,
  its default). The caller's answer does not wait for them. A cluster that has the topic already (409) is left as
  it is: with the same count it is logged as done; with another, as a conflict to mend by hand.
- **Grow** (``POST .../partitions``, unless ``updateLocalTopicOnly=true``): once grown here, each other replication
  cluster is grown to the same count with ``updateLocalTopicOnly=true``, and the answer waits for them: a failure
  there is the caller's answer (Pulsar's internalUpdatePartitionedTopicAsync, which updates every replication
  cluster after the local one).
- **The topic's own replication clusters** (``POST .../{topic}/replication`` on a partitioned topic): before they are
  stored, the partitioned topic (its count) is made on each of them, awaited; a cluster that has it with another
  count is a 412, a failed call a 500, and the clusters are then not stored (Pulsar's PersistentTopicsBase.
  internalSetReplicationClusters).

The other cluster is called on its cluster data's ``serviceUrl`` (``serviceUrlTls`` when ``brokerClientTlsEnabled``,
the cluster's value else the broker's), with the cluster's credentials (``authenticationPlugin`` /
``authenticationParameters``: token, basic or tls), else the broker's own, and over https with the cluster data's
TLS settings (``brokerClientTrustCertsFilePath``, ``brokerClientCertificateFilePath`` / ``...KeyFilePath``,
``tlsAllowInsecureConnection``), each else the broker's (Pulsar's BrokerService.getClusterPulsarAdmin).
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from broker.admin.common import HttpError
from broker.admin.partitioned_topics import PARTITIONED_METADATA_TYPE
from broker.admin.peers import reason_of, topic_path
from broker.metadata.policy_table import REPLICATION_CLUSTERS
from broker.service.broker_service import credential_headers
from broker.service.peer_link import RemoteError
from broker.service.remote_producer import client_credentials, cluster_setting, cluster_tls_context
from broker.tasks import OwnedTasks

if TYPE_CHECKING:
    from broker.admin.http import WebService
    from broker.config import BrokerConfig
    from broker.topic_name import TopicName

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ClusterAdmin:
    """Where and how to call another cluster's admin API."""

    url: str  # its base URL
    headers: dict[str, str]  # its credentials
    ssl_context: ssl.SSLContext | None  # over https: its cluster data's TLS settings, else the broker's

    def call_headers(self) -> dict[str, str]:
        return dict(self.headers)


def cluster_admin(cfg: BrokerConfig, name: str, data: Mapping[str, Any]) -> ClusterAdmin:
    """How to call cluster ``name``'s admin API (Pulsar's BrokerService.getClusterPulsarAdmin: the cluster data's
    URL, credentials and TLS settings, each else the broker's); RemoteError when its data has no URL for it or its
    credentials or TLS files cannot be used."""
    key = "serviceUrlTls" if cluster_setting(data, cfg, "brokerClientTlsEnabled") else "serviceUrl"
    url = str(data.get(key) or "").rstrip("/")
    if not url:
        raise RemoteError(f"cluster {name} has no {key}")
    if data.get("authenticationPlugin"):
        plugin, params = data["authenticationPlugin"], data.get("authenticationParameters") or ""
    else:
        plugin, params = cfg.brokerClientAuthenticationPlugin, cfg.brokerClientAuthenticationParameters
    _, _, client_cert = client_credentials(plugin, params)
    context = cluster_tls_context(cfg, name, data, client_cert) if url.startswith("https:") else None
    return ClusterAdmin(url, credential_headers(plugin, params), context)


def known_cluster_admin(web: WebService, cluster: str) -> ClusterAdmin:
    """``cluster_admin`` of a cluster from its stored cluster data; RemoteError when it has none."""
    data = web.metadata.clusters.get(cluster)
    if data is None:
        raise RemoteError(f"cluster {cluster} has no cluster data")
    return cluster_admin(web.ctx.config, cluster, data)


class ReplicatedPartitions:
    def __init__(self, web: WebService) -> None:
        self.web = web
        self.tasks = OwnedTasks("partitioned topics made on replication clusters")

    def _others(self, name: TopicName) -> list[str]:
        """The namespace's replication clusters but this one (Pulsar reads the namespace's, not the topic's)."""
        local = self.web.ctx.config.clusterName
        clusters = self.web.service.policies.for_namespace(name.namespace, REPLICATION_CLUSTERS)
        return [c for c in clusters if c != local]

    def _target(self, cluster: str, name: TopicName) -> tuple[str, ClusterAdmin]:
        admin = known_cluster_admin(self.web, cluster)
        return f"{admin.url}{topic_path(name)}/partitions", admin

    def create_in_background(self, name: TopicName, n: int, properties: dict[str, str] | None) -> None:
        """The partitioned topic made on each other replication cluster, not awaited: a failure is logged."""
        if not self.web.ctx.config.createTopicToRemoteClusterForReplication:
            return
        for cluster in self._others(name):
            self.tasks.spawn(self._logged(self._create(cluster, name, n, properties)),
                             name=f"create {name} on {cluster}")

    async def create_on(self, clusters: list[str], name: TopicName, n: int) -> None:
        """The partitioned topic (count only) made on each of ``clusters`` but this one, awaited; the first failure
        is raised as the caller's answer. Pulsar's internalSetReplicationClusters does this before it stores a
        partitioned topic's own replication clusters (with createTopicToRemoteClusterForReplication): a cluster
        that has it with another count is a 412, and the clusters are not stored."""
        if not self.web.ctx.config.createTopicToRemoteClusterForReplication:
            return
        local = self.web.ctx.config.clusterName
        for cluster in clusters:
            if cluster != local:
                await self._create(cluster, name, n, None)

    @staticmethod
    async def _logged(creation: Coroutine[Any, Any, None]) -> None:
        try:
            await creation
        except HttpError as exc:
            log.warning("%s", reason_of(exc.text or ""))

    async def _create(self, cluster: str, name: TopicName, n: int, properties: dict[str, str] | None) -> None:
        """Make it on ``cluster`` with ``createLocalTopicOnly=true`` (AdminResource.
        internalCreatePartitionedTopicToReplicatedClustersInBackground): done when made, or when the cluster has it
        with this count; HttpError 412 when it has it with another, 500 when the call fails."""
        try:
            url, admin = self._target(cluster, name)
        except RemoteError as exc:
            raise HttpError(500, f"partitioned topic {name} not made on cluster {cluster}: {exc}") from None
        headers = admin.call_headers()
        body: object = n
        if properties is not None:
            body = {"partitions": n, "properties": properties}
            headers["Content-Type"] = PARTITIONED_METADATA_TYPE
        try:
            await self.web.peers.call("PUT", f"{url}?createLocalTopicOnly=true", body=body, headers=headers,
                                      ssl_context=admin.ssl_context)
        except HttpError as exc:
            if exc.status_code != 409:
                raise HttpError(500, f"partitioned topic {name} not made on cluster {cluster}: "
                                     f"{reason_of(exc.text or '')}") from None
            await self._compare(cluster, name, n, url, admin)
            return
        log.info("partitioned topic %s made on cluster %s (%d partitions)", name, cluster, n)

    async def _compare(self, cluster: str, name: TopicName, n: int, url: str, admin: ClusterAdmin) -> None:
        """The other cluster had it already: the same count is nothing to do, another is a conflict to mend."""
        try:
            doc = await self.web.peers.call("GET", url, headers=admin.call_headers(), ssl_context=admin.ssl_context)
        except HttpError as exc:
            raise HttpError(500, f"partitioned topic {name} exists on cluster {cluster}, its count unknown: "
                                 f"{reason_of(exc.text or '')}") from None
        theirs = doc.get("partitions") if isinstance(doc, dict) else None
        if theirs != n:
            raise HttpError(412, f"There is an exists topic {name} with different partitions {theirs} on the remote "
                                 f"cluster {cluster}, you want to create it with partitions {n}")
        log.info("partitioned topic %s is on cluster %s already (%d partitions)", name, cluster, n)

    async def grow(self, name: TopicName, n: int) -> None:
        """Each other replication cluster grown to ``n`` partitions, awaited; the first failure is raised (an
        HttpError with the other cluster's status)."""
        for cluster in self._others(name):
            try:
                url, admin = self._target(cluster, name)
            except RemoteError as exc:
                raise HttpError(500, f"Update remote cluster {cluster} partition fail: {exc}") from None
            await self.web.peers.call("POST", f"{url}?updateLocalTopicOnly=true", body=n, headers=admin.call_headers(),
                                      ssl_context=admin.ssl_context)

    async def close(self) -> None:
        await self.tasks.close()
