"""Admin REST v2: a partitioned topic as a whole (Pulsar's partitioned-topic endpoints of PersistentTopics /
NonPersistentTopics): list, create, grow, delete, create the partitions still missing, and the stats and internal
stats of every partition together.

A partition's own work is done by the broker that owns it (``PartitionFanout.on_owners`` in partition_fanout.py:
locally, or the same call at the owner). The routes are registered with the other topic routes, in topics.py; so are
the operations that apply to each partition (subscriptions, unload, terminate, ...).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiohttp import web

from broker.admin import stats as S
from broker.admin.common import (
    HttpError,
    check_namespace_name,
    json_response,
    no_content,
    parse_properties,
    query_flag,
    read_body,
)
from broker.admin.owner_calls import CallFailure
from broker.admin.peers import subscription_segment
from broker.auth.http import check_deferred
from broker.errors import NotAllowedError
from broker.metadata.policy_table import AUTO_TOPIC_CREATION
from broker.metadata.policy_values import TooManyPartitionsError, check_java_int, check_partition_count
from broker.service import admin_ops
from broker.service.topic import is_reserved_subscription
from broker.topic_name import PARTITION_SUFFIX, TopicName
from managed_ledger import Position

if TYPE_CHECKING:
    from broker.admin.topics import TopicsResource
    from broker.service.broker_service import BrokerService


# The body type of PUT .../partitions that carries Pulsar's PartitionedTopicMetadata (what the admin client sends
# when the topic has properties): Pulsar's ExtPersistentTopics / ExtNonPersistentTopics.createPartitionedTopic
# consume it. Any other type is bound by PersistentTopics / NonPersistentTopics.createPartitionedTopic, whose entity
# is an ``int numPartitions``: a JSON object there fails the binding, a 400 (the admin client sends a bare number as
# application/json when there are no properties).
PARTITIONED_METADATA_TYPE = "application/vnd.partitioned-topic-metadata+json"
PartitionCount = tuple[int, dict[str, str] | None]
# Pulsar's MessageId.earliest, where the subscriptions copied onto a grown partitioned topic's partitions start.
EARLIEST = Position(-1, -1)
EARLIEST_JSON = {"ledgerId": -1, "entryId": -1}
# The body as ``read_partition_count`` read it, kept for the handler after the cluster-first check read it.
_PARTITION_COUNT = web.RequestKey[PartitionCount]("partition count")


async def read_partition_count(request: web.Request) -> PartitionCount:
    """The body of PUT .../partitions: the number of partitions, or, with ``PARTITIONED_METADATA_TYPE`` only,
    Pulsar's PartitionedTopicMetadata {"partitions": n, "properties": {...}}; 400 when it is neither, as Pulsar's
    JSON binding answers before its handler runs. Properties None: none given (the metadata then has none, not an
    empty map). Read once per request (the cluster-first check reads it before the handler)."""
    if _PARTITION_COUNT in request:
        return request[_PARTITION_COUNT]
    n = await read_body(request)
    properties: dict[str, str] | None = None
    if isinstance(n, dict):
        if request.content_type != PARTITIONED_METADATA_TYPE:
            raise HttpError(400, "Number of partitions must be an integer, got a JSON object (a partitioned topic's "
                                 f"metadata is read as {PARTITIONED_METADATA_TYPE} only)")
        if n.get("properties") is not None:
            properties = parse_properties(n["properties"])
        n = n.get("partitions")
    # (no body: Pulsar's binding gives its int parameter 0, which the handler's check refuses)
    count = check_java_int(0 if n is None else n, "Number of partitions"), properties
    request[_PARTITION_COUNT] = count
    return count


class PartitionedTopics:
    """The handlers; ``topics`` gives the names, the partition counts and the calls at each partition's owner."""

    def __init__(self, topics: TopicsResource) -> None:
        self.topics = topics

    @property
    def service(self) -> BrokerService:
        return self.topics.service

    async def list_partitioned(self, request: web.Request) -> web.Response:
        ns = self.topics.web.namespaces.namespace(request)
        domain = request.path.split("/")[3]
        return json_response(sorted(t for t in self.service.metadata.partitioned_topics
                                    if t.startswith(f"{domain}://{ns}/")))

    async def get_partitions(self, request: web.Request) -> web.Response:
        """GET .../partitions: the partitioned metadata. For a topic that is not there, Pulsar's
        internalGetPartitionedMetadataAsync answers 404 "Topic <name> not found", unless the caller asks
        ``checkAllowAutoCreation=true`` (as the clients' HTTP lookup does) and the namespace's auto-creation would
        create it: then {"partitions": 0, "deleted": false}, or, for partitioned auto-creation, the partitioned topic
        it creates."""
        name = self.topics.name(request)
        auto = query_flag(request, "checkAllowAutoCreation")
        n = await self.service.partitions_for(name, auto_create=auto)
        if n == 0 and not self._metadata_found(name, auto):
            raise HttpError(404, f"Topic {name} not found")
        return json_response(self.metadata_json(name, n))

    def metadata_json(self, name: TopicName, n: int) -> dict[str, Any]:
        """Pulsar's PartitionedTopicMetadata as its admin API writes it (Jackson, non-null fields, in field order):
        ``partitions``, ``deleted``, and ``properties`` when the partitioned topic's metadata has a map (even an
        empty one); a name with no partitions, {"partitions": 0, "deleted": false}."""
        stored = self.service.metadata.partitioned_metadata(name.base.full) if n else None
        doc: dict[str, Any] = {"partitions": n, "deleted": bool(stored and stored.get("deleted"))}
        properties = stored.get("properties") if stored else None
        if properties is not None:
            doc["properties"] = dict(properties)
        return doc

    def topic_exists(self, name: TopicName) -> bool:
        """Whether the topic is there, as Pulsar's NamespaceService.checkTopicExists tells: a partitioned topic, or one
        that ``_metadata_found`` finds (stored or live here, a partition within its count, a non-persistent topic
        another broker owns)."""
        return self.topics.partitions(name) > 0 or self._metadata_found(name, auto=False)

    def _metadata_found(self, name: TopicName, auto: bool) -> bool:
        """Whether a name with no partitions has partitioned metadata to show (0 partitions): a topic that is there, a
        partition of a partitioned topic within its count (Pulsar creates those with it), or, with ``auto``, a topic
        the namespace's auto-creation allows. A partition past its partitioned topic's count has none."""
        if name.partition_index >= 0:
            count = self.service.metadata.partitions_of(name.base.full)
            if count > 0:
                return name.partition_index < count
        if self.topics.exists(name):
            return True
        ownership = self.service.ownership
        if not name.persistent and ownership.distributed and not ownership.is_owned(ownership.bundle_of(name)):
            return True  # (live on its owner only: this broker cannot tell, and does not claim it is not there)
        return auto and self.service.policies.for_namespace(name.namespace, AUTO_TOPIC_CREATION).allow

    async def create_partitioned(self, request: web.Request) -> web.Response:
        """PUT .../partitions: create a partitioned topic (its body: ``read_partition_count``, read first: Pulsar's
        binding reads it before its handler checks anything)."""
        n, properties = await read_partition_count(request)
        check_namespace_name(request.match_info["tenant"], request.match_info["ns"])  # (Pulsar checks it first here)
        name = self.topics.name(request)
        if PARTITION_SUFFIX in name.local_name:  # (Pulsar's validatePartitionedTopicName: first, on any such name)
            raise HttpError(412, "Partitioned Topic Name should not contain '-partition-'")
        check_partition_count(n, self.service.config.maxNumPartitionsPerPartitionedTopic)
        if self.service.namespace_being_deleted(name.namespace):
            raise HttpError(412, f"Namespace {name.namespace} is being deleted")
        try:
            self.service.check_topics_limit(name, n)
        except NotAllowedError as exc:
            raise HttpError(412, exc.message) from exc
        if self.topics.partitions(name) == 0 and self.topics.exists(name):
            raise HttpError(409, "This topic already exists")
        await self.service.metadata.create_partitioned_topic(name.full, n, properties)  # 409 if it is already
        # Then its partitions (Pulsar's AdminResource.internalCreatePartitionedTopic: tryCreatePartitionsAsync after
        # the metadata), so they are listed, deleted, granted... as topics from now on.
        await self.service.create_partitions(name, n)
        if not query_flag(request, "createLocalTopicOnly"):
            self.topics.web.replicated.create_in_background(name, n, properties)
        return no_content()

    async def create_missed_partitions(self, request: web.Request) -> web.Response:
        """POST .../createMissedPartitions: create each partition that is not stored (``create_partitions``: not
        loaded, by whichever broker is asked, as Pulsar). In Pulsar's order (PersistentTopics.createMissedPartitions,
        internalCreateMissedPartitions): the name (412 for a partition's), the partitioned metadata (the caller's
        LOOKUP and the namespace's cluster: before this handler), 404 when the topic is not partitioned, then the
        namespace operation CREATE_TOPIC, then tryCreatePartitionsAsync (of a non-persistent topic: nothing made)."""
        name = self.topics.name(request)
        if PARTITION_SUFFIX in name.local_name:  # (Pulsar's validatePartitionedTopicName)
            raise HttpError(412, "Partitioned Topic Name should not contain '-partition-'")
        n = self.topics.partitions(name)
        if n == 0:
            raise HttpError(404, f"Topic {name} does not exist")
        await check_deferred(request)
        await self.service.create_partitions(name, n)
        return no_content()

    async def update_partitions(self, request: web.Request) -> web.Response:
        name = self.topics.name(request)
        n = check_java_int(await read_body(request), "Number of partitions")
        current = self.topics.partitions(name)
        if current == 0:  # (Pulsar's 409, for a topic that does not exist too)
            raise HttpError(409, f"Topic {name} is not the partitioned topic.")
        # Pulsar's 422s of PersistentTopicsBase.internalUpdatePartitionedTopicAsync, in its order.
        if n < current:
            raise HttpError(422, f"Desired partitions {n} can't be less than the current partitions {current}.")
        try:
            check_partition_count(n, self.service.config.maxNumPartitionsPerPartitionedTopic)
        except TooManyPartitionsError as exc:
            raise HttpError(422, f"Desired partitions {n} can't be greater than the maximum partitions per topic "
                                 f"{exc.most}.") from None
        local_only = query_flag(request, "updateLocalTopicOnly")
        if not local_only:
            await self._check_no_partition_past(request, name, current)
        if n != current:  # (the same count: Pulsar 4.0's no-op here, nothing stored or created)
            await self.service.metadata.set_partitions(name.full, n)
            # (Pulsar's internalUpdatePartitionedTopicAsync: tryCreatePartitionsAsync over all of them, after the
            # metadata)
            await self.service.create_partitions(name, n)
            if name.persistent:
                await self._copy_subscriptions(request, name, n)
        if not local_only:  # (then the namespace's other replication clusters, even for the same count here)
            await self.topics.web.replicated.grow(name, n)
        return no_content()

    async def _check_no_partition_past(self, request: web.Request, name: TopicName, current: int) -> None:
        """409 when the namespace lists a partition of this topic at or past its current count (one made as a
        topic of its own before the partitioned topic, or left by an earlier, larger one): growing would adopt
        its data. Pulsar's internalUpdatePartitionedTopicAsync checks the namespace's topic list of the domain the
        same way, in its words. (Its message lists the partitions past the count only, so a stored partition at
        exactly the count was refused with an empty list; this one lists every partition it refuses for.)"""
        mode = 0 if name.persistent else 1
        listed = (TopicName.parse(t) for t in await self.topics.topics_of_namespace(request, name.namespace, mode))
        past = sorted((t for t in listed if t.base.full == name.full and t.partition_index >= current),
                      key=lambda t: t.partition_index)
        if past:
            raise HttpError(409, "Exist unexpected topic partition(partition index grater than current metadata "
                                 f"maximum index {current}) {','.join(t.full for t in past)}")

    async def _copy_subscriptions(self, request: web.Request, name: TopicName, n: int) -> None:
        """Then, as Pulsar's internalUpdatePartitionedTopicAsync: the durable subscriptions of partition 0 (from its
        stats, at its owner) made on every partition at the earliest message (createSubscription with
        MessageId.earliest, replicated as there), each partition's by its owner; one a partition has already is left
        as it is (its 409 is no failure), any other failure is the answer. So a consumer misses nothing published
        to a new partition before it subscribes there. Each with partition 0's subscription properties, as Pulsar
        passes them (its stats' subscriptionProperties). Not the broker's own cursors."""
        fanout = self.topics.fanout
        first = name.partition(0)

        async def stats(p: TopicName) -> dict[str, Any]:
            return S.topic_stats(await self.service.get_topic(p, create=False), self.topics.web.sampler)

        doc = (await fanout.on_owners(request, [first], "GET", "stats", stats)).get(first)
        subscriptions = {} if doc is None else doc["subscriptions"]
        parts = [name.partition(i) for i in range(n)]
        for sub_name, sub_stats in subscriptions.items():
            if not sub_stats.get("isDurable") or is_reserved_subscription(sub_name):
                continue
            replicated = bool(sub_stats.get("isReplicated"))
            properties = sub_stats.get("subscriptionProperties") or None

            async def create(p: TopicName, sub_name: str = sub_name, replicated: bool = replicated,
                             properties: dict[str, str] | None = properties) -> None:
                await self.topics.create_partition_subscription(p, sub_name, EARLIEST, replicated, properties)

            action = f"subscription/{subscription_segment(sub_name)}"
            query = "?replicated=true" if replicated else ""
            body = EARLIEST_JSON if properties is None else {**EARLIEST_JSON, "properties": properties}
            for _, answer in await fanout.outcomes(request, parts, "PUT", action, create, query, body):
                if isinstance(answer, CallFailure) and answer.status != 409:
                    raise answer.error

    async def delete_partitioned(self, request: web.Request) -> web.Response:
        """DELETE .../partitions: each partition deleted by its owner (Pulsar's admin call per partition), then the
        partitioned topic's metadata. Without ``force``, a partition with clients connected refuses (412): checked
        here first for the ones this broker serves; another owner refuses its own (the partitions deleted before it
        stay deleted, as in Pulsar)."""
        name = self.topics.name(request)
        n = self.topics.partitions(name)
        if n == 0 and self.topics.exists(name):
            raise HttpError(409, f"{name} is a non-partitioned topic. Instead of calling delete-partitioned-topic "
                                 "please call delete.")
        if n == 0:
            raise HttpError(404, f"Topic {name} not found.")
        force = query_flag(request, "force")
        parts = [name.partition(i) for i in range(n)]
        busy = [t for p in parts if (t := self.service.get_topic_if_loaded(p)) is not None and admin_ops.has_clients(t)]
        if busy and not force:
            raise HttpError(412, admin_ops.busy_reason(busy[0]))  # (a partition's, as Pulsar's delete of it answers)
        # The partitioned topic's own grants go first (Pulsar's internalDeletePartitionedTopic:
        # internalRemovePartitionsAuthenticationPoliciesAsync), each persistent partition's with the partition.
        await self.service.metadata.remove_topic_permissions(name.namespace, [name.full])

        async def delete(p: TopicName) -> None:
            if self.topics.exists(p):
                await self.topics.delete_one(p, force=True)

        fanout = self.topics.fanout
        await fanout.on_owners(request, fanout.partitions_to_ask(name), "DELETE", "", delete,
                               "?force=true" if force else "")
        if name.persistent:  # (each stored partition's went with it; a partition not stored has none to delete
            # but may have grants: one of a partitioned topic the namespace's auto-creation made, never used, or one
            # deleted by itself and granted again)
            await self.service.metadata.remove_topic_permissions(name.namespace, [p.full for p in parts])
        await self.service.metadata.delete_partitioned(name.full)
        await self.service.schemas.delete(name.full)
        return no_content()

    async def partitioned_stats(self, request: web.Request) -> web.Response:
        """Pulsar's PartitionedTopicStats: each partition's stats from its owner, added up here. Of a non-persistent
        partitioned topic every partition is asked (Pulsar's NonPersistentTopics.getPartitionedStats asks the stats
        of each, which brings a partition that is not live to life)."""
        name = self.topics.name(request)
        n = self.topics.partitions(name)
        if n == 0:  # (Pulsar's words differ between its persistent and non-persistent resources)
            raise HttpError(404, f"Partitioned Topic {name} not found" if name.persistent
                            else f"Partitioned topic not found {name}")

        async def stats(p: TopicName) -> dict[str, Any]:
            return S.topic_stats(await self.service.get_topic(p, create=False), self.topics.web.sampler)

        fanout = self.topics.fanout
        parts = fanout.partitions_to_ask(name) if name.persistent else [name.partition(i) for i in range(n)]
        answers = await fanout.on_owners(request, parts, "GET", "stats", stats)
        per_partition = {p.full: doc for p, doc in answers.items()}
        return json_response(S.partitioned_stats(self.metadata_json(name, n), per_partition,
                                                 query_flag(request, "perPartition", True)))

    async def partitioned_internal_stats(self, request: web.Request) -> web.Response:
        """Pulsar's PartitionedTopicInternalStats: {"metadata": its PartitionedTopicMetadata, "partitions": {name:
        internal stats}}, each partition's from its owner."""
        name = self.topics.name(request)
        n = self.topics.partitions(name)
        if n == 0:
            raise HttpError(404, f"Partitioned Topic {name} not found")

        async def internal(p: TopicName) -> dict[str, Any]:
            return S.internal_stats(await self.service.get_topic(p, create=False))

        fanout = self.topics.fanout
        answers = await fanout.on_owners(request, fanout.partitions_to_ask(name), "GET", "internalStats", internal)
        return json_response({"metadata": self.metadata_json(name, n),
                              "partitions": {p.full: doc for p, doc in answers.items()}})
