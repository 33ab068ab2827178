"""Topic-list watchers are event-driven: nothing is listed or pushed without an event; an event for the watched
namespace brings one update however many events came; other namespaces' events cost nothing."""

from __future__ import annotations

import asyncio
import re

from broker.service.topic_watchers import TopicListEvents, TopicWatchers


class Namespace:
    """A fake topic index that counts how often it is listed."""

    def __init__(self, topics: list[str]) -> None:
        self.topics = topics
        self.listed = 0

    def list_topics(self, namespace: str) -> list[str]:
        self.listed += 1
        return list(self.topics) if namespace == "public/default" else []


async def settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


async def test_updates_follow_events_only() -> None:
    index = Namespace(["persistent://public/default/a"])
    pushed: list[tuple[int, list[str], list[str]]] = []
    events = TopicListEvents()
    watchers = TopicWatchers(index.list_topics, lambda topics: str(len(topics)),
                             lambda wid, new, deleted, digest: pushed.append((wid, new, deleted)), events)
    assert watchers.add(7, "public/default", re.compile("public/default/.*")) == ["persistent://public/default/a"]
    task = asyncio.create_task(watchers.run())
    try:
        await settle()
        listed = index.listed
        index.topics.append("persistent://public/default/b")  # no event: nothing happens, however long
        await settle()
        assert index.listed == listed and pushed == []

        events.ledger_changed("other/ns/persistent/x")  # another namespace: not even listed
        events.ledger_changed("public/default/non-persistent/x")  # (not a managed ledger of a persistent topic)
        await settle()
        assert index.listed == listed and pushed == []

        for _ in range(3):  # three events, one listing, one push
            events.ledger_changed("public/default/persistent/b")
        await settle()
        assert index.listed == listed + 1
        assert pushed == [(7, ["persistent://public/default/b"], [])]

        index.topics.remove("persistent://public/default/a")
        events.changed(None)  # (a metadata change: every watched namespace)
        await settle()
        assert pushed[-1] == (7, [], ["persistent://public/default/a"])

        watchers.remove(7)  # the last watcher gone: the task ends and leaves the events
        await asyncio.wait_for(task, 5)
        events.changed(None)
        assert index.listed == listed + 2
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
