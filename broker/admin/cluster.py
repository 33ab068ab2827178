"""Admin REST in cluster mode: calls on a topic go to the broker that owns it (Pulsar's validateTopicOwnership).

A request on a topic (``/admin/v2/{persistent|non-persistent}/{tenant}/{ns}/{topic}[/...]``) whose action needs
the loaded topic (``OWNER_ACTIONS``: create, delete, stats, subscriptions, cursors, unload, terminate, compaction,
messages...) is served only by the owner of the topic's bundle: any other broker looks the owner up (taking the
bundle itself, or finding which broker should, when nobody owns it, as a lookup does) and answers
``307 Temporary Redirect`` to the same path and query on the owner's web service, with ``authoritative`` set as
Pulsar sets it (true when this broker is the leader). Metadata-only actions (partitions, properties, topic
policies, the namespace's lists) are answered by any broker, and so is an action on a partitioned topic's base
name. A standalone broker owns everything: the middleware does nothing more. (In cluster mode the middleware first
reads what another broker has just stored of the topic and this one has not heard of yet,
``BrokerService.refresh_topic``: no check answers 404 for a topic that is stored.)

Before that, in every mode, a call on a topic of a namespace this broker's cluster does not serve is sent to the
peer cluster that does (Pulsar's validateGlobalNamespaceOwnership, ``broker.metadata.global_namespace``): ``307`` to
the same path and query on that cluster's service URL, for the actions Pulsar checks (``GLOBAL_NAMESPACE_ACTIONS``,
``GLOBAL_NAMESPACE_METHOD_ACTIONS``; topic policies in their handler); the HTTP lookup does the same
(``validate_global_namespace``). So do the namespace calls Pulsar's NamespacesBase
checks (``GLOBAL_NAMESPACE_ROUTES``: unloading the namespace or a bundle, splitting a bundle, and clearing the backlog
of or unsubscribing from one bundle; not the namespace-wide clearBacklog / unsubscribe), after what Pulsar checks
before (``check_before_peer_redirect``: a bundle unload's range, a split's positions and algorithm). Creating a topic
(PUT the topic or its partitions) is checked first too, but answered ``503`` where the others are redirected, as
Pulsar 4.0.7 answers it (``CREATE_ACTIONS``). The checks of creating a topic and of the HTTP lookup come before the
caller's permissions in Pulsar: the security middleware makes them (``validate_cluster_first``) before it refuses a
role (``Order.AFTER_NAMESPACE`` in ``broker.auth.http``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from urllib.parse import unquote

from aiohttp import web
from multidict import MultiDict
from yarl import URL

from broker.admin.common import HttpError, pulsar_name_ok, query_flag, read_body
from broker.admin.context import AdminContext
from broker.admin.partitioned_topics import read_partition_count
from broker.auth.http import check_deferred
from broker.cluster.data import NamespaceEphemeralData
from broker.cluster.operations import BundleOperationError, parse_bundle_range, parse_split_positions, split_algorithm
from broker.errors import BrokerError
from broker.metadata.bundles import BundleError, NamespaceBundle
from broker.metadata.global_namespace import GlobalNamespaceError, PeerCluster
from broker.service.broker_service import BrokerService
from broker.topic_name import TopicName, decode_local_name

DOMAINS = ("persistent", "non-persistent")
# The actions (path element after the topic) that Pulsar serves on the topic's owner only; "" is the topic itself
# (PUT create, DELETE delete).
OWNER_ACTIONS = frozenset({
    "", "stats", "internalStats", "subscriptions", "subscription", "all_subscription", "unload", "terminate",
    "lastMessageId", "compaction", "ledger", "examinemessage", "messageid", "trim", "truncate", "backlog",
})


# The actions on a topic for which Pulsar first checks that this cluster serves the namespace
# (PersistentTopicsBase's calls of validateGlobalNamespaceOwnershipAsync): "compaction" only for PUT (trigger), every
# method for the others.
GLOBAL_NAMESPACE_ACTIONS = frozenset({
    "stats", "partitioned-stats", "internalStats", "partitioned-internalStats", "internal-info", "subscriptions",
    "subscription", "all_subscription", "unload", "terminate", "examinemessage", "messageid", "ledger", "backlog",
    "backlogSize",
})
GLOBAL_NAMESPACE_PUT_ACTIONS = frozenset({"compaction"})
# (method, action) checked the same way because Pulsar 4.0.7 reads the topic's partitioned metadata with
# AdminResource.getPartitionedTopicMetadataAsync, which checks the caller's lookup permission, then the namespace's
# cluster (validateGlobalNamespaceOwnershipAsync), before anything else of the call: the partitioned metadata
# (internalGetPartitionedMetadataAsync; NonPersistentTopics' after its validateTopicOwnership, which a standalone
# passes), creating the missing partitions (internalCreateMissedPartitions) and truncating a persistent topic
# (internalTruncateTopicAsync; a partition's, internalTruncateNonPartitionedTopicAsync, gets there too when this
# cluster does not store it, through getTopicReferenceAsync / topicNotFoundReasonAsync). A non-persistent topic's
# truncate is refused before (412 "unsupport truncate"). Topic policies are checked by their handler
# (broker.admin.topic_policies: after the policies-enabled and not-a-partition checks, as Pulsar's preValidation).
GLOBAL_NAMESPACE_METHOD_ACTIONS = frozenset({
    ("GET", "partitions"), ("POST", "createMissedPartitions"), ("DELETE", "truncate"),
})
# (method, action) on a partition that this broker neither has loaded nor stores: Pulsar 4.0.7 looks the topic up with
# PersistentTopicsBase.getTopicReferenceAsync, whose topicNotFoundReasonAsync reads the partitioned topic's metadata
# with getPartitionedTopicMetadataAsync, so checks the namespace's cluster (after the caller's permission and
# validateTopicOwnership: in cluster mode the topic's owner redirects it to the peer cluster). A whole topic's is
# "not found" there, answered by the handler. (Pulsar's offload calls do the same; ours has none.) A non-persistent
# topic's trim is refused before (405).
GLOBAL_NAMESPACE_PARTITION_ACTIONS = frozenset({
    ("GET", "lastMessageId"), ("GET", "compaction"), ("POST", "trim"), ("DELETE", "truncate"),
})
# PUT on these creates a topic ("": a non-partitioned one, "partitions": a partitioned one). Pulsar 4.0.7's
# PersistentTopics / NonPersistentTopics check the namespace's cluster before anything but the namespace's name, with
# AdminResource.validateGlobalNamespaceOwnership(): its refusals (404, 412) pass as they are, but the redirect to the
# peer cluster is caught as any other failure and answered 503 (CREATE_REFUSED).
CREATE_ACTIONS = frozenset({"", "partitions"})
CREATE_REFUSED = "Failed to validate global cluster configuration"
_NS = "/admin/v2/namespaces/{tenant}/{ns}"
# The namespace calls (method, route) for which Pulsar's NamespacesBase calls validateGlobalNamespaceOwnership
# (4.0.7: internalUnloadNamespaceAsync, internalUnloadNamespaceBundleAsync - there only when no broker owns the
# bundle, which none of this cluster does for a namespace it does not serve -, internalSplitNamespaceBundleAsync,
# internalClearNamespaceBundleBacklog(ForSubscription), internalUnsubscribeNamespaceBundle).
BUNDLE_UNLOAD = _NS + "/{bundle}/unload"
BUNDLE_SPLIT = _NS + "/{bundle}/split"
GLOBAL_NAMESPACE_ROUTES = frozenset({
    ("PUT", _NS + "/unload"), ("PUT", BUNDLE_UNLOAD), ("PUT", BUNDLE_SPLIT),
    ("POST", _NS + "/{bundle}/clearBacklog"), ("POST", _NS + "/{bundle}/clearBacklog/{sub}"),
    ("POST", _NS + "/{bundle}/unsubscribe/{sub}"),
})


async def _bundle_has_owner(service: BrokerService, namespace: str, request: web.Request) -> bool:
    """Whether a broker of this cluster owns the bundle a bundle unload names: Pulsar's
    internalUnloadNamespaceBundleAsync checks the namespace's cluster only when none does. (So a namespace's own
    delete, which releases its bundles by unloading them on their owners after marking the namespace deleted, is not
    refused by them.) An invalid range is left to the handler."""
    try:
        bundle = NamespaceBundle.parse(namespace, request.match_info["bundle"])
    except BundleError:
        return False
    ownership = service.ownership
    if not ownership.distributed:  # (a standalone broker owns every bundle, as a matter of speaking only)
        return False
    return ownership.is_owned(bundle) or await ownership.owner_of(bundle) is not None


def topic_of(path: str) -> tuple[TopicName, str] | None:
    """(the topic, the action) of an admin path on one topic, else None. ``path`` as sent
    (``request.rel_url.raw_path``), each segment decoded on its own, so that a topic whose name has a ``/``
    (``a%2Fx``) is the one its route's handler serves, not ``a`` with the action ``x``; the topic's segment as
    Pulsar's Codec.decode reads it (a ``+`` is a space), as the handler reads it (``pulsar_topic_in_path``)."""
    parts = [decode_local_name(part) if i == 6 else unquote(part) for i, part in enumerate(path.split("/"))]
    # "", "admin", "v2", domain, tenant, ns, topic[, action, ...]
    if len(parts) < 7 or parts[1] != "admin" or parts[2] != "v2" or parts[3] not in DOMAINS or not parts[6]:
        return None
    try:
        name = TopicName.parse(f"{parts[3]}://{parts[4]}/{parts[5]}/{parts[6]}")
    except BrokerError:
        return None
    return name, parts[7] if len(parts) > 7 else ""


