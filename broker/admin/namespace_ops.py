"""Admin REST v2: operations on every topic of a namespace (Pulsar's namespace clearBacklog,
unsubscribe and unload; we have one broker, so "every bundle" is the whole namespace).

- ``POST .../clearBacklog`` and ``.../clearBacklog/{sub}``: every subscription (or just ``sub``)
  of every stored persistent topic skips to the end. Topics are loaded for it when they are not:
  the backlog of a topic nobody uses is cleared too.
- ``POST .../unsubscribe/{sub}``: ``sub`` is deleted from every topic that has it; refused as a
  whole (412) when any of them has a connected consumer, before anything is deleted.
- ``PUT .../unload``: every loaded topic is closed; its clients reconnect and load it again.

Each also exists per bundle (``.../{bundle}/clearBacklog``, ``.../{bundle}/unload``, ...): only the
topics whose name hashes into the bundle's range, with Pulsar's hash (CRC32 of the full topic
name), so ``--bundle`` in scripts means what it means against Pulsar.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from aiohttp import web

from broker.admin.common import HttpError, no_content
from broker.cluster.operations import BundleOperationError
from broker.service import admin_ops
from broker.service.topic import PersistentTopic
from broker.topic_name import TopicName

if TYPE_CHECKING:
    from broker.admin.http import WebService
    from broker.service.broker_service import BrokerService

NS = "/admin/v2/namespaces/{tenant}/{ns}"
# A bundle in a path: anything with "_" (a malformed range is a 412, as in Pulsar).
BUNDLE_PATTERN = "[^/]*_[^/]*"


class NamespaceOperationsResource:
    def __init__(self, web_service: WebService) -> None:
        self.web = web_service

    def register(self, r: web.UrlDispatcher) -> None:
        for base in (NS, NS + "/{bundle:" + BUNDLE_PATTERN + "}"):
            r.add_post(base + "/clearBacklog", self.clear_backlog)
            r.add_post(base + "/clearBacklog/{sub}", self.clear_backlog)
            r.add_post(base + "/unsubscribe/{sub}", self.unsubscribe)
            r.add_put(base + "/unload", self.unload)

    @property
    def service(self) -> BrokerService:
        return self.web.service

    def scope(self, request: web.Request) -> tuple[str, Callable[[TopicName], bool]]:
        """(namespace, which of its topics the request covers: all, or one bundle's)."""
        ns = self.web.namespaces.namespace(request)
        bundle = request.match_info.get("bundle")
        if bundle is None:
            return ns, lambda name: True
        try:
            found = self.web.bundles.ops.bundle(ns, bundle)
        except BundleOperationError as exc:
            raise HttpError(exc.status, exc.message) from None
        return ns, lambda name: found.includes(name.full)

    async def stored_topics(self, ns: str, covers: Callable[[TopicName], bool]) -> list[PersistentTopic]:
        """The persistent topics of the namespace (of the bundle) that have a ledger (loaded on demand)."""
        names = [TopicName.parse(n) for n in self.service.topics_of_namespace(ns, 0)]
        stored = set(self.service.ledger_factory.list_names())
        return [await self.service.get_persistent_topic(n, create=False) for n in names
                if n.persistence_path in stored and covers(n)]

    async def clear_backlog(self, request: web.Request) -> web.Response:
        ns, covers = self.scope(request)
        only = request.match_info.get("sub")
        for topic in await self.stored_topics(ns, covers):
            for name in admin_ops.subscription_names(topic):
                if only is None or name == only:
                    admin_ops.skip_all(await admin_ops.subscription(topic, name))
        return no_content()

    async def unsubscribe(self, request: web.Request) -> web.Response:
        ns, covers = self.scope(request)
        name = request.match_info["sub"]
        topics = [t for t in await self.stored_topics(ns, covers) if name in admin_ops.subscription_names(t)]
        for topic in topics:
            sub = topic.subscriptions.get(name)
            if sub is not None and sub.consumers:
                raise HttpError(412, f"Subscription {name} has active connected consumers on {topic.full_name}")
        for topic in topics:
            await admin_ops.delete_subscription(topic, name, force=False)
            self.service.expiry_stats.forget(topic.full_name, name)
        return no_content()

    async def unload(self, request: web.Request) -> web.Response:
        """The bundle's (every bundle's) topics are closed through ownership (broker.cluster)."""
        await self.web.bundles.unload(self.web.namespaces.namespace(request), request.match_info.get("bundle"))
        return no_content()
