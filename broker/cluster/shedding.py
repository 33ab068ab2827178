"""Which bundles the leader unloads: Apache Pulsar 4.0's classic load-shedding strategies
(``loadBalancerLoadSheddingStrategy``, a class name), as pure logic over the brokers' load reports. Each is a
``LoadSheddingStrategy``: ``find_bundles_for_unloading(brokers, recently_unloaded)`` -> broker id -> its bundles
to unload; ``create_strategy`` makes the one the configuration names (Pulsar instantiates that class by its full
name, ``Reflections.createInstance``: no short forms).

All of them read a bundle's load from the leader's short-term average of its owners' reports (``shortTermData``,
``broker.cluster.load_history``; the last report's ``lastStats`` for a bundle the leader has no average of), and
the brokers' own figures (usage, totals) from their last reports; they consider only the bundles the broker owns
(``LocalBrokerData.bundles``) that were not unloaded within the grace period, and never the heartbeat or
SLA-monitor namespaces' bundles (``LoadData.getBundleDataForLoadShedding``). A broker owning a single bundle sheds
nothing (but under AvgShedder).

``ThresholdShedder`` (Pulsar's default). For every broker, its usage is the highest weighted share of its resources
(``getMaxResourceUsageWithWeight``: CPU, direct memory, bandwidth in and out, each times its
``loadBalancer...ResourceWeight``; never the heap, here our process's memory), smoothed over the rounds: ``usage =
history * loadBalancerHistoryResourcePercentage + now * (1 - that)``, starting at the first usage seen (Pulsar's
``updateAvgResourceUsage``: a new leader acts on the load as it is). The average over the brokers is the mark; a
broker whose usage is ``loadBalancerBrokerThresholdShedderPercentage`` points or more above it is to shed
``throughput * (usage - average - threshold + 5 %)`` bytes per second (skipped under
``loadBalancerBundleUnloadMinThroughputThreshold`` MB/s). Its bundles, hottest first (throughput in + out), are
picked until that much is picked, and at least one. (As in Pulsar 4.0's ``findBundlesForUnloading``, only a broker
at or above ``average + threshold`` sheds: one far *under* the average keeps its bundles, also when its throughput
and the minimum are both 0.)

``OverloadShedder``. A broker whose usage now (no smoothing; the four-weight ``getMaxResourceUsageWithWeight``:
CPU, direct memory, bandwidth in and out, not heap memory) is at or above
``loadBalancerBrokerOverloadedThresholdPercentage`` % sheds ``throughput * (usage - threshold + 5 %)`` bytes per
second (no minimum), hottest bundles first, until that much and at least one.

``UniformLoadShedder``. Only two brokers matter: the highest and the lowest message rate (in + out) and the highest
and the lowest throughput (in + out), each in the brokers' own totals; a lowest of 0 (within 1e-6) counts as 1.
When the rate difference ``(max - min) * 100 / min`` is above ``loadBalancerMsgRateDifferenceShedderThreshold`` %
(> 0 to count), the busiest broker by rate sheds bundles worth up to ``maxUnloadPercentage`` of the difference,
provided that is at least ``minUnloadMessage`` messages per second; otherwise, when ``max / min`` throughput is above
``loadBalancerMsgThroughputMultiplierDifferenceShedderThreshold`` (> 0 to count), the busiest by throughput sheds up
to ``maxUnloadPercentage`` of that difference, provided it is at least ``minUnloadMessageThroughput`` bytes per
second. Its bundles, highest rate (or throughput) first, each one taken when it is no more than what is still
wanted + 1000, at most ``maxUnloadBundleNumPerShedding`` of them (-1: no limit). Pulsar keeps what is wanted in a
Java int (``MutableInt``): the amounts truncate toward 0, as here.

``AvgShedder`` (Pulsar 3.3+, PIP-364). Each broker's score is its weighted usage as ThresholdShedder's, now (no
smoothing), times 100. The brokers are sorted by score and paired from both ends (the lowest with the highest, the
second lowest with the second highest, ...). A pair whose scores differ by less than
``loadBalancerAvgShedderLowThreshold`` points forgets both brokers' hit counts; any other pair counts a low hit for
both, and a high hit too when they differ by ``loadBalancerAvgShedderHighThreshold`` points or more (else their high
counts are forgotten). A round with no such pair forgets every count. A pair acts when one of its brokers has
``loadBalancerAvgShedderHitCountHighThreshold`` high hits or ``loadBalancerAvgShedderHitCountLowThreshold`` low
ones (consecutive rounds, so a short spike moves nothing); acting forgets both brokers' counts. It moves
``maxUnloadPercentage`` of the pair's difference in message rate (in + out) when that is above
``minUnloadMessage``, else of their difference in throughput when that is above ``minUnloadMessageThroughput``,
else nothing: the busier broker's bundles, highest first, each taken when its load is above 0 and no more than what
is still wanted. A broker with a single bundle is warned about but not spared (as in Pulsar). Each bundle it picks
is planned to go to the pair's idler broker: with ``loadBalancerLoadPlacementStrategy`` set to AvgShedder too (the
same instance does both, as Pulsar requires), placement (``select_broker``) sends the bundle there, and any other
bundle to a broker picked at random among the candidates, remembered for that bundle. Brokers are sorted by score,
then by id (Pulsar's comparator truncates the difference to an int, so brokers within a point of each other keep
its map's order).
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from broker.cluster.data import BundleLoad, LoadReport, ResourceWeights
from broker.config import AVG_SHEDDER, OVERLOAD_SHEDDER, THRESHOLD_SHEDDER, UNIFORM_LOAD_SHEDDER
from broker.topic_name import is_per_broker_namespace

log = logging.getLogger(__name__)

# ThresholdShedder / OverloadShedder.ADDITIONAL_THRESHOLD_PERCENT_MARGIN: shed down to 5 % under the mark.
ADDITIONAL_MARGIN = 0.05
MB = 1024 * 1024
# UniformLoadShedder.EPS: a lowest rate or throughput this close to 0 counts as 1 (no division by 0).
EPS = 1e-6
# UniformLoadShedder takes a bundle whose load is at most what is still wanted plus this.
UNIFORM_SLACK = 1000
INT_MIN, INT_MAX = -(1 << 31), (1 << 31) - 1


@dataclass(frozen=True)
class ShedderSettings:
    """Pulsar's keys (ServiceConfiguration, 4.0 defaults)."""

    threshold_percent: float = 10  # loadBalancerBrokerThresholdShedderPercentage
    history_percentage: float = 0.9  # loadBalancerHistoryResourcePercentage
    min_throughput_mb: float = 10  # loadBalancerBundleUnloadMinThroughputThreshold (MB/s)
    weights: ResourceWeights = field(default_factory=ResourceWeights)
    overloaded_percent: int = 85  # loadBalancerBrokerOverloadedThresholdPercentage (OverloadShedder)
    # UniformLoadShedder:
    msg_rate_difference_percent: float = 50  # loadBalancerMsgRateDifferenceShedderThreshold
    msg_throughput_multiplier: float = 4  # loadBalancerMsgThroughputMultiplierDifferenceShedderThreshold
    max_unload_percentage: float = 0.2  # maxUnloadPercentage
    min_unload_message: int = 1000  # minUnloadMessage (messages per second)
    min_unload_message_throughput: int = 1024 * 1024  # minUnloadMessageThroughput (bytes per second)
    max_unload_bundle_num: int = -1  # maxUnloadBundleNumPerShedding (-1: no limit)
    # AvgShedder:
    avg_low_threshold: float = 15  # loadBalancerAvgShedderLowThreshold (score points)
    avg_high_threshold: float = 40  # loadBalancerAvgShedderHighThreshold
    avg_hit_count_low: int = 8  # loadBalancerAvgShedderHitCountLowThreshold (consecutive rounds)
    avg_hit_count_high: int = 2  # loadBalancerAvgShedderHitCountHighThreshold


