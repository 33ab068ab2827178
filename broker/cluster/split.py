"""Where to split a bundle, and which bundles to split: Apache Pulsar's split algorithms and its
BundleSplitterTask, as pure functions over the bundle, its topics and their load.

Algorithms (Pulsar's ``NamespaceBundleSplitAlgorithm`` implementations; each returns the split
points strictly inside the bundle, or ``None`` for "no valid boundary": the split is then a no-op,
as in Pulsar's ``splitAndOwnBundleOnceAndRetry``):

- ``range_equally_divide`` (the default): the middle of the range, ``lower + (upper - lower) // 2``;
- ``topic_count_equally_divide``: between the two middle topic hashes, so that each half has as
  many topics (``None`` with fewer than 2 topics);
- ``specified_positions_divide``: the given positions that fall strictly inside the bundle
  (``None`` with fewer than 2 topics, or when none falls inside);
- ``flow_or_qps_equally_divide``: walks the topics by hash, cutting each time the message rate
  (in + out) or the throughput (in + out) would pass ``loadBalancerNamespaceBundleMaxMsgRate`` /
  ``...MaxBandwidthMbytes``; ``None`` unless at least 2 topics carry traffic and the bundle is
  past a threshold by ``flowOrQpsDifferenceThresholdPercentage``.

``bundles_to_split`` is Pulsar's ``BundleSplitterTask.findBundlesToSplit``: a bundle with at least
2 topics past any threshold (topics, sessions = producers + consumers when the threshold is > 0,
message rate in + out, bandwidth in + out in MiB), as long as its namespace stays under
``loadBalancerNamespaceMaximumBundles`` counting the splits already chosen in the same round.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from broker.metadata.bundles import NamespaceBundle, hash_topic

RANGE_EQUALLY_DIVIDE = "range_equally_divide"
TOPIC_COUNT_EQUALLY_DIVIDE = "topic_count_equally_divide"
SPECIFIED_POSITIONS_DIVIDE = "specified_positions_divide"
FLOW_OR_QPS_EQUALLY_DIVIDE = "flow_or_qps_equally_divide"
ALGORITHMS = (RANGE_EQUALLY_DIVIDE, TOPIC_COUNT_EQUALLY_DIVIDE, SPECIFIED_POSITIONS_DIVIDE,
              FLOW_OR_QPS_EQUALLY_DIVIDE)
# Pulsar's LoadManagerShared.MIBI: the bandwidth thresholds are in MiB.
MIBI = 1024 * 1024


@dataclass(frozen=True)
class TopicLoad:
    """One topic's load, as Pulsar's TopicStats give it (rates per second, sampled)."""

    name: str  # the full topic name (a partition's own name)
    msg_rate_in: float = 0.0
    msg_rate_out: float = 0.0
    throughput_in: float = 0.0  # bytes per second
    throughput_out: float = 0.0
    producers: int = 0
    consumers: int = 0

    @property
    def msg_rate(self) -> float:
        return self.msg_rate_in + self.msg_rate_out

    @property
    def throughput(self) -> float:
        return self.throughput_in + self.throughput_out


@dataclass(frozen=True)
class SplitThresholds:
    """Pulsar's split thresholds (ServiceConfiguration keys and defaults)."""

    max_topics: int = 1000  # loadBalancerNamespaceBundleMaxTopics
    max_sessions: int = 1000  # loadBalancerNamespaceBundleMaxSessions (<= 0: not checked)
    max_msg_rate: int = 30000  # loadBalancerNamespaceBundleMaxMsgRate
    max_bandwidth_mbytes: int = 100  # loadBalancerNamespaceBundleMaxBandwidthMbytes
    max_bundles: int = 128  # loadBalancerNamespaceMaximumBundles
    flow_or_qps_difference_percent: int = 10  # flowOrQpsDifferenceThresholdPercentage


@dataclass(frozen=True)
class BundleStats:
    """Pulsar's NamespaceBundleStats of one bundle: its topics' load summed."""

    bundle: NamespaceBundle
    topics: int
    sessions: int  # producers + consumers
    msg_rate: float  # in + out
    throughput: float  # bytes per second, in + out


def bundle_stats(bundle: NamespaceBundle, loads: Iterable[TopicLoad]) -> BundleStats:
    mine = [t for t in loads if bundle.includes(t.name)]
    return BundleStats(bundle, len(mine), sum(t.producers + t.consumers for t in mine),
                       sum(t.msg_rate for t in mine), sum(t.throughput for t in mine))


# -- the algorithms ------------------------------------------------------------------------------------

