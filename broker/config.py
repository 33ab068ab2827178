"""Broker configuration: Apache Pulsar's key names (conf/standalone.conf) plus CLI overrides.

Each setting is a dataclass field whose name is the Pulsar key, so a Pulsar engineer can grep for
it. Values from the file are converted to the field's type; unknown keys are reported once at start.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

DEFAULT_CONFIG_PATH = Path(__file__).resolve().parent.parent / "conf" / "standalone.conf"


class ConfigError(ValueError):
    """A setting that cannot be honoured (bad value, unreadable file): the broker does not start."""


@dataclass
class BrokerConfig:
    # -- network ------------------------------------------------------------------------------------
    bindAddress: str = "0.0.0.0"
    # An empty port (None) disables that listener, as in Pulsar: e.g. brokerServicePort= with
    # brokerServicePortTls=6651 serves TLS only.
    brokerServicePort: int | None = 6650
    webServicePort: int | None = 8080
    # Host put in lookup answers. Empty: the address the client connected to (right for one broker).
    advertisedAddress: str = ""
    # Named listeners (broker.listeners): name:pulsar://host:port / name:pulsar+ssl://host:port,
    # comma-separated; lookups naming one get its URLs, others the internal listener's (empty = the
    # first). bindAddresses opens more sockets for listeners, in the same format.
    advertisedListeners: str = ""
    internalListenerName: str = ""
    bindAddresses: str = ""
    clusterName: str = "standalone"
    # -- protocol limits ----------------------------------------------------------------------------
    maxMessageSize: int = 5 * 1024 * 1024
    keepAliveIntervalSeconds: int = 30
    maxPendingPublishRequestsPerConnection: int = 1000
    # Bytes of in-flight publishes, broker-wide, before publishing connections stop being read.
    maxMessagePublishBufferSizeInMB: int = 128
    # -- limits (0 = unlimited, as in Pulsar) -------------------------------------------------------
    # Publish rate per topic (a namespace's publishRate and a topic's override it): past it, the
    # producers' connections are not read until the rate is back under (broker.service.rate_limits).
    maxPublishRatePerTopicInMessages: int = 0
    maxPublishRatePerTopicInBytes: int = 0
    # Dispatch rate per topic (all its subscriptions together) and per subscription, per second (a
    # namespace's or topic's dispatchRate / subscriptionDispatchRate override them).
    dispatchThrottlingRatePerTopicInMsg: int = 0
    dispatchThrottlingRatePerTopicInByte: int = 0
    dispatchThrottlingRatePerSubscriptionInMsg: int = 0
    dispatchThrottlingRatePerSubscriptionInByte: int = 0
    # ... and per replicator (each remote cluster of a topic; a namespace's or topic's
    # replicatorDispatchRate overrides them).
    dispatchThrottlingRatePerReplicatorInMsg: int = 0
    dispatchThrottlingRatePerReplicatorInByte: int = 0
    brokerMaxConnections: int = 0
    brokerMaxConnectionsPerIp: int = 0
    maxProducersPerTopic: int = 0
    maxConsumersPerTopic: int = 0
    maxConsumersPerSubscription: int = 0
    maxSubscriptionsPerTopic: int = 0
    # Persistent topics per namespace, partitions counted one by one (a namespace's
    # maxTopicsPerNamespace overrides it; system topics are not counted).
    maxTopicsPerNamespace: int = 0
    # -- topics and subscriptions -------------------------------------------------------------------
    allowAutoTopicCreation: bool = True
    allowAutoTopicCreationType: str = "non-partitioned"
    defaultNumPartitions: int = 1
    allowAutoSubscriptionCreation: bool = True
    brokerDeduplicationEnabled: bool = False
    # Entries between two snapshots of the deduplication state (Pulsar's default), and the time
    # after which a snapshot is taken anyway if entries came since the last one (a namespace's or
    # topic's deduplicationSnapshotInterval overrides it; 0 = by entries only), checked every
    # brokerDeduplicationSnapshotFrequencyInSeconds (0 = never).
    brokerDeduplicationEntriesInterval: int = 1000
    brokerDeduplicationSnapshotIntervalSeconds: int = 120
    brokerDeduplicationSnapshotFrequencyInSeconds: int = 120
    # Delayed delivery (deliver_at / deliver_after) for Shared and Key_Shared subscriptions; off:
    # such messages go out at once. A message delayed by more than the max (0 = no max) is refused.
    # (The tick time is accepted for Pulsar's configs; delays here are exact.) Namespace and topic
    # delayedDelivery policies override these.
    delayedDeliveryEnabled: bool = True
    delayedDeliveryTickTimeMillis: int = 1000
    delayedDeliveryMaxDelayInMillis: int = 0
    # Schemas: a producer without a schema is refused on a topic that has one; producers may add
    # new schema versions (else only the admin API can). Namespace policies override both.
    isSchemaValidationEnforced: bool = False
    isAllowAutoUpdateSchema: bool = True
    # Compaction: keep key-less messages in the compacted view (Pulsar's default since PIP-318: no).
    topicCompactionRetainNullKey: bool = False
    # Compact a topic automatically once this many bytes were added since its last compaction
    # (0 = never; per-namespace policy compaction_threshold overrides).
    brokerServiceCompactionThresholdInBytes: int = 0
    brokerServiceCompactionMonitorIntervalInSeconds: float = 60
    # -- namespace policy defaults (a namespace policy overrides each) ----------------------------
    # Message TTL in seconds for namespaces without message_ttl_in_seconds; 0 = messages never expire.
    ttlDurationDefaultInSeconds: int = 0
    # How often subscriptions are checked for expired messages (Pulsar's default 5; fractions allowed).
    messageExpiryCheckIntervalInMinutes: float = 5
    # How often retention is applied to loaded topics (policy changes, time-based expiry).
    retentionCheckIntervalInSeconds: float = 120
    # Retention of acknowledged data for namespaces without retention_policies (0 = delete at once,
    # -1 = keep forever). Applied to a topic when it is loaded.
    defaultRetentionTimeInMinutes: int = 0
    defaultRetentionSizeInMB: int = 0
    # Backlog quotas: checked every backlogQuotaCheckIntervalInSeconds and when a producer is created.
    backlogQuotaCheckEnabled: bool = True
    backlogQuotaCheckIntervalInSeconds: float = 60
    # Default destination_storage limit in bytes, and message_age limit in seconds (-1 = no limit).
    backlogQuotaDefaultLimitBytes: int = -1
    backlogQuotaDefaultLimitSecond: int = -1
    # producer_request_hold, producer_exception or consumer_backlog_eviction.
    backlogQuotaDefaultRetentionPolicy: str = "producer_request_hold"
    # Subscriptions without consumers and without reads or acks for this long are deleted
    # (0 = never; Pulsar's keys and defaults, fractions allowed here; a namespace's
    # subscription_expiration_time_minutes overrides it). Checked every ...CheckIntervalInMinutes.
    subscriptionExpirationTimeMinutes: float = 0
    subscriptionExpiryCheckIntervalInMinutes: float = 5
    # Topic-level policies (REST .../{topic}/retention, messageTTL, ...; Pulsar's default since 2.11).
    # Off: they answer 405 and stored ones are ignored.
    topicLevelPoliciesEnabled: bool = True
    # Inactive topics (Pulsar's keys and defaults): every FrequencySeconds, a loaded topic inactive
    # for MaxInactiveDurationSeconds (empty: the frequency) is deleted with its data. Mode
    # delete_when_no_subscriptions: inactive = no producers and no subscriptions;
    # delete_when_subscriptions_caught_up: no producers and no subscription with a backlog.
    # A namespace's inactive_topic_policies overrides the last three; the check itself only runs
    # when enabled here at start.
    brokerDeleteInactiveTopicsEnabled: bool = True
    brokerDeleteInactiveTopicsFrequencySeconds: float = 60
    brokerDeleteInactiveTopicsMode: str = "delete_when_no_subscriptions"
    brokerDeleteInactiveTopicsMaxInactiveDurationSeconds: int | None = None
    # Also delete a partitioned topic's metadata once its last partition was deleted as inactive.
    brokerDeleteInactivePartitionedTopicMetadataEnabled: bool = False
    dispatcherMaxReadBatchSize: int = 100
    maxUnackedMessagesPerConsumer: int = 50000
    # A Shared / Key_Shared subscription whose consumers hold this many unacknowledged messages
    # gets no new entries (redeliveries still go out) until acks bring it below half; 0 = no limit.
    maxUnackedMessagesPerSubscription: int = 200000
    # The subscription types consumers may use (namespace and topic policies override it), and
    # whether Key_Shared is possible at all.
    subscriptionTypesEnabled: list[str] = field(
        default_factory=lambda: ["Exclusive", "Shared", "Failover", "Key_Shared"])
    subscriptionKeySharedEnable: bool = True
    # Subscribes one consumer (client address, consumer name, consumer id) may make per period on
    # a persistent topic; 0 = no limit (namespace / topic subscribeRate override it).
    subscribeThrottlingRatePerConsumer: int = 0
    subscribeRatePeriodPerConsumerInSecond: int = 30
    # Replicated subscriptions (consumers' replicate_subscription_state): snapshot markers between
    # the clusters every so often, given up after the timeout; snapshots kept per subscription.
    enableReplicatedSubscriptions: bool = True
    replicatedSubscriptionsSnapshotFrequencyMillis: int = 1000
    replicatedSubscriptionsSnapshotTimeoutSeconds: int = 30
    replicatedSubscriptionsSnapshotMaxCachedPerSubscription: int = 10
    # -- geo-replication: how replicators reach other clusters (their cluster data overrides) ---------
    brokerClientTlsEnabled: bool = False
    brokerClientTrustCertsFilePath: str = ""
    brokerClientCertificateFilePath: str = ""
    brokerClientKeyFilePath: str = ""
    # token, basic, tls or Pulsar's client class names (org.apache.pulsar.client.impl.auth.AuthenticationToken)
    brokerClientAuthenticationPlugin: str = ""
    brokerClientAuthenticationParameters: str = field(default="", repr=False)
    subscriptionRedeliveryTrackerEnabled: bool = True
    # -- storage ------------------------------------------------------------------------------------
    dataDir: str = "data"
    # "file": topics are segment files under <dataDir>/ledgers (survive restarts and crashes);
    # "memory": topics live in RAM and are lost on restart.
    managedLedgerStorage: str = "file"
    # Ledger rollover (Pulsar's keys and defaults): a ledger is closed and a new one started when
    # it has this many entries, this much data or this age - but never before the minimum age.
    managedLedgerMaxEntriesPerLedger: int = 50000
    managedLedgerMaxSizePerLedgerMbytes: int = 2048
    managedLedgerMaxLedgerRolloverTimeMinutes: float = 240
    managedLedgerMinLedgerRolloverTimeMinutes: float = 10
    # Ours: fsync (fdatasync) appended entries before the producer's receipt goes out. false is
    # faster but a power cut or kernel crash can lose receipted messages of the last seconds
    # (a broker crash cannot: the data is in the OS page cache by then).
    managedLedgerSyncData: bool = True
    # Group commit of heavy streams (BookKeeper's journal keys; its defaults are 2 ms and 512 KiB):
    # while the previous sync carried at least an eighth of the threshold, the next one waits up to
    # this long (0 = never) for this many bytes, so fewer fdatasyncs carry the same data. Light
    # traffic never waits.
    journalMaxGroupWaitMSec: float = 1.0
    journalBufferedWritesThreshold: int = 512 * 1024
    # Durable cursor (subscription) positions are written at most this often per second; acks
    # since the last write are redelivered after a crash (Pulsar's key and default).
    managedLedgerDefaultMarkDeleteRateLimit: float = 1.0
    managedLedgerCacheSizeMB: int = 256
    # A subscription more than this many entries behind (unread) counts as backlogged: its cursor
    # is inactive, so the read cache does not keep entries for it and it reads from disk (Pulsar's
    # key and default; checked when a consumer joins or leaves and every statsUpdateFrequencyInSecs).
    # 0 = never backlogged.
    managedLedgerCursorBackloggedThreshold: int = 1000
    # How many cached reads may complete inline, nested, before the stack is unwound.
    managedLedgerReadNestingLimit: int = 10
    # -- stats --------------------------------------------------------------------------------------
    # Rates (msgRateIn, pulsar_rate_in, ...) are computed over this interval from counter snapshots.
    statsUpdateFrequencyInSecs: float = 60
    # Per-topic and per-subscription series in /metrics (else aggregated per namespace, as Pulsar).
    exposeTopicLevelMetricsInPrometheus: bool = True
    # Per-consumer and per-producer series in /metrics (Pulsar's defaults: off).
    exposeConsumerLevelMetricsInPrometheus: bool = False
    exposeProducerLevelMetricsInPrometheus: bool = False
    # -- TLS (Pulsar's keys; see broker.auth.tls) ---------------------------------------------------
    # TLS listeners: binary pulsar+ssl:// and HTTPS. Empty = off; 0 picks a free port.
    brokerServicePortTls: int | None = None
    webServicePortTls: int | None = None
    # Deprecated in Pulsar (the TLS ports are what enable TLS): accepted, warned about if set alone.
    tlsEnabled: bool = False
    tlsCertificateFilePath: str = ""
    tlsKeyFilePath: str = ""
    # CA certificates client certificates must chain to (also enables asking for one).
    tlsTrustCertsFilePath: str = ""
    # Accept clients whose certificate cannot be verified; such a certificate then authenticates nothing.
    tlsAllowInsecureConnection: bool = False
    # true: the TLS handshake fails without a trusted client certificate; false: ask, do not require.
    tlsRequireTrustedClientCertOnConnect: bool = False
    # e.g. TLSv1.3,TLSv1.2 (empty = the TLS library's defaults); ciphers by IANA or OpenSSL name.
    tlsProtocols: list[str] = field(default_factory=list)
    tlsCiphers: list[str] = field(default_factory=list)
    # -- authentication (broker.auth) --------------------------------------------------------------
    authenticationEnabled: bool = False
    # tls, token, basic, or Pulsar's class names
    # (org.apache.pulsar.broker.authentication.AuthenticationProviderTls, ...Token, ...Basic).
    authenticationProviders: list[str] = field(default_factory=list)
    # Role given to clients that present no credentials or an unknown method (empty = refuse them).
    anonymousUserRole: str = ""
    # How often live connections are checked for expired credentials (then AUTH_CHALLENGE).
    authenticationRefreshCheckSeconds: float = 60
    # Require credentials for /metrics too (Pulsar's default: metrics are open).
    authenticateMetricsEndpoint: bool = False
    # Token provider: HMAC secret (HS256) or public key (RS256/ES256...), each a data:, file:,
    # path or base64 value. Secrets never appear in logs or reprs.
    tokenSecretKey: str = field(default="", repr=False)
    tokenPublicKey: str = ""
    tokenPublicAlg: str = "RS256"
    # Claim holding the role (empty = "sub"); audience claim and this broker's audience.
    tokenAuthClaim: str = ""
    tokenAudienceClaim: str = ""
    tokenAudience: str = ""
    tokenAllowedClockSkewSeconds: int = 0
    # OpenID Connect provider (broker.auth.openid; Pulsar's names and defaults): token issuers and
    # audiences (both required), the role claim, clock leeway, key cache refresh, HTTP timeouts,
    # https-only issuers, and a CA file for the issuers' TLS (empty = the system's).
    openIDAllowedTokenIssuers: list[str] = field(default_factory=list)
    openIDAllowedAudiences: list[str] = field(default_factory=list)
    openIDRoleClaim: str = "sub"
    openIDAcceptedTimeLeewaySeconds: int = 0
    openIDCacheRefreshAfterWriteSeconds: int = 64800
    openIDKeyIdCacheMissRefreshSeconds: int = 300
    openIDHttpConnectionTimeoutMillis: int = 10000
    openIDHttpReadTimeoutMillis: int = 10000
    openIDRequireIssuersUseHttps: bool = True
    openIDTokenIssuerTrustCertsFilePath: str = ""
    openIDFallbackDiscoveryMode: str = "DISABLED"
    # Basic provider: the htpasswd file (path, file:, data: or base64 content).
    basicAuthConf: str = field(default="", repr=False)
    # -- authorization -----------------------------------------------------------------------------
    authorizationEnabled: bool = False
    superUserRoles: list[str] = field(default_factory=list)
    # Roles of proxies (Apache Pulsar's proxy) that connect on behalf of clients: they must name the
    # client's role (original principal), and both must be authorized. With
    # authenticateOriginalAuthData the client's own credentials, relayed by the proxy, are checked too.
    proxyRoles: list[str] = field(default_factory=list)
    authenticateOriginalAuthData: bool = False
    # Grants to "prefix*" or "*suffix" roles match by prefix / suffix.
    authorizationAllowWildcardsMatching: bool = False
    # Keys from the file that we do not know (reported once at start).
    unknown_keys: list[str] = field(default_factory=list, repr=False)

    @classmethod
    def load(cls, path: str | Path | None = None, **overrides: Any) -> BrokerConfig:
        cfg = cls()
        if path is not None:
            cfg.apply_file(Path(path))
        for key, value in overrides.items():
            if value is not None:
                cfg.set(key, value)
        return cfg

    def apply_file(self, path: Path) -> None:
        for lineno, raw in enumerate(path.read_text().splitlines(), 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            key, sep, value = line.partition("=")
            if not sep:
                raise ValueError(f"{path}:{lineno}: expected key=value, got {raw!r}")
            key, value = key.strip(), value.strip()
            if key in _FIELDS:
                self.set(key, value)
            else:
                self.unknown_keys.append(key)

    def set(self, key: str, value: Any) -> None:
        f = _FIELDS.get(key)
        if f is None:
            raise KeyError(f"unknown configuration key {key!r}")
        setattr(self, key, _convert(key, f.type, value))

    def report_unknown(self) -> None:
        if self.unknown_keys:
            log.warning("configuration keys not supported (ignored): %s", ", ".join(sorted(self.unknown_keys)))


_FIELDS = {f.name: f for f in dataclasses.fields(BrokerConfig) if f.name != "unknown_keys"}


def _convert(key: str, type_name: Any, value: Any) -> Any:
    if isinstance(value, tuple):
        return list(value)
    if not isinstance(value, str):
        return value
    t = str(type_name)
    try:
        if t == "list[str]":
            return [item.strip() for item in value.split(",") if item.strip()]
        if t == "int | None":
            return int(value) if value.strip() else None
        if t == "int":
            return int(value)
        if t == "float":
            return float(value)
        if t == "bool":
            lowered = value.lower()
            if lowered not in ("true", "false"):
                raise ValueError(value)
            return lowered == "true"
    except ValueError:
        raise ValueError(f"configuration key {key}: cannot read {value!r} as {t}") from None
    return value
