"""The global topic policy changes still to be copied to another cluster, in their stored form.

A broker copies each change of a topic's global policy to the namespace's other replication clusters
(``broker.admin.global_policies``). Until a cluster has taken a change, it waits in one document per namespace and
cluster, ``/pulsar-py/global-policy-copies/<tenant>/<ns>/<cluster>`` (ours: Pulsar keeps them as the backlog of the
namespace's ``__change_events`` system topic that its replicator to that cluster has not sent yet):

    {"changes": [{"topic": "persistent://t/ns/a", "method": "POST", "path": "maxProducers", "query": [],
                  "body": 8}, ...]}

``changes`` are in the order they are sent, oldest first. At most one change per policy of a topic waits (the
policy: the topic, the path below it, and ``backlogQuotaType`` for a backlog quota): a newer one replaces it and goes
to the end, after any change made since, so what arrives last is the latest value, and a document holds no more
than its namespace's topics times their policies. Once sent, a change is removed only if it is still there as sent:
a newer one that replaced it meanwhile stays to be sent (the same change made again may go with it: the other
cluster has that value already).

An entry that does not read as a change (not written by us) is left out, and dropped at the document's next write.

Pure: documents in, documents out; ``broker.metadata.store`` writes them with compare-and-set.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from broker.errors import InvalidTopicNameError
from broker.topic_name import TopicName

JsonDoc = dict[str, Any]
Stored = Mapping[str, Any] | None  # a document as read (None: there is none)

BACKLOG_QUOTA_TYPE = "backlogQuotaType"  # (the one query parameter that names which policy a call changes)


@dataclass(frozen=True)
class PolicyCall:
    """One admin call that makes a global policy change: its method, the path below the topic's (``maxProducers``,
    ``backlogQuota``, ``billing/dispatchRate``), its other query parameters, and its JSON body."""

    method: str
    policy_path: str
    query: tuple[tuple[str, str], ...] = ()
    body: object = None

    @property
    def policy(self) -> tuple[str, tuple[tuple[str, str], ...]]:
        """Which policy of a topic the call changes (a newer call of the same one replaces it)."""
        return self.policy_path, tuple(q for q in self.query if q[0] == BACKLOG_QUOTA_TYPE)


@dataclass(frozen=True)
class WaitingChange:
    topic: str  # the topic's full name (a partitioned topic's base name)
    call: PolicyCall

    def to_json(self) -> JsonDoc:
        c = self.call
        return {"topic": self.topic, "method": c.method, "path": c.policy_path,
                "query": [list(q) for q in c.query], "body": c.body}

    @classmethod
    def from_json(cls, entry: object) -> WaitingChange | None:
        """The change an entry holds, or None when it does not read as one."""
        if not isinstance(entry, dict):
            return None
        topic, method, path, query = (entry.get(k) for k in ("topic", "method", "path", "query"))
        if not (isinstance(topic, str) and isinstance(method, str)
                and isinstance(path, str) and isinstance(query, list)
                and all(isinstance(q, list) and len(q) == 2 and all(isinstance(p, str) for p in q) for q in query)):
            return None
        try:
            TopicName.parse(topic)
        except InvalidTopicNameError:
            return None
        return cls(topic, PolicyCall(method, path, tuple((k, v) for k, v in query), entry.get("body")))


def queue_key(namespace: str, cluster: str) -> str:
    """The key of the document of ``namespace``'s changes waiting for ``cluster``."""
    return f"{namespace}/{cluster}"


def queue_of(key: str) -> tuple[str, str]:
    """(namespace, cluster) of a document's key."""
    namespace, cluster = key.rsplit("/", 1)
    return namespace, cluster


def changes(doc: Stored) -> list[WaitingChange]:
    """The changes a document holds, oldest first."""
    entries = (doc or {}).get("changes")
    found = (WaitingChange.from_json(e) for e in entries) if isinstance(entries, list) else ()
    return [c for c in found if c is not None]


def first(doc: Stored) -> WaitingChange | None:
    """The change to send next."""
    waiting = changes(doc)
    return waiting[0] if waiting else None


def _document(waiting: Sequence[WaitingChange]) -> JsonDoc | None:
    return {"changes": [c.to_json() for c in waiting]} if waiting else None


def queued(doc: Stored, topic: str, calls: Sequence[PolicyCall]) -> JsonDoc | None:
    """``doc`` with ``calls`` (changes of ``topic``, in the order made) at its end, each replacing the change of
    the same policy still waiting."""
    waiting = changes(doc)
    for call in calls:
        waiting = [c for c in waiting if (c.topic, c.call.policy) != (topic, call.policy)]
        waiting.append(WaitingChange(topic, call))
    return _document(waiting)


def taken(doc: Stored, sent: WaitingChange) -> JsonDoc | None:
    """``doc`` without ``sent`` (the other cluster took it, or refused it), if it is still there as sent; None when
    no change is left (the document goes)."""
    return _document([c for c in changes(doc) if c != sent])
