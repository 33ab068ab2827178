"""A loaded persistent topic whose cluster is no longer one of its clusters is deleted, with its data, as Pulsar 4.0.7
deletes it: ``PersistentTopic.checkReplication`` calls ``removeTopicIfLocalClusterNotAllowed``, which asks
``checkAllowedCluster`` and, on ``false``, runs ``deleteForcefully()``.

When exactly (Pulsar's checkReplication and checkAllowedCluster, for the V2 names we serve, all "global" to Pulsar):

- a persistent topic (NonPersistentTopic.checkReplication only updates its replicators), not a system topic (Pulsar's
  SystemTopic does it only for ``__change_events`` and the transaction-buffer / pending-ack topics, none of which we
  keep: our topic policies live in the metadata store);
- the replication clusters in force for it - its own (topic policies, local else global), else its namespace's - are
  set: Pulsar returns
  at once on an empty list ("No replication clusters configured"). An unset, empty or unreadable stored list is the
  broker's default here, the local cluster alone (``policy_table.REPLICATION_CLUSTERS``), so it never fires;
- the local cluster is not in that list, nor in the namespace's ``allowed_clusters`` (PIP-321).

Ours checks more before it deletes anything, because the deletion cannot be undone: the namespace's Policies must be
known (Pulsar reads an absent document as no allowed clusters), readable (``allowed_clusters`` a list of names) and not
marked ``deleted`` (the namespace's own delete is at work on its topics; Pulsar's onPoliciesUpdate ignores such an
update too). The values are the broker's metadata cache: a read of the store that fails changes nothing in it
(``broker.metadata.cache``), so a transient failure keeps the last values read; it never makes a list empty.

When it is checked: for every loaded persistent topic at each change of the metadata (Pulsar: on a namespace policies
update, on a topic policies update, and every replicationPolicyCheckDurationSeconds), and once a topic is loaded
(Pulsar: in openLedgerComplete). The deletion runs in the background, owned here; when it starts, the topic must still
be that very loaded object, owned by this broker, and the check must still hold (nothing awaited in between), else
nothing is done.

What the deletion does (``BrokerService.delete_loaded_topic``, Pulsar's ``delete(false, false, true)``): every producer
gets CLOSE_PRODUCER and every consumer CLOSE_CONSUMER (the official clients reconnect: their lookup is then sent to the
peer cluster that serves the namespace, or refused); the replicators stop; the managed ledger (messages, subscriptions,
replication cursors) is deleted, then the topic's metadata (topic policies, compaction, termination). A non-partitioned
topic's schema goes too; a partition's only once no partition of its topic is left, with the partitioned topic's own
topic policies (Pulsar's deleteSchemaAndPoliciesIfClusterRemoved; the partitioned metadata stays, as in Pulsar).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from broker.metadata.policies import allowed_clusters_of
from broker.metadata.policy_table import REPLICATION_CLUSTERS
from broker.tasks import OwnedTasks
from broker.topic_name import TopicName, is_system_topic

if TYPE_CHECKING:
    from broker.service.broker_service import BrokerService
    from broker.service.topic import PersistentTopic

log = logging.getLogger(__name__)


def local_cluster_excluded(local_cluster: str, namespace_policies: Mapping[str, Any] | None,
                           replication_clusters: list[str]) -> bool:
    """Pulsar's ``checkAllowedCluster`` answering false, after ours checks: True only when the namespace's Policies
    are known, readable and not being deleted, and ``replication_clusters`` (the list in force for the topic) is not
    empty and does not hold the local cluster, nor do the namespace's allowed clusters."""
    if not isinstance(namespace_policies, Mapping) or namespace_policies.get("deleted"):
        return False
    allowed = allowed_clusters_of(namespace_policies)
    if allowed is None:
        return False  # (not ours to read: nothing is deleted on a value we cannot understand)
    return bool(replication_clusters) and local_cluster not in replication_clusters and local_cluster not in allowed


class ClusterRemoval:
    """Deletes the loaded persistent topics whose cluster has left their clusters (one deletion per topic at a time,
    each a task owned here)."""

    def __init__(self, service: BrokerService) -> None:
        self.service = service
        self._deletions = OwnedTasks("broker service: topics deleted as their cluster left their clusters")
        self._deleting: dict[str, PersistentTopic] = {}  # full name -> the topic object being deleted
        self.deleted_total = 0

    def excluded(self, name: TopicName) -> bool:
        """Whether a topic of this name is not to be served by this cluster at all (see the module's docstring)."""
        service = self.service
        if not name.persistent or is_system_topic(name.full):
            return False
        return local_cluster_excluded(service.config.clusterName, service.metadata.namespaces.get(name.namespace),
                                      service.policies.get(name, REPLICATION_CLUSTERS))

    def check(self, topic: PersistentTopic) -> bool:
        """Start the deletion of a loaded topic that is excluded; True while it is being deleted (its replicators are
        then left to the deletion)."""
        name = topic.name.full
        if self._deleting.get(name) is topic:
            return True
        if topic.closed or self.service.closed or self.service.topics.get(name) is not topic \
                or not self.excluded(topic.name):
            return False
        self._deleting[name] = topic
        self._deletions.spawn(self._delete(topic), name=f"delete {name}: its cluster left its clusters")
        return True

    async def _delete(self, topic: PersistentTopic) -> None:
        service, name = self.service, topic.name
        try:
            clusters = service.policies.get(name, REPLICATION_CLUSTERS)
            if not await service.delete_loaded_topic(topic, lambda: self.excluded(name)):
                return
            self.deleted_total += 1
            log.warning("deleted topic %s: local cluster %s is not in its replication clusters %s nor in the "
                        "allowed clusters of its namespace", name, service.config.clusterName, clusters)
            if name.partition_index < 0:
                await service.schemas.delete(name.full)
                return
            base = name.base
            partitions = service.metadata.partitions_of(base.full)
            if not any(service.topic_exists(base.partition(i)) for i in range(partitions)):
                await service.schemas.delete(base.full)
                await service.metadata.forget_topic_policies(base.full)
        finally:
            if self._deleting.get(name.full) is topic:
                del self._deleting[name.full]

    async def close(self) -> None:
        """Let the deletions under way end (a deletion cut short would leave part of a topic's data)."""
        await self._deletions.wait()
