"""Admin REST v2: operations on every topic of a namespace (Pulsar's namespace clearBacklog,
unsubscribe and unload).

- ``POST .../clearBacklog`` and ``.../clearBacklog/{sub}``: every subscription (or just ``sub``)
  of every stored persistent topic skips to the end. Topics are loaded for it when they are not:
  the backlog of a topic nobody uses is cleared too (standalone; in cluster mode, as in Pulsar, only
  the bundles some broker owns are visited).
- ``POST .../unsubscribe/{sub}``: ``sub`` is deleted from every topic that has it; refused (412)
  when any of them has a connected consumer, before anything of that bundle is deleted.
- ``PUT .../unload``: the bundles are released (``service.ownership.unload_bundle``): their loaded topics close,
  their clients look up again (in cluster mode another broker may take them).

Each also exists per bundle (``.../{bundle}/clearBacklog``, ``.../{bundle}/unload``, ...): only the
topics whose name hashes into the bundle's range, with Pulsar's hash (CRC32 of the full topic
name), so ``--bundle`` in scripts means what it means against Pulsar.

Cluster mode (``on_owners``): a bundle another broker owns is that broker's: a namespace-wide request is passed on
to the owner of each bundle (``broker.admin.peers``), side by side within one time bound (``broker.admin.owner_calls``),
a request on one bundle is redirected there (307).

``DELETE .../{bundle}`` takes every one-segment path no other route does (as in Pulsar: a DELETE of a name it has no
DELETE for is a bundle's, refused as an invalid range, 412). Another method on such a path is no route (404, with the
reason; Pulsar's Jersey answers 405, the path fitting that DELETE-only route), and the namespace resources Pulsar has
and this broker has not (``NOT_SERVED``) are refused as such (404) with each method Pulsar has for them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING
from urllib.parse import quote

from aiohttp import web

from broker.admin.cluster import check_not_unloading, redirect_url
from broker.admin.common import HttpError, no_content, query_flag
from broker.admin.owner_calls import PeerCall, fan_out, first_failure
from broker.cluster.bundles import NamespaceBundle
from broker.cluster.operations import BundleOperationError
from broker.service import admin_ops
from broker.service.topic import PersistentTopic
from broker.topic_name import TopicName

if TYPE_CHECKING:
    from broker.admin.http import WebService
    from broker.service.broker_service import BrokerService

NS = "/admin/v2/namespaces/{tenant}/{ns}"
# A bundle in a path: any name (Pulsar's routes take any; a malformed range is a 412, as Pulsar's
# validateNamespaceBundleRange answers, once the checks before it passed: the namespace's cluster first).
BUNDLE_PATTERN = "[^/]+"
# Pulsar 4.0.7's namespace resources (admin v2 Namespaces) this broker does not serve, with the methods Pulsar has for
# each: their calls are answered 404 saying so (not a bundle's 412, nor a 405), other methods as any other name's.
NOT_SERVED: dict[str, frozenset[str]] = {
    "entryFilters": frozenset({"GET", "HEAD", "POST", "DELETE"}),
    "migration": frozenset({"POST"}),
    "resourcegroup": frozenset({"GET", "HEAD", "DELETE"}),
}


class NamespaceOperationsResource:
    def __init__(self, web_service: WebService) -> None:
        self.web = web_service

    def register(self, r: web.UrlDispatcher) -> None:
        for base in (NS, NS + "/{bundle:" + BUNDLE_PATTERN + "}"):
            r.add_post(base + "/clearBacklog", self.clear_backlog)
            r.add_post(base + "/clearBacklog/{sub}", self.clear_backlog)
            r.add_post(base + "/unsubscribe/{sub}", self.unsubscribe)
            r.add_put(base + "/unload", self.unload)

    def register_last(self, r: web.UrlDispatcher) -> None:
        """After every other route of the namespace: a DELETE of a name no other route takes is a bundle's (as in
        Pulsar, whose DELETE of a policy it has no DELETE for is a bundle's, refused as an invalid range); any other
        method there is ``no_route``'s."""
        bundle = NS + "/{bundle:" + BUNDLE_PATTERN + "}"
        r.add_delete(bundle, self.delete_bundle)
        for add in (r.add_get, r.add_put, r.add_post):  # (GET with HEAD)
            add(bundle, self.no_route)

    @property
    def service(self) -> BrokerService:
        return self.web.service

    def scope(self, request: web.Request) -> tuple[str, NamespaceBundle | None]:
        """(namespace, the bundle named in the path or None for the whole namespace)."""
        ns = self.web.namespaces.namespace(request)
        range_name = request.match_info.get("bundle")
        if range_name is None:
            return ns, None
        try:
            return ns, self.web.bundles.ops.bundle(ns, range_name)
        except BundleOperationError as exc:
            raise HttpError(exc.status, exc.message) from None

    async def no_route(self, request: web.Request) -> web.Response:
        """A one-segment path of a namespace with a method no route of it has but the bundle's DELETE: 405 when the
        path is another route's (its literal name, with other methods: aiohttp's own answer, which this catch-all
        route would otherwise take), else 404."""
        check_served(request)
        this = request.match_info.route.resource
        path = f"{NS}/{request.match_info['bundle']}"
        allowed = {route.method for resource in request.app.router.resources()
                   if resource is not this and resource.canonical == path for route in resource}
        if allowed:
            raise web.HTTPMethodNotAllowed(request.method, allowed)
        raise HttpError(404, f"Not Found: no namespace resource named {request.match_info['bundle']!r}")

    async def delete_bundle(self, request: web.Request) -> web.Response:
        """DELETE .../{bundle}[?force=true] (``pulsar-admin namespaces delete-bundle``), as Pulsar 4.0.7's
        internalDeleteNamespaceBundleAsync: 409 "Cannot delete non empty bundle" while a persistent topic of the
        namespace hashes into it, unless ``force``; then the bundle is given up as an unload gives it up (its topics
        closed, their data kept: Pulsar deletes no topic either). By its owner (307 there in cluster mode)."""
        check_served(request)
        force = query_flag(request, "force")

        async def delete(ns: str, bundle: NamespaceBundle | None) -> None:
            assert bundle is not None
            if not force and any(bundle.includes(name) for name in self.service.topics_of_namespace(ns, 0)):
                raise HttpError(409, "Cannot delete non empty bundle")
            await self.web.bundles.unload(ns, bundle.range_name)

        await self.on_owners(request, "", delete)
        return no_content()

    async def stored_topics(self, ns: str, bundle: NamespaceBundle | None) -> list[PersistentTopic]:
        """The persistent topics of the namespace (of the bundle) that have a ledger (loaded on demand). Not those
        whose cluster left their clusters: Pulsar visits only loaded topics here, and it has deleted those
        (``broker.service.cluster_removal``); loading one would delete it."""
        names = [TopicName.parse(n) for n in self.service.topics_of_namespace(ns, 0)]
        stored = set(self.service.ledger_factory.list_names())
        excluded = self.service.cluster_removal.excluded
        return [await self.service.get_persistent_topic(n, create=False) for n in names
                if n.persistence_path in stored and (bundle is None or bundle.includes(n.full)) and not excluded(n)]

    async def on_owners(self, request: web.Request, action: str,
                        local: Callable[[str, NamespaceBundle | None], Awaitable[None]]) -> None:
        """Run ``local`` over the namespace or the bundle of the path. Standalone: here, at once. Cluster mode, as
        Pulsar's NamespacesBase: each bundle owned here is done here; a namespace-wide request is passed on to the
        owner of each other bundle (``.../{bundle}/{action}`` there, with the broker client's credentials); a request
        on one bundle that another broker owns is redirected there (307). A bundle nobody owns has nothing loaded:
        skipped, as Pulsar does (checkOwnershipPresent)."""
        ns, named = self.scope(request)
        if not self.service.ownership.distributed:
            await local(ns, named)
            return
        await self.each_bundle(request, ns, named, request.method, action, local)

    async def each_bundle(self, request: web.Request, ns: str, named: NamespaceBundle | None, method: str,
                          action: str, local: Callable[[str, NamespaceBundle | None], Awaitable[None]]) -> None:
        """Cluster mode: ``local`` on the bundles owned here, ``method`` on ``{bundle}/{action}`` at the owner
        of the others (one bundle named in the path: a 307 there instead). The bundles are done side by side, as
        Pulsar's waitForAll over its admin client's calls (``owner_calls.fan_out``: at most ``FANOUT_CONCURRENCY``
        at once, the calls to other brokers within ``FANOUT_TIMEOUT_S`` in all); every bundle's call is made even
        when one fails, and the answer is then the first failure in bundle order."""
        ownership = self.service.ownership
        if named is not None:
            if ownership.is_owned(named):
                await local(ns, named)
                return
            owner = await ownership.owner_of(named)
            check_not_unloading(named, owner)
            base = owner and (owner.http_url_tls if request.secure else owner.http_url)
            if base:
                raise web.HTTPTemporaryRedirect(redirect_url(request, base, ownership.is_leader))
            return  # (owned by nobody)

        async def one(bundle: NamespaceBundle, peer_call: PeerCall) -> None:
            if ownership.is_owned(bundle):
                await local(ns, bundle)
                return
            owner = await peer_call.owner(ownership.owner_of(bundle), f"{ns}/{bundle.range_name}")
            check_not_unloading(bundle, owner)
            base = owner and (owner.http_url_tls if request.secure else owner.http_url)
            if base:  # (else owned by nobody)
                await peer_call(method, f"{base}/admin/v2/namespaces/{ns}/{bundle.range_name}/{action}", None)

        bundles = self.service.metadata.namespace_bundles(ns).bundles
        failure = first_failure(await fan_out(self.web.peers, request, bundles, one, f"the calls on every bundle "
                                                                                     f"of {ns}"))
        if failure is not None:
            raise failure.error

    async def release_bundles(self, request: web.Request, ns: str) -> None:
        """Cluster mode: every bundle of ``ns`` released by its owner (a namespace being deleted)."""
        await self.each_bundle(request, ns, None, "PUT", "unload", self._unload)

    async def clear_backlog(self, request: web.Request) -> web.Response:
        only = request.match_info.get("sub")

        async def clear(ns: str, bundle: NamespaceBundle | None) -> None:
            for topic in await self.stored_topics(ns, bundle):
                for name in topic.subscription_names():
                    if only is None or name == only:
                        admin_ops.skip_all(await admin_ops.subscription(topic, name))

        await self.on_owners(request, "clearBacklog" if only is None else f"clearBacklog/{quote(only, safe='')}",
                             clear)
        return no_content()

    async def unsubscribe(self, request: web.Request) -> web.Response:
        """(In cluster mode the refusal for connected consumers is per bundle, as in Pulsar: the other bundles are
        done all the same, the refusal answers once they are.)"""
        name = request.match_info["sub"]

        async def unsubscribe(ns: str, bundle: NamespaceBundle | None) -> None:
            topics = [t for t in await self.stored_topics(ns, bundle) if name in t.subscription_names()]
            for topic in topics:
                sub = topic.subscriptions.get(name)
                if sub is not None and sub.consumers:
                    raise HttpError(412, "Subscription has active connected consumers")  # (Pulsar's words)
            for topic in topics:
                await admin_ops.delete_subscription(topic, name, force=False)
                self.service.expiry_stats.forget(topic.full_name, name)

        await self.on_owners(request, f"unsubscribe/{quote(name, safe='')}", unsubscribe)
        return no_content()

    async def unload(self, request: web.Request) -> web.Response:
        """Release the bundle (or every bundle of the namespace) through ownership (broker.cluster): its topics
        close, their clients look up again (cluster mode: any broker may take it then)."""
        await self.on_owners(request, "unload", self._unload)
        return no_content()

    async def _unload(self, ns: str, bundle: NamespaceBundle | None) -> None:
        if self.service.ownership.distributed and bundle is not None:
            await self.service.ownership.unload_bundle(bundle)
        else:
            await self.web.bundles.unload(ns, None if bundle is None else bundle.range_name)


def check_served(request: web.Request) -> None:
    """404 for a call of a namespace resource Pulsar has and this broker has not (``NOT_SERVED``)."""
    name = request.match_info["bundle"]
    if request.method in NOT_SERVED.get(name, ()):
        raise HttpError(404, f"Not supported by this broker: {request.method} of a namespace's {name}")