def ownership_middleware(ctx: AdminContext) -> Callable[..., Awaitable[web.StreamResponse]]:
    @web.middleware
    async def redirect_to_owner(request: web.Request,
                                handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        if request.match_info.http_exception is not None:
            # No route (404) or not this method (405, e.g. POST .../compaction): Jersey answers that before any
            # resource method runs, so before the owner's redirect.
            return await handler(request)
        service = ctx.service
        resource = request.match_info.route.resource
        if resource is not None and (request.method, resource.canonical) in GLOBAL_NAMESPACE_ROUTES:
            namespace = f"{request.match_info['tenant']}/{request.match_info['ns']}"
            await check_before_peer_redirect(ctx, request, namespace, resource.canonical)
            if await service.metadata.namespace_exists_fresh(namespace) and not (  # (else the handler answers)
                    resource.canonical == BUNDLE_UNLOAD and await _bundle_has_owner(service, namespace, request)):
                redirect_to_peer(request, namespace, lambda: service.peer_cluster_of(namespace))
        m = request.match_info
        if service.distributed and "tenant" in m and "ns" in m and pulsar_name_ok(m["tenant"]) and pulsar_name_ok(
                m["ns"]):
            # A namespace another broker has just created, read now (its notification may be on its way): every
            # namespace call answers for what is stored, as Pulsar's policies are read through its metadata cache,
            # which loads a key it does not hold (a GET .../bundles at once after a PUT through another broker).
            await service.metadata.namespace_exists_fresh(f"{m['tenant']}/{m['ns']}")
        found = topic_of(request.rel_url.raw_path)
        if found is not None and service.distributed and "topic" in request.match_info:
            # What another broker has just stored of the topic, read now (its notification may be on its way): the
            # checks below and the handler's answer for it, as Pulsar's metadata cache loads what it does not hold.
            await service.refresh_topic(found[0])
        if found is not None and peer_checked(request.method, *found):
            await check_served_here(service, request, *found)
        if found is not None and service.ownership.distributed:
            name, action = found
            if action in OWNER_ACTIONS and not (name.partition_index < 0
                                                 and service.metadata.partitions_of(name.full) > 0) and not (
                    action == "" and request.method == "GET"):  # (GET .../{ns}/{bundle}: a bundle's topic list)
                # A check left to the handler past the namespace's cluster (Order.AFTER_LOOKUP) comes before the
                # owner's redirect: Pulsar's internalTruncateNonPartitionedTopicAsync checks the tenant's admin, then
                # validateTopicOwnership.
                await check_deferred(request)
                await validate_topic_ownership(ctx, request, name)
        if found is not None and peer_checked_partition(service, request.method, *found):
            await check_served_here(service, request, found[0])
        return await handler(request)

    return redirect_to_owner


def peer_checked(method: str, name: TopicName, action: str) -> bool:
    """Whether the middleware checks a call on a topic (``action``: the path element after it) against the
    namespace's cluster."""
    if action in GLOBAL_NAMESPACE_ACTIONS or (
            method == "PUT" and action in GLOBAL_NAMESPACE_PUT_ACTIONS | CREATE_ACTIONS):
        return True
    return ((method, action) in GLOBAL_NAMESPACE_METHOD_ACTIONS and (name.persistent or action != "truncate")
            and not (action == "truncate" and name.partition_index >= 0))  # (a partition's: peer_checked_partition)


def peer_checked_partition(service: BrokerService, method: str, name: TopicName, action: str) -> bool:
    """Whether a call on a partition is checked against the namespace's cluster because this broker does not have
    it (``GLOBAL_NAMESPACE_PARTITION_ACTIONS``)."""
    return (name.partition_index >= 0 and (method, action) in GLOBAL_NAMESPACE_PARTITION_ACTIONS
            and (name.persistent or action not in ("trim", "truncate"))
            and service.get_topic_if_loaded(name) is None and not service.topic_exists(name))


async def check_before_peer_redirect(ctx: AdminContext, request: web.Request, namespace: str, route: str) -> None:
    """What Pulsar 4.0.7's NamespacesBase checks of a namespace call before anything else, so before
    validateGlobalNamespaceOwnership sends it to the peer cluster: a bundle unload parses its range first
    (NamespaceBundleFactory.getBundle), a split reads its body (the split positions) and checks its algorithm. The
    other calls check their bundle after the redirect, on the cluster that serves the namespace (validated there
    against its bundles)."""
    try:
        if route == BUNDLE_UNLOAD:
            parse_bundle_range(namespace, request.match_info["bundle"])
        elif route == BUNDLE_SPLIT:
            split_algorithm(ctx.config, request.query.get("splitAlgorithmName") or None,
                            parse_split_positions(await read_body(request)))
    except BundleOperationError as exc:
        raise HttpError(exc.status, exc.message) from None


async def validate_topic_ownership(ctx: AdminContext, request: web.Request, name: TopicName) -> None:
    """Return when this broker owns the topic's bundle (taking it when the lookup picks this broker); else raise
    the 307 to the owner (or the broker picked to own it)."""
    ownership = ctx.service.ownership
    if ownership.is_owned(ownership.bundle_of(name)):
        return
    await ctx.service.refresh_namespace(name)
    if not ctx.metadata.namespace_exists(name.namespace):
        return  # (the handler answers the missing namespace)
    base = await topic_owner_url(ctx, name, request.secure, query_flag(request, "authoritative"))
    if base is not None:
        raise web.HTTPTemporaryRedirect(redirect_url(request, base, ownership.is_leader))


async def topic_owner_url(ctx: AdminContext, name: TopicName, secure: bool, authoritative: bool = False) -> str | None:
    """None when this broker serves ``name`` (standalone; or it owns the topic's bundle, taking it when the lookup
    picks this broker); else the web service URL of the broker that owns it, or of the one that decides who will
    (the leader: a call there is redirected once more). 412 when that broker has no URL of the scheme asked."""
    ownership = ctx.service.ownership
    if not ownership.distributed or ownership.is_owned(ownership.bundle_of(name)):
        return None
    answer = await ownership.lookup(name, authoritative, None)
    if ownership.is_owned(ownership.bundle_of(name)):
        return None
    base = answer.http_url_tls if secure else answer.http_url
    if not base:
        raise HttpError(412, f"Failed to find ownership for topic:{name.full}")
    return base


def validate_global_namespace(service: BrokerService, request: web.Request, name: TopicName) -> None:
    """Return when this broker's cluster serves the topic's namespace; else raise the 307 to the same path and query
    on the peer cluster that does (its TLS service URL over https when it has one and this broker serves https), or
    the refusal (404, 412) when no cluster can."""
    redirect_to_peer(request, name.namespace, lambda: service.peer_cluster(name))


async def validate_global_namespace_to_create(service: BrokerService, request: web.Request, name: TopicName,
                                              action: str) -> None:
    """``validate_global_namespace`` as creating a topic (``action``: one of ``CREATE_ACTIONS``) makes it: 503 where
    the others answer 307; a partition count that is not one is 400 before (Pulsar's JSON binding reads it first)."""
    if action == "partitions":
        await read_partition_count(request)
    try:
        validate_global_namespace(service, request, name)
    except web.HTTPTemporaryRedirect:
        raise HttpError(503, CREATE_REFUSED) from None


async def validate_cluster_first(service: BrokerService, request: web.Request) -> None:
    """Pulsar's check of the namespace's cluster on the routes where it comes before the caller's permissions
    (creating a topic: PersistentTopics.createNonPartitionedTopic / createPartitionedTopic; the HTTP lookup:
    TopicLookupBase.internalLookupTopicAsync, validateTopicOperation after it): raise what the route answers for a
    namespace this cluster does not serve. Nothing when it serves it, or the name is not a topic's, or the namespace
    does not exist (answered by what reads it)."""
    m = request.match_info
    lookup = request.path.startswith("/lookup/")
    domain = m["domain"] if lookup else request.path.split("/")[3]
    try:
        name = TopicName.parse(f"{domain}://{m['tenant']}/{m['ns']}/{m['topic']}")
    except BrokerError:
        return
    resource = request.match_info.route.resource
    partitioned = resource is not None and resource.canonical.endswith("/partitions")
    await check_served_here(service, request, name, None if lookup else "partitions" if partitioned else "")


async def check_served_here(service: BrokerService, request: web.Request, name: TopicName,
                            action: str | None = None) -> None:
    """The check of the namespace's cluster for a call on ``name``: ``validate_global_namespace``, or, for a PUT
    creating a topic (``action`` in ``CREATE_ACTIONS``), ``validate_global_namespace_to_create``. Nothing when the
    namespace does not exist (what reads it answers that)."""
    await service.refresh_namespace(name)
    if not service.metadata.namespace_exists(name.namespace):
        return
    if request.method == "PUT" and action in CREATE_ACTIONS:
        await validate_global_namespace_to_create(service, request, name, action)
    else:
        validate_global_namespace(service, request, name)


def redirect_to_peer(request: web.Request, namespace: str, find_peer: Callable[[], PeerCluster | None]) -> None:
    """``validate_global_namespace`` with the peer cluster ``find_peer`` answers (a topic's or a namespace's)."""
    try:
        peer = find_peer()
    except GlobalNamespaceError as exc:
        raise HttpError(exc.status, exc.message) from None
    if peer is None:
        return
    tls = request.secure and bool(peer.service_url_tls)
    base = URL(peer.service_url_tls if tls else peer.service_url)
    if not base.host:
        raise HttpError(503, f"Failed to validate global cluster configuration : ns={namespace}  "
                             f"emsg=the service URL of cluster {peer.name} is not configured")
    raise web.HTTPTemporaryRedirect(request.url.with_host(base.host).with_port(base.port))


def check_not_unloading(bundle: NamespaceBundle, owner: NamespaceEphemeralData | None) -> None:
    """A bundle whose owner is releasing it (its node disabled) has no broker to send the call to: the owner no
    longer serves it, and redirected there (or, on the owner, to itself) the call would come back until the release
    ends. Pulsar's NamespaceService.findBrokerServiceUrl fails the lookup of such a bundle ("Namespace bundle %s is
    being unloaded", an IllegalStateException), which the admin call answers 500
    (PulsarWebResource.resumeAsyncResponseExceptionally: a RestException of the cause)."""
    if owner is not None and owner.disabled:
        raise HttpError(500, f"Namespace bundle {bundle} is being unloaded")


def redirect_url(request: web.Request, base: str, authoritative: bool) -> URL:
    """The request's path and query on the broker at ``base``, with ``authoritative`` replaced. A URL, not its
    text: the path stays as the request encoded it (aiohttp parses a redirect's text again, which decodes ``%2E%2E``
    and climbs a level: a subscription named ``..`` would be sent to the topic's route). A parameter given more
    than once (``topics=a&topics=b``) keeps every value."""
    query = MultiDict(request.url.query)
    query["authoritative"] = "true" if authoritative else "false"
    return on_broker(request, base).with_query(query)


def on_broker(request: web.Request, base: str) -> URL:
    """The request's URL (path and query as it came) on the broker at ``base``."""
    target = URL(base)
    return request.url.with_scheme(target.scheme).with_host(target.host or "").with_port(target.port)


async def redirect_to_broker(ctx: AdminContext, request: web.Request, broker_id: str) -> None:
    """Pulsar's maybeRedirectToBroker: return when ``broker_id`` (``host:port``, an ``http(s)://`` before it allowed)
    is this broker; else the 307 to the same path and query on that registered broker's web service (its TLS one over
    https, or when it has no plain one), or 404 when no broker of that id is registered (a standalone broker: any
    other id)."""
    wanted = broker_id.removeprefix("http://").removeprefix("https://")
    process = ctx.process
    if wanted == ctx.broker_id or f"http://{wanted}" == process.web_url or f"https://{wanted}" == process.web_url_tls:
        return
    registry = ctx.service.registry
    report = await registry.broker_report(wanted) if registry is not None else None
    if report is None:
        raise HttpError(404, f"Broker id '{broker_id}' not found in available brokers.")
    urls = report.urls
    base = urls.web_url_tls if (request.secure or not urls.web_url) and urls.web_url_tls else urls.web_url or ""
    raise web.HTTPTemporaryRedirect(on_broker(request, base))


def validate_cluster_ownership(ctx: AdminContext, request: web.Request, cluster: str | None) -> None:
    """Pulsar's validateClusterOwnershipAsync for the brokers' calls naming a cluster: any name passes when
    authorization is off (Pulsar: "any cluster name should be valid"), and so do none, ``global`` and this broker's
    cluster; another cluster is answered with the 307 to the same path and query on its service URL, one that does
    not exist with 404."""
    if cluster is None or cluster in ("global", ctx.cluster) or not ctx.config.authorizationEnabled:
        return
    data = ctx.metadata.clusters.get(cluster)
    if data is None:
        raise HttpError(404, f"Cluster does not exist: cluster={cluster}")
    tls = request.secure and bool(data.get("serviceUrlTls"))
    base = URL(str(data.get("serviceUrlTls") if tls else data.get("serviceUrl") or ""))
    if not base.host:
        raise HttpError(500, f"the service URL of cluster {cluster} is not configured")
    raise web.HTTPTemporaryRedirect(request.url.with_host(base.host).with_port(base.port))
