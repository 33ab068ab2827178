"""Topic-list watchers (PIP-145): WATCH_TOPIC_LIST and the WATCH_TOPIC_UPDATE pushes that follow.

The Java client's pattern (regex) consumers open one per pattern when CONNECTED advertises
``supports_topic_watchers``, then stop polling with GET_TOPICS_OF_NAMESPACE and rely on the pushes
(Java 4.0.0-4.0.3 never poll at all). A watcher lives as long as its connection.

The pattern is matched, without its domain scheme, against each persistent topic's base name
without its scheme (a partitioned topic matches with all its partitions), as Pulsar's
TopicListService does; the list holds partition-level names and its hash is GET_TOPICS's.

Event-driven, as Pulsar's TopicListService (which listens to the metadata store): the broker
service tells ``TopicListEvents`` when a namespace's topics may have changed (the managed-ledger
factory created or deleted a name - through this broker, or, on storage the brokers share, through
another, from the metadata store's notifications; or the metadata changed: partitioned topics).
Each connection's ``TopicWatchers`` then compares the namespace's list with what each of its
watchers last sent, once per loop iteration however many events came, and pushes the difference.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from broker.topic_name import TopicName

_SCHEME = re.compile(r"^(persistent|non-persistent)://")


def compile_pattern(pattern: str) -> re.Pattern[str]:
    """The client's pattern without its domain scheme; re.error when it is not a valid regex."""
    return re.compile(_SCHEME.sub("", pattern))


def matching(topics: list[str], pattern: re.Pattern[str]) -> list[str]:
    """The topics (partition-level names) whose base name, scheme removed, matches ``pattern``."""
    out = []
    for t in topics:
        base = TopicName.parse(t).base.full
        if pattern.fullmatch(_SCHEME.sub("", base)):
            out.append(t)
    return sorted(out)


@dataclass
class Watcher:
    namespace: str
    pattern: re.Pattern[str]
    topics: set[str] = field(default_factory=set)


class TopicListEvents:
    """Broker-wide: which namespaces' topic lists may have changed. The connections' watchers subscribe while they
    have watchers; ``changed`` tells them (None: any namespace, e.g. after a metadata change)."""

    def __init__(self) -> None:
        self._subscribers: dict[TopicWatchers, None] = {}  # insertion-ordered set

    def subscribe(self, watchers: TopicWatchers) -> None:
        self._subscribers[watchers] = None

    def unsubscribe(self, watchers: TopicWatchers) -> None:
        self._subscribers.pop(watchers, None)

    def changed(self, namespace: str | None) -> None:
        for watchers in list(self._subscribers):
            watchers.namespace_changed(namespace)

    def ledger_changed(self, ledger_name: str) -> None:
        """A managed ledger was created or deleted: ``tenant/namespace/domain/<encoded local name>``."""
        tenant, _, rest = ledger_name.partition("/")
        namespace, _, domain = rest.partition("/")
        if domain.startswith("persistent/"):
            self.changed(f"{tenant}/{namespace}")


class TopicWatchers:
    """The watchers of one connection and the task that pushes their updates (see the module docstring)."""

    def __init__(self, list_topics: Callable[[str], list[str]], hash_of: Callable[[list[str]], str],
                 push: Callable[[int, list[str], list[str], str], None], events: TopicListEvents) -> None:
        self._list_topics = list_topics
        self._hash_of = hash_of
        self._push = push
        self._events = events
        self.watchers: dict[int, Watcher] = {}
        self._changed: set[str] = set()  # namespaces to compare at the next wake-up
        self._wake = asyncio.Event()

    def add(self, watcher_id: int, namespace: str, pattern: re.Pattern[str]) -> list[str]:
        """Register (or replace) a watcher; returns its current matching topics."""
        topics = matching(self._list_topics(namespace), pattern)
        self.watchers[watcher_id] = Watcher(namespace, pattern, set(topics))
        return topics

    def remove(self, watcher_id: int) -> bool:
        removed = self.watchers.pop(watcher_id, None) is not None
        if not self.watchers:
            self._wake.set()  # the task ends
        return removed

    def namespace_changed(self, namespace: str | None) -> None:
        """An event: compare the watchers of ``namespace`` (None: all) soon."""
        namespaces = {w.namespace for w in self.watchers.values()}
        if namespace is not None:
            namespaces &= {namespace}
        if namespaces:
            self._changed |= namespaces
            self._wake.set()

    def check(self, namespaces: set[str] | None = None) -> None:
        """Push an update to each watcher (of ``namespaces``, else all) whose matching topics changed since it
        last heard."""
        listed: dict[str, list[str]] = {}
        for watcher_id, w in list(self.watchers.items()):
            if namespaces is not None and w.namespace not in namespaces:
                continue
            topics = listed.get(w.namespace)
            if topics is None:
                topics = listed[w.namespace] = self._list_topics(w.namespace)
            now = set(matching(topics, w.pattern))
            if now != w.topics:
                new, deleted = sorted(now - w.topics), sorted(w.topics - now)
                w.topics = now
                self._push(watcher_id, new, deleted, self._hash_of(sorted(now)))

    async def run(self) -> None:
        """Push updates as events come, until no watcher is left (the connection's task owner cancels it on
        close)."""
        self._events.subscribe(self)
        try:
            self.check()  # what changed between add() and subscribing
            while self.watchers:
                await self._wake.wait()
                self._wake.clear()
                changed, self._changed = self._changed, set()
                if changed:
                    self.check(changed)
        finally:
            self._events.unsubscribe(self)
