"""Admin REST v2: topics (Pulsar's PersistentTopics / NonPersistentTopics resources).

Partitioned topics follow Pulsar: operations that make sense per partition (create, list or delete
subscriptions, skip all, reset by time, expire, subscription properties and replicated status, trim,
compaction, unload) are applied to every partition, each by the broker that owns it (partition_fanout.py: locally,
or the same call at the owner, as Pulsar's broker makes it through its admin client); the ones that name a
position in one log (skip n, reset to a message id, peek, last message id) answer 405 on the partitioned
name and work on ``...-partition-k``. The operations on a partitioned topic as a whole (create, grow,
delete, its partitioned stats) are in partitioned_topics.py.

Reads never create a managed ledger: stats and subscriptions of a partition that was never written to
are left out rather than creating it. (The stats of a non-persistent partition within its partitioned
topic's count do bring it to life, as Pulsar's do: there is nothing to store.)

Non-persistent topics are the live ones: list, stats (Pulsar's NonPersistentTopicStats), live
subscriptions (list, delete, properties, a reset by time that has nothing to move), unload and delete
work. Creating a subscription is refused with Pulsar's 400 (only a client's SUBSCRIBE makes one),
terminating with its 406. Operations on stored messages or cursor positions answer 405: with
Pulsar's reason where Pulsar answers 405 (after its 404 for a topic that does not exist), with ours
where Pulsar fails with a 500 (it casts the topic to a persistent one: skip, reset to a position,
compaction, get a message by id).
"""

from __future__ import annotations

import base64
import contextlib
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from aiohttp import web

from broker.admin import stats as S
from broker.admin.cluster import check_not_unloading, redirect_to_peer, redirect_url
from broker.admin.common import (
    DOMAINS,
    HttpError,
    check_namespace_name,
    int_param,
    json_response,
    no_content,
    parse_properties,
    parse_topic_name,
    query_flag,
    read_body,
    resumed_empty,
)
from broker.admin.owner_calls import PeerCall, fan_out, first_failure
from broker.admin.partition_fanout import PartitionFanout
from broker.admin.partitioned_topics import PartitionedTopics
from broker.auth.http import check_deferred
from broker.cluster.operations import BundleOperationError
from broker.errors import NotAllowedError, SubscriptionNotFoundError, TopicNotFoundError
from broker.java_text import iso_time_ms
from broker.protocol import pulsar_api_pb2 as pb
from broker.protocol.commands import INT64_MAX
from broker.protocol.entry import entry_body, parse_payload, peek_broker_entry_metadata, skip_broker_entry_metadata
from broker.protocol.text import mend_strings
from broker.service import admin_ops
from broker.service.backlog_quota import backlog_size_from
from broker.service.replication import is_replicator_name
from broker.service.topic import RESERVED_SUBSCRIPTION, PersistentTopic, is_reserved_subscription
from broker.topic_name import TopicName, is_system_topic
from compression_codecs import DecompressionError, decompress
from managed_ledger import Entry, ManagedCursor, ManagedLedgerError, Position

if TYPE_CHECKING:
    from broker.admin.http import WebService
    from broker.cluster.bundles import NamespaceBundle
    from broker.service.broker_service import AnyTopic, BrokerService
    from broker.service.kinds import AnySubscription
    from broker.service.subscription import Subscription

Handler = Callable[[web.Request], Awaitable[web.Response]]
TOPIC = "/{tenant}/{ns}/{topic}"
SUB = TOPIC + "/subscription/{sub}"
# Pulsar's answer (400) to PUT .../subscription/{sub} on a non-persistent topic: only SUBSCRIBE makes one there.
CREATE_LIVE_SUBSCRIPTION = "Create subscription on non-persistent topic can only be done through client"
# A bundle in a path (GET .../non-persistent/{tenant}/{ns}/{bundle}: no topic route answers GET without an action).
# Any name, as Pulsar's route takes it: one that is not a range is 412 once the namespace is checked.
BUNDLE_NAME = "[^/]+"
# The most a peeked or fetched message is uncompressed to (its metadata announces the size; a larger one is
# returned as stored, with the header naming its codec).
PEEK_INFLATE_LIMIT = 64 * 1024 * 1024


