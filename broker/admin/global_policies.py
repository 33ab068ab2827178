"""A topic's global policies copied to the namespace's other replication clusters.

In Apache Pulsar a global topic policy (``isGlobal=true``) is an event on the namespace's ``__change_events`` system
topic that is replicated to the namespace's replication clusters, where it becomes that cluster's global policy
(Pulsar refuses global replication clusters outside them for that reason). Here topic policies live in the metadata
store, so each change of a global policy is sent as the same admin call to each other cluster of the namespace's
replication clusters, with ``isGlobal=true`` and ``replicatedFrom=<this cluster>``:

- A broker of ours takes a call with ``replicatedFrom`` as a copy: it stores it as its global value without copying it
  on (no loop), and for a topic it does not have yet too (a Pulsar cluster keeps a replicated event for a topic made
  later; here the topic's existence is not checked).
- A Pulsar broker stores it as its global policy (and replicates its own event back through ``__change_events``,
  which a broker of ours keeps as a topic nobody reads).

Each change is kept in the metadata store before the admin call answers, one queue per namespace and other cluster
(``broker.metadata.policy_copies``: where, and in which form), and removed once that cluster has taken it. In the
queue a change of a policy that is still waiting replaces the waiting one (which is moved to the end, after any
change made since), so what arrives last is the latest value, and a queue holds at most one change per policy of
each topic of its namespace.

One broker sends them: the leader (``/loadbalance/leader``; a standalone broker is its own), which every broker
that takes an admin call reaches through the store, and which a restarted or newly elected leader finds there
(within ``LEADERSHIP_CHECK_S``: the registry tells nobody when the leadership moves). (Not
the owner of each topic's bundle: a bundle nobody has looked up since a restart has no owner, and its changes would
wait for a client.) It has one sender per other cluster, which sends that cluster's changes in order, one call at a
time. A call the other cluster refuses (4xx: its namespace or checks) is logged and dropped; one that fails (no
answer, 5xx) is tried again, after 1 s, then twice as long each time up to a minute, until it goes through, the
broker stops (the change stays stored for the next leader) or is no longer the leader. A leader that loses its
metadata session stops sending when the store says so, before its successor is elected, as bundle owners stop: the
one call it may still have under way can land after the successor's first, the same window a bundle has.

A queue goes as a whole when its namespace is deleted, or no longer has that cluster among its replication clusters
(Pulsar stops that replicator and deletes its cursor, and the namespace's system topic with the namespace): the
leader checks the queues against the namespaces' policies after every metadata change, reading a namespace again
from the store before it drops its queue. A topic deleted here keeps its waiting changes: they are for the other
cluster's topic, which the deletion here does not touch (Pulsar's events already written stay in the namespace's
system topic and are replicated all the same).

Removing every policy of a topic (``DELETE .../policies``) removes its global ones on the other clusters policy by
policy (their local ones are theirs), with the calls that remove each one; a global ``schemaValidationEnforced``,
which Pulsar's API cannot remove (only set to false), stays there.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from aiohttp import web

from broker.admin.common import HttpError, is_global
from broker.admin.peers import path_segment, reason_of, topic_path
from broker.admin.replicated_topics import known_cluster_admin
from broker.metadata import policy_copies as C
from broker.metadata import policy_table as T
from broker.metadata.policy_copies import PolicyCall
from broker.metadata.store import MetadataStoreError
from broker.service.peer_link import RemoteError
from broker.tasks import OwnedTasks, woken
from broker.topic_name import TopicName
from metadata_store.api import MetadataStoreError as StoreUnavailableError

if TYPE_CHECKING:
    from broker.admin.http import WebService

log = logging.getLogger(__name__)

REPLICATED_FROM = "replicatedFrom"  # (a query parameter of ours: the call is a copy from that cluster)
FIRST_RETRY_S = 1.0
LAST_RETRY_S = 60.0
# How soon a broker that became the leader starts sending (the registry tells nobody when the leadership moves; a
# standalone broker is the leader from the start), and how soon the queues are looked at again after a failed read:
# a few seconds, as the load manager's leader checks (REPORTS_CHECK_S).
LEADERSHIP_CHECK_S = 5.0


def is_copy(request: web.Request) -> bool:
    """Whether the call is another cluster's copy of its global policy change (stored here, not copied on)."""
    return REPLICATED_FROM in request.query and is_global(request)


