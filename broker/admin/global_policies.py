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

Each other cluster has one sender that sends its changes in order, one call at a time; a change of a policy that is
still waiting replaces the waiting one (which is moved to the end, after any change made since), so what arrives last
is the latest value. A call the other cluster refuses (4xx: its namespace or checks) is logged and dropped; one that
fails (no answer, 5xx) is tried again, after 1 s, then twice as long each time up to a minute, until it goes
through or the broker stops. Changes not yet sent when the broker stops are not kept (Pulsar's are, in its
system topic's backlog): set the policy again there.

Removing every policy of a topic (``DELETE .../policies``) removes its global ones on the other clusters policy by
policy (their local ones are theirs), with the calls that remove each one; a global ``schemaValidationEnforced``,
which Pulsar's API cannot remove (only set to false), stays there.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from aiohttp import web

from broker.admin.common import HttpError, is_global
from broker.admin.peers import path_segment, reason_of, topic_path
from broker.admin.replicated_topics import known_cluster_admin
from broker.metadata import policy_table as T
from broker.service.peer_link import RemoteError
from broker.tasks import OwnedTasks

if TYPE_CHECKING:
    from broker.admin.http import WebService
    from broker.topic_name import TopicName

log = logging.getLogger(__name__)

REPLICATED_FROM = "replicatedFrom"  # (a query parameter of ours: the call is a copy from that cluster)
FIRST_RETRY_S = 1.0
LAST_RETRY_S = 60.0


def is_copy(request: web.Request) -> bool:
    """Whether the call is another cluster's copy of its global policy change (stored here, not copied on)."""
    return REPLICATED_FROM in request.query and is_global(request)


@dataclass(frozen=True)
class PolicyCall:
    """One admin call that makes a global policy change: its method, the path below the topic's (``maxProducers``,
    ``backlogQuota``, ``billing/dispatchRate``), its other query parameters, and its JSON body."""

    method: str
    policy_path: str
    query: tuple[tuple[str, str], ...] = ()
    body: object = None


class GlobalPolicyCopies:
    def __init__(self, web: WebService) -> None:
        self.web = web
        # other cluster -> (topic, policy path, query) -> the call still to send, oldest first
        self._waiting: dict[str, OrderedDict[tuple[str, str, tuple[tuple[str, str], ...]], PolicyCall]] = {}
        self._senders: set[str] = set()
        self.tasks = OwnedTasks("global topic policies copied to other clusters")

    def copy(self, request: web.Request, name: TopicName, calls: list[PolicyCall]) -> None:
        """Send ``calls`` (the change just stored here by ``request``) to the namespace's other replication
        clusters, unless the request is itself a copy."""
        if is_copy(request) or not calls:
            return
        local = self.web.ctx.config.clusterName
        clusters = self.web.service.policies.for_namespace(name.namespace, T.REPLICATION_CLUSTERS)
        topic = topic_path(name)
        for cluster in clusters:
            if cluster == local:
                continue
            waiting = self._waiting.setdefault(cluster, OrderedDict())
            for call in calls:
                key = (topic, call.policy_path, tuple(q for q in call.query if q[0] == "backlogQuotaType"))
                waiting.pop(key, None)
                waiting[key] = call
            if cluster not in self._senders:
                self._senders.add(cluster)
                self.tasks.spawn(self._send(cluster), name=f"global topic policies to {cluster}")

    async def _send(self, cluster: str) -> None:
        waiting = self._waiting[cluster]
        delay = FIRST_RETRY_S
        try:
            while waiting:
                key, call = next(iter(waiting.items()))
                try:
                    await self._call(cluster, key[0], call)
                except (HttpError, RemoteError) as exc:
                    status = exc.status_code if isinstance(exc, HttpError) else 0
                    reason = reason_of(exc.text or "") if isinstance(exc, HttpError) else str(exc)
                    if 400 <= status < 500:
                        log.warning("global policy %s %s/%s not copied to cluster %s: %d %s", call.method, key[0],
                                    call.policy_path, cluster, status, reason)
                    else:
                        log.info("global policy %s %s/%s not copied to cluster %s yet (%s); trying again in %g s",
                                 call.method, key[0], call.policy_path, cluster, reason, delay)
                        await asyncio.sleep(delay)
                        delay = min(delay * 2, LAST_RETRY_S)
                        continue
                delay = FIRST_RETRY_S
                if waiting.get(key) is call:  # (else changed again meanwhile: the newer call is waiting)
                    del waiting[key]
        finally:
            self._senders.discard(cluster)

    async def _call(self, cluster: str, topic: str, call: PolicyCall) -> None:
        admin = known_cluster_admin(self.web, cluster)
        query = urlencode((*call.query, ("isGlobal", "true"), (REPLICATED_FROM, self.web.ctx.config.clusterName)))
        await self.web.peers.call(call.method, f"{admin.url}{topic}/{call.policy_path}?{query}", body=call.body,
                                  headers=admin.call_headers(), ssl_context=admin.ssl_context)

    async def close(self) -> None:
        await self.tasks.close()


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