def range_equally_divide(bundle: NamespaceBundle) -> list[int]:
    return [bundle.lower + (bundle.upper - bundle.lower) // 2]


def topic_count_equally_divide(bundle: NamespaceBundle, topics: Iterable[str]) -> list[int] | None:
    hashes = sorted(hash_topic(t) for t in topics if bundle.includes(t))
    if len(hashes) <= 1:
        return None
    start = hashes[max(len(hashes) // 2 - 1, 0)]
    end = hashes[len(hashes) // 2]
    return [start + (end - start) // 2]


def specified_positions_divide(bundle: NamespaceBundle, topics: Iterable[str],
                               positions: Sequence[int]) -> list[int] | None:
    if sum(1 for t in topics if bundle.includes(t)) <= 1:
        return None
    inside = sorted({p for p in positions if bundle.lower < p < bundle.upper})
    return inside or None


def flow_or_qps_equally_divide(bundle: NamespaceBundle, loads: Iterable[TopicLoad],
                               thresholds: SplitThresholds) -> list[int] | None:
    by_hash: dict[int, TopicLoad] = {}
    for t in loads:
        if bundle.includes(t.name) and (t.msg_rate > 0 or t.throughput > 0):  # (idle topics: skipped)
            by_hash[hash_topic(t.name)] = t
    max_rate = thresholds.max_msg_rate
    max_bytes = thresholds.max_bandwidth_mbytes * MIBI
    margin = 1 + thresholds.flow_or_qps_difference_percent / 100.0
    total_rate = sum(t.msg_rate for t in by_hash.values())
    total_bytes = sum(t.throughput for t in by_hash.values())
    if len(by_hash) < 2 or (total_rate < max_rate * margin and total_bytes < max_bytes * margin):
        return None
    hashes = sorted(by_hash)
    points: list[int] = []
    rate, nbytes = by_hash[hashes[0]].msg_rate, by_hash[hashes[0]].throughput
    for previous, h in itertools.pairwise(hashes):
        t = by_hash[h]
        if rate > max_rate or nbytes > max_bytes or rate + t.msg_rate > max_rate or nbytes + t.throughput > max_bytes:
            points.append(previous + (h - previous) // 2 + 1)
            rate, nbytes = t.msg_rate, t.throughput
        else:
            rate += t.msg_rate
            nbytes += t.throughput
    return [p for p in points if bundle.lower < p < bundle.upper] or None


def split_points(algorithm: str, bundle: NamespaceBundle, *, topics: Sequence[str] = (),
                 loads: Sequence[TopicLoad] = (), positions: Sequence[int] = (),
                 thresholds: SplitThresholds = SplitThresholds()) -> list[int] | None:
    """Where ``algorithm`` cuts ``bundle`` (None: nowhere). ``topics``: the namespace's topics
    (partitions by their own names); ``loads``: the loaded topics' rates."""
    if algorithm == RANGE_EQUALLY_DIVIDE:
        return range_equally_divide(bundle)
    if algorithm == TOPIC_COUNT_EQUALLY_DIVIDE:
        return topic_count_equally_divide(bundle, topics)
    if algorithm == SPECIFIED_POSITIONS_DIVIDE:
        return specified_positions_divide(bundle, topics, positions)
    if algorithm == FLOW_OR_QPS_EQUALLY_DIVIDE:
        return flow_or_qps_equally_divide(bundle, loads, thresholds)
    raise ValueError(f"unknown split algorithm {algorithm!r}; one of {', '.join(ALGORITHMS)}")


# -- the automatic split (BundleSplitterTask) ---------------------------------------------------------

def bundles_to_split(stats: Iterable[BundleStats], bundle_counts: Mapping[str, int],
                     thresholds: SplitThresholds) -> list[NamespaceBundle]:
    """The bundles past a threshold, in the order given, while each namespace's bundle count plus
    the splits chosen so far stays under ``max_bundles``."""
    chosen: list[NamespaceBundle] = []
    added: dict[str, int] = {}
    max_bytes = thresholds.max_bandwidth_mbytes * MIBI
    for s in stats:
        if s.topics < 2:
            continue
        hot = (s.topics > thresholds.max_topics
               or (thresholds.max_sessions > 0 and s.sessions > thresholds.max_sessions)
               or s.msg_rate > thresholds.max_msg_rate or s.throughput > max_bytes)
        if not hot or not s.bundle.can_split:
            continue
        ns = s.bundle.namespace
        if bundle_counts.get(ns, 0) + added.get(ns, 0) < thresholds.max_bundles:
            chosen.append(s.bundle)
            added[ns] = added.get(ns, 0) + 1
    return chosen