class LoadSheddingStrategy(Protocol):
    """Pulsar's ``LoadSheddingStrategy``: what the leader's load manager asks every shedding round."""

    name: str  # Pulsar's simple class name, in the load manager's log lines
    settings: ShedderSettings  # (replaced by the load manager before each round: some are dynamic settings)

    def find_bundles_for_unloading(self, brokers: Mapping[str, LoadReport], recently_unloaded: Collection[str] = (),
                                   short_term: Mapping[str, BundleLoad] | None = None) -> dict[str, list[str]]:
        """broker id -> the bundles to unload from it (each "tenant/ns/0x.._0x.."); ``short_term``: the leader's
        short-term averages of the bundles' loads (``broker.cluster.load_history``), read instead of the reports'."""
        ...


def _exempt(bundle: str) -> bool:
    """The per-broker namespaces' bundles are never shed (``LoadData.getBundleDataForLoadShedding``)."""
    return is_per_broker_namespace(bundle.rsplit("/", 1)[0])  # (NamespaceBundle.getBundleNamespace)


def _bundle_loads(brokers: Mapping[str, LoadReport], value: Callable[[float, float, float, float], float],
                  short_term: Mapping[str, BundleLoad] | None = None) -> dict[str, float]:
    """Every reported bundle but the exempt ones -> ``value(rate in, rate out, throughput in, throughput out)`` of its
    short-term average, or of its last report when there is none (Pulsar's ``getBundleDataForLoadShedding``: the
    leader's bundle data, and each bundle's ``getShortTermData``)."""
    averaged = short_term or {}
    out: dict[str, float] = {}
    for report in brokers.values():
        for name, load in report.bundle_stats.items():
            if not _exempt(name):
                load = averaged.get(name, load)
                out[name] = value(load.msg_rate_in, load.msg_rate_out, load.msg_throughput_in, load.msg_throughput_out)
    return out


