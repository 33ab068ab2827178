"""Admin REST v2: split a namespace bundle (Pulsar's Namespaces.splitNamespaceBundle), and the
automatic split round of a single broker, run every ``loadBalancerSplitIntervalMinutes`` (in cluster mode the
leader's, ``broker.cluster.load_manager``).

- ``PUT /admin/v2/namespaces/{tenant}/{ns}/{bundle}/split?unload=&splitAlgorithmName=`` with an
  optional JSON body: the split positions (``[1073741824, ...]``, numbers or hex strings such as
  ``"0x50000000"``), used by ``specified_positions_divide``. ``{bundle}`` is a range name
  (``0x00000000_0x40000000``), ``LARGEST`` or ``HOT``. The checks and statuses are
  ``broker.cluster.operations``'s; a success is 204.
- ``GET .../{bundle}/topicHashPositions?topics=...`` (``pulsar-admin namespaces get-topic-positions``): where topics
  sit in the bundle's hash range (``topic_hash_positions``), e.g. to choose split positions.
- ``GET .../bundles`` (the bundles now) is in ``namespace_metadata.py``; the unloads
  (``PUT .../unload``, ``.../{bundle}/unload``) in ``namespace_ops.py``.

The bundle operations and the automatic split live in ``broker.cluster``; this resource gives
them the broker's topics and their sampled load (the stats sampler is the web service's).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from aiohttp import web

from broker.admin.cluster import redirect_url
from broker.admin.common import HttpError, json_response, no_content, query_flag, read_body
from broker.admin.stats import ZERO, StatsSampler
from broker.cluster.bundles import NamespaceBundle, hash_topic
from broker.cluster.operations import (
    HOT,
    LARGEST,
    BundleOperationError,
    BundleOperations,
    BundleSplitter,
    parse_split_positions,
)
from broker.cluster.split import TopicLoad
from broker.service.broker_service import MODE_ALL
from broker.service.periodic import PeriodicTask
from broker.topic_name import TopicName, decode_local_name

if TYPE_CHECKING:
    from broker.admin.http import WebService
    from broker.service.broker_service import BrokerService
    from broker.service.kinds import AnySubscription

NS = "/admin/v2/namespaces/{tenant}/{ns}"
# A bundle in a path: a range, LARGEST or HOT; any other name too (Pulsar's route takes it), a 412 once the checks
# before the bundle's passed (the namespace's cluster first).
SPLIT_BUNDLE_PATTERN = "[^/]+"
SECONDS_PER_MINUTE = 60


def topic_loads(service: BrokerService, sampler: StatsSampler) -> list[TopicLoad]:
    """The loaded topics' load over the sampler's last interval (statsUpdateFrequencyInSecs)."""
    loads = []
    for topic in service.all_topics():
        rate_in = sampler.topic_in.get(topic, ZERO)
        subs: list[AnySubscription] = list(topic.subscriptions.values())
        outs = [sampler.sub_out.get(s, ZERO) for s in subs]
        loads.append(TopicLoad(topic.full_name, rate_in.msgs, sum(r.msgs for r in outs), rate_in.bytes,
                               sum(r.bytes for r in outs), len(topic.producers),
                               sum(len(s.consumers) for s in subs)))
    return loads


def topic_hash_positions(in_bundle: Sequence[str], asked: Sequence[str]) -> dict[str, int]:
    """Pulsar's NamespacesBase.internalGetTopicHashPositionsAsync over the topics of one bundle (``in_bundle``: full
    names, partitions one by one): each topic -> its bundle hash (``hash_topic``: CRC-32 of its full name). Nothing
    asked: every topic of the bundle. Else, for each name asked (short forms as the client's: ``x`` is
    ``persistent://public/default/x``; an invalid one InvalidTopicNameError, 412, where Pulsar answers 500): a topic
    that is no partition stands for itself and its partitions, each of them in the bundle keyed by its full name; a
    partition, when in the bundle, is keyed as asked. A topic not in the bundle, or a name of none, is left out.
    (Pulsar hashes a partition asked in a short form as it is spelt, ``t/ns/x-partition-0``, not the bundle's hash of
    its full name; ours gives the hash of the full name, the one the bundle's range holds.)"""
    if not asked:
        return {topic: hash_topic(topic) for topic in in_bundle}
    present = set(in_bundle)
    positions: dict[str, int] = {}
    for spelt in asked:
        name = TopicName.parse(spelt)
        if name.partition_index < 0:
            positions.update((t, hash_topic(t)) for t in in_bundle if TopicName.parse(t).base.full == name.full)
        elif name.full in present:
            positions[spelt] = hash_topic(name.full)
    return positions


def parse_flag(request: web.Request, name: str) -> bool:
    value = request.query.get(name, "false").lower()
    if value not in ("true", "false"):
        raise HttpError(400, f"{name} must be true or false")
    return value == "true"


class BundlesResource:
    def __init__(self, web_service: WebService) -> None:
        self.web = web_service
        service = web_service.service
        self.ops = BundleOperations(
            service.metadata, lambda: service.ownership, web_service.ctx.config,
            topics_of=lambda ns: service.topics_of_namespace(ns, MODE_ALL),
            loads=lambda: topic_loads(service, web_service.sampler))
        # (One broker only: in cluster mode the leader's load manager, broker.cluster.load_manager, picks the
        # bundles to split from every broker's report and asks their owners, as Pulsar's leader does.)
        self.splitter = BundleSplitter(self.ops, should_run=lambda: not service.ownership.distributed)
        self._round = PeriodicTask("bundle-split", web_service.ctx.config.loadBalancerSplitIntervalMinutes
                                   * SECONDS_PER_MINUTE, self._split_round)

    def register(self, r: web.UrlDispatcher) -> None:
        r.add_put(NS + "/{bundle:" + SPLIT_BUNDLE_PATTERN + "}/split", self.split)
        r.add_get(NS + "/{bundle:" + SPLIT_BUNDLE_PATTERN + "}/topicHashPositions", self.hash_positions)
        self.web.app.on_startup.append(self._start)
        self.web.app.on_cleanup.append(self._stop)

    async def _start(self, app: web.Application) -> None:
        self._round.start()

    async def _stop(self, app: web.Application) -> None:
        await self._round.stop()

    async def _split_round(self) -> None:
        await self.splitter.run_once()

    async def split(self, request: web.Request) -> web.Response:
        ns = self.web.namespaces.namespace(request)
        try:
            positions = parse_split_positions(await read_body(request))
            await self.to_owner(request, ns, request.match_info["bundle"])
            await self.ops.split(ns, request.match_info["bundle"], unload=parse_flag(request, "unload"),
                                 algorithm=request.query.get("splitAlgorithmName") or None, positions=positions)
        except BundleOperationError as exc:
            raise HttpError(exc.status, exc.message) from None
        return no_content()

    async def hash_positions(self, request: web.Request) -> web.Response:
        """GET .../{bundle}/topicHashPositions[?topics=a&topics=b] (``topic_hash_positions``), Pulsar's
        TopicHashPositions: {namespace, bundle (as the path names it), topicHashPositions}. Its checks in Pulsar's
        order: the namespace's name (412), the namespace (404), the range (412), then its owner's read-only lookup
        (cluster mode: 307 to the owner; 412 when no broker owns it, as Pulsar does not take a bundle for a read).
        Each ``topics`` value is decoded once more, as Pulsar's Codec.decode (``+`` a space)."""
        asked = [decode_local_name(t) for t in request.query.getall("topics", [])]
        found: dict[str, Any] = {}

        async def positions(ns: str, bundle: NamespaceBundle | None) -> None:
            assert bundle is not None
            in_bundle = [t for t in self.web.service.topics_of_namespace(ns, MODE_ALL) if bundle.includes(t)]
            found.update(namespace=ns, bundle=request.match_info["bundle"],
                         topicHashPositions=topic_hash_positions(in_bundle, asked))

        await self.web.namespace_ops.on_owners(request, "topicHashPositions", positions)
        if not found:  # (cluster mode: owned by nobody)
            raise HttpError(412, f"Failed to find ownership for ServiceUnit:{self.web.namespace_ops.scope(request)[1]}")
        return json_response(found)

    async def to_owner(self, request: web.Request, ns: str, range_name: str) -> None:
        """Cluster mode: a bundle is split by its owner (Pulsar's validateNamespaceBundleOwnership, not read-only).
        Owned by another broker: 307 there; owned by nobody: placed as a lookup places it (this broker takes it
        when it is the one picked, or when ``authoritative``; else 307 to the broker picked, or to the leader, which
        picks), as Pulsar's getWebServiceUrl does. (LARGEST and HOT name bundles of this broker's own topics.)"""
        ownership = self.web.service.ownership
        if not ownership.distributed or range_name in (LARGEST, HOT):
            return
        try:
            bundle = self.ops.bundle(ns, range_name)
        except BundleOperationError as exc:
            raise HttpError(exc.status, exc.message) from None
        if ownership.is_owned(bundle):
            return
        answer = await ownership.lookup_bundle(bundle, query_flag(request, "authoritative"), None)
        if ownership.is_owned(bundle):
            return
        base = answer.http_url_tls if request.secure else answer.http_url
        if not base:
            raise HttpError(412, f"Failed to find ownership for ServiceUnit:{bundle}")
        raise web.HTTPTemporaryRedirect(redirect_url(request, base, ownership.is_leader))

    async def unload(self, ns: str, bundle: str | None) -> None:
        """For the unload endpoints: one bundle, or the whole namespace."""
        try:
            await self.ops.unload(ns, bundle)
        except BundleOperationError as exc:
            raise HttpError(exc.status, exc.message) from None