class GlobalPolicyCopies:
    def __init__(self, web: WebService) -> None:
        self.web = web
        self._wake = asyncio.Event()  # a metadata change: queues may have come, gone or grown
        self._senders: set[str] = set()  # the clusters with a sender under way
        self.tasks = OwnedTasks("global topic policies copied to other clusters")

    def start(self) -> None:
        """Follow the stored queues (sending them while this broker is the leader)."""
        self.web.metadata.listeners.append(self._wake.set)
        self._wake.set()
        self.tasks.spawn(self._follow(), name="global topic policy queues")

    async def close(self) -> None:
        with contextlib.suppress(ValueError):
            self.web.metadata.listeners.remove(self._wake.set)
        await self.tasks.close()

    @property
    def _leading(self) -> bool:
        return self.web.service.ownership.is_leader

    def _replicates_to(self, namespace: str, cluster: str) -> bool:
        return cluster in self.web.service.policies.for_namespace(namespace, T.REPLICATION_CLUSTERS)

    async def copy(self, request: web.Request, name: TopicName, calls: list[PolicyCall]) -> None:
        """Keep ``calls`` (the change just stored here by ``request``) to be sent to the namespace's other
        replication clusters, unless the request is itself a copy; done when stored."""
        if is_copy(request) or not calls:
            return
        local = self.web.ctx.config.clusterName
        for cluster in self.web.service.policies.for_namespace(name.namespace, T.REPLICATION_CLUSTERS):
            if cluster != local:
                await self.web.metadata.queue_global_policy_copies(name.namespace, cluster, name.full, calls)

    async def _follow(self) -> None:
        """On the leader: drop the queues no longer wanted, and have a sender for each cluster with changes."""
        while True:
            await woken(self._wake, LEADERSHIP_CHECK_S)
            if not self._leading:
                continue
            try:
                await self._drop_unwanted()
            except (MetadataStoreError, StoreUnavailableError) as exc:
                log.warning("global policy queues not checked (%s); trying again in %g s", exc, LEADERSHIP_CHECK_S)
            for key in list(self.web.metadata.global_policy_copies):
                cluster = C.queue_of(key)[1]
                if cluster not in self._senders:
                    self._senders.add(cluster)
                    self.tasks.spawn(self._send(cluster), name=f"global topic policies to {cluster}")

    async def _drop_unwanted(self) -> None:
        """Drop the queues of namespaces gone or no longer replicated to their cluster (as the store says now: the
        change that made them may be another broker's, its notification not here yet)."""
        for key in list(self.web.metadata.global_policy_copies):
            namespace, cluster = C.queue_of(key)
            if self._replicates_to(namespace, cluster):
                continue
            await self.web.metadata.read_namespace(namespace)
            if not self._replicates_to(namespace, cluster):
                log.info("global policy changes of %s for cluster %s dropped: not one of its replication clusters",
                         namespace, cluster)
                await self.web.metadata.drop_global_policy_copies(namespace, cluster)

    def _next(self, cluster: str) -> tuple[str, C.WaitingChange] | None:
        """The namespace and change to send ``cluster`` next: the oldest of the first namespace with one."""
        for key, doc in sorted(self.web.metadata.global_policy_copies.items()):
            namespace, queue_cluster = C.queue_of(key)
            if queue_cluster == cluster and self._replicates_to(namespace, cluster):
                change = C.first(dict(doc))
                if change is not None:
                    return namespace, change
        return None

    async def _send(self, cluster: str) -> None:
        delay = FIRST_RETRY_S
        try:
            while self._leading and (head := self._next(cluster)) is not None:
                namespace, change = head
                try:
                    await self._send_one(cluster, namespace, change)
                except (HttpError, RemoteError, MetadataStoreError, StoreUnavailableError) as exc:
                    reason = reason_of(exc.text or "") if isinstance(exc, HttpError) else str(exc)
                    log.info("global policy %s %s/%s not copied to cluster %s yet (%s); trying again in %g s",
                             change.call.method, change.topic, change.call.policy_path, cluster, reason, delay)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, LAST_RETRY_S)
                    continue
                delay = FIRST_RETRY_S
        finally:
            self._senders.discard(cluster)

    async def _send_one(self, cluster: str, namespace: str, change: C.WaitingChange) -> None:
        """Send one change, and remove it from its queue once ``cluster`` took it or refused it (4xx)."""
        try:
            await self._call(cluster, change)
        except HttpError as exc:
            if not 400 <= exc.status_code < 500:
                raise
            log.warning("global policy %s %s/%s not copied to cluster %s: %d %s", change.call.method, change.topic,
                        change.call.policy_path, cluster, exc.status_code, reason_of(exc.text or ""))
        await self.web.metadata.global_policy_copy_taken(namespace, cluster, change)

    async def _call(self, cluster: str, change: C.WaitingChange) -> None:
        admin = known_cluster_admin(self.web, cluster)
        call = change.call
        query = urlencode((*call.query, ("isGlobal", "true"), (REPLICATED_FROM, self.web.ctx.config.clusterName)))
        await self.web.peers.call(call.method, f"{admin.url}{topic_path(TopicName.parse(change.topic))}/"
                                               f"{call.policy_path}?{query}", body=call.body,
                                  headers=admin.call_headers(), ssl_context=admin.ssl_context)


def request_call(request: web.Request, policy_path: str, body: object = None) -> PolicyCall:
    """The call ``request`` made, to be made again elsewhere: its method, the policy's path, its query but
    ``isGlobal`` and ``replicatedFrom``, and its body."""
    query = tuple((k, v) for k, v in request.query.items() if k not in ("isGlobal", REPLICATED_FROM))
    return PolicyCall(request.method, policy_path, query, body)


def removals(stored: dict[str, Any], paths: dict[str, str]) -> list[PolicyCall]:
    """The calls that remove each of a topic's stored global policies (``stored``: its TopicPolicies document;
    ``paths``: a TopicPolicies field -> the path of its policy, for those removed by a DELETE of that path)."""
    calls = []
    for field, value in stored.items():
        if field == T.BACKLOG_QUOTAS.topic_key and isinstance(value, dict):
            calls += [PolicyCall("DELETE", "backlogQuota", (("backlogQuotaType", kind),)) for kind in value]
        elif field == T.SUBSCRIPTION_POLICIES_FIELD and isinstance(value, dict):
            calls += [PolicyCall("DELETE", f"{path_segment(sub)}/dispatchRate") for sub in value]
        elif field in paths:
            calls.append(PolicyCall("DELETE", paths[field]))
    return calls
