"""Dynamic configuration (``pulsar-admin brokers update-dynamic-config``): settings changed while the brokers run.

As Apache Pulsar keeps them (DynamicConfigurationResources): one node of the metadata store, ``/admin/configuration``,
a JSON map setting -> its value as text, which every broker of the cluster applies over its configuration file, at
start and whenever the map changes (the metadata cache's notifications); a setting taken out of the map goes back to
the value the broker started with. The admin calls (``broker.admin.http``) write the map; this module applies it.

Dynamic here are the settings that take effect while the broker runs (``DYNAMIC``), in one of four ways:

- read where they are used (whether Key_Shared is allowed, a partitioned topic's most partitions, the bundle split
  thresholds and algorithms, load shedding on or off, the unload timeout, whether failure domains count in
  placement, the broker client's credentials and TLS: for each connection, challenge answer and admin call);
- the broker's level of a policy (rates, auto-creation, subscription types, the inactive-topic mode, the dispatcher
  pause on ack state...): a change moves the metadata generation, and every topic resolves its policies again, as
  after a namespace policy change;
- read again where they were kept: the super users (``AuthorizationService``), the load-shedding thresholds (at
  each shedding round);
- told to what keeps them (``on_change``): the placement's resource weights, overloaded threshold and smoothing
  (``LoadManager.placement_settings_changed``), the bundles of a namespace created without a count, the broker-wide
  publish buffer (publishers it holds read again when a raised limit lets them), the read cache's size, whether
  the inactive-topic check runs and how often (``Housekeeping``), the broker-wide dispatch and publish limits (made
  when first set: an unlimited broker has none, and given to every subscription or producer; then following the
  configuration), the dispatchers' read sizes and how their rate limits count (given to every running
  dispatcher); or read again for each wait: the
  shedding interval.

Any other setting is refused (412), as Pulsar refuses one that is not dynamic. Pulsar's list is longer: most of the
rest are settings this broker does not have; a few it has but reads once at start, so they are not offered as
dynamic (``docs/configuration.md`` names them). A value the setting does not accept is refused when it is set
(Pulsar stores it and logs its failure to apply it); one stored by another writer is ignored with a warning.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Iterable
from typing import Any

from broker.cluster.data import PLACEMENT_SETTINGS
from broker.config import BrokerConfig, ConfigError, converted
from broker.metadata.store import BrokerMetadata
from broker.service.dispatch_context import CONFIGURED_FIELDS
from broker.service.peer_link import RemoteError
from broker.service.remote_producer import plugin_kind

log = logging.getLogger(__name__)

# Read where they are used.
_READ_IN_PLACE = (
    "brokerDeleteInactivePartitionedTopicMetadataEnabled", "subscriptionKeySharedEnable",
    "maxNumPartitionsPerPartitionedTopic", "namespaceBundleUnloadingTimeoutMs",
    "loadBalancerSheddingEnabled", "loadBalancerSheddingGracePeriodMinutes",
    "loadBalancerAutoBundleSplitEnabled", "loadBalancerAutoUnloadSplitBundlesEnabled",
    "loadBalancerNamespaceBundleMaxTopics", "loadBalancerNamespaceBundleMaxSessions",
    "loadBalancerNamespaceBundleMaxMsgRate", "loadBalancerNamespaceBundleMaxBandwidthMbytes",
    "loadBalancerNamespaceMaximumBundles", "flowOrQpsDifferenceThresholdPercentage",
    "supportedNamespaceBundleSplitAlgorithms", "defaultNamespaceBundleSplitAlgorithm", "failureDomainsEnabled",
    # (the broker client's: read for each connection, challenge answer and admin call, ``peer_link.Credentials``)
    "brokerClientAuthenticationPlugin", "brokerClientAuthenticationParameters", "brokerClientTlsEnabled",
)
# The broker's level of a policy (``broker.metadata.policy_table``): resolved again once the generation moves.
_POLICY_DEFAULTS = (
    "brokerDeleteInactiveTopicsMode", "brokerDeleteInactiveTopicsMaxInactiveDurationSeconds",
    "subscriptionTypesEnabled", "maxTopicsPerNamespace", "isAllowAutoUpdateSchemaEnabled",
    "maxPublishRatePerTopicInMessages", "maxPublishRatePerTopicInBytes",
    "subscribeThrottlingRatePerConsumer", "subscribeRatePeriodPerConsumerInSecond",
    "dispatchThrottlingRatePerTopicInMsg", "dispatchThrottlingRatePerTopicInByte",
    "dispatchThrottlingRatePerSubscriptionInMsg", "dispatchThrottlingRatePerSubscriptionInByte",
    "dispatchThrottlingRatePerReplicatorInMsg", "dispatchThrottlingRatePerReplicatorInByte",
    "allowAutoTopicCreation", "allowAutoTopicCreationType", "allowAutoSubscriptionCreation", "defaultNumPartitions",
    "dispatcherPauseOnAckStatePersistentEnabled",
)
# Read again where they were kept.
_READ_AGAIN = (
    "superUserRoles",
    "loadBalancerBrokerThresholdShedderPercentage", "loadBalancerBundleUnloadMinThroughputThreshold",
    "loadBalancerMsgRateDifferenceShedderThreshold", "loadBalancerMsgThroughputMultiplierDifferenceShedderThreshold",
    "maxUnloadPercentage", "minUnloadMessage", "minUnloadMessageThroughput", "maxUnloadBundleNumPerShedding",
    "loadBalancerAvgShedderLowThreshold", "loadBalancerAvgShedderHighThreshold",
    "loadBalancerAvgShedderHitCountLowThreshold", "loadBalancerAvgShedderHitCountHighThreshold",
)
# Told to what keeps them (a hook given to ``on_change``).
_HOOKED = ("defaultNumberOfNamespaceBundles", "maxMessagePublishBufferSizeInMB", "managedLedgerCacheSizeMB",
           "brokerDeleteInactiveTopicsEnabled", "brokerDeleteInactiveTopicsFrequencySeconds",
           "loadBalancerSheddingIntervalMinutes", "dispatchThrottlingRateInMsg", "dispatchThrottlingRateInByte",
           "brokerPublisherThrottlingMaxMessageRate", "brokerPublisherThrottlingMaxByteRate")
# (also hooked: PLACEMENT_SETTINGS, given to the load manager's ``placement_settings_changed``)
# What every dispatcher keeps in its context (given to the running ones when it changes).
DISPATCHER_SETTINGS = tuple(CONFIGURED_FIELDS.values())
DYNAMIC: frozenset[str] = frozenset(_READ_IN_PLACE + _POLICY_DEFAULTS + _READ_AGAIN + _HOOKED + PLACEMENT_SETTINGS
                                     + DISPATCHER_SETTINGS)


def _check_plugin(plugin: str) -> None:
    try:
        plugin_kind(plugin)
    except RemoteError as exc:
        raise ConfigError(f"brokerClientAuthenticationPlugin: {exc}") from None


# What a value must be beyond its type and range (the configuration's rules). The authentication parameters are not
# checked here: they go with the plugin, and changing both takes two calls; parameters the plugin cannot use fail each
# connection or call with the reason (as at start, where the pair is checked).
_CHECKS: dict[str, Callable[[Any], None]] = {"brokerClientAuthenticationPlugin": _check_plugin}


def _converted(key: str, raw: str) -> Any:
    value = converted(key, raw)
    check = _CHECKS.get(key)
    if check is not None:
        check(value)
    return value


class NotDynamicError(Exception):
    """A setting that cannot change while the broker runs (or that this broker does not have)."""


class DynamicConfiguration:
    """Applies the stored dynamic settings to ``config`` (the broker's one configuration object)."""

    def __init__(self, config: BrokerConfig, metadata: BrokerMetadata) -> None:
        self.config = config
        self.metadata = metadata
        # What each dynamic setting was at start: a setting taken out of the map goes back to it.
        self._started_with = {key: copy.copy(getattr(config, key)) for key in DYNAMIC}
        self._applied: dict[str, Any] = {}  # setting -> the stored value in force
        self._ignored: dict[str, Any] = {}  # setting -> a stored value not applied (warned once)
        self._hooks: list[tuple[frozenset[str], Callable[[], None]]] = []

    def start(self) -> None:
        """Apply what is stored, then after every change of the metadata: first of the listeners, so that those
        after it (and everything that re-reads its policies because the generation moved) see the new values."""
        self.metadata.listeners.insert(0, self.apply)
        self.apply()

    def on_change(self, keys: Iterable[str], hook: Callable[[], None]) -> None:
        """Call ``hook`` (once per change, whichever of ``keys`` changed) after any of ``keys`` took a new value."""
        self._hooks.append((frozenset(keys), hook))

    @staticmethod
    def check(key: str, value: str) -> None:
        """NotDynamicError, or ConfigError (what the setting accepts), unless ``key`` may be set to ``value``."""
        if key not in DYNAMIC:
            raise NotDynamicError(key)
        _converted(key, value)

    def apply(self) -> None:
        stored = self.metadata.dynamic_configuration
        changed = []
        for key in DYNAMIC:
            raw = stored.get(key)
            if raw is None:
                self._ignored.pop(key, None)
            if raw == self._applied.get(key) or (raw is not None and raw == self._ignored.get(key)):
                continue
            if raw is None:
                value = self._started_with[key]
                self._applied.pop(key, None)
            else:
                try:
                    value = _converted(key, raw)
                except ConfigError as exc:
                    log.warning("dynamic configuration: %s not applied (%s); %r stays in force",
                                key, exc, getattr(self.config, key))
                    self._ignored[key] = raw
                    continue
                self._applied[key] = raw
            self._ignored.pop(key, None)
            if value != getattr(self.config, key):
                setattr(self.config, key, copy.copy(value))
                changed.append(key)
        for key in sorted(set(stored) - DYNAMIC - set(self._ignored)):
            log.warning("dynamic configuration: %s is not a dynamic setting here; ignored", key)
            self._ignored[key] = stored[key]
        if changed:
            log.info("dynamic configuration applied: %s",
                     ", ".join(f"{k}={getattr(self.config, k)!r}" for k in sorted(changed)))
            for keys, hook in self._hooks:
                if keys.intersection(changed):
                    try:
                        hook()
                    except Exception:  # (one hook's failure leaves the others, and the listeners after, to run)
                        log.exception("dynamic configuration: applying %s failed", ", ".join(sorted(keys)))
