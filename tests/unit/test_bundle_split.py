"""Pulsar's split algorithms and BundleSplitterTask as pure functions, and the single-broker
ownership's unload (in-process fakes of the broker service)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from broker.cluster import split as S
from broker.cluster.bundles import FULL_UPPER, NamespaceBundle, NamespaceBundles, hash_topic
from broker.cluster.ownership import StandaloneOwnership
from broker.topic_name import TopicName

NS = "t/ns"
WHOLE = NamespaceBundle(NS, 0, FULL_UPPER)
FIRST = NamespaceBundle(NS, 0, 0x40000000)


def names_in(bundle: NamespaceBundle, count: int, prefix: str = "x") -> list[str]:
    names = [f"persistent://{NS}/{prefix}{i}" for i in range(2000)]
    found = [n for n in names if bundle.includes(n)][:count]
    assert len(found) == count
    return found


def test_range_equally_divide_is_the_middle() -> None:
    assert S.split_points(S.RANGE_EQUALLY_DIVIDE, FIRST) == [0x20000000]
    assert S.split_points(S.RANGE_EQUALLY_DIVIDE, WHOLE) == [0x7FFFFFFF]
    assert S.split_points(S.RANGE_EQUALLY_DIVIDE, NamespaceBundle(NS, 4, 7)) == [5]


def test_topic_count_equally_divide_halves_the_topics() -> None:
    topics = names_in(FIRST, 6)
    hashes = sorted(hash_topic(t) for t in topics)
    (point,) = S.split_points(S.TOPIC_COUNT_EQUALLY_DIVIDE, FIRST, topics=topics) or []
    assert point == hashes[2] + (hashes[3] - hashes[2]) // 2  # Pulsar's: between the middle two
    assert sum(hash_topic(t) < point for t in topics) == 3
    odd = topics[:5]
    h = sorted(hash_topic(t) for t in odd)
    assert S.split_points(S.TOPIC_COUNT_EQUALLY_DIVIDE, FIRST, topics=odd) == [h[1] + (h[2] - h[1]) // 2]
    # topics outside the bundle do not count; fewer than 2: no boundary
    outside = names_in(NamespaceBundle(NS, 0x40000000, FULL_UPPER), 3, "y")
    assert S.split_points(S.TOPIC_COUNT_EQUALLY_DIVIDE, FIRST, topics=[topics[0], *outside]) is None


def test_specified_positions_divide() -> None:
    topics = names_in(FIRST, 2)
    assert S.split_points(S.SPECIFIED_POSITIONS_DIVIDE, FIRST, topics=topics,
                          positions=[0x30000000, 0x10000000, 0x50000000, 0, 0x30000000]) == [0x10000000, 0x30000000]
    assert S.split_points(S.SPECIFIED_POSITIONS_DIVIDE, FIRST, topics=topics, positions=[0x50000000]) is None
    assert S.split_points(S.SPECIFIED_POSITIONS_DIVIDE, FIRST, topics=topics[:1], positions=[0x10000000]) is None


def test_flow_or_qps_cuts_where_the_rate_would_pass_the_threshold() -> None:
    limits = S.SplitThresholds(max_msg_rate=100, max_bandwidth_mbytes=1000)
    topics = names_in(FIRST, 4)
    by_hash = sorted(topics, key=hash_topic)
    loads = [S.TopicLoad(t, msg_rate_in=40, msg_rate_out=20) for t in by_hash]  # 60 each: 240 in all
    points = S.split_points(S.FLOW_OR_QPS_EQUALLY_DIVIDE, FIRST, loads=loads, thresholds=limits)
    h = [hash_topic(t) for t in by_hash]
    # 60 + 60 > 100: a cut between every two topics (Pulsar's middle + 1)
    assert points == [h[i - 1] + (h[i] - h[i - 1]) // 2 + 1 for i in (1, 2, 3)]
    small = [S.TopicLoad(t, msg_rate_in=20) for t in by_hash]  # 80 < 100 * 1.1: no split
    assert S.split_points(S.FLOW_OR_QPS_EQUALLY_DIVIDE, FIRST, loads=small, thresholds=limits) is None
    idle = [S.TopicLoad(by_hash[0], msg_rate_in=500), *(S.TopicLoad(t) for t in by_hash[1:])]
    assert S.split_points(S.FLOW_OR_QPS_EQUALLY_DIVIDE, FIRST, loads=idle, thresholds=limits) is None  # 1 busy
    with pytest.raises(ValueError):
        S.split_points("no_such", FIRST)


def test_bundles_to_split_as_bundle_splitter_task() -> None:
    bundles = NamespaceBundles.equal(NS, 4).bundles
    limits = S.SplitThresholds(max_topics=3, max_sessions=10, max_msg_rate=100, max_bandwidth_mbytes=1,
                               max_bundles=6)

    def stats(b: NamespaceBundle, topics: int = 2, sessions: int = 0, rate: float = 0.0,
              nbytes: float = 0.0) -> S.BundleStats:
        return S.BundleStats(b, topics, sessions, rate, nbytes)

    assert S.bundles_to_split([stats(bundles[0], topics=4)], {NS: 4}, limits) == [bundles[0]]
    assert S.bundles_to_split([stats(bundles[0], sessions=11)], {NS: 4}, limits) == [bundles[0]]
    assert S.bundles_to_split([stats(bundles[0], rate=101)], {NS: 4}, limits) == [bundles[0]]
    assert S.bundles_to_split([stats(bundles[0], nbytes=S.MIBI + 1)], {NS: 4}, limits) == [bundles[0]]
    assert S.bundles_to_split([stats(bundles[0], topics=3, sessions=10, rate=100, nbytes=S.MIBI)], {NS: 4},
                              limits) == []  # at the thresholds, not past them
    assert S.bundles_to_split([stats(bundles[0], topics=1, rate=1e9)], {NS: 4}, limits) == []  # < 2 topics
    no_sessions = S.SplitThresholds(max_topics=3, max_sessions=0)
    assert S.bundles_to_split([stats(bundles[0], sessions=10_000)], {NS: 4}, no_sessions) == []
    # the maximum counts the splits chosen in the same round
    hot = [stats(b, topics=9) for b in bundles]
    assert S.bundles_to_split(hot, {NS: 4}, limits) == list(bundles[:2])
    assert S.bundles_to_split(hot, {NS: 6}, limits) == []
    tiny = NamespaceBundle(NS, 0, 1)
    assert S.bundles_to_split([stats(tiny, topics=9)], {NS: 4}, limits) == []


def test_bundle_stats_sum_the_bundles_topics() -> None:
    inside = names_in(FIRST, 2)
    outside = names_in(NamespaceBundle(NS, 0x40000000, FULL_UPPER), 1, "y")
    loads = [S.TopicLoad(inside[0], 1, 2, 3, 4, producers=1, consumers=2),
             S.TopicLoad(inside[1], 10, 20, 30, 40, consumers=1), S.TopicLoad(outside[0], 1000, producers=5)]
    assert S.bundle_stats(FIRST, loads) == S.BundleStats(FIRST, 2, 4, 33.0, 77.0)


@dataclass
class FakeTopic:
    name: TopicName


class FakeHost:
    def __init__(self, names: list[str]) -> None:
        self.topics = {n: FakeTopic(TopicName.parse(n)) for n in names}

    def served_topic_names(self) -> list[str]:
        return list(self.topics)

    async def unload_topics(self, names: list[str]) -> int:
        return sum(self.topics.pop(name, None) is not None for name in names)

    def stop_serving_now(self) -> None:
        self.topics.clear()

    def bundle_acquired(self, bundle: NamespaceBundle) -> None:
        return None


async def test_single_broker_unload_closes_the_bundles_topics_only() -> None:
    inside = names_in(FIRST, 3)
    outside = names_in(NamespaceBundle(NS, 0x40000000, FULL_UPPER), 2, "y")
    other_ns = "persistent://t/other/z"
    host = FakeHost([*inside, *outside, other_ns])
    ownership = StandaloneOwnership(host, lambda ns: NamespaceBundles(ns, (0, 0x40000000, FULL_UPPER)))
    await ownership.bundle_split(FIRST, [NamespaceBundle(NS, 0, 0x20000000)])
    assert len(host.topics) == 6  # a split keeps every topic loaded
    assert await ownership.unload_bundle(FIRST) == 3
    assert sorted(host.topics) == sorted([*outside, other_ns])
