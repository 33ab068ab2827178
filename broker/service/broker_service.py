"""The broker service: owns topics, the managed ledger factory and the metadata store."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, NamedTuple

from broker.config import BrokerConfig, ConfigError
from broker.errors import BrokerError, NotAllowedError, TopicNotFoundError
from broker.metadata import policies as P
from broker.metadata.store import MetadataStore
from broker.service import admin_ops
from broker.service.backlog_quota import BacklogQuotaManager
from broker.service.compaction import load_view
from broker.service.housekeeping import Housekeeping
from broker.service.inactive_topics import InactiveTopicMonitor
from broker.service.nonpersistent import NonPersistentTopic
from broker.service.remote_producer import RemoteError, client_credentials
from broker.service.schemas import SchemaRegistry
from broker.service.topic import PersistentTopic
from broker.topic_name import TopicName, is_system_topic
from managed_ledger import InitialPosition, ManagedLedger, ManagedLedgerConfig, ManagedLedgerFactory, Position
from managed_ledger.file import FileManagedLedgerFactory
from managed_ledger.memory import MemoryManagedLedgerFactory

log = logging.getLogger(__name__)

MB = 1024 * 1024
# GET_TOPICS_OF_NAMESPACE modes (CommandGetTopicsOfNamespace.Mode)
MODE_PERSISTENT, MODE_NON_PERSISTENT, MODE_ALL = 0, 1, 2
# The health check's own log: outside every namespace's topic list (no tenant "pulsar" is made).
HEALTH_LEDGER = "pulsar/__health/persistent/heartbeat"
HEALTH_CHECK_TIMEOUT_S = 10.0

AnyTopic = PersistentTopic | NonPersistentTopic


class AutoTopicCreation(NamedTuple):
    """The effective auto-creation rule of a namespace (its override, else the broker settings)."""

    allowed: bool
    partitioned: bool
    default_partitions: int


class BrokerService:
    def __init__(self, config: BrokerConfig, data_dir: Path | None) -> None:
        self.config = config
        self.data_dir = data_dir
        self.metadata = MetadataStore(data_dir / "metadata.json" if data_dir else None, config.clusterName)
        self.schemas = SchemaRegistry(self.metadata,
                                      lambda topic, key: self.topic_policy(TopicName.parse(topic), key))
        self.ledger_config = ManagedLedgerConfig(
            max_entries_per_ledger=config.managedLedgerMaxEntriesPerLedger,
            cache_size_bytes=config.managedLedgerCacheSizeMB * 1024 * 1024,
            read_nesting_limit=config.managedLedgerReadNestingLimit,
        )
        self.ledger_factory: ManagedLedgerFactory = self._make_ledger_factory()
        self.topics: dict[str, PersistentTopic] = {}
        # Live non-persistent topics (kept while they have producers or consumers; nothing stored).
        self.non_persistent_topics: dict[str, NonPersistentTopic] = {}
        self._loading: dict[str, asyncio.Future[PersistentTopic]] = {}
        self._producer_names = itertools.count()
        # Topics being unloaded or deleted: a load of the same name waits for that to finish, so
        # a client reconnecting at once never gets the managed ledger that is being closed.
        self._unloading: dict[str, asyncio.Future[None]] = {}
        self.backlog_quotas = BacklogQuotaManager(self)
        self.expiry_stats = admin_ops.ExpiryStats()
        # (Single values, brokerDeleteInactiveTopicsMode and subscriptionTypesEnabled among them,
        # were checked by BrokerConfig's rules; the client credentials need parsing.)
        try:
            client_credentials(config.brokerClientAuthenticationPlugin, config.brokerClientAuthenticationParameters)
        except RemoteError as exc:
            raise ConfigError(f"brokerClientAuthenticationPlugin: {exc}") from None
        self.inactive_topics = InactiveTopicMonitor(self)
        # Periodic jobs over the loaded topics, started with the first one and stopped in close().
        self.housekeeping = Housekeeping(self)
        # Shared / Key_Shared dispatchers blocked on their subscription's unacked limit: a policy
        # change may lift it, so they re-plan a read after every metadata change.
        self.unacked_blocked: set[Any] = set()
        self.metadata.listeners.append(self._metadata_changed)
        self._resuming: asyncio.Task[None] | None = None
        # The heartbeat log of health_check (opened on the first check).
        self._health_ledger: ManagedLedger | None = None
        self.health_check_timeout_s = HEALTH_CHECK_TIMEOUT_S
        self._health_lock = asyncio.Lock()
        self.closed = False

    def _metadata_changed(self) -> None:
        for dispatcher in list(self.unacked_blocked):
            asyncio.get_running_loop().call_soon(dispatcher.trigger_read)
        # Replication clusters (or a cluster's URL) may have changed.
        for topic in self.all_topics():
            topic.update_replication()

    def replication_targets(self, name: TopicName) -> list[str]:
        """The other clusters a topic is replicated to: its own replication clusters, else its
        namespace's, when this cluster is one of them, less this cluster."""
        clusters = (self.topic_policy(name, P.T_REPLICATION_CLUSTERS)
                    or self.metadata.policy(name.namespace, P.REPLICATION_CLUSTERS) or [])
        local = self.config.clusterName
        return [c for c in clusters if c != local] if local in clusters else []

    def _make_ledger_factory(self) -> ManagedLedgerFactory:
        cfg = self.config
        # Rollover settings (kept here with the storage choice; retention is per namespace).
        self.ledger_config = dataclasses.replace(
            self.ledger_config,
            max_size_per_ledger_bytes=cfg.managedLedgerMaxSizePerLedgerMbytes * MB,
            max_ledger_rollover_time_s=cfg.managedLedgerMaxLedgerRolloverTimeMinutes * 60,
            min_ledger_rollover_time_s=cfg.managedLedgerMinLedgerRolloverTimeMinutes * 60,
        )
        kind = cfg.managedLedgerStorage
        if kind not in ("file", "memory"):
            raise ValueError(f"managedLedgerStorage={kind!r}: expected 'file' or 'memory'")
        if kind == "memory":
            return MemoryManagedLedgerFactory()
        if self.data_dir is None:
            # An empty dataDir keeps nothing on disk (metadata neither): topics live in memory.
            log.warning("managedLedgerStorage=file without a dataDir: topics are kept in memory")
            return MemoryManagedLedgerFactory()
        rate = cfg.managedLedgerDefaultMarkDeleteRateLimit
        return FileManagedLedgerFactory(
            str(self.data_dir / "ledgers"),
            sync=cfg.managedLedgerSyncData,
            group_wait_s=max(0.0, cfg.journalMaxGroupWaitMSec) / 1000,
            group_bytes=max(1, cfg.journalBufferedWritesThreshold),
            cache_size_bytes=self.ledger_config.cache_size_bytes,
            cursor_persist_interval_s=1.0 / rate if rate > 0 else 0.0,
        )

    def generate_producer_name(self) -> str:
        return f"{self.config.clusterName}-0-{next(self._producer_names)}"

    # -- topics ------------------------------------------------------------------------------------
    def check_namespace(self, name: TopicName) -> None:
        if not self.metadata.namespace_exists(name.namespace):
            raise TopicNotFoundError(f"Namespace {name.namespace} does not exist (topic {name})")

    def get_topic_if_loaded(self, name: TopicName) -> AnyTopic | None:
        if not name.persistent:
            return self.non_persistent_topics.get(name.full)
        return self.topics.get(name.full)

    def all_topics(self) -> list[AnyTopic]:
        return [*self.topics.values(), *self.non_persistent_topics.values()]

    def topic_exists(self, name: TopicName) -> bool:
        if not name.persistent:
            return name.full in self.non_persistent_topics
        return name.persistence_path in self.ledger_factory.list_names()

    def _check_may_create(self, name: TopicName, create: bool, explicit: bool) -> None:
        """TopicNotFoundError unless a missing topic may be created: a partition of a partitioned
        topic always, otherwise by admin request or the namespace's auto-creation rule."""
        base = name.base
        is_partition = base is not name and self.metadata.partitions_of(base.full) > name.partition_index
        allowed = explicit or (create and self.auto_topic_creation(name.namespace).allowed)
        if not is_partition and not allowed:
            raise TopicNotFoundError(f"Topic {name} does not exist")

    async def get_topic(self, name: TopicName, create: bool, *, explicit: bool = False) -> AnyTopic:
        """The loaded topic, loading it if stored. A topic that does not exist is created when
        ``create`` and the namespace's auto-creation rule allow it, or always when ``explicit``
        (an admin create)."""
        if name.persistent:
            return await self.get_persistent_topic(name, create, explicit=explicit)
        unloading = self._unloading.get(name.full)
        if unloading is not None:
            await asyncio.shield(unloading)
            return await self.get_topic(name, create, explicit=explicit)
        if self.closed:
            raise NotAllowedError("Broker is shutting down")
        return self._non_persistent_topic(name, create, explicit)

    async def get_persistent_topic(self, name: TopicName, create: bool, *, explicit: bool = False) -> PersistentTopic:
        """``get_topic`` for a persistent name (what operations on stored messages and cursors take)."""
        if not name.persistent:
            raise NotAllowedError(f"{name} is not a persistent topic")
        topic = self.topics.get(name.full)
        if topic is not None:
            return topic
        unloading = self._unloading.get(name.full)
        if unloading is not None:
            await asyncio.shield(unloading)
            return await self.get_persistent_topic(name, create, explicit=explicit)
        if self.closed:
            raise NotAllowedError("Broker is shutting down")
        self.check_namespace(name)
        loading = self._loading.get(name.full)
        if loading is not None:
            return await loading
        if not self.topic_exists(name):
            self._check_may_create(name, create, explicit)
            self.check_topics_limit(name, 1)
        fut: asyncio.Future[PersistentTopic] = asyncio.get_running_loop().create_future()
        self._loading[name.full] = fut
        try:
            ledger = await self.ledger_factory.open(name.persistence_path, self.ledger_config_for(name))
            topic = PersistentTopic(self, name, ledger)
            topic.compacted_view = await load_view(topic)
            await topic.dedup.recover()
            await topic.start_replication()
            terminated = self.metadata.terminated.get(name.full)
            if terminated is not None:
                topic.terminated_at = Position(*terminated)
            self.topics[name.full] = topic
            fut.set_result(topic)
            self.housekeeping.start()
            return topic
        except BaseException as exc:
            fut.set_exception(exc)
            fut.exception()  # mark retrieved: waiters re-raise it themselves
            raise
        finally:
            del self._loading[name.full]

    def _non_persistent_topic(self, name: TopicName, create: bool, explicit: bool) -> NonPersistentTopic:
        """The live non-persistent topic, created on first use (nothing to load)."""
        topic = self.non_persistent_topics.get(name.full)
        if topic is not None:
            return topic
        self.check_namespace(name)
        self._check_may_create(name, create, explicit)
        topic = self.non_persistent_topics[name.full] = NonPersistentTopic(self, name)
        return topic

    def forget_non_persistent_topic(self, topic: NonPersistentTopic) -> None:
        """The topic has no producers and no consumers left (it keeps nothing)."""
        if self.non_persistent_topics.get(topic.full_name) is topic:
            del self.non_persistent_topics[topic.full_name]

    async def partitions_for(self, name: TopicName, auto_create: bool = True) -> int:
        """Partition count for PARTITIONED_METADATA (0 = not partitioned)."""
        if name.partition_index >= 0:
            return 0
        self.check_namespace(name)
        n = self.metadata.partitions_of(name.full)
        if n > 0:
            return n
        rule = self.auto_topic_creation(name.namespace)
        if auto_create and rule.allowed and rule.partitioned and not self.topic_exists(name):
            self.check_topics_limit(name, rule.default_partitions)
            self.metadata.set_partitions(name.full, rule.default_partitions)
            return rule.default_partitions
        return 0

    def check_topics_limit(self, name: TopicName, new_topics: int) -> None:
        """NotAllowedError when ``new_topics`` more persistent topics (a partitioned topic's
        partitions counted one by one, as soon as it is declared) would take the namespace past its
        maxTopicsPerNamespace, else the broker's; 0 = no limit. System topics neither count nor are
        refused; a partition already declared is already counted."""
        limit = self.metadata.policy(name.namespace, P.MAX_TOPICS_PER_NAMESPACE)
        if limit is None:
            limit = self.config.maxTopicsPerNamespace
        if limit <= 0 or not name.persistent or is_system_topic(name.full):
            return
        existing = self.topics_of_namespace(name.namespace, MODE_PERSISTENT)
        if name.full not in existing and len(existing) + new_topics > limit:
            raise NotAllowedError("Exceed maximum number of topics in namespace.")

    # -- namespace policies ----------------------------------------------------------------------------
    def auto_topic_creation(self, namespace: str) -> AutoTopicCreation:
        override = self.metadata.policy(namespace, P.AUTO_TOPIC_CREATION)
        cfg = self.config
        if override is None:
            return AutoTopicCreation(cfg.allowAutoTopicCreation, cfg.allowAutoTopicCreationType == "partitioned",
                                     cfg.defaultNumPartitions)
        partitioned = override.get("topicType") == "partitioned"
        return AutoTopicCreation(bool(override.get("allowAutoTopicCreation")), partitioned,
                                 int(override.get("defaultNumPartitions") or cfg.defaultNumPartitions))

    # -- effective policies: the topic's own, else its namespace's, else the broker's ---------------
    def topic_policy(self, name: TopicName, key: str) -> Any:
        """A topic-level policy (a partition has its partitioned topic's), or None when unset or
        topic-level policies are off."""
        if not self.config.topicLevelPoliciesEnabled:
            return None
        return self.metadata.topic_policy(name.base.full, key)

    def effective_policy(self, name: TopicName, topic_key: str, namespace_key: str | None, default: Any) -> Any:
        """Topic level, else namespace level, else ``default`` (the broker setting); a value is
        taken whole (a topic's retention does not inherit the namespace's size limit)."""
        value = self.topic_policy(name, topic_key)
        if value is None and namespace_key is not None:
            value = self.metadata.policy(name.namespace, namespace_key)
        return default if value is None else value

    def message_ttl(self, name: TopicName) -> int:
        """Seconds after which unacknowledged messages expire; 0 = never."""
        return int(self.effective_policy(name, P.T_MESSAGE_TTL, P.MESSAGE_TTL, self.config.ttlDurationDefaultInSeconds))

    def retention(self, name: TopicName) -> dict[str, int]:
        return dict(self.effective_policy(name, P.T_RETENTION, P.RETENTION, self.default_retention()))

    def default_retention(self) -> dict[str, int]:
        return {"retentionTimeInMinutes": self.config.defaultRetentionTimeInMinutes,
                "retentionSizeInMB": self.config.defaultRetentionSizeInMB}

    def max_producers(self, name: TopicName) -> int:
        return int(self.effective_policy(name, P.T_MAX_PRODUCERS, P.MAX_PRODUCERS_PER_TOPIC,
                                         self.config.maxProducersPerTopic))

    def max_consumers(self, name: TopicName) -> int:
        return int(self.effective_policy(name, P.T_MAX_CONSUMERS, P.MAX_CONSUMERS_PER_TOPIC,
                                         self.config.maxConsumersPerTopic))

    def max_consumers_per_subscription(self, name: TopicName) -> int:
        return int(self.effective_policy(name, P.T_MAX_CONSUMERS_PER_SUBSCRIPTION, P.MAX_CONSUMERS_PER_SUBSCRIPTION,
                                         self.config.maxConsumersPerSubscription))

    def max_subscriptions(self, name: TopicName) -> int:
        """Durable subscriptions a topic may have (0 = unlimited)."""
        return int(self.effective_policy(name, P.T_MAX_SUBSCRIPTIONS, P.MAX_SUBSCRIPTIONS_PER_TOPIC,
                                         self.config.maxSubscriptionsPerTopic))

    def max_unacked_per_consumer(self, name: TopicName) -> int:
        """Unacknowledged messages a Shared / Key_Shared consumer may hold (0 = unlimited)."""
        return int(self.effective_policy(name, P.T_MAX_UNACKED_ON_CONSUMER, P.MAX_UNACKED_PER_CONSUMER,
                                         self.config.maxUnackedMessagesPerConsumer))

    def max_unacked_per_subscription(self, name: TopicName) -> int:
        """Unacknowledged messages a Shared / Key_Shared subscription may hold before it reads no
        new entries (0 = unlimited)."""
        return int(self.effective_policy(name, P.T_MAX_UNACKED_ON_SUBSCRIPTION, P.MAX_UNACKED_PER_SUBSCRIPTION,
                                         self.config.maxUnackedMessagesPerSubscription))

    def subscription_types_broker(self) -> list[str]:
        return P.parse_subscription_types(self.config.subscriptionTypesEnabled)

    def subscription_types_enabled(self, name: TopicName) -> list[str]:
        """The subscription types a topic takes: its own set, else its namespace's, else the
        broker's subscriptionTypesEnabled (an empty set counts as not set)."""
        return list(self.topic_policy(name, P.T_SUBSCRIPTION_TYPES_ENABLED)
                    or self.metadata.policy(name.namespace, P.SUBSCRIPTION_TYPES_ENABLED)
                    or self.subscription_types_broker())

    def _rate_doc(self, name: TopicName, topic_key: str, namespace_key: str,
                  broker: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """A rate in force: the topic's, else its namespace's for this cluster (Policies keeps
        rates per cluster), else the broker's settings."""
        doc = self.topic_policy(name, topic_key)
        if doc is None:
            doc = (self.metadata.policy(name.namespace, namespace_key) or {}).get(self.config.clusterName)
        return dict(broker() if doc is None else doc)

    def publish_rate_doc(self, name: TopicName) -> dict[str, int]:
        """The PublishRate in force (else the broker's maxPublishRatePerTopicIn* settings)."""
        return self._rate_doc(name, P.T_PUBLISH_RATE, P.PUBLISH_MAX_MESSAGE_RATE, lambda: {
            "publishThrottlingRateInMsg": self.config.maxPublishRatePerTopicInMessages,
            "publishThrottlingRateInByte": self.config.maxPublishRatePerTopicInBytes})

    def publish_rate(self, name: TopicName) -> tuple[int, int]:
        """(messages, bytes) per second a topic may take; 0 or less = no limit."""
        doc = self.publish_rate_doc(name)
        return int(doc["publishThrottlingRateInMsg"]), int(doc["publishThrottlingRateInByte"])

    # Who dispatches under a DispatchRate -> (topic-level key, namespace-level key, the broker's
    # messages and bytes settings).
    _DISPATCH_RATES = {
        "topic": (P.T_DISPATCH_RATE, P.TOPIC_DISPATCH_RATE,
                  "dispatchThrottlingRatePerTopicInMsg", "dispatchThrottlingRatePerTopicInByte"),
        "subscription": (P.T_SUBSCRIPTION_DISPATCH_RATE, P.SUBSCRIPTION_DISPATCH_RATE,
                         "dispatchThrottlingRatePerSubscriptionInMsg", "dispatchThrottlingRatePerSubscriptionInByte"),
        "replicator": (P.T_REPLICATOR_DISPATCH_RATE, P.REPLICATOR_DISPATCH_RATE,
                       "dispatchThrottlingRatePerReplicatorInMsg", "dispatchThrottlingRatePerReplicatorInByte"),
    }

    def dispatch_rate_doc(self, name: TopicName, kind: str) -> dict[str, Any]:
        """The DispatchRate in force for a topic's subscriptions together (``kind`` "topic"), for
        each of its subscriptions ("subscription") or for each of its replicators ("replicator"):
        the topic's, else its namespace's, else the broker's dispatchThrottlingRatePer* settings."""
        topic_key, namespace_key, msgs_key, bytes_key = self._DISPATCH_RATES[kind]
        return self._rate_doc(name, topic_key, namespace_key, lambda: {
            "dispatchThrottlingRateInMsg": getattr(self.config, msgs_key),
            "dispatchThrottlingRateInByte": getattr(self.config, bytes_key),
            "ratePeriodInSecond": 1, "relativeToPublishRate": False})

    def dispatch_rate(self, name: TopicName, kind: str) -> tuple[int, int, int, bool]:
        """(messages, bytes, period in seconds, relative to the publish rate); 0 or less = no limit."""
        doc = self.dispatch_rate_doc(name, kind)
        return (int(doc["dispatchThrottlingRateInMsg"]), int(doc["dispatchThrottlingRateInByte"]),
                int(doc.get("ratePeriodInSecond", 1)), bool(doc.get("relativeToPublishRate", False)))

    def subscribe_rate_doc(self, name: TopicName) -> dict[str, int]:
        """The SubscribeRate in force (else the broker's subscribeThrottlingRatePerConsumer and
        subscribeRatePeriodPerConsumerInSecond)."""
        return self._rate_doc(name, P.T_SUBSCRIBE_RATE, P.SUBSCRIBE_RATE, lambda: {
            "subscribeThrottlingRatePerConsumer": self.config.subscribeThrottlingRatePerConsumer,
            "ratePeriodInSecond": self.config.subscribeRatePeriodPerConsumerInSecond})

    def subscribe_rate(self, name: TopicName) -> tuple[int, int]:
        """(subscribes per consumer, period in seconds); 0 or less = no limit."""
        doc = self.subscribe_rate_doc(name)
        return int(doc["subscribeThrottlingRatePerConsumer"]), int(doc["ratePeriodInSecond"])

    def delayed_delivery(self, name: TopicName) -> dict[str, Any]:
        """The DelayedDeliveryPolicies in force: the topic's, else its namespace's, else the broker's."""
        cfg = self.config
        return dict(self.effective_policy(name, P.T_DELAYED_DELIVERY, P.DELAYED_DELIVERY, {
            "active": cfg.delayedDeliveryEnabled, "tickTime": cfg.delayedDeliveryTickTimeMillis,
            "maxDeliveryDelayInMillis": cfg.delayedDeliveryMaxDelayInMillis}))

    def schema_validation_enforced(self, name: TopicName) -> bool:
        """Producers without a schema are refused on topics that have one."""
        return bool(self.effective_policy(name, P.T_SCHEMA_VALIDATION_ENFORCED, P.SCHEMA_VALIDATION_ENFORCED,
                                          self.config.isSchemaValidationEnforced))

    def allow_auto_subscription_creation(self, name: TopicName) -> bool:
        """Consumers may create a durable subscription by subscribing."""
        doc = self.effective_policy(name, P.T_AUTO_SUBSCRIPTION_CREATION, P.AUTO_SUBSCRIPTION_CREATION,
                                    {"allowAutoSubscriptionCreation": self.config.allowAutoSubscriptionCreation})
        return bool(doc["allowAutoSubscriptionCreation"])

    def allow_auto_update_schema(self, name: TopicName) -> bool:
        """Producers may register new schema versions."""
        value = self.metadata.policy(name.namespace, P.ALLOW_AUTO_UPDATE_SCHEMA)
        return bool(self.config.isAllowAutoUpdateSchema if value is None else value)

    def deduplication(self, name: TopicName) -> bool:
        return bool(self.effective_policy(name, P.T_DEDUPLICATION, P.DEDUPLICATION,
                                          self.config.brokerDeduplicationEnabled))

    def ledger_config_for(self, name: TopicName) -> ManagedLedgerConfig:
        """The managed-ledger settings with the topic's retention and persistence policies
        (applied when a topic loads, and to loaded topics by the retention housekeeping task)."""
        r = self.retention(name)
        minutes, size_mb = r["retentionTimeInMinutes"], r["retentionSizeInMB"]
        persistence = self.effective_policy(name, P.T_PERSISTENCE, P.PERSISTENCE, None)
        return dataclasses.replace(self.ledger_config,
                                   retention_time_s=-1 if minutes < 0 else minutes * 60,
                                   retention_size_bytes=-1 if size_mb < 0 else size_mb * MB,
                                   mark_delete_rate=None if persistence is None
                                   else float(persistence["managedLedgerMaxMarkDeleteRate"]))

    def apply_ledger_policies_to(self, scope: str) -> None:
        """A retention or persistence change reaches the loaded topics it covers now: ``scope``
        is a topic's full name (every partition, for a partitioned one) or a namespace."""
        for topic in list(self.topics.values()):
            if scope in (topic.name.base.full, topic.name.namespace):
                self.apply_ledger_policies(topic)

    def apply_ledger_policies(self, topic: PersistentTopic) -> None:
        """Give a loaded topic's managed ledger its current retention and persistence, and let
        it trim."""
        if topic.closed:
            return
        wanted = self.ledger_config_for(topic.name)
        if wanted != topic.ledger.config:
            topic.ledger.update_config(wanted)
        topic.ledger.trim_consumed_ledgers()

    def subscription_expiration_s(self, namespace: str) -> float:
        """Seconds without consumers, reads or acks after which a subscription is deleted (0 = never)."""
        minutes = self.metadata.policy(namespace, P.SUBSCRIPTION_EXPIRATION)
        return float(self.config.subscriptionExpirationTimeMinutes if minutes is None else minutes) * 60

    def topics_of_namespace(self, namespace: str, mode: int) -> list[str]:
        """Persistent (mode 0), non-persistent (1) or all (2) topics, including partitions.
        Non-persistent topics are the live ones, plus the partitions of partitioned ones."""
        names: set[str] = set()
        domains: set[str] = set()
        if mode in (MODE_PERSISTENT, MODE_ALL):
            domains.add("persistent")
            prefix = namespace + "/persistent/"
            for path in self.ledger_factory.list_names():
                if path.startswith(prefix):
                    names.add(f"persistent://{namespace}/{path[len(prefix):]}")
        if mode in (MODE_NON_PERSISTENT, MODE_ALL):
            domains.add("non-persistent")
            names.update(t.full_name for t in self.non_persistent_topics.values() if t.name.namespace == namespace)
        for base, n in self.metadata.partitioned_topics.items():
            t = TopicName.parse(base)
            if t.namespace == namespace and t.domain in domains:
                names.update(t.partition(i).full for i in range(n))
        return sorted(n for n in names if not is_system_topic(n))

    async def delete_topic(self, name: TopicName) -> None:
        async def delete() -> None:
            topic: AnyTopic | None = self.topics.pop(name.full, None) or self.non_persistent_topics.pop(name.full, None)
            if topic is not None:
                await topic.close()
            if name.persistence_path in self.ledger_factory.list_names():
                await self.ledger_factory.delete(name.persistence_path)
            self.expiry_stats.forget(name.full)
            # (A partition has no policies of its own: its partitioned topic's stay.)
            compaction = self.metadata.forget_topic(name.full)
            if compaction is not None and compaction["ledger"] in self.ledger_factory.list_names():
                await self.ledger_factory.delete(compaction["ledger"])

        await self._while_unloading(name, delete)

    async def unload_topic(self, name: TopicName) -> bool:
        """Close the topic (its data stays); it is loaded again on next use. False if not loaded."""
        topic = self.get_topic_if_loaded(name)
        if topic is None:
            return False

        async def unload() -> None:
            self.topics.pop(name.full, None)
            self.non_persistent_topics.pop(name.full, None)
            admin_ops.disconnect_clients(topic)
            await topic.close()

        await self._while_unloading(name, unload)
        return True

    def is_unloading(self, name: TopicName) -> bool:
        return name.full in self._unloading

    async def _while_unloading(self, name: TopicName, work: Callable[[], Awaitable[None]]) -> None:
        """Run ``work`` as the only unload/delete of ``name``; loads of the name wait for it."""
        while (previous := self._unloading.get(name.full)) is not None:
            await asyncio.shield(previous)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._unloading[name.full] = done
        try:
            await work()
        finally:
            del self._unloading[name.full]
            done.set_result(None)

    def compaction_threshold(self, name: TopicName) -> int:
        """Bytes published since the last compaction that trigger the next one (0 = never)."""
        return int(self.effective_policy(name, P.T_COMPACTION_THRESHOLD, P.COMPACTION_THRESHOLD,
                                         self.config.brokerServiceCompactionThresholdInBytes))

    def start(self) -> None:
        """Background work once the broker serves: replication picks up where it stopped."""
        self._resuming = asyncio.get_running_loop().create_task(self._resume_replication())

    async def _resume_replication(self) -> None:
        """Load the stored topics that are replicated (their namespace's or own replication
        clusters name another cluster), so that what their replicators had not sent before a
        restart goes out now rather than when a client next uses the topic. Pulsar loads the
        topics of a bundle when it comes to own it; here one broker owns them all."""
        loaded = 0
        for path in self.ledger_factory.list_names():
            if self.closed:
                return
            parts = path.split("/", 3)
            if len(parts) != 4 or parts[2] != "persistent" or is_system_topic(path):
                continue  # (the health check's log, compacted views...)
            try:
                name = TopicName.parse(f"persistent://{parts[0]}/{parts[1]}/{parts[3]}")
            except BrokerError:
                continue
            if name.full in self.topics or not self.replication_targets(name):
                continue
            try:
                await self.get_topic(name, create=False)
                loaded += 1
            except Exception as exc:  # (a topic that cannot be loaded now loads on its next use)
                log.warning("replicated topic %s not loaded at start: %s", name, exc)
        if loaded:
            log.info("loaded %d replicated topics: their replicators resume", loaded)

    async def health_check(self) -> None:
        """Pulsar's broker health check, through storage: append an entry to the broker's own
        heartbeat log and read it back through its cursor (which then acknowledges it, so the log
        is trimmed at rollover). Raises on a failure, TimeoutError after HEALTH_CHECK_TIMEOUT_S."""
        async def round_trip() -> None:
            if self._health_ledger is None or self._health_ledger.is_closed:
                self._health_ledger = await self.ledger_factory.open(HEALTH_LEDGER, self.ledger_config)
            ledger = self._health_ledger
            cursor = await ledger.open_cursor("health", InitialPosition.LATEST)
            position = await ledger.add_entry_async(f"health {time.time_ns()}".encode())
            while True:
                entries = await cursor.read_entries_or_wait_async(100)
                if any(e.position == position for e in entries):
                    break
            cursor.mark_delete(position)

        async with self._health_lock, asyncio.timeout(self.health_check_timeout_s):
            await round_trip()  # (one reader on the heartbeat cursor at a time)

    async def close(self) -> None:
        self.closed = True
        if self._resuming is not None:
            self._resuming.cancel()
            await asyncio.gather(self._resuming, return_exceptions=True)
        await self.housekeeping.stop()
        waits: list[Awaitable[None]] = [t.close() for t in self.all_topics()]
        await asyncio.gather(*waits, return_exceptions=True)
        self.topics.clear()
        self.non_persistent_topics.clear()
        await self.ledger_factory.close()