def _throughput(rate_in: float, rate_out: float, tp_in: float, tp_out: float) -> float:
    return tp_in + tp_out


def _msg_rate(rate_in: float, rate_out: float, tp_in: float, tp_out: float) -> float:
    return rate_in + rate_out


def _candidates(report: LoadReport, loads: Mapping[str, float],
                recently_unloaded: Collection[str]) -> list[tuple[str, float]]:
    """The broker's own bundles with a load, not recently unloaded, highest load first (ties by name)."""
    owned = set(report.bundles)
    return sorted(((b, v) for b, v in loads.items() if b in owned and b not in recently_unloaded),
                  key=lambda c: (-c[1], c[0]))


def _hottest_until(candidates: list[tuple[str, float]], to_offload: float) -> list[str]:
    """Threshold/OverloadShedder's pick: in order while less than ``to_offload`` is picked, and at least one."""
    marked = 0.0
    picked: list[str] = []
    for b, t in candidates:
        if marked < to_offload or not picked:
            picked.append(b)
            marked += t
    return picked


class ThresholdShedder:
    """Keeps each broker's smoothed usage from round to round (as Pulsar's instance does)."""

    name = "ThresholdShedder"

    def __init__(self, settings: ShedderSettings | None = None) -> None:
        self.settings = settings or ShedderSettings()
        self.avg_usage: dict[str, float] = {}

    def find_bundles_for_unloading(self, brokers: Mapping[str, LoadReport], recently_unloaded: Collection[str] = (),
                                   short_term: Mapping[str, BundleLoad] | None = None) -> dict[str, list[str]]:
        s = self.settings
        threshold = s.threshold_percent / 100.0
        history = s.history_percentage
        total = 0.0
        for broker_id, report in brokers.items():
            now = report.max_resource_usage_with_weight(s.weights)
            before = self.avg_usage.get(broker_id)  # (none yet: the current usage, as updateAvgResourceUsage)
            smoothed = now if before is None else before * history + (1 - history) * now
            self.avg_usage[broker_id] = smoothed
            total += smoothed
        for gone in set(self.avg_usage) - set(brokers):
            del self.avg_usage[gone]
        average = total / len(brokers) if brokers else 0.0
        chosen: dict[str, list[str]] = {}
        if average == 0:
            return chosen
        loads = _bundle_loads(brokers, _throughput, short_term)
        for broker_id, report in sorted(brokers.items()):
            usage = self.avg_usage.get(broker_id, 0.0)
            if usage < average + threshold:
                continue  # (not overloaded)
            throughput = report.msg_throughput_in + report.msg_throughput_out
            to_offload = throughput * (usage - average - threshold + ADDITIONAL_MARGIN)
            if to_offload < s.min_throughput_mb * MB:
                continue
            if len(report.bundles) <= 1:
                continue  # (the sole bundle overloads it: nothing to do)
            picked = _hottest_until(_candidates(report, loads, recently_unloaded), to_offload)
            if picked:
                chosen[broker_id] = picked
        return chosen