class TopicsResource:
    def __init__(self, web_service: WebService) -> None:
        self.web = web_service
        # The calls on each partition of a partitioned topic, by the partition's owner.
        self.fanout = PartitionFanout(web_service.ctx, web_service.peers, self.partitions, self.exists)
        self.partitioned = PartitionedTopics(self)  # the operations on a partitioned topic as a whole

    def register(self, r: web.UrlDispatcher) -> None:
        for d in DOMAINS:
            base = f"/admin/v2/{d}"
            live = d == "non-persistent"
            # Operations on stored messages or cursor positions: 405 on non-persistent topics.
            stored = _refused_without_storage if live else _as_is

            def refused(handler: Handler, reason: str, live: bool = live) -> Handler:
                """``handler``, or on a non-persistent topic Pulsar's 405 with ``reason``."""
                return self._refused_on_live_topic(reason) if live else handler

            r.add_get(base + "/{tenant}/{ns}", self.list_topics)
            r.add_get(base + "/{tenant}/{ns}/partitioned", self.partitioned.list_partitioned)
            if base.endswith("/non-persistent"):  # (Pulsar's getListFromBundle, what getList asks each owner)
                r.add_get(base + "/{tenant}/{ns}/{bundle:" + BUNDLE_NAME + "}", self.list_in_bundle)
            r.add_put(base + TOPIC, self.create)
            r.add_delete(base + TOPIC, self.delete)
            r.add_get(base + TOPIC + "/partitions", self.partitioned.get_partitions)
            r.add_get(base + TOPIC + "/properties", self.get_properties)
            r.add_put(base + TOPIC + "/properties", self.update_properties)
            r.add_delete(base + TOPIC + "/properties", self.remove_property)
            r.add_put(base + TOPIC + "/partitions", self.partitioned.create_partitioned)
            r.add_post(base + TOPIC + "/partitions", self.partitioned.update_partitions)
            r.add_delete(base + TOPIC + "/partitions", self.partitioned.delete_partitioned)
            r.add_post(base + TOPIC + "/createMissedPartitions", self.partitioned.create_missed_partitions)
            # (Pulsar refuses a non-persistent trim before looking the topic up)
            r.add_post(base + TOPIC + "/trim",
                       _refused("Trim on a non-persistent topic is not allowed") if live else self.trim)
            # (Pulsar's NonPersistentTopics answers truncate so, before looking the topic up)
            r.add_delete(base + TOPIC + "/truncate", _refused("unsupport truncate", 412) if live else self.truncate)
            r.add_get(base + TOPIC + "/stats", self.stats)
            r.add_get(base + TOPIC + "/partitioned-stats", self.partitioned.partitioned_stats)
            r.add_get(base + TOPIC + "/internalStats", self.internal_stats)
            r.add_get(base + TOPIC + "/internal-info", self.internal_info)
            r.add_get(base + TOPIC + "/partitioned-internalStats", self.partitioned.partitioned_internal_stats)
            r.add_get(base + TOPIC + "/subscriptions", self.subscriptions)
            r.add_put(base + SUB, _refused(CREATE_LIVE_SUBSCRIPTION, 400) if live else self.create_subscription)
            r.add_delete(base + SUB, self.delete_subscription)
            r.add_post(base + SUB + "/skip_all", stored(self.skip_all))
            r.add_post(base + SUB + "/skip/{n}", stored(self.skip))
            r.add_post(base + SUB + "/resetcursor/{timestamp}", self.reset_live_by_time if live else self.reset_by_time)
            r.add_post(base + SUB + "/resetcursor", stored(self.reset_to_position))
            r.add_post(base + SUB + "/expireMessages/{seconds}", refused(
                self.expire, "Expire messages on a non-persistent topic is not allowed"))
            # (Pulsar has no check for a non-persistent topic here: it fails casting the topic, a 500)
            r.add_post(base + SUB + "/expireMessages", stored(self.expire_to_position))
            r.add_post(base + TOPIC + "/all_subscription/expireMessages/{seconds}", refused(
                self.expire_all, "Expire messages for all subscriptions on a non-persistent topic is not allowed"))
            r.add_post(base + SUB + "/analyzeBacklog", refused(
                self.analyze_backlog, "Unsupported operation analyzeBacklog for NonPersistentSubscription"))
            r.add_get(base + SUB + "/position/{n}", refused(
                self.peek, "Peek messages on a non-persistent topic is not allowed"))
            r.add_get(base + SUB + "/properties", self.get_subscription_properties)
            r.add_put(base + SUB + "/properties", self.set_subscription_properties)
            if d == "persistent":
                r.add_post(base + SUB + "/replicatedSubscriptionStatus", self.set_replicated_status)
                r.add_get(base + SUB + "/replicatedSubscriptionStatus", self.get_replicated_status)
            else:
                r.add_post(base + SUB + "/replicatedSubscriptionStatus", _refused(
                    "Cannot enable/disable replicated subscriptions on non-persistent topics"))
                r.add_get(base + SUB + "/replicatedSubscriptionStatus", _refused(
                    "Cannot get replicated subscriptions on non-persistent topics"))
            r.add_put(base + TOPIC + "/unload", self.unload)
            r.add_post(base + TOPIC + "/terminate", self.terminate)
            r.add_post(base + TOPIC + "/terminate/partitions", self.terminate)
            r.add_get(base + TOPIC + "/lastMessageId", refused(
                self.last_message_id, "GetLastMessageId on a non-persistent topic is not allowed"))
            r.add_put(base + TOPIC + "/compaction", stored(self.trigger_compaction))
            r.add_get(base + TOPIC + "/compaction", stored(self.compaction_status))
            r.add_get(base + TOPIC + "/ledger/{ledger}/entry/{entry}", stored(self.message_by_id))
            r.add_put(base + TOPIC + "/backlogSize", stored(self.backlog_size))
            r.add_get(base + TOPIC + "/examinemessage", refused(
                self.examine_message, "Examine messages on a non-persistent topic is not allowed"))
            r.add_get(base + TOPIC + "/messageid/{timestamp}", refused(
                self.message_id_by_time, "Get message ID by timestamp on a non-persistent topic is not allowed"))

    @property
    def service(self) -> BrokerService:
        return self.web.service

    # -- names and lookups -----------------------------------------------------------------------
    def name(self, request: web.Request) -> TopicName:
        """The topic of the path: 412 for a name Pulsar refuses; 404 "Namespace not found" (Pulsar's words) when its
        tenant or namespace does not exist (a broker's heartbeat namespace exists: its health check's topic is
        there)."""
        name = self.path_name(request)
        if not self.web.metadata.namespace_exists(name.namespace):
            raise HttpError(404, "Namespace not found")
        return name

    @staticmethod
    def path_name(request: web.Request) -> TopicName:
        """The topic of the path, its namespace not looked up: 412 for a name Pulsar refuses."""
        m = request.match_info
        return parse_topic_name(request.path.split("/")[3], m["tenant"], m["ns"], m["topic"])

    def partitions(self, name: TopicName) -> int:
        return self.service.metadata.partitions_of(name.full) if name.partition_index < 0 else 0

    def exists(self, name: TopicName) -> bool:
        return (self.service.get_topic_if_loaded(name) is not None
                or self.service.ledger_factory.exists(name.persistence_path))

    def check_exists(self, name: TopicName) -> None:
        """404 "Topic <name> not found" for a topic that is not there (``PartitionedTopics.topic_exists``), as Pulsar's
        PersistentTopicsBase.internalCheckTopicExists answers (AdminResource.getTopicNotFoundErrorMessage)."""
        if not self.partitioned.topic_exists(name):
            raise HttpError(404, f"Topic {name} not found")

    def _not_partitioned(self, name: TopicName) -> None:
        if self.partitions(name) > 0:  # (Pulsar's words: its partitions are the topics)
            raise HttpError(404, f"Topic {name} not found")

    def not_found(self, name: TopicName) -> HttpError:
        """The 404 of a topic that is not there, in Pulsar's words (PersistentTopicsBase.topicNotFoundReasonAsync): a
        plain name, "Topic <name> not found"; a partition's name, whether its partitioned topic has partitions at all
        (it may be a partition past their count, or one not created)."""
        if name.partition_index < 0:
            return HttpError(404, f"Topic {name} not found")
        if self.service.metadata.partitions_of(name.base.full) == 0:
            return HttpError(404, f"Partitioned Topic not found: {name} has zero partitions")
        return HttpError(404, "Topic partitions were not yet created")

    def _partition_in_range(self, name: TopicName) -> None:
        """404 for a partition's name past its partitioned topic's count (never loaded, let alone created)."""
        if name.partition_index < 0:
            return
        if 0 < self.service.metadata.partitions_of(name.base.full) <= name.partition_index:
            raise self.not_found(name)

    async def topic(self, name: TopicName, *, live_partition: bool = False) -> AnyTopic:
        """An existing topic (loaded on demand); 404 otherwise. Never auto-creates. A non-persistent partition that
        is not live is brought to life only with ``live_partition`` (the stats routes: Pulsar's
        getTopicReferenceAsync -> BrokerService.getTopic creates a non-persistent partition within its partitioned
        topic's count whatever createIfMissing says); the other routes leave it alone (in cluster mode every
        partition of a non-persistent partitioned topic is asked, see ``PartitionFanout.partitions_to_ask``)."""
        self._not_partitioned(name)
        self._partition_in_range(name)
        if not name.persistent and name.partition_index >= 0 and not live_partition and not self.exists(name):
            raise self.not_found(name)
        try:
            return await self.service.get_topic(name, create=False)
        except TopicNotFoundError:
            raise self.not_found(name) from None

    async def stored_topic(self, name: TopicName) -> PersistentTopic:
        """``topic`` for the routes on stored messages and cursors (persistent names only)."""
        self._not_partitioned(name)
        self._partition_in_range(name)
        try:
            return await self.service.get_persistent_topic(name, create=False)
        except TopicNotFoundError:
            raise self.not_found(name) from None

    def _single(self, name: TopicName, op: str | None) -> bool:
        """Whether ``name`` is one topic (not partitioned). With ``op``, a partitioned name is
        refused with 405 (operations on one position of one log)."""
        if self.partitions(name) == 0:
            return True
        if op is not None:
            raise HttpError(405, f"{op} on a partitioned topic is not allowed")
        return False

    async def stored_one(self, name: TopicName, op: str) -> PersistentTopic:
        """The topic of a route on one position of one log (persistent names only): 405 on a partitioned topic."""
        self._single(name, op)
        return await self.stored_topic(name)

    async def for_each_subscription(self, request: web.Request, op: str | None,
                                    action: Callable[[PersistentTopic, Subscription], Awaitable[None]],
                                    body: object = None) -> web.Response:
        """Apply ``action`` to the subscription on the topic or on each partition, by the partition's owner, with
        the request's ``body`` (persistent topics). A partition without the subscription: 404, once the others
        are done (as Pulsar answers); ``op``: the operation's name, refused (405) on a partitioned topic."""
        name = self.name(request)
        sub_name = request.match_info["sub"]
        self._single(name, op)

        async def apply(one: TopicName) -> None:
            topic = await self.stored_topic(one)
            await action(topic, await admin_ops.subscription(topic, sub_name))

        if not await self.fanout.each(request, name, apply, body=body, missing_ok=False):
            raise HttpError(404, f"Subscription {sub_name} not found")
        return no_content()

    @staticmethod
    async def _subscription(topic: AnyTopic, name: str) -> AnySubscription:
        return await topic.match_kind(lambda t: admin_ops.subscription(t, name),
                                      lambda t: admin_ops.live_subscription(t, name))

    # -- topics ----------------------------------------------------------------------------------
    async def list_topics(self, request: web.Request) -> web.Response:
        ns = self.web.namespaces.namespace(request)
        mode = 0 if request.path.split("/")[3] == "persistent" else 1
        names = await self.topics_of_namespace(request, ns, mode)
        bundle = request.query.get("bundle")
        if bundle:  # Pulsar's getList(bundle): the topics whose bundle's range name is exactly this
            bundles = self.web.metadata.namespace_bundles(ns)
            names = [n for n in names if bundles.find(n).range_name == bundle]
        return json_response(names)

    async def topics_of_namespace(self, request: web.Request, ns: str, mode: int) -> list[str]:
        """``service.topics_of_namespace``; in cluster mode the non-persistent topics (live on their owner only) of
        every bundle another broker owns are asked of that broker, as Pulsar's getList / internalGetListOfTopics
        do (getListInBundle of each bundle through the broker's admin client; a bundle nobody owns has none): side
        by side, within one time bound (``owner_calls.fan_out``), the first failure in bundle order answering."""
        names = set(self.service.topics_of_namespace(ns, mode))
        ownership = self.service.ownership
        if mode == 0 or not ownership.distributed:
            return sorted(names)

        async def one(bundle: NamespaceBundle, peer_call: PeerCall) -> Any:
            if ownership.is_owned(bundle):
                return None
            owner = await peer_call.owner(ownership.owner_of(bundle), f"{ns}/{bundle.range_name}")
            base = owner and (owner.http_url_tls if request.secure else owner.http_url)
            if not base:
                return None
            return await peer_call("GET", f"{base}/admin/v2/non-persistent/{ns}/{bundle.range_name}", None)

        outcomes = await fan_out(self.web.peers, request, self.web.metadata.namespace_bundles(ns).bundles, one,
                                 f"the topic lists of every bundle of {ns}")
        if (failure := first_failure(outcomes)) is not None:
            raise failure.error
        for _, listed in outcomes:
            names.update(n for n in listed or () if isinstance(n, str) and not is_system_topic(n))
        return sorted(names)

    async def list_in_bundle(self, request: web.Request) -> web.Response:
        """GET /admin/v2/non-persistent/{tenant}/{ns}/{bundle}: the live non-persistent topics of one bundle, from
        its owner (307 there). Pulsar's getListFromBundle reads the namespace (404), then sends a namespace another
        cluster serves there (validateGlobalNamespaceOwnership: 307, or 412), then checks the bundle (412: its
        isBundleOwnedByAnyBroker validates the range first), then answers 204 with no body when no broker owns the
        bundle (isBundleOwnedByAnyBroker false: a read-only lookup finds no owner; the namespace-wide list reads that
        as no topics). (Not Pulsar's 404 for a namespace marked deleted: a namespace's delete asks the owners of its
        bundles for their live topics once it is marked.)"""
        ns = self.web.namespaces.namespace(request)
        redirect_to_peer(request, ns, lambda: self.service.peer_cluster_of(ns, allow_deleted=True))
        try:
            bundle = self.web.bundles.ops.bundle(ns, request.match_info["bundle"])
        except BundleOperationError as exc:
            raise HttpError(exc.status, exc.message) from None
        ownership = self.service.ownership
        if ownership.distributed and not ownership.is_owned(bundle):
            owner = await ownership.owner_of(bundle)
            check_not_unloading(bundle, owner)
            if owner is None:
                return no_content()
            base = owner.http_url_tls if request.secure else owner.http_url
            if not base:
                return json_response([])
            raise web.HTTPTemporaryRedirect(redirect_url(request, base, ownership.is_leader))
        return json_response(sorted(t.full_name for t in self.service.non_persistent_topics.values()
                                    if t.name.namespace == ns and bundle.includes(t.full_name)
                                    and not is_system_topic(t.full_name)))

    async def create(self, request: web.Request) -> web.Response:
        """PUT a topic; an optional body is its properties ({key: value})."""
        check_namespace_name(request.match_info["tenant"], request.match_info["ns"])  # (Pulsar checks it first here)
        name = self.name(request)
        properties = parse_properties(await read_body(request))
        await self._check_partition_name(name)
        if self.partitions(name) > 0 or self.exists(name):
            raise HttpError(409, "This topic already exists")
        try:
            await self.service.get_topic(name, create=True, explicit=True)
        except NotAllowedError as exc:  # (the namespace's topic limit: 409, as Pulsar answers)
            raise HttpError(409, exc.message) from exc
        if properties:
            await self.service.metadata.set_topic_properties(name.full, properties)
        return no_content()

    async def _check_partition_name(self, name: TopicName) -> None:
        """Pulsar's validateNonPartitionTopicName for the admin's create: a name ending in "-partition-<n>" is
        refused (412) unless it is a partition of a partitioned topic that has more than n partitions. The count is
        read from the store when this broker has not heard of the partitioned topic yet (the broker that created it
        may be asking this one, the partition's owner, to create its partitions)."""
        if name.partition_index < 0:
            return
        partitions = await self.service.metadata.partitions_of_fresh(name.base.full)
        local, base = name.local_name, name.base.local_name
        if partitions == 0:
            raise HttpError(412, f'Can\'t create topic {local} with "-partition-" followed by numeric value if there '
                                 f"isn't a partitioned topic {base} created.")
        if name.partition_index >= partitions:
            raise HttpError(412, f'Can\'t create topic {local} with "-partition-" followed by a number smaller than '
                                 f"number of partition of partitioned topic {base}")

    # -- properties ------------------------------------------------------------------------------
    def properties_key(self, name: TopicName) -> str:
        """Where a topic's properties are kept: a partitioned topic's (base) name covers its
        partitions; 404 when the topic does not exist."""
        if self.service.metadata.partitions_of(name.base.full) > 0:
            return name.base.full
        if not self.exists(name):
            raise HttpError(404, f"Topic {name} not found")
        return name.full

    async def get_properties(self, request: web.Request) -> web.Response:
        key = self.properties_key(self.name(request))
        return json_response(self.service.metadata.topic_properties.get(key, {}))

    async def update_properties(self, request: web.Request) -> web.Response:
        """PUT .../properties: add or replace the given keys (the others stay)."""
        key = self.properties_key(self.name(request))
        properties = parse_properties(await read_body(request))
        await self.service.metadata.update_topic_properties(key, lambda stored: {**stored, **properties})
        return no_content()

    async def remove_property(self, request: web.Request) -> web.Response:
        """DELETE .../properties?key=k."""
        key = self.properties_key(self.name(request))
        prop = request.query.get("key")
        if not prop:
            raise HttpError(400, "The key of the property to remove is required (?key=)")
        await self.service.metadata.update_topic_properties(
            key, lambda stored: {k: v for k, v in stored.items() if k != prop})
        return no_content()

    async def delete(self, request: web.Request) -> web.Response:
        """DELETE a (non-partitioned or partition) topic. One that is not there: a 404 "Topic <name> not found", its
        namespace not looked up first; but a non-persistent one, nothing to do: 204 (Pulsar's NonPersistentTopics
        deletes whatever is loaded under the name, in any namespace)."""
        name = self.path_name(request)
        if name.namespace not in self.web.metadata.namespaces:
            if not name.persistent:
                return no_content()
            raise HttpError(404, f"Topic {name} not found")
        if self.partitions(name) > 0:
            raise HttpError(409, f"{name} is a partitioned topic, instead of calling delete topic, please call "
                                 "delete-partitioned-topic.")  # (Pulsar's words)
        if not self.exists(name):
            if not name.persistent:
                return no_content()
            raise HttpError(404, f"Topic {name} not found")
        await self.delete_one(name, force=query_flag(request, "force"))
        return no_content()

    async def delete_one(self, name: TopicName, force: bool) -> None:
        """Delete a (non-partitioned or partition) topic; 412 while clients are connected, unless
        ``force``, which disconnects them first (they may recreate it if auto-creation allows)."""
        topic = self.service.get_topic_if_loaded(name)
        if topic is not None and admin_ops.has_clients(topic):
            if not force:
                raise HttpError(412, admin_ops.busy_reason(topic))
            admin_ops.disconnect_clients(topic)
        await self.service.delete_topic(name)
        if name.partition_index < 0:
            await self.service.schemas.delete(name.full)

    async def trim(self, request: web.Request) -> web.Response:
        """POST .../trim: delete the ledgers every subscription has consumed, as retention allows
        (what happens on its own at rollover), on the topic or each partition (by its owner)."""
        async def trim(one: TopicName) -> None:
            (await self.stored_topic(one)).ledger.trim_consumed_ledgers()

        await self.fanout.each(request, self.name(request), trim)
        return resumed_empty()  # (Pulsar 4.0.7's answer: 200, no body)

    async def truncate(self, request: web.Request) -> web.Response:
        """DELETE .../truncate: every subscription's backlog cleared and every ledger but the current one deleted,
        whatever the retention (Pulsar's truncateTopic); on the topic or each partition (by its owner). The tenant's
        admins only, checked here: after the caller's LOOKUP and the namespace's cluster (Order.AFTER_LOOKUP), as
        Pulsar's internalTruncateTopicAsync. (Pulsar checks a partitioned topic's partitions with the broker's own
        role, so the caller's LOOKUP suffices there; here the tenant's admins only, as for any other topic.)"""
        async def truncate(one: TopicName) -> None:
            (await self.stored_topic(one)).truncate()

        await check_deferred(request)
        await self.fanout.each(request, self.name(request), truncate)
        return no_content()

    # -- stats -----------------------------------------------------------------------------------
    async def stats(self, request: web.Request) -> web.Response:
        """GET .../stats; of a non-persistent partition that is not live, that of the partition it brings to life
        (Pulsar 4.0.7 answers 200 with empty stats, and the partition is live afterwards)."""
        topic = await self.topic(self.name(request), live_partition=True)
        return json_response(S.topic_stats(topic, self.web.sampler))

    async def internal_stats(self, request: web.Request) -> web.Response:
        topic = await self.topic(self.name(request), live_partition=True)
        stats = S.internal_stats(topic)
        if query_flag(request, "metadata") and isinstance(topic, PersistentTopic):
            await S.add_ledger_metadata(stats, topic.ledger)
        return json_response(stats)

    async def internal_info(self, request: web.Request) -> web.Response:
        """GET .../internal-info (``pulsar-admin topics info-internal``): the topic's managed ledger as stored, read
        from the storage without loading the topic (Pulsar's getManagedLedgerInfo, on any broker); a partitioned
        topic's as Pulsar's PartitionedManagedLedgerInfo, each partition's under ``partitions``."""
        name = self.name(request)
        partitions = self.service.metadata.partitions_of(name.full) if name.partition_index < 0 else 0
        if partitions:
            infos = {str(p): await self._stored_info(p) for p in map(name.partition, range(partitions))}
            return json_response({"version": 0, "partitions": infos})
        return json_response(await self._stored_info(name))

    async def _stored_info(self, name: TopicName) -> dict[str, Any]:
        """A topic's ManagedLedgerInfo, with what this broker keeps in its metadata store rather than in the managed
        ledger's own (Pulsar keeps both there): the terminated position and a non-partitioned topic's properties."""
        info = await self.service.ledger_factory.stored_info(name.persistence_path) if name.persistent else None
        if info is None:
            raise HttpError(404, f"Topic {name} not found")
        metadata = self.service.metadata
        terminated = metadata.terminated.get(name.full)
        properties = {**info.properties, **metadata.topic_properties.get(name.full, {})}
        return S.managed_ledger_info(info._replace(
            properties=properties, terminated=Position(*terminated) if terminated is not None else info.terminated))

    # -- subscriptions ---------------------------------------------------------------------------
    async def subscriptions(self, request: web.Request) -> web.Response:
        """The subscriptions of the topic, or of every partition (each from its owner)."""
        async def names(one: TopicName) -> list[str]:
            return sorted((await self.topic(one)).subscription_names())

        listed = await self.fanout.each(request, self.name(request), names)
        return json_response(sorted({sub for names in listed for sub in names or ()}))

    async def create_subscription(self, request: web.Request) -> web.Response:
        """PUT .../subscription/{sub}: an optional ResetCursorData body (the start, and the subscription's
        ``properties``, stored with it as Pulsar's createSubscription does), ``?replicated=true`` for a replicated
        subscription (Pulsar's query parameter)."""
        name = self.name(request)
        sub_name = request.match_info["sub"]
        if is_reserved_subscription(sub_name):
            # (Pulsar's admin API does not check this, but a subscription would share the broker's own cursor)
            raise HttpError(412, RESERVED_SUBSCRIPTION)
        body = await read_body(request)
        start = None if body is None else message_id(body)
        properties = subscription_properties(body)
        replicated = query_flag(request, "replicated")

        n = self.partitions(name)
        if n == 0:
            topic = await self.service.get_persistent_topic(name, create=True)
            await self._create_subscription(topic, sub_name, start, replicated, properties)
            return no_content()

        async def create_partition(partition: TopicName) -> None:
            await self.create_partition_subscription(partition, sub_name, start, replicated, properties)

        # Each partition by its owner (Pulsar's createSubscription per partition through its admin client), every one
        # of them (created if need be); like Pulsar, a partition that has it already is not an error.
        created, _ = await self.fanout.tally(request, [name.partition(i) for i in range(n)],
                                             create_partition, body=body)
        if created == 0:
            raise HttpError(409, "Subscription already exists for topic")
        return no_content()

    async def create_partition_subscription(self, partition: TopicName, sub_name: str, start: Position | None,
                                            replicated: bool, properties: Mapping[str, str] | None) -> None:
        """A partition's share of a subscription made on its partitioned topic (here, by the partition's owner): the
        partition made if need be, 409 when it has the subscription already."""
        topic = await self.service.get_persistent_topic(partition, create=True)
        if sub_name in topic.subscription_names():
            raise HttpError(409, "Subscription already exists for topic")
        await self._create_subscription(topic, sub_name, start, replicated, properties)

    @staticmethod
    async def _create_subscription(topic: PersistentTopic, sub_name: str, start: Position | None,
                                   replicated: bool, properties: Mapping[str, str] | None) -> None:
        sub = await admin_ops.create_subscription(topic, sub_name, start, properties)
        if replicated and not sub.set_replicated():
            raise HttpError(500, "Failed to update cursor properties")

    async def delete_subscription(self, request: web.Request) -> web.Response:
        """On persistent and non-persistent topics alike (a live subscription of the latter); on each partition of
        a partitioned topic, by its owner."""
        force = query_flag(request, "force")
        sub_name = request.match_info["sub"]
        name = self.name(request)

        async def delete(one: TopicName) -> None:
            t = await self.topic(one)
            sub = await self._subscription(t, sub_name)
            # (admin_ops takes a persistent topic; the non-persistent one meets it by duck typing until
            # both kinds share one subscription protocol: branch r-dispatch)
            await admin_ops.delete_subscription(t, sub.name, force)  # type: ignore[arg-type]
            self.service.expiry_stats.forget(t.full_name, sub.name)

        # (a non-persistent partition may not be live: only a live one is asked to have the subscription)
        if not await self.fanout.each(request, name, delete, missing_ok=not name.persistent):
            raise HttpError(404, f"Subscription {sub_name} not found")
        return no_content()

    async def _each_subscription(self, request: web.Request, action: Callable[[AnySubscription], Awaitable[Any]],
                                 body: object = None) -> list[Any]:
        """``action`` on the subscription of the path, of either kind, on the topic or on each created partition
        (by its owner, with ``body``): the answers; 404 when there is none."""
        name = self.name(request)
        sub_name = request.match_info["sub"]

        async def one(topic: TopicName) -> Any:
            return await action(await self._subscription(await self.topic(topic), sub_name))

        answers = await self.fanout.each(request, name, one, body=body, missing_ok=not name.persistent)
        if not answers:
            raise HttpError(404, f"Subscription {sub_name} not found")
        return answers

    async def get_subscription_properties(self, request: web.Request) -> web.Response:
        """GET .../subscription/{sub}/properties (a partitioned topic: every partition's, merged, as Pulsar 4.0.7
        answers); a non-persistent subscription's are kept while it lives, as in Pulsar."""
        async def properties(sub: AnySubscription) -> dict[str, str]:
            return dict(sub.subscription_properties)

        merged: dict[str, str] = {}
        for doc in await self._each_subscription(request, properties):
            merged.update(doc or {})
        return json_response(merged)

    async def set_subscription_properties(self, request: web.Request) -> web.Response:
        """PUT .../subscription/{sub}/properties: replace them all with the body's {key: value}."""
        properties = parse_properties(await read_body(request))

        async def replace(sub: AnySubscription) -> None:
            await sub.set_subscription_properties(properties)

        await self._each_subscription(request, replace, body=properties)
        return no_content()

    async def skip_all(self, request: web.Request) -> web.Response:
        async def skip_all(t: PersistentTopic, sub: Subscription) -> None:
            admin_ops.skip_all(sub)

        return await self.for_each_subscription(request, None, skip_all)

    async def skip(self, request: web.Request) -> web.Response:
        n = int_param(request.match_info["n"], "Number of messages")
        if n < 0:
            raise HttpError(412, "Number of messages to skip must be >= 0")

        async def skip(t: PersistentTopic, sub: Subscription) -> None:
            admin_ops.skip(sub, n)

        return await self.for_each_subscription(request, "Skip messages", skip)

    async def reset_by_time(self, request: web.Request) -> web.Response:
        timestamp = int_param(request.match_info["timestamp"], "Timestamp")

        async def reset(t: PersistentTopic, sub: Subscription) -> None:
            await admin_ops.reset_by_time(t, sub, timestamp)

        return await self.for_each_subscription(request, None, reset)

    async def reset_live_by_time(self, request: web.Request) -> web.Response:
        """POST .../resetcursor/{timestamp} on a non-persistent topic: nothing stored to rewind to, so
        success, as Pulsar answers (and as a consumer's seek by time is answered)."""
        int_param(request.match_info["timestamp"], "Timestamp")

        async def nothing(sub: AnySubscription) -> None:
            return None

        await self._each_subscription(request, nothing)
        return no_content()

    async def reset_to_position(self, request: web.Request) -> web.Response:
        """POST .../subscription/{sub}/resetcursor with a message id (Pulsar's ResetCursorData: ledgerId, entryId,
        partitionIndex, batchIndex, excluded): the subscription reads from it again (Pulsar's
        internalResetCursorOnPosition); a batchIndex inside a batch leaves the messages before it acknowledged.
        One topic or partition: 405 on a partitioned topic. The partitionIndex is not checked, as in Pulsar."""
        body = await read_body(request)
        if body is None:
            raise HttpError(400, "A message id body {\"ledgerId\": L, \"entryId\": E} is required")
        start = message_id(body)
        # (ResetCursorData's isExcluded is "excluded" on the wire; message_id checked the dict. The query flag is ours.)
        excluded = body.get("excluded", False) if isinstance(body, dict) else False
        exclusive = bool(excluded) or query_flag(request, "isExcluded")
        batch_index = _int_field(body, "batchIndex", -1) if isinstance(body, dict) else -1
        if self.partitions(self.name(request)) > 0:  # (in Pulsar's words, not _single's; no partitionIndex check)
            raise HttpError(405, "Reset-cursor at position is not allowed for partitioned-topic")

        async def reset(t: PersistentTopic, sub: Subscription) -> None:
            await admin_ops.reset_to(t, sub, start, exclusive, batch_index)

        return await self.for_each_subscription(request, None, reset)

    async def expire(self, request: web.Request) -> web.Response:
        seconds = int_param(request.match_info["seconds"], "Expire time")

        async def expire(t: PersistentTopic, sub: Subscription) -> None:
            await self._expire(t, sub.cursor, seconds)

        return await self.for_each_subscription(request, None, expire)

    async def expire_all(self, request: web.Request) -> web.Response:
        seconds = int_param(request.match_info["seconds"], "Expire time")

        async def expire_all(one: TopicName) -> None:
            t = await self.stored_topic(one)
            for cursor in list(t.ledger.cursors.values()):
                await self._expire(t, cursor, seconds)

        await self.fanout.each(request, self.name(request), expire_all)
        return no_content()

    async def expire_to_position(self, request: web.Request) -> web.Response:
        """POST .../subscription/{sub}/expireMessages with a message id (Pulsar's ResetCursorData: ledgerId, entryId,
        partitionIndex, batchIndex, excluded): expire every message up to it (Pulsar's
        internalExpireMessagesByPosition). One topic or partition: 405 on a partitioned topic; 409 for a position
        past the last entry. ``sub`` may name a replicator (pulsar.repl.<cluster>): its cursor is moved."""
        body = await read_body(request)
        if not isinstance(body, dict):
            raise HttpError(400, "A message id body {\"ledgerId\": L, \"entryId\": E} is required")
        message = message_id(body)
        partition_index = _int_field(body, "partitionIndex", -1)
        batch_index = _int_field(body, "batchIndex", -1)
        excluded = body.get("excluded", False)  # (ResetCursorData's isExcluded() on the wire; "isExcluded" is ignored)
        if not isinstance(excluded, bool):
            raise HttpError(400, "excluded must be a boolean")
        name = self.name(request)
        sub_name = request.match_info["sub"]
        if partition_index != name.partition_index:
            raise HttpError(412, "Invalid parameter for expire message by position, partition index of passed in "
                                 "message position doesn't match partition index for the topic")
        if self.partitions(name) > 0:
            raise HttpError(405, "Expire message at position is not supported for partitioned-topic")
        topic = await self.stored_topic(name)
        if is_replicator_name(sub_name):
            cursor = topic.ledger.cursors.get(sub_name)
            if cursor is None:
                raise HttpError(404, "Replicator not found")
        else:
            cursor = (await self._user_subscription(topic, sub_name)).cursor
        size = await admin_ops.batch_size_at(topic, message) if batch_index >= 0 else 0
        now_ms = int(time.time() * 1000)
        expired = admin_ops.expire_to(topic, cursor, admin_ops.expiry_target(message, batch_index, size, excluded))
        if expired is None:
            raise HttpError(409, f"Expire message by position not issued on topic {name} for subscription "
                                 f"{sub_name} due to ongoing message expiration not finished or invalid message "
                                 "position provided.")
        self.service.expiry_stats.record(topic.full_name, cursor.name, expired, now_ms)
        return no_content()

    async def analyze_backlog(self, request: web.Request) -> web.Response:
        """POST .../subscription/{sub}/analyzeBacklog, with an optional message id body to start from: the
        subscription's unacknowledged entries and messages counted (Pulsar's AnalyzeSubscriptionBacklogResult; no
        entry filters here, so every entry is accepted). One topic or partition: 405 on a partitioned topic."""
        body = await read_body(request)
        start = None if body is None else message_id(body)
        name = self.name(request)
        if self.partitions(name) > 0:
            raise HttpError(405, "Analyze backlog on a partitioned topic is not allowed, please try do it on specific "
                                 "topic partition")
        topic = await self.stored_topic(name)
        sub = await self._user_subscription(topic, request.match_info["sub"])
        cfg = self.service.config
        limits = admin_ops.BacklogScanLimits(max_entries=cfg.subscriptionBacklogScanMaxEntries,
                                             max_time_s=cfg.subscriptionBacklogScanMaxTimeMs / 1000,
                                             read_batch=cfg.dispatcherMaxReadBatchSize)
        found = await admin_ops.analyze_backlog(topic, sub.cursor, start, limits)
        result: dict[str, object] = {
            "entries": found.entries, "messages": found.messages,
            "filterRejectedEntries": 0, "filterAcceptedEntries": found.entries, "filterRescheduledEntries": 0,
            "filterRejectedMessages": 0, "filterAcceptedMessages": found.messages, "filterRescheduledMessages": 0,
            "aborted": found.aborted,
        }
        if found.first is not None:  # (Pulsar leaves out what is null)
            result["firstMessageId"] = str(found.first)
        if found.last is not None:
            result["lastMessageId"] = str(found.last)
        return json_response(result)

    @staticmethod
    async def _user_subscription(topic: PersistentTopic, sub_name: str) -> Subscription:
        """The subscription ``sub_name`` (live or stored), as Pulsar's topic.getSubscription finds it: 404 with its
        words when there is none (the broker's own cursors are none)."""
        if PersistentTopic.is_subscription_cursor(sub_name):
            with contextlib.suppress(SubscriptionNotFoundError):
                return await admin_ops.subscription(topic, sub_name)
        raise HttpError(404, f"Subscription {sub_name} not found for topic {topic.full_name}")

    async def _expire(self, topic: PersistentTopic, cursor: ManagedCursor, seconds: int) -> None:
        now_ms = int(time.time() * 1000)
        expired = await admin_ops.expire_cursor(topic, cursor, seconds, now_ms)
        self.service.expiry_stats.record(topic.full_name, cursor.name, expired, now_ms)

    async def set_replicated_status(self, request: web.Request) -> web.Response:
        """Make a subscription replicated or not (a boolean body), on every partition of a
        partitioned topic."""
        enabled = await read_body(request)
        if not isinstance(enabled, bool):
            raise HttpError(400, "A boolean body (true to replicate the subscription, false not to) is required")

        async def apply(t: PersistentTopic, sub: Subscription) -> None:
            if not sub.set_replicated(enabled):
                raise HttpError(500, "Failed to update cursor properties")

        return await self.for_each_subscription(request, None, apply, body=enabled)

    async def get_replicated_status(self, request: web.Request) -> web.Response:
        """{topic or partition: replicated} for the subscription (each partition's from its owner)."""
        sub_name = request.match_info["sub"]

        async def status(one: TopicName) -> dict[str, bool]:
            t = await self.stored_topic(one)
            return {t.full_name: (await admin_ops.subscription(t, sub_name)).replicated}

        merged: dict[str, bool] = {}
        for doc in await self.fanout.each(request, self.name(request), status, missing_ok=False):
            merged.update(doc or {})
        if not merged:
            raise HttpError(404, f"Subscription {sub_name} not found")
        return json_response(merged)

    async def peek(self, request: web.Request) -> web.Response:
        n = int_param(request.match_info["n"], "Message position")
        if n < 1:
            raise HttpError(412, "Message position must be >= 1")
        name = self.name(request)
        topic = await self.stored_one(name, "Peek messages")
        sub_name = request.match_info["sub"]
        try:
            sub = await admin_ops.subscription(topic, sub_name)
        except SubscriptionNotFoundError:
            if is_reserved_subscription(sub_name):
                raise
            # Pulsar's getSubscriptionReference: peeking creates a subscription that is not there (durable, at the
            # earliest message), so its answer is the topic's n-th message, or 404 "Message not found".
            sub = await topic.get_or_create_subscription(sub_name, True, pb.CommandSubscribe.Earliest, None)
        return entry_response(await admin_ops.peek(topic, sub, n))

    async def backlog_size(self, request: web.Request) -> web.Response:
        """PUT .../backlogSize with a message id (``pulsar-admin topics get-backlog-size -m``): the bytes stored after
        it, estimated as Pulsar's ManagedLedger estimates them; ledgerId -1: every byte stored. 405 on a
        partitioned topic, as Pulsar."""
        position = message_id(await read_body(request))
        name = self.name(request)
        if self.partitions(name) > 0:
            raise HttpError(405, "calculate backlog size is not allowed for partitioned-topic")
        ledger = (await self.stored_topic(name)).ledger
        return json_response(ledger.total_size if position.ledger_id == -1 else backlog_size_from(ledger, position))

    async def message_by_id(self, request: web.Request) -> web.Response:
        position = Position(int_param(request.match_info["ledger"], "Ledger id"),
                            int_param(request.match_info["entry"], "Entry id"))
        topic = await self.stored_one(self.name(request), "Get message by id")
        try:
            entry = await topic.ledger.read_entry(position)
        except ManagedLedgerError:
            raise HttpError(404, "Message id not found") from None
        return entry_response(entry)

    async def examine_message(self, request: web.Request) -> web.Response:
        """GET .../examinemessage?initialPosition=latest|earliest&messagePosition=N (1-based)."""
        initial = request.query.get("initialPosition", "latest")
        if initial not in ("latest", "earliest"):
            raise HttpError(412, "initialPosition must be 'latest' or 'earliest'")
        n = int_param(request.query.get("messagePosition", "1"), "messagePosition")
        topic = await self.stored_one(self.name(request), "Examine messages")
        if topic.ledger.number_of_entries <= 0:
            raise HttpError(412, "Could not examine messages due to the total message is zero")
        return entry_response(await admin_ops.examine(topic, initial == "latest", n))

    async def message_id_by_time(self, request: web.Request) -> web.Response:
        """GET .../messageid/{timestamp}: the first message published at or after it (past the
        last message: the position the next one will get)."""
        timestamp = int_param(request.match_info["timestamp"], "Timestamp")
        name = self.name(request)
        topic = await self.stored_one(name, "Get message ID by timestamp")
        position = await topic.find_position_by_time(timestamp)
        return json_response(message_id_json(position.ledger_id, position.entry_id, name.partition_index))

    def _refused_on_live_topic(self, reason: str) -> Handler:
        """Pulsar's answer on a non-persistent topic to an operation on stored messages: 404 when the
        topic does not exist, else 405 with ``reason``."""
        async def refuse(request: web.Request) -> web.Response:
            name = self.name(request)
            if self.partitions(name) == 0:
                await self.topic(name)
            raise HttpError(405, reason)

        return refuse

    # -- lifecycle -------------------------------------------------------------------------------
    async def unload(self, request: web.Request) -> web.Response:
        """PUT .../unload: close the topic (loaded again on next use); on a partitioned topic each partition, by its
        owner (Pulsar's internalUnloadTopic: the admin client's unloadTopic per partition)."""
        name = self.name(request)

        async def unload(one: TopicName) -> None:
            self._partition_in_range(one)
            if not self.exists(one):
                raise self.not_found(one)
            await self.service.unload_topic(one)

        # (A partitioned topic whose partitions were never created has nothing loaded: 204, as Pulsar, which creates
        # the partitions with the partitioned topic, answers.)
        await self.fanout.each(request, name, unload)
        return no_content()

    async def terminate(self, request: web.Request) -> web.Response:
        """POST .../terminate (one topic) or .../terminate/partitions (each partition): the last message id."""
        name = self.name(request)
        if not name.persistent:  # (Pulsar's validatePersistentTopicName)
            raise HttpError(406, "Need to provide a persistent topic name")
        if request.path.endswith("/partitions"):
            # (Pulsar's internalTerminatePartitionedTopic: a partition's name, or a name with no partitions, is 405.)
            if name.partition_index >= 0 or self.partitions(name) == 0:
                raise HttpError(405, "Termination of a non-partitioned topic is not allowed using "
                                     "partitioned-terminate, please use terminate commands")

            async def terminate(p: TopicName) -> dict[str, int]:
                last = await (await self.service.get_persistent_topic(p, create=False)).terminate()
                return message_id_json(last.ledger_id, last.entry_id, p.partition_index)

            answers = await self.fanout.on_owners(request, self.fanout.existing_partitions(name), "POST", "terminate",
                                                  terminate)
            return web.json_response({str(p.partition_index): doc for p, doc in answers.items()})
        topic = await self.stored_one(name, "Terminate")
        last = await topic.terminate()
        return web.json_response(message_id_json(last.ledger_id, last.entry_id, name.partition_index))

    async def trigger_compaction(self, request: web.Request) -> web.Response:
        """PUT .../compaction: start compacting. On a partitioned topic, each created partition is compacted by its
        owner (Pulsar's internalTriggerCompaction: the admin client's triggerCompaction per partition); 409 only
        when every one of them was compacting already (nothing started)."""
        name = self.name(request)
        if not name.persistent:
            raise HttpError(405, "Compaction is only for persistent topics")
        if self._single(name, None):
            await self._trigger_compaction(name)
            return no_content()
        started, running = await self.fanout.tally(request, self.fanout.existing_partitions(name),
                                                   self._trigger_compaction)
        if running and not started:  # (a partitioned topic none of whose partitions was used: nothing to do)
            raise HttpError(409, "Compaction already in progress")
        return no_content()

    async def _trigger_compaction(self, name: TopicName) -> None:
        """Start compacting one topic this broker serves; 409 while a run is under way."""
        if not (await self.stored_topic(name)).compactor.trigger():
            raise HttpError(409, "Compaction already in progress")

    async def compaction_status(self, request: web.Request) -> web.Response:
        """GET .../compaction: {"status": NOT_RUN|RUNNING|SUCCESS|ERROR, "lastError": ...}. A partitioned topic's
        name is 404, as Pulsar 4.0.7 answers (internalCompactionStatusAsync looks the name up as one loaded topic,
        getTopicReferenceAsync, and finds none): its status is per partition."""
        name = self.name(request)
        if self.partitions(name) > 0:
            raise HttpError(404, f"Topic {name} not found")
        topic = await self.stored_topic(name)
        return web.json_response({"status": topic.compactor.status.value, "lastError": topic.compactor.last_error})

    async def last_message_id(self, request: web.Request) -> web.Response:
        name = self.name(request)
        topic = await self.stored_one(name, "GetLastMessageId")
        last, batch_index = await topic.last_message_id()
        return json_response(message_id_json(last.ledger_id, last.entry_id, name.partition_index, batch_index))


