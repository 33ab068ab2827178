"""Admin REST v2: operations on every topic of a namespace (Pulsar's namespace clearBacklog,
unsubscribe and unload; we have one broker, so "every bundle" is the whole namespace).

- ``POST .../clearBacklog`` and ``.../clearBacklog/{sub}``: every subscription (or just ``sub``)
  of every stored persistent topic skips to the end. Topics are loaded for it when they are not:
  the backlog of a topic nobody uses is cleared too.
- ``POST .../unsubscribe/{sub}``: ``sub`` is deleted from every topic that has it; refused as a
  whole (412) when any of them has a connected consumer, before anything is deleted.
- ``PUT .../unload``: the bundles are released (``service.ownership.unload_bundle``): their loaded topics close,
  their clients look up again (in cluster mode another broker may take them); a bundle another broker owns is
  unloaded by that broker (307 for a bundle, passed on for a namespace).

Each also exists per bundle (``.../{bundle}/clearBacklog``, ``.../{bundle}/unload``, ...): only the
topics whose name hashes into the bundle's range, with Pulsar's hash (CRC32 of the full topic
name), so ``--bundle`` in scripts means what it means against Pulsar.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import aiohttp
from aiohttp import web

from broker.admin.cluster import redirect_url
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
# How long a namespace unload waits for another broker to unload its bundle.
FORWARD_TIMEOUT_S = 60.0


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
        """Release the bundle (or every bundle of the namespace) through ownership (broker.cluster): its topics
        close, their clients look up again (cluster mode: any broker may take it then). In cluster mode a bundle
        another broker owns is that broker's to unload: a bundle's unload is redirected there (307), a namespace's
        is passed on to each owner; a bundle nobody owns has nothing to unload."""
        ns = self.web.namespaces.namespace(request)
        range_name = request.match_info.get("bundle")
        ownership = self.service.ownership
        if not ownership.distributed:
            await self.web.bundles.unload(ns, range_name)
            return no_content()
        try:
            targets = ([self.web.bundles.ops.bundle(ns, range_name)] if range_name is not None
                       else self.service.metadata.namespace_bundles(ns).bundles)
        except BundleOperationError as exc:
            raise HttpError(exc.status, exc.message) from None
        for bundle in targets:
            if ownership.is_owned(bundle):
                await ownership.unload_bundle(bundle)
                continue
            owner = await ownership.owner_of(bundle)
            base = owner and (owner.http_url_tls if request.secure else owner.http_url)
            if not base:
                continue  # (owned by nobody)
            if range_name is not None:
                raise web.HTTPTemporaryRedirect(redirect_url(request, base, ownership.is_leader))
            await forward_put(request, f"{base}{NS.format(**request.match_info)}/{bundle.range_name}/unload")
        return no_content()


async def forward_put(request: web.Request, url: str) -> None:
    """PUT ``url`` on another broker with this request's credentials; its error becomes ours."""
    headers = {k: v for k, v in request.headers.items() if k.lower() == "authorization"}
    timeout = aiohttp.ClientTimeout(total=FORWARD_TIMEOUT_S)
    async with aiohttp.ClientSession(timeout=timeout) as session, session.put(url, headers=headers) as answer:
        if answer.status >= 400:
            raise HttpError(answer.status, f"{url}: {await answer.text()}")