class OverloadShedder:
    """Stateless: each round looks at the usage in the latest reports only."""

    name = "OverloadShedder"

    def __init__(self, settings: ShedderSettings | None = None) -> None:
        self.settings = settings or ShedderSettings()

    def find_bundles_for_unloading(self, brokers: Mapping[str, LoadReport], recently_unloaded: Collection[str] = (),
                                   short_term: Mapping[str, BundleLoad] | None = None) -> dict[str, list[str]]:
        s = self.settings
        threshold = s.overloaded_percent / 100.0
        loads = _bundle_loads(brokers, _throughput, short_term)
        chosen: dict[str, list[str]] = {}
        for broker_id, report in sorted(brokers.items()):
            usage = report.max_resource_usage_with_weight(s.weights)
            if usage < threshold:
                log.debug("OverloadShedder: [%s] broker is not overloaded (usage %.1f %%)", broker_id, usage * 100)
                continue
            throughput = report.msg_throughput_in + report.msg_throughput_out
            to_offload = throughput * (usage - threshold + ADDITIONAL_MARGIN)
            log.info("OverloadShedder: attempting to shed load on %s, which has resource usage %.1f %% above threshold"
                     " %.1f %% -- offloading at least %.3f MByte/s of traffic", broker_id, usage * 100,
                     threshold * 100, to_offload / MB)
            if len(report.bundles) > 1:
                picked = _hottest_until(_candidates(report, loads, recently_unloaded), to_offload)
                if picked:
                    chosen[broker_id] = picked
            elif report.bundles:
                log.warning("OverloadShedder: HIGH USAGE WARNING: sole namespace bundle %s is overloading broker %s;"
                            " no load shedding will be done on this broker", report.bundles[0], broker_id)
            else:
                log.warning("OverloadShedder: broker %s is overloaded despite having no bundles", broker_id)
        return chosen


def _d2i(value: float) -> int:
    """Java's (int) of a double: toward 0, saturated, NaN -> 0."""
    if math.isnan(value):
        return 0
    return max(INT_MIN, min(INT_MAX, int(value))) if math.isfinite(value) else (INT_MAX if value > 0 else INT_MIN)


def _i32(value: int) -> int:
    """Java's int arithmetic: wraps around."""
    return (value - INT_MIN) % (1 << 32) + INT_MIN


class UniformLoadShedder:
    """Stateless: each round compares the busiest and the idlest broker of the latest reports."""

    name = "UniformLoadShedder"

    def __init__(self, settings: ShedderSettings | None = None) -> None:
        self.settings = settings or ShedderSettings()

    def find_bundles_for_unloading(self, brokers: Mapping[str, LoadReport], recently_unloaded: Collection[str] = (),
                                   short_term: Mapping[str, BundleLoad] | None = None) -> dict[str, list[str]]:
        s = self.settings
        if not brokers:
            return {}
        max_rate = max_tp = -1.0
        min_rate = min_tp = float(INT_MAX)
        busiest_by_rate = busiest_by_tp = idlest_by_rate = idlest_by_tp = ""
        for broker_id, report in sorted(brokers.items()):  # (ties: the first, by id; Pulsar's is a hash order)
            rate = report.msg_rate_in + report.msg_rate_out
            tp = report.msg_throughput_in + report.msg_throughput_out
            if rate > max_rate:
                busiest_by_rate, max_rate = broker_id, rate
            if tp > max_tp:
                busiest_by_tp, max_tp = broker_id, tp
            if rate < min_rate:
                idlest_by_rate, min_rate = broker_id, rate
            if tp < min_tp:
                idlest_by_tp, min_tp = broker_id, tp
        if -EPS <= min_rate <= EPS:
            min_rate = 1.0
        if -EPS <= min_tp <= EPS:
            min_tp = 1.0
        rate_difference_percent = (max_rate - min_rate) * 100 / min_rate
        tp_multiplier = max_tp / min_tp
        by_rate = 0 < s.msg_rate_difference_percent < rate_difference_percent
        by_tp = 0 < s.msg_throughput_multiplier < tp_multiplier
        if not (by_rate or by_tp):
            return {}
        if by_rate:
            log.debug("UniformLoadShedder: msgRate overloaded broker %s (%.1f msg/s), underloaded broker %s (%.1f)",
                      busiest_by_rate, max_rate, idlest_by_rate, min_rate)
            broker_id, wanted, minimum = busiest_by_rate, _d2i((max_rate - min_rate) * s.max_unload_percentage), \
                s.min_unload_message
            value, what = _msg_rate, "msgRate"
        else:
            log.debug("UniformLoadShedder: msgThroughput overloaded broker %s (%.1f B/s), underloaded broker %s (%.1f)",
                      busiest_by_tp, max_tp, idlest_by_tp, min_tp)
            broker_id, wanted, minimum = busiest_by_tp, _d2i((max_tp - min_tp) * s.max_unload_percentage), \
                s.min_unload_message_throughput
            value, what = _throughput, "msgThroughput"
        report = brokers[broker_id]
        if len(report.bundles) <= 1 or wanted < minimum:
            return {}
        picked: list[str] = []
        for bundle, load in _candidates(report, _bundle_loads(brokers, value, short_term), recently_unloaded):
            if s.max_unload_bundle_num != -1 and len(picked) >= s.max_unload_bundle_num:
                break
            if load <= _i32(wanted + UNIFORM_SLACK):
                log.info("UniformLoadShedder: found bundle %s to unload with %s %s", bundle, what, load)
                wanted = _i32(wanted + _d2i(-load))
                picked.append(bundle)
        return {broker_id: picked} if picked else {}