def message_id_json(ledger_id: int, entry_id: int, partition_index: int, batch_index: int = -1) -> dict[str, Any]:
    """A message id as Pulsar's admin JSON has it (MessageIdImpl, or BatchMessageIdImpl for a batch's last message):
    ``batchIndex`` -1 outside a batch, ``batchSize`` 0 (as those classes' getters give them)."""
    return {"ledgerId": ledger_id, "entryId": entry_id, "partitionIndex": partition_index, "batchIndex": batch_index,
            "batchSize": 0}


def _as_is(handler: Handler) -> Handler:
    return handler


def _refused(reason: str, status: int = 405) -> Handler:
    async def refuse(request: web.Request) -> web.Response:
        raise HttpError(status, reason)

    return refuse


def _refused_without_storage(handler: Handler) -> Handler:
    return _refused("Not supported on a non-persistent topic: it stores no messages and no cursors")


def _int_field(body: dict[str, Any], key: str, default: int) -> int:
    """An optional integer of a JSON body (400 when it is something else)."""
    value = body.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise HttpError(400, f"{key} must be an integer")
    return value


def subscription_properties(body: object) -> dict[str, str] | None:
    """ResetCursorData's ``properties``: a JSON object of strings, or none (absent or null)."""
    properties = body.get("properties") if isinstance(body, dict) else None
    return None if properties is None else parse_properties(properties, "Subscription")


