"""The broker service: the topic registry (load, create, unload, delete) and its lifecycle.

It owns the loaded topics, the managed ledger factory and the metadata store; the policies in
force come from ``self.policies`` (broker.metadata.policy_table's PolicyResolver)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import itertools
import logging
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from broker.cluster.bundles import NamespaceBundle, NamespaceBundles
from broker.cluster.data import PLACEMENT_SETTINGS, BrokerUrls, BundleLoad, LoadReport
from broker.cluster.load import Counters, LoadSampler, bandwidth_kbps, memory_limit_mb, nic_limit_kbps, rss_mb
from broker.cluster.load_manager import LoadManager
from broker.cluster.ownership import ClusterOwnership, Ownership, PendingOwnership, StandaloneOwnership
from broker.cluster.registry import BrokerRegistry
from broker.config import BrokerConfig, ConfigError
from broker.errors import NotAllowedError, PersistenceError, ServiceNotReadyError, TopicNotFoundError
from broker.metadata.global_namespace import GlobalNamespaceError, PeerCluster, peer_cluster_for
from broker.metadata.layout import MANAGED_LEDGER_NAMES_MARKER
from broker.metadata.legacy import LEGACY_FILE_NAME
from broker.metadata.policies import allowed_clusters_of
from broker.metadata.policy_table import (
    AUTO_TOPIC_CREATION,
    MAX_TOPICS_PER_NAMESPACE,
    PERSISTENCE,
    REPLICATION_CLUSTERS,
    RETENTION,
    PolicyResolver,
)
from broker.metadata.policy_values import PolicyError, check_partition_count
from broker.metadata.store import BrokerMetadata, open_broker_metadata_store
from broker.service import admin_ops
from broker.service.backlog_quota import BacklogQuotaManager
from broker.service.cluster_removal import ClusterRemoval
from broker.service.compacted_view import load_view
from broker.service.compaction import compacted_ledger_names
from broker.service.dispatch_context import configured_fields
from broker.service.dynamic_config import DISPATCHER_SETTINGS, DynamicConfiguration
from broker.service.health import HealthChecker
from broker.service.housekeeping import Housekeeping
from broker.service.inactive_topics import InactiveTopicMonitor
from broker.service.kinds import AnySubscription
from broker.service.nonpersistent import NonPersistentTopic
from broker.service.offload import OffloadTiers, offload_policy_for, offloader_of
from broker.service.offload_stats import OffloaderStats
from broker.service.operation_stats import LatencySummary, LookupStats, SnapshotStats, TopicLoadStats
from broker.service.peer_link import RemoteError
from broker.service.rate_limits import BrokerPublishThrottle, DispatchRate
from broker.service.remote_producer import RemoteSettings, broker_client_credentials, client_credentials
from broker.service.replication import remote_clusters
from broker.service.schemas import SchemaRegistry
from broker.service.topic import PersistentTopic
from broker.service.topic_watchers import TopicListEvents
from broker.service.transactions import TransactionService
from broker.tasks import OwnedTasks, SingleFlight
from broker.topic_name import (
    TopicName,
    heartbeat_broker,
    heartbeat_namespace,
    is_system_topic,
    local_name_of_encoded,
    persistence_path_of_raw,
    persistence_path_of_shared,
)
from broker.version import __version__
from managed_ledger import (
    ManagedLedgerConfig,
    ManagedLedgerError,
    ManagedLedgerFactory,
    OffloadPolicy,
    Position,
)
from managed_ledger.bookkeeper.client import BookKeeper
from managed_ledger.bookkeeper.factory import (
    BookKeeperManagedLedgerFactory,
    bookkeeper_zookeeper,
    ml_metadata_store_url,
)
from managed_ledger.bookkeeper.ml_formats import MetadataFormats
from managed_ledger.bookkeeper.placement import ANY_GROUP, IsolationGroups, PlacementPolicy
from managed_ledger.bookkeeper.zk import AsyncZk
from managed_ledger.disk_space import DiskSpacePolicy, StorageGuard
from managed_ledger.file import FileManagedLedgerFactory
from managed_ledger.memory import MemoryManagedLedgerFactory
from metadata_store.api import MetadataStore, MetadataStoreError

if TYPE_CHECKING:
    from kazoo.client import KazooClient

log = logging.getLogger(__name__)

MB = 1024 * 1024
# GET_TOPICS_OF_NAMESPACE modes (CommandGetTopicsOfNamespace.Mode)
MODE_PERSISTENT, MODE_NON_PERSISTENT, MODE_ALL = 0, 1, 2
# The managed ledgers earlier versions' health checks wrote to (one broker; in cluster mode with "-<brokerId>", the id's
# ":" as "-"): deleted at start, the health check now going through the heartbeat topic (broker.service.health).
OLD_HEALTH_LEDGER = "pulsar/__health/persistent/heartbeat"
HEALTH_CHECK_TIMEOUT_S = 10.0
# Topics of unloaded bundles closed at once, broker-wide (each close writes its ledger's and cursors' state). All at
# once, a bundle of 1,000+ topics queued every write behind every other one and each topic finished only at the end.
# Broker-wide, so that the bundles of a namespace unload in parallel (as Pulsar's) without multiplying it.
UNLOAD_PARALLELISM = 32
# Distinct managed-ledger configs ledger_config_for keeps (one per set of retention and persistence values in use;
# past this many, as when every topic has its own, the set starts again rather than grow).
LEDGER_CONFIGS_KEPT = 64
# (retention time, retention size, mark-delete rate, bookie affinity, offload policy)
LedgerConfigKey = tuple[float, int, float | None, tuple[str, str] | None, OffloadPolicy]

AnyTopic = PersistentTopic | NonPersistentTopic


def broker_client_headers(config: BrokerConfig) -> dict[str, str]:
    """The HTTP credentials of the broker client (``brokerClientAuthenticationPlugin``: token or basic), for the
    leader's admin calls to other brokers (TLS client certificates are not sent on those)."""
    return credential_headers(config.brokerClientAuthenticationPlugin, config.brokerClientAuthenticationParameters)


def credential_headers(plugin: str, params: str) -> dict[str, str]:
    """The Authorization header of an authentication plugin and its parameters (token or basic; none for tls or no
    plugin); RemoteError for one that cannot be used."""
    method, data, _ = client_credentials(plugin, params)
    if method == "token":
        return {"Authorization": f"Bearer {data.decode()}"}
    if method == "basic":
        return {"Authorization": f"Basic {base64.b64encode(data).decode()}"}
    return {}


def is_shared_store_url(url: str) -> bool:
    """A metadataStoreUrl that several brokers can share (ZooKeeper): not empty, ``local:`` or ``memory:``."""
    url = url.strip()
    return bool(url) and not url.startswith(("local:", "memory:"))