# How long AvgShedder remembers where it sent (or planned to send) a bundle that no broker reports any more (split,
# or its namespace deleted); Pulsar keeps such entries for good.
AVG_PLAN_TTL_S = 3600.0


class AvgShedder:
    """Both a shedding strategy and a placement strategy (``select_broker``); keeps each broker's hit counts from
    round to round and where each bundle should go (as Pulsar's instance does)."""

    name = "AvgShedder"

    def __init__(self, settings: ShedderSettings | None = None, rng: random.Random | None = None) -> None:
        self.settings = settings or ShedderSettings()
        self._rng = rng or random.Random()
        self.hits_high: dict[str, int] = {}
        self.hits_low: dict[str, int] = {}
        self.scores: dict[str, float] = {}
        self.planned: dict[str, tuple[str, float]] = {}  # bundle -> (broker id, when planned)

    def find_bundles_for_unloading(self, brokers: Mapping[str, LoadReport], recently_unloaded: Collection[str] = (),
                                   short_term: Mapping[str, BundleLoad] | None = None) -> dict[str, list[str]]:
        s = self.settings
        self._forget_old_plans(brokers)
        self.scores = {b: r.max_resource_usage_with_weight(s.weights) * 100 for b, r in brokers.items()}
        ranked = sorted(self.scores, key=lambda b: (self.scores[b], b))
        pairs = self._pairs(ranked)
        log.info("AvgShedder: brokers by score %s; high hits %s, low hits %s", ranked, self.hits_high, self.hits_low)
        chosen: dict[str, list[str]] = {}
        if not pairs:
            self.hits_high.clear()
            self.hits_low.clear()
            return chosen
        for idle, busy in pairs:
            if not any(self.hits_high.get(b, 0) >= s.avg_hit_count_high
                       or self.hits_low.get(b, 0) >= s.avg_hit_count_low for b in (idle, busy)):
                continue  # (not for enough consecutive rounds yet)
            for b in (idle, busy):
                self.hits_high.pop(b, None)
                self.hits_low.pop(b, None)
            picked = self._pick(brokers, busy, idle, recently_unloaded, short_term)
            if picked:
                chosen.setdefault(busy, []).extend(picked)
        return chosen

    def _pairs(self, ranked: list[str]) -> list[tuple[str, str]]:
        """Pair the idlest with the busiest, inwards; count the hits (Pulsar's findBrokerPairs)."""
        s = self.settings
        pairs: list[tuple[str, str]] = []
        i, j = 0, len(ranked) - 1
        while i <= j:
            idle, busy = ranked[i], ranked[j]
            difference = self.scores[busy] - self.scores[idle]
            if difference < s.avg_low_threshold:
                for b in (idle, busy):
                    self.hits_high.pop(b, None)
                    self.hits_low.pop(b, None)
            else:
                pairs.append((idle, busy))
                for b in (idle, busy):
                    self.hits_low[b] = self.hits_low.get(b, 0) + 1
                    if difference < s.avg_high_threshold:
                        self.hits_high.pop(b, None)
                    else:
                        self.hits_high[b] = self.hits_high.get(b, 0) + 1
            i += 1
            j -= 1
        return pairs

    def _pick(self, brokers: Mapping[str, LoadReport], busy: str, idle: str, recently_unloaded: Collection[str],
              short_term: Mapping[str, BundleLoad] | None) -> list[str]:
        """The busy broker's bundles to move to the idle one (Pulsar's selectBundleForUnloading)."""
        s = self.settings
        low, high = brokers[idle], brokers[busy]
        rate_wanted = (high.msg_rate_in + high.msg_rate_out - low.msg_rate_in - low.msg_rate_out) \
            * s.max_unload_percentage
        tp_wanted = (high.msg_throughput_in + high.msg_throughput_out - low.msg_throughput_in
                     - low.msg_throughput_out) * s.max_unload_percentage
        if rate_wanted > s.min_unload_message:
            wanted, value = rate_wanted, _msg_rate
        elif tp_wanted > s.min_unload_message_throughput:
            wanted, value = tp_wanted, _throughput
        else:
            log.info("AvgShedder: broker %s would shed bundles to broker %s, but the throughput to move, %.3f MByte/s,"
                     " is under %.3f MByte/s and the message rate to move, %.1f/s, under %d/s: nothing unloaded",
                     busy, idle, tp_wanted / MB, s.min_unload_message_throughput / MB, rate_wanted,
                     s.min_unload_message)
            return []
        if len(high.bundles) == 1:
            log.warning("AvgShedder: HIGH USAGE WARNING: sole namespace bundle %s is overloading broker %s",
                        high.bundles[0], busy)
        elif not high.bundles:
            log.warning("AvgShedder: broker %s is overloaded despite having no bundles", busy)
        log.info("AvgShedder: broker %s (score %.1f) is to shed %s %.1f to broker %s (score %.1f)", busy,
                 self.scores[busy], "msgRate" if value is _msg_rate else "throughput", wanted, idle, self.scores[idle])
        picked: list[str] = []
        now = time.monotonic()
        for bundle, load in _candidates(high, _bundle_loads(brokers, value, short_term), recently_unloaded):
            if 0 < load <= wanted:
                picked.append(bundle)
                self.planned[bundle] = (idle, now)
                wanted -= load
        return picked

    def select_broker(self, candidates: Collection[str], bundle: str,
                      brokers: Mapping[str, LoadReport] | None = None) -> str | None:
        """Placement (Pulsar's AvgShedder.selectBroker): where the shedding planned ``bundle`` to go when that broker
        is a candidate, else a candidate at random, remembered for the bundle."""
        if not candidates:
            return None
        plan = self.planned.get(bundle)
        if plan is not None and plan[0] in candidates:
            return plan[0]
        chosen = self._rng.choice(sorted(candidates))
        self.planned[bundle] = (chosen, time.monotonic())
        return chosen

    def _forget_old_plans(self, brokers: Mapping[str, LoadReport]) -> None:
        reported = {b for r in brokers.values() for b in r.bundles}
        horizon = time.monotonic() - AVG_PLAN_TTL_S
        self.planned = {b: p for b, p in self.planned.items() if b in reported or p[1] > horizon}


STRATEGIES: dict[str, Callable[[ShedderSettings], LoadSheddingStrategy]] = {
    THRESHOLD_SHEDDER: ThresholdShedder, OVERLOAD_SHEDDER: OverloadShedder, UNIFORM_LOAD_SHEDDER: UniformLoadShedder,
    AVG_SHEDDER: AvgShedder}


def create_strategy(class_name: str, settings: ShedderSettings) -> LoadSheddingStrategy:
    """The strategy ``loadBalancerLoadSheddingStrategy`` names (its full Pulsar class name)."""
    try:
        return STRATEGIES[class_name](settings)
    except KeyError:
        raise ValueError(f"loadBalancerLoadSheddingStrategy={class_name}: not supported") from None