def message_id(body: object) -> Position:
    """A MessageId / ResetCursorData body: {"ledgerId": L, "entryId": E, ...}."""
    if not isinstance(body, dict):
        raise HttpError(400, "Message id must be a JSON object {\"ledgerId\": L, \"entryId\": E}")
    try:
        lid, eid = body["ledgerId"], body["entryId"]
    except KeyError:
        raise HttpError(400, "Message id needs ledgerId and entryId") from None
    if any(isinstance(v, bool) or not isinstance(v, int) for v in (lid, eid)):
        raise HttpError(400, "ledgerId and entryId must be integers")
    # Java's MessageId.latest is (Long.MAX, Long.MAX); anything past the end means "the end".
    return Position(min(lid, INT64_MAX), min(eid, INT64_MAX))


# -- peek / get-message responses ---------------------------------------------------------------------



def entry_response(entry: Entry) -> web.Response:
    """The message as Pulsar's admin API returns it: the (uncompressed) payload as the body, the
    metadata in X-Pulsar-* headers (PersistentTopicsBase.generateResponseWithEntry)."""
    bem = peek_broker_entry_metadata(entry.data)
    data = skip_broker_entry_metadata(entry.data)
    md = parse_payload(data, verify=False).metadata
    mend_strings(md)  # (a producer's text that is not UTF-8: headers take only str)
    payload = entry_body(data)
    h: dict[str, str] = {"X-Pulsar-Message-ID": str(entry.position)}
    if bem is not None:  # (PIP-70, as Pulsar names them)
        if bem.HasField("broker_timestamp"):
            h["X-Pulsar-Broker-Entry-METADATA-timestamp"] = iso_time_ms(bem.broker_timestamp)
        if bem.HasField("index"):
            h["X-Pulsar-Broker-Entry-METADATA-index"] = str(bem.index)
    for kv in md.properties:
        h[f"X-Pulsar-PROPERTY-{kv.key}"] = kv.value
    h["X-Pulsar-publish-time"] = iso_time_ms(md.publish_time)
    if md.HasField("event_time") and md.event_time:
        h["X-Pulsar-event-time"] = iso_time_ms(md.event_time)
    if md.HasField("deliver_at_time"):
        h["X-Pulsar-deliver-at-time"] = iso_time_ms(md.deliver_at_time)
    if md.HasField("num_messages_in_batch"):
        h["X-Pulsar-num-batch-message"] = str(md.num_messages_in_batch)
        h["X-Pulsar-batch-size"] = str(len(payload))
    if md.HasField("null_value"):
        h["X-Pulsar-null-value"] = _bool(md.null_value)
    if md.HasField("num_chunks_from_msg"):
        h["X-Pulsar-PROPERTY-TOTAL-CHUNKS"] = str(md.num_chunks_from_msg)
        h["X-Pulsar-PROPERTY-CHUNK-ID"] = str(md.chunk_id)
    h["X-Pulsar-Is-Encrypted"] = _bool(len(md.encryption_keys) > 0)
    h["X-Pulsar-producer-name"] = md.producer_name
    h["X-Pulsar-sequence-id"] = str(md.sequence_id)
    if md.HasField("replicated_from"):
        h["X-Pulsar-replicated-from"] = md.replicated_from
    if md.HasField("partition_key"):
        h["X-Pulsar-partition-key"] = md.partition_key
    if md.HasField("compression"):
        h["X-Pulsar-compression"] = pb.CompressionType.Name(md.compression)
    if md.HasField("uncompressed_size"):
        h["X-Pulsar-uncompressed-size"] = str(md.uncompressed_size)
    if md.HasField("encryption_algo"):
        h["X-Pulsar-encryption-algo"] = md.encryption_algo
    if md.HasField("schema_version"):
        h["X-Pulsar-Base64-schema-version"] = base64.b64encode(md.schema_version).decode()
    if md.HasField("partition_key_b64_encoded"):
        h["X-Pulsar-partition-key-b64-encoded"] = _bool(md.partition_key_b64_encoded)
    if md.HasField("ordering_key"):
        h["X-Pulsar-Base64-ordering-key"] = base64.b64encode(md.ordering_key).decode()
    if md.HasField("marker_type"):
        h["X-Pulsar-marker-type"] = str(md.marker_type)
    if md.HasField("highest_sequence_id"):
        h["X-Pulsar-highest-sequence-id"] = str(md.highest_sequence_id)
    if md.HasField("uuid"):
        h["X-Pulsar-uuid"] = md.uuid
    if md.HasField("total_chunk_msg_size"):
        h["X-Pulsar-total-chunk-msg-size"] = str(md.total_chunk_msg_size)
    if md.HasField("chunk_id"):
        h["X-Pulsar-chunk-id"] = str(md.chunk_id)
    if md.HasField("null_partition_key"):
        h["X-Pulsar-null-partition-key"] = _bool(md.null_partition_key)
    body = payload
    # Encrypted payloads are returned as stored; so is one the broker cannot (or will not: past PEEK_INFLATE_LIMIT)
    # uncompress, with the header that says its codec.
    if not md.encryption_keys and md.uncompressed_size <= PEEK_INFLATE_LIMIT:
        with contextlib.suppress(DecompressionError):
            body = decompress(md.compression, payload, md.uncompressed_size)
    return web.Response(body=body, headers=h, content_type="application/octet-stream")


def _bool(value: bool) -> str:
    return "true" if value else "false"
