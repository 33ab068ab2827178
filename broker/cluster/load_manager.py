"""The leader's load-manager rounds (Apache Pulsar's ``ModularLoadManagerImpl`` on the leader): load shedding
and the automatic bundle split. Every broker runs the loop; a round does something only while this broker is the
leader (``/loadbalance/leader``), so the work moves with the leadership when the leader dies.

Shedding (``doLoadShedding``, every ``loadBalancerSheddingIntervalMinutes`` when ``loadBalancerSheddingEnabled``
and more than one broker is registered): the bundles unloaded less than ``loadBalancerSheddingGracePeriodMinutes``
ago are forgotten past that; the strategy ``loadBalancerLoadSheddingStrategy`` names (``broker.cluster.shedding``:
Pulsar's default ``ThresholdShedder``, ``OverloadShedder``, ``UniformLoadShedder`` or ``AvgShedder``; the log lines
name it; with ``loadBalancerLoadPlacementStrategy`` AvgShedder too, placement asks the same instance) picks
bundles per broker; one of a namespace in ``loadBalancerSheddingExcludedNamespaces`` (PIP-380) is skipped, not
replaced; for each of the others, placement picks where it should go (``selectBroker``: the same rules as a lookup of
an unowned bundle); nothing happens when that is its owner or no broker; otherwise the leader records the
destination as the bundle's affinity (what Pulsar's unload with ``destinationBroker`` does on the leader), asks the
owner to unload it (``PUT /admin/v2/namespaces/{ns}/{range}/unload`` on the owner's web URL), and marks it recently
unloaded. Its clients look up again; the leader then gives the bundle to the destination.

Split (``checkNamespaceBundleSplit``, every ``loadBalancerSplitIntervalMinutes`` when
``loadBalancerAutoBundleSplitEnabled`` and more than one broker is registered): the bundles past Pulsar's thresholds
in the brokers' reports (``lastStats``; ``broker.cluster.split.bundles_to_split``) are split by their owner
(``PUT .../{range}/split?unload=...``), asked by the leader. (A single broker splits its own bundles:
``broker.admin.bundles``.)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping

import aiohttp

from broker.cluster import split as S
from broker.cluster.bundles import NamespaceBundle, NamespaceBundles
from broker.cluster.data import LoadReport, ResourceWeights
from broker.cluster.operations import thresholds_of
from broker.cluster.placement import (
    LeastResourceUsageWithWeight,
    Placement,
    anti_affinity_allows_unload,
    isolation_candidates,
)
from broker.cluster.registry import BrokerRegistry
from broker.cluster.shedding import AvgShedder, LoadSheddingStrategy, ShedderSettings, create_strategy
from broker.config import AVG_SHEDDER, LEAST_RESOURCE_USAGE_WITH_WEIGHT, BrokerConfig
from broker.tasks import OwnedTasks
from metadata_store.api import MetadataStoreError

log = logging.getLogger(__name__)

REQUEST_TIMEOUT_S = 60.0
# How often the leader looks for new load reports to sample (a broker considers rewriting its own this often).
REPORTS_CHECK_S = 5.0


def resource_weights(config: BrokerConfig) -> ResourceWeights:
    """The loadBalancer...ResourceWeight keys, as placement and the shedding strategies weigh usage."""
    return ResourceWeights(config.loadBalancerCPUResourceWeight, config.loadBalancerMemoryResourceWeight,
                           config.loadBalancerDirectMemoryResourceWeight, config.loadBalancerBandwidthInResourceWeight,
                           config.loadBalancerBandwidthOutResourceWeight)


def shedder_settings(config: BrokerConfig) -> ShedderSettings:
    return ShedderSettings(
        threshold_percent=config.loadBalancerBrokerThresholdShedderPercentage,
        history_percentage=config.loadBalancerHistoryResourcePercentage,
        min_throughput_mb=config.loadBalancerBundleUnloadMinThroughputThreshold,
        weights=resource_weights(config),
        overloaded_percent=config.loadBalancerBrokerOverloadedThresholdPercentage,
        msg_rate_difference_percent=config.loadBalancerMsgRateDifferenceShedderThreshold,
        msg_throughput_multiplier=config.loadBalancerMsgThroughputMultiplierDifferenceShedderThreshold,
        max_unload_percentage=config.maxUnloadPercentage,
        min_unload_message=config.minUnloadMessage,
        min_unload_message_throughput=config.minUnloadMessageThroughput,
        max_unload_bundle_num=config.maxUnloadBundleNumPerShedding,
        avg_low_threshold=config.loadBalancerAvgShedderLowThreshold,
        avg_high_threshold=config.loadBalancerAvgShedderHighThreshold,
        avg_hit_count_low=config.loadBalancerAvgShedderHitCountLowThreshold,
        avg_hit_count_high=config.loadBalancerAvgShedderHitCountHighThreshold)


def split_stats(brokers: Mapping[str, LoadReport]) -> list[S.BundleStats]:
    """The bundles' load as their owners last reported it (Pulsar's bundle data, from ``lastStats``)."""
    out = []
    for report in brokers.values():
        for name, load in sorted(report.bundle_stats.items()):
            try:
                bundle = NamespaceBundle.parse(*name.rsplit("/", 1))
            except ValueError:
                continue
            out.append(S.BundleStats(bundle, load.topics, load.producer_count + load.consumer_count,
                                     load.msg_rate_in + load.msg_rate_out, load.throughput))
    return out


class LoadManager:
    """``placement``: the lookups' placement (the affinities set here are read by the next lookup);
    ``bundles_of(ns)``: the namespace's bundles now; ``headers()``: the broker client's credentials for the admin
    calls to the owners, as they are at each call."""

    def __init__(self, config: BrokerConfig, registry: BrokerRegistry, placement: Placement,
                 bundles_of: Callable[[str], NamespaceBundles],
                 headers: Callable[[], Mapping[str, str]] = dict) -> None:
        self.config = config
        self.registry = registry
        self.placement = placement
        self.bundles_of = bundles_of
        self.headers = headers
        self.shedder: LoadSheddingStrategy = create_strategy(config.loadBalancerLoadSheddingStrategy,
                                                             shedder_settings(config))
        if config.loadBalancerLoadPlacementStrategy == AVG_SHEDDER and isinstance(self.shedder, AvgShedder):
            # One instance plans and places (Pulsar's ModularLoadManagerImpl; the config checks both name it).
            placement.strategy = self.shedder
        elif config.loadBalancerLoadPlacementStrategy == LEAST_RESOURCE_USAGE_WITH_WEIGHT:
            placement.strategy = LeastResourceUsageWithWeight()
        self.placement_settings_changed()
        self.recently_unloaded: dict[str, float] = {}  # bundle -> when (time.time())
        self.unloads = 0  # bundles unloaded by shedding (tests, logs)
        self.splits = 0
        self._tasks = OwnedTasks("load manager")

    def placement_settings_changed(self) -> None:
        """Give the placement (and its strategy, and the shedder) the settings they weigh brokers' usage with: at
        start, and when one of ``PLACEMENT_SETTINGS`` changes while the broker runs (a dynamic setting)."""
        c = self.config
        weights, overloaded = resource_weights(c), c.loadBalancerBrokerOverloadedThresholdPercentage / 100.0
        self.placement.weights, self.placement.overloaded = weights, overloaded
        strategy = self.placement.strategy
        if isinstance(strategy, LeastResourceUsageWithWeight):
            strategy.weights, strategy.overloaded = weights, overloaded
            strategy.history = c.loadBalancerHistoryResourcePercentage
            strategy.difference = c.loadBalancerAverageResourceUsageDifferenceThresholdPercentage / 100.0
        self.shedder.settings = shedder_settings(c)

    def start(self) -> None:
        c = self.config
        # (the shedding interval is a dynamic setting: read again for each wait)
        self._tasks.spawn(self._every(lambda: c.loadBalancerSheddingIntervalMinutes * 60, self.shed_once),
                          name="shedding")
        self._tasks.spawn(self._every(lambda: c.loadBalancerSplitIntervalMinutes * 60, self.split_once), name="split")
        self._tasks.spawn(self._every(lambda: REPORTS_CHECK_S, self.observe_reports), name="load history")

    async def close(self) -> None:
        self._tasks.cancel()
        await self._tasks.wait()

    async def _every(self, interval_s: Callable[[], float], job: Callable[[], object]) -> None:
        while True:
            await asyncio.sleep(interval_s())
            try:
                result = job()
                if asyncio.iscoroutine(result):
                    await result
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("load manager round failed; next in %.1f s", interval_s())

    async def observe_reports(self) -> None:
        """On the leader: the bundles' averages take a sample when a broker wrote a new report
        (``broker.cluster.load_history``; Pulsar's leader updates them on each report's notification)."""
        if self.registry.is_leader:
            try:
                self.placement.history.observe(await self.registry.active_brokers())
            except MetadataStoreError as exc:
                log.debug("load reports not read: %s", exc)

    async def _brokers(self) -> dict[str, LoadReport]:
        brokers = await self.registry.active_brokers()
        self.placement.history.observe(brokers)  # (the reports as written: the averages' samples)
        brokers[self.registry.urls.broker_id] = self.registry.current_report()
        return brokers

    # -- shedding -------------------------------------------------------------------------------------
    async def shed_once(self) -> list[str]:
        """One round; the bundles unloaded."""
        if not self.config.loadBalancerSheddingEnabled or not self.registry.is_leader:
            return []
        try:
            brokers = await self._brokers()
        except MetadataStoreError as exc:
            log.warning("load shedding skipped: %s", exc)
            return []
        if len(brokers) <= 1:
            return []
        grace_s = self.config.loadBalancerSheddingGracePeriodMinutes * 60
        now = time.time()
        self.recently_unloaded = {b: at for b, at in self.recently_unloaded.items() if now - at < grace_s}
        self.shedder.settings = shedder_settings(self.config)  # (its thresholds are dynamic settings)
        plan = self.shedder.find_bundles_for_unloading(brokers, self.recently_unloaded,
                                                       self.placement.history.short_term())
        excluded = set(self.config.loadBalancerSheddingExcludedNamespaces)
        done = []
        for broker_id, bundles in plan.items():
            for name in bundles:
                # PIP-380 (loadBalancerSheddingExcludedNamespaces): as Pulsar's ModularLoadManagerImpl.doLoadShedding,
                # a bundle of such a namespace the strategy picked is skipped, not replaced by another one.
                namespace = name.rsplit("/", 1)[0]  # (LoadManagerShared.getNamespaceNameFromBundleName)
                if namespace in excluded:
                    log.debug("%s: skipping load shedding for namespace %s", self.shedder.name, namespace)
                    continue
                if await self._shed(name, broker_id, brokers):
                    done.append(name)
        return done

    async def _shed(self, name: str, owner_id: str, brokers: dict[str, LoadReport]) -> bool:
        try:
            bundle = NamespaceBundle.parse(*name.rsplit("/", 1))
        except ValueError:
            return False
        allowed = isolation_candidates(bundle.namespace, sorted(brokers), self.placement.isolation() or {})
        if not [b for b in allowed if b != owner_id]:
            return False  # (no other broker may have it: shouldNamespacePoliciesUnload)
        group = self.placement.group_of(bundle.namespace)
        if group and not anti_affinity_allows_unload(owner_id, allowed,
                                                     self.placement.group_counts(group, brokers)):
            return False  # (it would land on a broker as crowded with its group: shouldAntiAffinityNamespaceUnload)
        dest = self.placement.choose(bundle, brokers)
        if dest is None:
            log.info("%s: no broker available to unload bundle %s from broker %s", self.shedder.name, name, owner_id)
            return False
        if dest == owner_id:
            log.warning("%s: the destination broker %s is the same as the current owner of bundle %s",
                        self.shedder.name, dest, name)
            return False
        owner = brokers.get(owner_id)
        base = owner.urls.web_url if owner is not None else None
        if not base:
            return False
        log.info("%s: unloading bundle %s from broker %s to broker %s", self.shedder.name, name, owner_id, dest)
        self.placement.set_affinity(name, dest)
        try:
            await self._put(f"{base}/admin/v2/namespaces/{bundle.namespace}/{bundle.range_name}/unload")
        except (aiohttp.ClientError, TimeoutError, RuntimeError) as exc:
            self.placement.set_affinity(name, None)
            log.warning("load shedding of %s on %s failed: %s", name, owner_id, exc)
            return False
        self.recently_unloaded[name] = time.time()
        self.unloads += 1
        return True

    # -- split ------------------------------------------------------------------------------------------
    async def split_once(self) -> list[NamespaceBundle]:
        if not self.config.loadBalancerAutoBundleSplitEnabled or not self.registry.is_leader:
            return []
        try:
            brokers = await self._brokers()
        except MetadataStoreError as exc:
            log.warning("bundle split round skipped: %s", exc)
            return []
        if len(brokers) <= 1:
            return []
        stats = split_stats(brokers)
        counts: dict[str, int] = {}
        live: list[S.BundleStats] = []
        for s in stats:
            ns = s.bundle.namespace
            try:
                bundles = self.bundles_of(ns)
            except Exception:  # (namespace deleted meanwhile)
                continue
            counts[ns] = len(bundles)
            if s.bundle in bundles.bundles:  # (already split: Pulsar's checkBundleDataExistInNamespaceBundles)
                live.append(s)
        owner_of = {name: broker_id for broker_id, r in brokers.items() for name in r.bundle_stats}
        unload = str(self.config.loadBalancerAutoUnloadSplitBundlesEnabled).lower()
        done = []
        for bundle in S.bundles_to_split(live, counts, thresholds_of(self.config)):
            owner = brokers.get(owner_of.get(str(bundle), ""))
            if owner is None or not owner.urls.web_url:
                continue
            log.info("Load-manager splitting bundle %s (owner %s, unload %s)", bundle, owner.urls.broker_id, unload)
            try:
                await self._put(f"{owner.urls.web_url}/admin/v2/namespaces/{bundle.namespace}/"
                                f"{bundle.range_name}/split?unload={unload}")
            except (aiohttp.ClientError, TimeoutError, RuntimeError) as exc:
                log.warning("Failed to split namespace bundle %s: %s", bundle, exc)
                continue
            self.splits += 1
            done.append(bundle)
        return done

    async def _put(self, url: str) -> None:
        timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
        async with aiohttp.ClientSession(timeout=timeout) as session, \
                session.put(url, headers=self.headers()) as answer:
            if answer.status >= 400:
                text = ""
                with contextlib.suppress(aiohttp.ClientError, UnicodeDecodeError):
                    text = await answer.text()
                raise RuntimeError(f"PUT {url}: {answer.status} {text[:300]}")

