"""Which bundles the leader unloads from overloaded brokers: Apache Pulsar's default load-shedding strategy,
``ThresholdShedder`` (``loadBalancerLoadSheddingStrategy`` in 4.0), as pure logic over the brokers' load reports.

For every broker, its usage is the highest weighted share of its resources (``getMaxResourceUsageWithWeight``:
CPU, memory, direct memory, bandwidth in and out, each times its ``loadBalancer...ResourceWeight``), smoothed over
the rounds: ``usage = history * loadBalancerHistoryResourcePercentage + now * (1 - that)``, starting at the first
usage seen (Pulsar's ``updateAvgResourceUsage``: a new leader acts on the load as it is). The average over the
brokers is the mark; a broker whose usage is ``loadBalancerBrokerThresholdShedderPercentage`` points or more above
it is to shed ``throughput * (usage - average - threshold + 5 %)`` bytes per second (skipped under
``loadBalancerBundleUnloadMinThroughputThreshold`` MB/s). Its bundles, hottest first (the throughput in + out of
its last report), except the recently unloaded ones, are picked until that much is picked, and at least one; a
broker with a single bundle sheds nothing (Pulsar's "sole namespace bundle" warning).

(As in Pulsar 4.0's ``findBundlesForUnloading``, only a broker at or above ``average + threshold`` sheds: one far
*under* the average keeps its bundles, also when its throughput and the minimum are both 0.)
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from broker.cluster.data import LoadReport, ResourceWeights

# ThresholdShedder.ADDITIONAL_THRESHOLD_PERCENT_MARGIN: shed down to 5 % under the mark.
ADDITIONAL_MARGIN = 0.05
MB = 1024 * 1024
# Pulsar's HEARTBEAT_NAMESPACE_PATTERN(_V2): the per-broker heartbeat namespaces are never shed.
HEARTBEAT_PREFIX = "pulsar/"


@dataclass(frozen=True)
class ShedderSettings:
    """Pulsar's keys (ServiceConfiguration, 4.0 defaults)."""

    threshold_percent: float = 10  # loadBalancerBrokerThresholdShedderPercentage
    history_percentage: float = 0.9  # loadBalancerHistoryResourcePercentage
    min_throughput_mb: float = 10  # loadBalancerBundleUnloadMinThroughputThreshold (MB/s)
    weights: ResourceWeights = field(default_factory=ResourceWeights)


def _heartbeat(bundle: str) -> bool:
    ns = bundle.rsplit("/", 1)[0]
    return ns.startswith(HEARTBEAT_PREFIX) and ("/" in ns[len(HEARTBEAT_PREFIX):] or ":" in ns)


class ThresholdShedder:
    """Keeps each broker's smoothed usage from round to round (as Pulsar's instance does)."""

    def __init__(self, settings: ShedderSettings | None = None) -> None:
        self.settings = settings or ShedderSettings()
        self.avg_usage: dict[str, float] = {}

    def find_bundles_for_unloading(self, brokers: Mapping[str, LoadReport],
                                   recently_unloaded: Collection[str] = ()) -> dict[str, list[str]]:
        """broker id -> the bundles to unload from it (each "tenant/ns/0x.._0x..")."""
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
        bundle_throughput: dict[str, float] = {}
        for report in brokers.values():
            for name, load in report.bundle_stats.items():
                bundle_throughput[name] = load.throughput
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
            owned = set(report.bundles)
            candidates = sorted(((t, b) for b, t in bundle_throughput.items()
                                 if b in owned and b not in recently_unloaded and not _heartbeat(b)),
                                key=lambda c: -c[0])
            marked = 0.0
            picked: list[str] = []
            for t, b in candidates:
                if marked < to_offload or not picked:
                    picked.append(b)
                    marked += t
            if picked:
                chosen[broker_id] = picked
        return chosen