class BrokerService:
    def __init__(self, config: BrokerConfig, data_dir: Path | None) -> None:
        self.config = config
        self.data_dir = data_dir
        # The broker's metadata, in the metadata store opened by open() (metadataStoreUrl).
        self.metadata = BrokerMetadata(config.clusterName,
                                      default_bundles=config.defaultNumberOfNamespaceBundles)
        self.metadata_store: MetadataStore | None = None
        # The settings changed while the brokers run (pulsar-admin brokers update-dynamic-config), applied to config.
        self.dynamic_config = DynamicConfiguration(config, self.metadata)
        # The policies in force for each topic (topic, else namespace, else broker): one table.
        self.policies = PolicyResolver(config, self.metadata)
        self.schemas = SchemaRegistry(self.metadata, self.policies)
        # brokerPublisherThrottlingMax{Message,Byte}Rate over all topics; None when neither is set.
        self.broker_publish_throttle = BrokerPublishThrottle.from_config(config, self.metadata)
        # dispatchThrottlingRateIn{Msg,Byte}: what every subscription of the broker dispatches together,
        # on top of each topic's and subscription's limits; None when neither is set.
        self.broker_dispatch_rate = DispatchRate.broker_wide(config, self.metadata)
        # Every add's latency, request to durable (Pulsar's broker-wide pulsar_broker_publish_latency summary).
        self.publish_latency = LatencySummary()
        # What the offloader wrote, read and deleted (brk_ledgeroffloader_*); Pulsar keeps none without
        # exposeManagedLedgerMetricsInPrometheus.
        self.offloader_stats = OffloaderStats() if config.exposeManagedLedgerMetricsInPrometheus else None
        # The offloaders of namespaces and topics whose offload policies name other driver settings.
        self.offload_tiers = OffloadTiers(config, data_dir)
        self.ledger_config = ManagedLedgerConfig(
            max_entries_per_ledger=config.managedLedgerMaxEntriesPerLedger,
            cache_size_bytes=config.managedLedgerCacheSizeMB * 1024 * 1024,
            read_nesting_limit=config.managedLedgerReadNestingLimit,
            new_entries_check_delay_s=config.managedLedgerNewEntriesCheckDelayInMillis / 1000,
            offloaded_idle_s=config.managedLedgerInactiveOffloadedLedgerEvictionTimeSeconds,
            max_unacked_ranges_to_persist=config.managedLedgerMaxUnackedRangesToPersist,
            add_latency_sink=self.publish_latency,
        )
        # ledger_config_for's configs: the base they were made from, and one per set of policy values.
        self._ledger_configs: tuple[ManagedLedgerConfig, dict[LedgerConfigKey, ManagedLedgerConfig]] = (
            self.ledger_config, {})
        self.ledger_factory: ManagedLedgerFactory = self._make_ledger_factory()
        self.topics: dict[str, PersistentTopic] = {}
        # Live non-persistent topics (kept while they have producers or consumers; nothing stored).
        self.non_persistent_topics: dict[str, NonPersistentTopic] = {}
        self._loading: SingleFlight[str, PersistentTopic] = SingleFlight("topic load")
        self._producer_names = itertools.count()
        # Topics being unloaded or deleted: a load of the same name waits for that to finish, so
        # a client reconnecting at once never gets the managed ledger that is being closed.
        self._unloading: dict[str, asyncio.Future[None]] = {}
        # Namespaces an admin of this broker is deleting (``namespace_being_deleted``).
        self.namespaces_being_deleted: set[str] = set()
        self.backlog_quotas = BacklogQuotaManager(self)
        self.expiry_stats = admin_ops.ExpiryStats()
        # Lookups and topic loads, for Pulsar's pulsar_broker_lookup* and pulsar_topic_load_* metrics.
        self.lookup_stats = LookupStats()
        self.topic_load_stats = TopicLoadStats()
        self.snapshot_stats = SnapshotStats()  # replicated subscriptions' snapshots (pulsar_replicated_subscriptions_*)
        # The outcome of the last periodic health check (pulsar_health): -1 none yet, 1 passed, 0 failed.
        self.health_check_status = -1
        # (Single values, brokerDeleteInactiveTopicsMode and subscriptionTypesEnabled among them,
        # were checked by BrokerConfig's rules; the client credentials need parsing.)
        try:
            broker_client_credentials(config)
        except RemoteError as exc:
            raise ConfigError(f"brokerClientAuthenticationPlugin: {exc}") from None
        self.inactive_topics = InactiveTopicMonitor(self)
        # Loaded topics whose cluster left their clusters are deleted (Pulsar's removeTopicIfLocalClusterNotAllowed).
        self.cluster_removal = ClusterRemoval(self)
        # Periodic jobs over the loaded topics, started with the first one and stopped in close().
        self.housekeeping = Housekeeping(self)
        # Shared / Key_Shared dispatchers blocked on their subscription's or a consumer's unacked limit: a policy
        # change may lift it, so they re-plan a read after every metadata change.
        self.unacked_blocked: set[Any] = set()
        self.metadata.listeners.append(self._metadata_changed)
        # PIP-145 topic-list watchers hear of created and deleted topics: managed-ledger names, and partitioned
        # topics (metadata).
        self.topic_list_events = TopicListEvents()
        self.ledger_factory.add_names_listener(self.topic_list_events.ledger_changed)
        self.dynamic_config.on_change(("defaultNumberOfNamespaceBundles",), self._default_bundles_changed)
        self.dynamic_config.on_change(("managedLedgerCacheSizeMB",),
                                      lambda: self.ledger_factory.resize_cache(config.managedLedgerCacheSizeMB * MB))
        self.dynamic_config.on_change(
            ("brokerDeleteInactiveTopicsEnabled", "brokerDeleteInactiveTopicsFrequencySeconds"),
            self.housekeeping.inactive_topic_settings_changed)
        self.dynamic_config.on_change(
            ("brokerPublisherThrottlingMaxMessageRate", "brokerPublisherThrottlingMaxByteRate"),
            self._broker_publish_limit_set)
        self.dynamic_config.on_change(("dispatchThrottlingRateInMsg", "dispatchThrottlingRateInByte"),
                                      self._broker_dispatch_limit_set)
        self.dynamic_config.on_change(DISPATCHER_SETTINGS, self._dispatcher_settings_changed)
        self._resuming: asyncio.Task[None] | None = None
        # Unloads of topics whose managed ledger was fenced under them (ledger_fenced).
        self._fenced_unloads = OwnedTasks("broker service: unloads of fenced topics")
        # The health check through the broker's own port (``serve_as``, once the ports are bound).
        self.health_checker: HealthChecker | None = None
        self.health_check_timeout_s = HEALTH_CHECK_TIMEOUT_S
        # Which bundles this broker serves: all of them (one broker), or those it owns in ZooKeeper (cluster mode,
        # set up by start_cluster once the broker's ports are known).
        self.ownership: Ownership = (PendingOwnership(self.namespace_bundles) if self.distributed
                                     else StandaloneOwnership(self, self.namespace_bundles))
        self.registry: BrokerRegistry | None = None
        self.load_manager: LoadManager | None = None
        self.load = LoadSampler()
        # Topics closed at once when the metadata session was lost (their closes run here).
        self._dropped = OwnedTasks("broker service: topics dropped with the metadata session")
        self._unloads = OwnedTasks("broker service: topics unloaded with their bundle")
        self._unload_gate = asyncio.Semaphore(UNLOAD_PARALLELISM)
        # Replicated topics loaded as their bundle comes to this broker (cluster mode).
        self._bundle_loads = OwnedTasks("broker service: replicated topics of acquired bundles")
        # The transaction coordinators (transactionCoordinatorEnabled; docs/transactions.md). In cluster mode each is
        # served by the owner of its assignment-topic partition's bundle, as in Pulsar.
        self.transactions: TransactionService | None = (
            TransactionService(self) if config.transactionCoordinatorEnabled else None)
        self.closed = False
        self.started_at_ms = int(time.time() * 1000)

    def _metadata_changed(self) -> None:
        self.topic_list_events.changed(None)
        for dispatcher in list(self.unacked_blocked):
            asyncio.get_running_loop().call_soon(dispatcher.unacked_limits_changed)
        # Replication clusters (or a cluster's URL) may have changed. A topic whose cluster left its clusters is
        # deleted instead (Pulsar's checkReplication: removeTopicIfLocalClusterNotAllowed comes first).
        removing = {t.full_name for t in list(self.topics.values()) if self.cluster_removal.check(t)}
        for topic in self.all_topics():
            topic.publish_throttle.policies_changed()
            if topic.full_name not in removing:
                topic.update_replication()
        if self.broker_publish_throttle is not None:
            self.broker_publish_throttle.policies_changed()

    def replication_targets(self, name: TopicName) -> list[str]:
        """The other clusters a topic is replicated to (``replication.remote_clusters``), from its own replication
        clusters, else its namespace's, and its namespace's allowed clusters."""
        allowed = allowed_clusters_of(self.metadata.namespaces.get(name.namespace)) or ()
        return remote_clusters(self.config.clusterName, self.policies.get(name, REPLICATION_CLUSTERS), allowed,
                               persistent=name.persistent)

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
        if kind not in ("file", "memory", "bookkeeper"):
            raise ValueError(f"managedLedgerStorage={kind!r}: expected 'file', 'memory' or 'bookkeeper'")
        offloader = offloader_of(cfg, self.data_dir)  # (a bad offload setting fails the start, with the reason)
        if kind == "memory":
            return MemoryManagedLedgerFactory()
        if kind == "bookkeeper":
            factory = self._make_bookkeeper_factory()
            if isinstance(factory, BookKeeperManagedLedgerFactory):
                factory.offloader, factory.offload_stats = offloader, self.offloader_stats
            return factory
        if self.data_dir is None:
            # An empty dataDir keeps nothing on disk (metadata neither): topics live in memory.
            log.warning("managedLedgerStorage=file without a dataDir: topics are kept in memory")
            return MemoryManagedLedgerFactory()
        rate = cfg.managedLedgerDefaultMarkDeleteRateLimit
        file_factory = FileManagedLedgerFactory(
            str(self.data_dir / "ledgers"),
            sync=cfg.managedLedgerSyncData,
            group_wait_s=max(0.0, cfg.journalMaxGroupWaitMSec) / 1000,
            group_bytes=max(1, cfg.journalBufferedWritesThreshold),
            group_min_bytes=cfg.journalGroupMinBatchBytes,
            direct_io=cfg.managedLedgerDirectIO,
            cache_size_bytes=self.ledger_config.cache_size_bytes,
            cursor_persist_interval_s=1.0 / rate if rate > 0 else 0.0,
            disk_space=DiskSpacePolicy(
                usage_threshold=cfg.managedLedgerDiskUsageThreshold,
                lwm_threshold=cfg.managedLedgerDiskUsageLwmThreshold,
                warn_threshold=cfg.managedLedgerDiskUsageWarnThreshold,
                min_free_bytes=cfg.managedLedgerMinFreeDiskSpaceMB * MB,
                check_interval_s=cfg.managedLedgerDiskCheckIntervalMillis / 1000,
                add_hold_s=cfg.managedLedgerDiskFullAddHoldSeconds),
            migrate_names=persistence_path_of_raw,  # (a data dir of a version that stored raw local names)
            offloader=offloader,
        )
        file_factory.offload_stats = self.offloader_stats
        return file_factory

    def _make_bookkeeper_factory(self) -> ManagedLedgerFactory:
        """One ZooKeeper session per broker where the settings allow, as Pulsar: the managed-ledger znodes go
        through the broker's own metadata store when ``metadataStoreUrl`` is a ZooKeeper, and the BookKeeper client
        uses that store's session too when BookKeeper's ZooKeeper is the same one, without a chroot. Otherwise
        their sessions honour ``metadataStoreSessionTimeoutMillis``."""
        cfg = self.config
        session_timeout_s = cfg.metadataStoreSessionTimeoutMillis / 1000
        try:
            zk, ledgers_root = bookkeeper_zookeeper(cfg.bookkeeperMetadataServiceUri, cfg.metadataStoreUrl)
            rate = cfg.managedLedgerDefaultMarkDeleteRateLimit
            ml_store_url = ml_metadata_store_url(cfg.metadataStoreUrl, zk)
            shares_store = ml_store_url.removeprefix("zk:") == cfg.metadataStoreUrl.strip().removeprefix("zk:")
            bk_zk = AsyncZk(zk, session_timeout_s=session_timeout_s, shared=partial(self._shared_zk_session, zk))
            placement = PlacementPolicy(rack_aware=cfg.bookkeeperClientRackawarePolicyEnabled,
                                        min_racks_per_write_quorum=cfg.bookkeeperClientMinNumRacksPerWriteQuorum,
                                        enforce_min_racks=cfg.bookkeeperClientEnforceMinNumRacksPerWriteQuorum)
            return BookKeeperManagedLedgerFactory(
                BookKeeper(bk_zk, ledgers_root, placement=placement, isolation=(
                    IsolationGroups(cfg.bookkeeperClientIsolationGroups, cfg.bookkeeperClientSecondaryIsolationGroups)
                    if cfg.bookkeeperClientIsolationGroups else None)),
                self._broker_metadata_store if shares_store else ml_store_url,
                ensemble_size=cfg.managedLedgerDefaultEnsembleSize, write_quorum=cfg.managedLedgerDefaultWriteQuorum,
                ack_quorum=cfg.managedLedgerDefaultAckQuorum, cache_size_bytes=self.ledger_config.cache_size_bytes,
                cursor_persist_interval_s=1.0 / rate if rate > 0 else 0.0, session_timeout_s=session_timeout_s,
                add_retry_window_s=cfg.managedLedgerDiskFullAddHoldSeconds,
                storage_check_interval_s=cfg.managedLedgerDiskCheckIntervalMillis / 1000,
                formats=MetadataFormats.from_names(
                    cfg.managedLedgerInfoCompressionType, cfg.managedCursorInfoCompressionType,
                    ledger_info_threshold=cfg.managedLedgerInfoCompressionThresholdInBytes,
                    cursor_info_threshold=cfg.managedCursorInfoCompressionThresholdInBytes,
                    acks_as_long_array=cfg.managedLedgerPersistIndividualAckAsLongArray),
                # (znodes of a version that stored raw local names: moved to Pulsar's names once; a name Pulsar's
                # brokers may have written, one already spelled as Codec.encode spells a name, stays)
                migrate_names=persistence_path_of_shared, names_marker=MANAGED_LEDGER_NAMES_MARKER)
        except ValueError as exc:
            raise ConfigError(f"managedLedgerStorage=bookkeeper: {exc}") from None

    def _broker_metadata_store(self) -> MetadataStore:
        if self.metadata_store is None:
            raise ManagedLedgerError("the broker's metadata store is not open")
        return self.metadata_store

    def _shared_zk_session(self, hosts: str) -> KazooClient | None:
        """The broker's ZooKeeper client, when its store is on ``hosts`` at the root (BookKeeper's paths are
        absolute), else None."""
        from metadata_store.zookeeper import ZooKeeperMetadataStore  # (kazoo only in ZooKeeper set-ups)

        store = self.metadata_store
        if isinstance(store, ZooKeeperMetadataStore) and not store.address.chroot and store.address.hosts == hosts:
            return store.kazoo_client
        return None

    # -- cluster mode ------------------------------------------------------------------------------------
    @property
    def distributed(self) -> bool:
        """Cluster mode: the metadata store is shared (ZooKeeper), so brokers own bundles; a local or memory store
        means one broker owning everything."""
        return is_shared_store_url(self.config.metadataStoreUrl)

    def namespace_bundles(self, namespace: str) -> NamespaceBundles:
        return self.metadata.namespace_bundles(namespace)

    async def serve_as(self, urls: BrokerUrls, own_settings: Callable[[], RemoteSettings]) -> None:
        """Once the broker's ports are bound: its heartbeat namespace (``pulsar/<brokerId>``, Pulsar's
        registerBootstrapNamespaces: in cluster mode every broker's, each owned by the broker it names, see
        ClusterOwnership; one broker: its own) and the health check through its own port (``own_settings``: how a
        client inside the broker reaches it). Then cluster mode starts (``start_cluster``)."""
        if self.distributed:
            self.metadata.implicit_namespace = lambda namespace: heartbeat_broker(namespace) is not None
        else:
            own = heartbeat_namespace(urls.broker_id)
            self.metadata.implicit_namespace = lambda namespace: namespace == own
        self.health_checker = HealthChecker(self, urls.broker_id, own_settings, self.health_check_timeout_s)
        await self.start_cluster(urls)
        await self._delete_old_health_ledger(urls.broker_id)

    async def _delete_old_health_ledger(self, broker_id: str) -> None:
        name = OLD_HEALTH_LEDGER if not self.distributed else f"{OLD_HEALTH_LEDGER}-{broker_id.replace(':', '-')}"
        try:
            if await self.ledger_factory.exists_fresh(name):
                await self.ledger_factory.delete(name)
                log.info("deleted %s, the log of an earlier version's health check", name)
        except Exception as exc:  # (tried again at the next start)
            log.warning("deleting %s, the log of an earlier version's health check: %s", name, exc)

    async def start_cluster(self, urls: BrokerUrls) -> None:
        """Cluster mode, once the broker's ports are bound: register in /loadbalance/brokers, run for leader, own
        bundles through ZooKeeper, its heartbeat namespace's first. (Standalone: nothing to do.)"""
        if not self.distributed or self.metadata_store is None:
            return
        # The cluster's URLs, as its metadata set-up would have stored them: every broker then answers the same
        # GET /admin/v2/clusters/{cluster} (not each its own URLs), and a peer cluster's redirect has somewhere to go.
        cluster_urls = {"serviceUrl": urls.web_url, "serviceUrlTls": urls.web_url_tls,
                        "brokerServiceUrl": urls.pulsar_url, "brokerServiceUrlTls": urls.pulsar_url_tls}
        await self.metadata.fill_cluster_urls(self.config.clusterName,
                                              {k: v for k, v in cluster_urls.items() if v})
        registry = BrokerRegistry(self.metadata_store, urls, lambda: self.load_report(urls))
        ownership = ClusterOwnership(self.metadata_store, urls, registry, self, self.namespace_bundles,
                                     self.metadata.stored_namespace_bundles)
        c = self.config
        ownership.placement.group_of = self.metadata.anti_affinity_group
        ownership.placement.isolation = lambda: self.metadata.isolation_policies(c.clusterName)
        # (off: Pulsar's refreshBrokerToFailureDomainMap leaves the map empty; a dynamic setting, read at each choice)
        ownership.placement.failure_domains = lambda: (self.metadata.broker_failure_domains(c.clusterName)
                                                       if c.failureDomainsEnabled else {})
        # (made before the registry starts: it sets the placement strategy the first lookups use)
        load_manager = LoadManager(c, registry, ownership.placement, self.namespace_bundles,
                                   lambda: broker_client_headers(c))
        self.dynamic_config.on_change(PLACEMENT_SETTINGS, load_manager.placement_settings_changed)
        await registry.start()
        self.registry, self.ownership = registry, ownership
        await self._own_heartbeat_namespace(ownership, urls.broker_id)
        if self.transactions is not None:
            self.transactions.start_cluster(urls.pulsar_url or urls.pulsar_url_tls or "")
        self.load_manager = load_manager
        self.load_manager.start()

    async def _own_heartbeat_namespace(self, ownership: ClusterOwnership, broker_id: str) -> None:
        """Pulsar's registerNamespace(heartbeat namespace, ensureOwned): this broker takes the full bundle of its
        heartbeat namespace at start. Another broker holding it (two brokers with one id) is logged: this broker's
        health check then fails, telling its operator."""
        namespace = heartbeat_namespace(broker_id)
        bundle = self.namespace_bundles(namespace).bundles[0]
        try:
            owner = await ownership.acquire(bundle)
        except Exception as exc:  # (a lookup of the namespace takes it later: the named broker is this one)
            log.warning("heartbeat namespace %s not owned at start: %s", namespace, exc)
            return
        if not owner.same_owner(ownership.mine):
            log.error("heartbeat namespace %s is owned by %s, not by this broker: is another broker using the id %s?",
                      namespace, owner.native_url, broker_id)

    def load_report(self, urls: BrokerUrls) -> LoadReport:
        topics = self.all_topics()
        owned = self.ownership.owned_bundles()
        zero = Counters(0, 0, 0, 0)
        per_bundle: dict[str, Counters] = {str(b): zero for b in owned}
        sessions: dict[str, tuple[int, int, int]] = {}  # bundle -> (topics, producers, consumers)
        msg_in = bytes_in = msg_out = bytes_out = producers = consumers = 0
        for topic in topics:
            t_out = t_bytes_out = t_consumers = 0
            subs: list[AnySubscription] = [*topic.subscriptions.values()]
            for sub in subs:
                for c in sub.consumers:
                    t_consumers += 1
                    t_out += c.msg_out
                    t_bytes_out += c.bytes_out
            msg_in += topic.msg_in
            bytes_in += topic.bytes_in
            producers += len(topic.producers)
            consumers += t_consumers
            msg_out += t_out
            bytes_out += t_bytes_out
            if self.ownership.distributed:
                try:
                    bundle = str(self.ownership.bundle_of(topic.name))
                except Exception:  # (its namespace is gone)
                    continue
                was = per_bundle.get(bundle, zero)
                per_bundle[bundle] = Counters(was.msg_in + topic.msg_in, was.bytes_in + topic.bytes_in,
                                              was.msg_out + t_out, was.bytes_out + t_bytes_out)
                n, p, k = sessions.get(bundle, (0, 0, 0))
                sessions[bundle] = (n + 1, p + len(topic.producers), k + t_consumers)
        rates = self.load.sample(Counters(msg_in, bytes_in, msg_out, bytes_out), per_bundle)
        stats = {}
        for bundle in per_bundle:
            r = self.load.bundle_rates.get(bundle)
            n, p, k = sessions.get(bundle, (0, 0, 0))
            stats[bundle] = BundleLoad(r.msg_rate_in, r.msg_rate_out, r.throughput_in, r.throughput_out, k, p, n) \
                if r is not None else BundleLoad(consumer_count=k, producer_count=p, topics=n)
        rss, total = rss_mb(), memory_limit_mb()
        nic = nic_limit_kbps(self.config.loadBalancerOverrideBrokerNicSpeedGbps)
        return LoadReport(urls, cpu_usage=rates.cpu_percent, cpu_limit=100.0, memory_usage_mb=rss,
                          memory_limit_mb=total, msg_rate_in=rates.msg_rate_in, msg_rate_out=rates.msg_rate_out,
                          msg_throughput_in=rates.throughput_in, msg_throughput_out=rates.throughput_out,
                          num_topics=len(topics), num_bundles=len(owned), num_consumers=consumers,
                          num_producers=producers, bundles=tuple(sorted(str(b) for b in owned)),
                          last_update_ms=int(time.time() * 1000), version=__version__,
                          start_timestamp_ms=self.started_at_ms,
                          bandwidth_in_usage=bandwidth_kbps(rates.throughput_in), bandwidth_in_limit=nic,
                          bandwidth_out_usage=bandwidth_kbps(rates.throughput_out), bandwidth_out_limit=nic,
                          bundle_stats=stats)

    # TopicHost (broker.cluster.ownership): what bundle ownership does to the loaded topics.
    def served_topic_names(self) -> list[str]:
        # (A transaction coordinator is served as its assignment-topic partition: it goes with that bundle. A topic
        # being loaded is one too: its unload waits for the load, see unload_topics.)
        coordinators = self.transactions.served_assign_partitions() if self.transactions is not None else []
        loading = [name for name in self._loading if name not in self.topics]
        return [*self.topics, *loading, *self.non_persistent_topics, *coordinators]

    async def unload_topics(self, names: list[str]) -> int:
        if self.transactions is not None:
            tc_ids = [tc for tc in map(self.transactions.coordinator_of_partition, names) if tc is not None]
            await self.transactions.release(tc_ids)
        # At most UNLOAD_PARALLELISM at once (over every unload under way), in order; those waiting their turn keep
        # serving their clients, and each starts as soon as any close ends (a stuck one holds its own place only).
        # Waited for at most namespaceBundleUnloadingTimeoutMs (Pulsar's unloadServiceUnit timeout): past it the
        # rest go on closing in the background and the caller releases the bundle.
        closed = 0

        async def unload(name: str) -> None:
            nonlocal closed
            # A topic being loaded is closed once loaded (or its load gives up, the bundle no longer served, and
            # closes what it opened), before the caller releases the bundle: closed after, it would write its cursors'
            # state over that of the broker that has taken the bundle meanwhile, fencing its managed ledger. Pulsar's
            # unloadServiceUnit closes the topics' futures, loading ones included, before the bundle is released.
            loading = self._loading.get(name)
            if loading is not None:
                with contextlib.suppress(Exception):
                    await loading
            async with self._unload_gate:
                try:
                    if await self.unload_topic(TopicName.parse(name)):
                        closed += 1
                except Exception as exc:
                    log.warning("unloading %s failed: %s", name, exc)

        tasks = [self._unloads.spawn(unload(n), name=f"unload {n}") for n in names]
        if not tasks:
            return 0
        _, pending = await asyncio.wait(tasks, timeout=self.config.namespaceBundleUnloadingTimeoutMs / 1000)
        if pending:
            log.warning("unloading %d topics timed out after %d ms: %d closed, the other %d close in the background",
                        len(names), self.config.namespaceBundleUnloadingTimeoutMs, closed, len(pending))
        return closed

    def stop_serving_now(self) -> None:
        """The metadata session is lost: other brokers may own these bundles any moment. Every client of every
        topic is disconnected now (no receipt goes out after this), the topics leave the registry now, and their
        closes run in the background."""
        if self.transactions is not None:
            self.transactions.drop_all_now()
        topics: list[AnyTopic] = self.all_topics()
        self.topics.clear()
        self.non_persistent_topics.clear()
        for topic in topics:
            admin_ops.disconnect_clients(topic)
            self._dropped.spawn(topic.close(), name=f"drop {topic.name.full}")

    def generate_producer_name(self) -> str:
        return f"{self.config.clusterName}-0-{next(self._producer_names)}"

    # -- topics ------------------------------------------------------------------------------------
    def check_namespace(self, name: TopicName) -> None:
        if not self.metadata.namespace_exists(name.namespace):
            raise TopicNotFoundError(f"Namespace {name.namespace} does not exist (topic {name})")

    def peer_cluster(self, name: TopicName) -> PeerCluster | None:
        """Pulsar's checkLocalOrGetPeerReplicationCluster for the topic's namespace: None when this cluster serves
        it, else the peer cluster its lookups and admin calls are sent to (GlobalNamespaceError when none can)."""
        return self.peer_cluster_of(name.namespace, allow_deleted=is_system_topic(name.full))

    def peer_cluster_of(self, namespace: str, *, allow_deleted: bool = False) -> PeerCluster | None:
        """``peer_cluster`` for a namespace (its admin calls that Pulsar checks)."""
        policies = self.metadata.namespaces.get(namespace)
        if policies is None and self.metadata.implicit_namespace(namespace):
            return None  # (a heartbeat namespace is served where it is: Pulsar's checkLocalOrGetPeerReplicationCluster)
        return peer_cluster_for(namespace, self.config.clusterName, policies,
                                self.metadata.clusters, allow_deleted=allow_deleted)

    def check_cluster_serves(self, name: TopicName) -> None:
        """PRODUCER and SUBSCRIBE in a namespace that another cluster serves (or none can): ServiceNotReady, as a
        Pulsar broker answers them there (none of its cluster owns the namespace's bundles, every lookup having
        been sent elsewhere); the client looks up again and is sent to the peer cluster. A missing namespace is left
        to the command's own checks."""
        if not self.metadata.namespace_exists(name.namespace):
            return
        try:
            if self.peer_cluster(name) is None:
                return
        except GlobalNamespaceError:
            pass
        raise ServiceNotReadyError(f"Namespace bundle for topic ({name.full}) not served by this instance: cluster "
                                   f"{self.config.clusterName} does not serve namespace {name.namespace}. Please "
                                   "redo the lookup.")

    async def refresh_namespace(self, name: TopicName) -> None:
        """Cluster mode: a namespace this broker has not heard of yet is read from the metadata store (another
        broker may have just created it; its notification may be on its way), as Pulsar's metadata cache loads a
        key it does not hold. One broker: its own cache is the truth."""
        if self.distributed and not self.metadata.namespace_exists(name.namespace):
            await self.metadata.namespace_exists_fresh(name.namespace)

    async def refresh_topic(self, name: TopicName) -> None:
        """Cluster mode: ``refresh_namespace``, then what this broker does not know of the topic read from the
        metadata store: its base name's partitioned metadata and, of a persistent name, its managed ledger (of a
        partitioned topic's name, each partition's), any of which another broker may have just created, its
        notification on its way. So the synchronous checks after it (``topic_exists``, ``metadata.partitions_of``)
        answer for what is stored, as Pulsar's do: NamespaceService.checkTopicExists reads the partitioned metadata
        through its metadata cache (which loads a key it does not hold) and then TopicResources.
        persistentTopicExists (the store's exists). Nothing is read for a topic known here; one broker: nothing."""
        if not self.distributed:
            return
        await self.refresh_namespace(name)
        factory = self.ledger_factory
        if (not self.metadata.namespace_exists(name.namespace) or self.get_topic_if_loaded(name) is not None
                or (name.persistent and factory.exists(name.persistence_path))):
            return  # (a stored topic is no partitioned one: Pulsar refuses to make either where the other is)
        partitions = await self.metadata.partitions_of_fresh(name.base.full)
        if not name.persistent:
            return
        stored = [name.partition(i) for i in range(partitions)] if name.partition_index < 0 and partitions else [name]
        await asyncio.gather(*(factory.exists_fresh(one.persistence_path) for one in stored
                               if not factory.exists(one.persistence_path)))

    def get_topic_if_loaded(self, name: TopicName) -> AnyTopic | None:
        if not name.persistent:
            return self.non_persistent_topics.get(name.full)
        return self.topics.get(name.full)

    def _broker_publish_limit_set(self) -> None:
        """A broker-wide publish limit set while the broker runs: the limiter is made if there was none (an
        unlimited broker has none) and given to every producer; changed or lifted, it follows by itself."""
        if self.broker_publish_throttle is not None:
            return
        throttle = self.broker_publish_throttle = BrokerPublishThrottle.from_config(self.config, self.metadata)
        if throttle is not None:
            for topic in self.all_topics():
                for producer in topic.producers.values():
                    producer.broker_throttle = throttle

    def _default_bundles_changed(self) -> None:
        """defaultNumberOfNamespaceBundles changed while the broker runs: namespaces created from now on without a
        bundle count get that many (those created before keep the bundles stored for them)."""
        self.metadata.default_bundles = self.config.defaultNumberOfNamespaceBundles

    def _broker_dispatch_limit_set(self) -> None:
        """A broker-wide dispatch limit set while the broker runs: made if there was none and added to every
        subscription's limits (its dispatcher's too); changed or lifted, it follows by itself."""
        if self.broker_dispatch_rate is not None:
            return
        rate = self.broker_dispatch_rate = DispatchRate.broker_wide(self.config, self.metadata)
        if rate is not None:
            for topic in self.topics.values():
                for sub in topic.subscriptions.values():
                    sub.add_dispatch_rate(rate)

    def _dispatcher_settings_changed(self) -> None:
        """Read sizes and how rate limits count, changed while the broker runs: every dispatcher there takes them
        (new ones read them from the configuration)."""
        fields = configured_fields(self.config)
        for topic in self.topics.values():
            for sub in topic.subscriptions.values():
                d = sub.dispatcher
                if d is not None:
                    d.context_changed(dataclasses.replace(d.context, **fields))

    def all_topics(self) -> list[AnyTopic]:
        return [*self.topics.values(), *self.non_persistent_topics.values()]

    def topic_exists(self, name: TopicName) -> bool:
        if not name.persistent:
            return name.full in self.non_persistent_topics
        return self.ledger_factory.exists(name.persistence_path)

    async def create_partitions(self, name: TopicName, partitions: int) -> None:
        """The partitioned topic's first ``partitions`` partitions made to exist: each one's managed ledger stored,
        empty and not loaded (its first use loads it), as Pulsar's AdminResource.tryCreatePartitionsAsync does when a
        partitioned topic is created, grown or has its missing partitions created (TopicResources.
        createPersistentTopicAsync: the partition's managed-ledger znode, empty); one already stored stays as it is
        (its AlreadyExists is no failure there). All side by side, as Pulsar waits for all of them. A non-persistent
        topic's partitions have nothing stored (Pulsar only tells its topic-event listeners of them), and neither
        does a partitioned topic the namespace's auto-creation makes (BrokerService.
        createDefaultPartitionedTopicAsync: the partitioned metadata only; its partitions come with their use)."""
        if not name.persistent:
            return
        factory = self.ledger_factory
        paths = [p for p in (name.partition(i).persistence_path for i in range(partitions)) if not factory.exists(p)]
        results = await asyncio.gather(*(factory.create(p) for p in paths), return_exceptions=True)
        for result in results:
            if isinstance(result, ManagedLedgerError):
                raise PersistenceError(f"Failed to create the partitions of {name}: {result}") from result
            if isinstance(result, BaseException):
                raise result

    def namespace_being_deleted(self, namespace: str) -> bool:
        """Whether a namespace is being deleted, here or by any broker of the cluster: no topic is
        created in it meanwhile (without it, a create between the delete's emptiness check and its
        end left an orphan). Here from the moment the delete starts; for every broker once its
        policies say ``deleted``, as Pulsar marks them before deleting the topics."""
        return namespace in self.namespaces_being_deleted or bool(self.metadata.policy(namespace, "deleted"))

    def _check_may_create(self, name: TopicName, create: bool, explicit: bool) -> None:
        """TopicNotFoundError unless a missing topic may be created: a partition of a partitioned
        topic always (NotAllowedError for an index past its count), otherwise by admin request or the namespace's
        auto-creation rule."""
        if self.namespace_being_deleted(name.namespace):
            raise NotAllowedError(f"Namespace {name.namespace} is being deleted")
        base = name.base
        partitions = self.metadata.partitions_of(base.full) if base is not name else 0
        if partitions > 0 and name.partition_index >= partitions:
            # (Pulsar's BrokerService.getTopic: a partition name past the partitioned topic's count)
            raise NotAllowedError(f"Illegal topic partition name {name} with max allowed {partitions} partitions")
        is_partition = partitions > 0
        allowed = explicit or (create and self.policies.for_namespace(name.namespace, AUTO_TOPIC_CREATION).allow)
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
        if name.full not in self.non_persistent_topics:
            await self.refresh_topic(name)  # (cluster mode: a partitioned topic another broker has just made)
            await self.ownership.wait_serving(name)
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
        await self.refresh_topic(name)  # (cluster mode: one another broker has just stored is loaded, not refused)
        self.check_namespace(name)
        loading = self._loading.get(name.full)
        if loading is not None:
            return await loading
        await self.ownership.wait_serving(name)
        loading = self._loading.get(name.full)  # (loaded meanwhile)
        if loading is not None:
            return await loading
        topic = self.topics.get(name.full)
        if topic is not None:
            return topic
        if self.topic_exists(name):
            return await self._loading.run(name.full, lambda: self._load_topic(name))
        self._check_may_create(name, create, explicit)
        self.check_topics_limit(name, 1)
        topic = await self._loading.run(name.full, lambda: self._load_topic(name))
        if explicit:  # (an admin's create must outlive a power cut; an auto-created topic is made again on use)
            await topic.ledger.sync_creation()
        return topic

    async def _load_topic(self, name: TopicName) -> PersistentTopic:
        load_started = time.monotonic()
        try:
            try:
                ledger = await self.ledger_factory.open(name.persistence_path, self.ledger_config_for(name))
            except ManagedLedgerError as exc:  # (a full disk, an unreachable bookie: the client retries)
                raise PersistenceError(f"Failed to open the managed ledger of {name}: {exc}") from exc
            try:
                self.ownership.check_serving(name)  # (the bundle may have been lost or unloaded meanwhile)
                if self.distributed:
                    # What the previous owner stored of the topic just before it let go (a compaction's result, a
                    # termination), read now: its notification may not be here yet, and these are read once, at load
                    # (Pulsar keeps them in the managed ledger's own metadata, read as it opens).
                    await self.metadata.read_topic_records(name.full)
            except (ServiceNotReadyError, MetadataStoreError) as exc:
                await ledger.close()
                if isinstance(exc, MetadataStoreError):  # (the client retries)
                    raise ServiceNotReadyError(f"Topic {name}: its records not read from the metadata store: {exc}") \
                        from exc
                raise
            topic = PersistentTopic(self, name, ledger)
            try:
                topic.compacted_view = await load_view(topic)
                await topic.compactor.hold_for_first_run()
                await topic.dedup.recover()
                if topic.entry_stamper is not None:
                    await topic.entry_stamper.recover(ledger)
                await topic.txn_buffer.recover()
                await topic.start_replication()
            except BaseException:  # (its managed ledger and view stayed open, each load leaking more)
                try:
                    await topic.abandon_load()
                except Exception:  # (the load's own error is the one to report)
                    log.warning("could not close what the failed load of %s opened", name, exc_info=True)
                raise
            terminated = self.metadata.terminated.get(name.full)
            if terminated is not None:
                topic.terminated_at = Position(*terminated)
            try:
                # Once more, with no await before the topic is registered: an unload of the bundle (or a lost session)
                # while the state above was recovered closed the loaded topics only, not this one (Pulsar's
                # unloadServiceUnit closes the futures of the topics being loaded too).
                self.ownership.check_serving(name)
            except ServiceNotReadyError:
                await topic.close()
                raise
            self.topics[name.full] = topic
            self.topic_load_stats.loaded(load_started)
            self.housekeeping.start()
            self.cluster_removal.check(topic)  # (Pulsar checks it as a topic loads too: openLedgerComplete)
            return topic
        except BaseException:
            self.topic_load_stats.load_failed()
            raise

    def _non_persistent_topic(self, name: TopicName, create: bool, explicit: bool) -> NonPersistentTopic:
        """The live non-persistent topic, created on first use (nothing to load)."""
        topic = self.non_persistent_topics.get(name.full)
        if topic is not None:
            return topic
        self.check_namespace(name)
        self.ownership.check_serving(name)
        self._check_may_create(name, create, explicit)
        topic = self.non_persistent_topics[name.full] = NonPersistentTopic(self, name)
        self.housekeeping.start()  # (the inactive-topic check collects one no client attaches to)
        return topic

    def forget_non_persistent_topic(self, topic: NonPersistentTopic) -> None:
        """The topic has no producers and no consumers left (it keeps nothing)."""
        if self.non_persistent_topics.get(topic.full_name) is topic:
            del self.non_persistent_topics[topic.full_name]

    def partitions_now(self, name: TopicName, auto_create: bool = True) -> int | None:
        """``partitions_for``'s answer when it needs no waiting, else None: not when the namespace or the topic must
        be read from the metadata store first (cluster mode: one this broker knows neither as partitioned nor as
        stored) nor when a partitioned topic is to be created."""
        if name.partition_index >= 0:
            return 0
        if self.distributed and not (self.metadata.namespace_exists(name.namespace) and (
                self.metadata.partitions_of(name.full) > 0 or self.topic_exists(name))):
            return None
        return self._partitions_known(name, auto_create)

    async def partitions_for(self, name: TopicName, auto_create: bool = True) -> int:
        """Partition count for PARTITIONED_METADATA (0 = not partitioned)."""
        if name.partition_index >= 0:
            return 0
        await self.refresh_topic(name)
        n = self._partitions_known(name, auto_create)
        if n is not None:
            return n
        rule = self.policies.for_namespace(name.namespace, AUTO_TOPIC_CREATION)
        partitions = rule.default_partitions or self.config.defaultNumPartitions
        try:  # (an override stored before the max was lowered; Pulsar's BrokerService checks this too)
            check_partition_count(partitions, self.config.maxNumPartitionsPerPartitionedTopic)
        except PolicyError as exc:
            raise NotAllowedError(exc.reason) from None
        self.check_topics_limit(name, partitions)
        await self.metadata.set_partitions(name.full, partitions)
        return partitions

    def _partitions_known(self, name: TopicName, auto_create: bool) -> int | None:
        """The partition count of a topic (not a partition) as known now, its namespace known; None when the
        auto-creation rule makes it a new partitioned topic (which ``partitions_for`` creates)."""
        self.check_namespace(name)
        n = self.metadata.partitions_of(name.full)
        if n > 0:
            return n
        rule = self.policies.for_namespace(name.namespace, AUTO_TOPIC_CREATION)
        if auto_create and rule.allow and rule.partitioned and not self.topic_exists(name):
            return None
        return 0

    def check_topics_limit(self, name: TopicName, new_topics: int) -> None:
        """NotAllowedError when ``new_topics`` more persistent topics (a partitioned topic's
        partitions counted one by one, as soon as it is declared) would take the namespace past its
        maxTopicsPerNamespace, else the broker's; 0 = no limit. System topics neither count nor are
        refused; a partition already declared is already counted."""
        limit = self.policies.for_namespace(name.namespace, MAX_TOPICS_PER_NAMESPACE)
        if limit <= 0 or not name.persistent or is_system_topic(name.full):
            return
        existing = self.topics_of_namespace(name.namespace, MODE_PERSISTENT)
        if name.full not in existing and len(existing) + new_topics > limit:
            raise NotAllowedError("Exceed maximum number of topics in namespace.")

    def ledger_config_for(self, name: TopicName) -> ManagedLedgerConfig:
        """The managed-ledger settings with the topic's retention and persistence policies
        (applied when a topic loads, and to loaded topics by the retention housekeeping task)."""
        retention = self.policies.get(name, RETENTION)
        persistence = self.policies.get(name, PERSISTENCE)
        base = self.ledger_config
        rate = None if persistence is None else persistence.max_mark_delete_rate
        key = (retention.time_s, retention.size_bytes, rate, self.bookie_affinity_for(name),
               offload_policy_for(self, name))
        # (The configs are frozen and most topics share their values: one made per distinct set of values, not one
        # per topic load, which cost a dataclasses.replace, ~4.4 us in process, per new topic.)
        memo = self._ledger_configs
        if memo[0] is not base:
            memo = self._ledger_configs = (base, {})
        config = memo[1].get(key)
        if config is None:
            if len(memo[1]) >= LEDGER_CONFIGS_KEPT:
                memo[1].clear()
            config = memo[1][key] = dataclasses.replace(base, retention_time_s=key[0], retention_size_bytes=key[1],
                                                        mark_delete_rate=key[2], bookie_affinity=key[3],
                                                        offload=key[4])
        return config

    def bookie_affinity_for(self, name: TopicName) -> tuple[str, str] | None:
        """The bookie isolation groups (primary, secondary) of the topic's new ledgers, as Pulsar's
        BrokerService.getManagedLedgerConfig hands them to IsolatedBookieEnsemblePlacementPolicy: its namespace's
        bookie affinity group; without one, None (the BookKeeper client's isolation groups, if any), or with
        strictBookieAffinityEnabled the bookies of no group ("*", any bookie, for a system topic)."""
        group = self.metadata.bookie_affinity_group(name.namespace)
        if group is not None:
            return (group.get("bookkeeperAffinityGroupPrimary") or "", group.get("bookkeeperAffinityGroupSecondary")
                    or "")
        if self.config.strictBookieAffinityEnabled:
            return (ANY_GROUP, ANY_GROUP) if is_system_topic(name.full) else ("", "")
        return None

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
        retention = self.policies.get(topic.name, RETENTION)
        persistence = self.policies.get(topic.name, PERSISTENCE)
        rate = None if persistence is None else persistence.max_mark_delete_rate
        affinity = self.bookie_affinity_for(topic.name)
        offload = offload_policy_for(self, topic.name)
        config = topic.ledger.config
        # (Compared field by field: a new config object per topic per sweep cost more than the rest.)
        if (config.retention_time_s, config.retention_size_bytes, config.mark_delete_rate,
                config.bookie_affinity, config.offload) != (retention.time_s, retention.size_bytes, rate, affinity,
                                                            offload):
            topic.ledger.update_config(dataclasses.replace(
                config, retention_time_s=retention.time_s, retention_size_bytes=retention.size_bytes,
                mark_delete_rate=rate, bookie_affinity=affinity, offload=offload))
        topic.ledger.trim_consumed_ledgers()

    def topics_of_namespace(self, namespace: str, mode: int) -> list[str]:
        """Persistent (mode 0), non-persistent (1) or all (2) topics, including partitions.
        Non-persistent topics are the live ones, plus the partitions of partitioned ones."""
        names: set[str] = set()
        domains: set[str] = set()
        if mode in (MODE_PERSISTENT, MODE_ALL):
            domains.add("persistent")
            prefix = namespace + "/persistent/"
            for path in self.ledger_factory.list_names():  # (the local name decoded: a "/" in it is stored as %2F)
                if path.startswith(prefix) and (local := local_name_of_encoded(path[len(prefix):])) is not None:
                    names.add(f"persistent://{namespace}/{local}")
        if mode in (MODE_NON_PERSISTENT, MODE_ALL):
            domains.add("non-persistent")
            names.update(t.full_name for t in self.non_persistent_topics.values() if t.name.namespace == namespace)
        for base, n in self.metadata.partitioned_topics.items():
            t = TopicName.parse(base)
            if t.namespace == namespace and t.domain in domains:
                names.update(t.partition(i).full for i in range(n))
        return sorted(n for n in names if not is_system_topic(n))

    async def delete_topic(self, name: TopicName) -> None:
        await self._while_unloading(name, lambda: self._delete_now(name))

    async def delete_loaded_topic(self, topic: PersistentTopic, still: Callable[[], bool]) -> bool:
        """Delete ``topic`` and its data, as Pulsar's deleteForcefully: its producers and consumers are closed first
        (they look up again). Only that very topic object, still loaded and owned here, and only when ``still()``
        holds as the deletion begins (nothing is awaited between that check and the topic leaving the loaded set);
        False, and nothing done, otherwise."""
        name = topic.name
        deleted = False

        async def delete() -> None:
            nonlocal deleted
            if topic.closed or self.topics.get(name.full) is not topic \
                    or not self.ownership.is_owned(self.ownership.bundle_of(name)) or not still():
                return
            deleted = True
            admin_ops.disconnect_clients(topic)
            await self._delete_now(name)

        await self._while_unloading(name, delete)
        return deleted

    async def _delete_now(self, name: TopicName) -> None:
        """Delete a topic, loaded or not: close it, delete its managed ledger and its metadata (run as the only
        unload or delete of the name: ``_while_unloading``)."""
        topic: AnyTopic | None = self.topics.pop(name.full, None) or self.non_persistent_topics.pop(name.full, None)
        if topic is not None:
            await topic.close()
        if self.ledger_factory.exists(name.persistence_path):
            # (with the config it would open with: its offloader deletes the offloaded copies)
            await self.ledger_factory.delete(name.persistence_path, self.ledger_config_for(name))
        self.expiry_stats.forget(name.full)
        # (A partition has no policies of its own: its partitioned topic's stay.)
        compaction = await self.metadata.forget_topic(name.full)
        if not name.persistent:
            return  # (no compacted view: those ledgers' names leave the domain out, they are the persistent topic's)
        # (Pulsar's PersistentTopic.delete: BrokerService.deleteTopicAuthenticationWithRetry)
        await self.metadata.remove_topic_permissions(name.namespace, [name.full])
        for view in compacted_ledger_names(name, compaction):  # (with what failed runs left)
            if self.ledger_factory.exists(view):
                await self.ledger_factory.delete(view)

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

    def ledger_fenced(self, topic: PersistentTopic) -> None:
        """A write failed because the topic's managed ledger is fenced (another broker took it over, or a storage
        failure stopped it): that instance cannot be used again. Unload the topic, as Pulsar's
        PersistentTopic.addFailed closes it on ManagedLedgerFencedException: its clients are disconnected, and the
        next use loads it afresh from the metadata. (Kept loaded, its producers would resend into the fenced ledger
        for ever.)"""
        if self.closed or topic.closed or self.topics.get(topic.name.full) is not topic or topic.fenced_unload:
            return
        topic.fenced_unload = True

        async def unload() -> None:
            await self.unload_topic(topic.name)

        self._fenced_unloads.spawn(unload(), name=f"unload fenced {topic.name.full}")

    @property
    def pending_topic_loads(self) -> int:
        """Persistent topics being loaded now (Pulsar's pulsar_broker_topic_load_pending_requests)."""
        return len(self._loading)

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

    async def open(self) -> None:
        """Open the metadata store (``metadataStoreUrl``) and load what the broker keeps of it;
        a data dir's old ``metadata.json`` is imported into it once."""
        cfg = self.config
        try:
            self.metadata_store = await open_broker_metadata_store(
                cfg.metadataStoreUrl, self.data_dir, session_timeout_s=cfg.metadataStoreSessionTimeoutMillis / 1000,
                operation_timeout_s=cfg.metadataStoreOperationTimeoutSeconds)
        except MetadataStoreError as exc:  # (a bad URL, an unreachable ZooKeeper, a locked directory)
            raise ConfigError(f"metadataStoreUrl={cfg.metadataStoreUrl!r}: {exc}") from None
        legacy = self.data_dir / LEGACY_FILE_NAME if self.data_dir is not None else None
        try:
            await self.metadata.start(self.metadata_store, legacy)
            self.dynamic_config.start()
            if self.transactions is not None:
                await self.transactions.create_assign_topic()
            await self._start_storage()
        except BaseException:
            await self.metadata.close()
            await self.metadata_store.close()
            self.metadata_store = None
            raise

    async def _start_storage(self) -> None:
        """The managed-ledger storage started before anything is served, as Pulsar's PulsarService.start makes its
        ManagedLedgerStorage (newManagedLedgerStorage) before it starts the BrokerService and the WebService: on
        BookKeeper the factory connects and learns the stored names (its first scan of the store), so a topic list,
        a lookup or an existence check asked at once answers for every stored topic, never "none" because the scan
        was still under way. (File and memory storage: nothing to wait for.) A storage that cannot start stops
        the broker's start, as Pulsar's does."""
        try:
            factory = self.ledger_factory
            if isinstance(factory, BookKeeperManagedLedgerFactory) and self.metadata_store is not None:
                # The bookies' racks and isolation groups, from the broker's metadata store, as Pulsar's
                # BookieRackAffinityMapping and IsolatedBookieEnsemblePlacementPolicy read them (their
                # METADATA_STORE_INSTANCE is the broker's local metadata store). (Followed whatever the rack-aware
                # setting: a namespace's bookie affinity group needs the groups.)
                await factory.bk.racks.follow(self.metadata_store)
            await factory.start()
        except Exception as exc:
            raise ConfigError(f"managedLedgerStorage={self.config.managedLedgerStorage}: the storage did not "
                              f"start: {exc!r}") from exc

    def start(self) -> None:
        """Background work once the broker serves: replication picks up where it stopped."""
        self._resuming = asyncio.get_running_loop().create_task(self._resume_replication())

    async def _resume_replication(self) -> None:
        """Load the stored topics that are replicated (their namespace's or own replication
        clusters name another cluster), so that what their replicators had not sent before a
        restart goes out now rather than when a client next uses the topic. Pulsar loads the
        topics of a bundle when it comes to own it (cluster mode: ``bundle_acquired``); one broker owns them all.
        (The storage started in ``open``.)"""
        if self.transactions is not None:
            try:
                await self.transactions.load_stored()
            except Exception:  # (each loads again on its first request)
                log.exception("transaction coordinators not loaded at start")
        if not self.ownership.distributed:
            await self._load_replicated(lambda name: True)

    def bundle_acquired(self, bundle: NamespaceBundle) -> None:
        """Cluster mode: this broker now owns ``bundle``; its replicated topics load, so their replicators resume, and
        so do the transaction coordinators whose assignment partition it holds."""
        if not self.closed and self.transactions is not None:
            for tc_id in self.transactions.bundle_acquired(bundle):
                self._bundle_loads.spawn(self.transactions.load_quietly(tc_id), name=f"transaction coordinator {tc_id}")
        if not self.closed:
            self._bundle_loads.spawn(self._load_replicated(
                lambda name: name.namespace == bundle.namespace and bundle.includes(name.full)),
                name=f"replicated topics of {bundle}")

    async def _load_replicated(self, covers: Callable[[TopicName], bool]) -> None:
        loaded = 0
        for path in self.ledger_factory.list_names():
            if self.closed:
                return
            name = TopicName.from_persistence_path(path)
            if name is None or not name.persistent or is_system_topic(path):
                continue  # (the health check's log, compacted views...)
            if name.full in self.topics or not covers(name) or not self.replication_targets(name):
                continue
            try:
                await self.get_topic(name, create=False)
                loaded += 1
            except Exception as exc:  # (a topic that cannot be loaded now loads on its next use)
                log.warning("replicated topic %s not loaded: %s", name, exc)
        if loaded:
            log.info("loaded %d replicated topics: their replicators resume", loaded)

    @property
    def disk_space(self) -> StorageGuard | None:
        """Whether storage takes new entries: the file ledger's free-space floor, or on BookKeeper whether enough
        bookies are writable (None for memory storage, or without a data dir)."""
        factory = self.ledger_factory
        if isinstance(factory, FileManagedLedgerFactory):
            return factory.disk
        if isinstance(factory, BookKeeperManagedLedgerFactory):
            return factory.availability
        return None

    async def health_check(self) -> None:
        """Pulsar's broker health check: a message sent to the broker's heartbeat topic through its own port and
        read back (broker.service.health). Raises on a failure, TimeoutError after ``health_check_timeout_s``.
        While storage refuses new entries (the free-space floor, too few writable bookies) it fails at once with
        the reason."""
        disk = self.disk_space
        if disk is not None and not disk.writable():
            raise PersistenceError(f"storage refuses new entries: {disk.reason}")
        checker = self.health_checker
        if checker is None:
            raise ServiceNotReadyError("The broker is starting")
        checker.timeout_s = self.health_check_timeout_s
        await checker.check()

    async def check_health_for_metrics(self) -> None:
        """Pulsar's HealthChecker: the health check every healthCheckMetricsUpdateTimeInSeconds, its outcome kept
        for pulsar_health (the admin API's check does not change it, as in Pulsar)."""
        try:
            await self.health_check()
        except Exception as exc:  # (the reason is logged; the metric says only that it failed)
            log.warning("periodic health check failed: %s", exc)
            self.health_check_status = 0
        else:
            self.health_check_status = 1

    async def close(self) -> None:
        # Cluster mode: release the bundles first (their topics close, their clients look up another broker).
        if self.load_manager is not None:
            await self.load_manager.close()
        await self.ownership.close()
        if self.registry is not None:
            await self.registry.close()
        self.closed = True
        await self._loading.close()
        await self._bundle_loads.close()
        await self._dropped.wait()
        await self._unloads.wait()
        if self._resuming is not None:
            self._resuming.cancel()
            await asyncio.gather(self._resuming, return_exceptions=True)
        await self._fenced_unloads.close()
        await self.cluster_removal.close()
        await self.housekeeping.stop()
        if self.transactions is not None:
            await self.transactions.close()
        waits: list[Awaitable[None]] = [t.close() for t in self.all_topics()]
        await asyncio.gather(*waits, return_exceptions=True)
        if self.broker_publish_throttle is not None:
            self.broker_publish_throttle.release()
        self.topics.clear()
        self.non_persistent_topics.clear()
        await self.ledger_factory.close()
        await self.metadata.close()
        if self.metadata_store is not None:
            await self.metadata_store.close()
            self.metadata_store = None
