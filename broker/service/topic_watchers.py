"""Topic-list watchers (PIP-145): WATCH_TOPIC_LIST and the WATCH_TOPIC_UPDATE pushes that follow.

The Java client's pattern (regex) consumers open one per pattern when CONNECTED advertises
``supports_topic_watchers``, then stop polling with GET_TOPICS_OF_NAMESPACE and rely on the pushes
(Java 4.0.0-4.0.3 never poll at all). A watcher lives as long as its connection.

The pattern is matched, without its domain scheme, against each persistent topic's base name
without its scheme (a partitioned topic matches with all its partitions), as Pulsar's
TopicListService does; the list holds partition-level names and its hash is GET_TOPICS's.
Changes are found by comparing the namespace's topic list every WATCH_INTERVAL_S with what each
watcher last sent: one scan of the broker's own topic index per watched namespace, whatever
created or deleted the topic (a producer, a consumer, the admin API, retention).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from broker.topic_name import TopicName

# How often the watched namespaces are compared with what the watchers last sent.
WATCH_INTERVAL_S = 0.5
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


class TopicWatchers:
    """The watchers of one connection and the loop that pushes their updates."""

    def __init__(self, list_topics: Callable[[str], list[str]], hash_of: Callable[[list[str]], str],
                 push: Callable[[int, list[str], list[str], str], None]) -> None:
        self._list_topics = list_topics
        self._hash_of = hash_of
        self._push = push
        self.watchers: dict[int, Watcher] = {}

    def add(self, watcher_id: int, namespace: str, pattern: re.Pattern[str]) -> list[str]:
        """Register (or replace) a watcher; returns its current matching topics."""
        topics = matching(self._list_topics(namespace), pattern)
        self.watchers[watcher_id] = Watcher(namespace, pattern, set(topics))
        return topics

    def remove(self, watcher_id: int) -> bool:
        return self.watchers.pop(watcher_id, None) is not None

    def check(self) -> None:
        """Push an update to each watcher whose matching topics changed since it last heard."""
        listed: dict[str, list[str]] = {}
        for watcher_id, w in list(self.watchers.items()):
            topics = listed.get(w.namespace)
            if topics is None:
                topics = listed[w.namespace] = self._list_topics(w.namespace)
            now = set(matching(topics, w.pattern))
            if now != w.topics:
                new, deleted = sorted(now - w.topics), sorted(w.topics - now)
                w.topics = now
                self._push(watcher_id, new, deleted, self._hash_of(sorted(now)))

    async def run(self) -> None:
        """Check until no watcher is left (the connection's task owner cancels it on close)."""
        while self.watchers:
            await asyncio.sleep(WATCH_INTERVAL_S)
            self.check()
