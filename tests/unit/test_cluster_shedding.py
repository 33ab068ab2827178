"""The leader's load shedding as pure logic (broker.cluster.shedding: Pulsar's ThresholdShedder), the placement of a
shed bundle (affinity, overloaded owner) and the report's JSON (lastStats, bandwidth)."""

from __future__ import annotations

import dataclasses
import random

from broker.cluster.bundles import NamespaceBundle, NamespaceBundles
from broker.cluster.data import BrokerUrls, BundleLoad, LoadReport, ResourceWeights
from broker.cluster.load_manager import split_stats
from broker.cluster.placement import Placement
from broker.cluster.shedding import MB, ShedderSettings, ThresholdShedder
from tests.unit.load_stubs import StubRegistry

NS = "t/ns"
B = [f"{NS}/0x{i * 0x40000000:08x}_0x{min((i + 1) * 0x40000000, 0xffffffff):08x}" for i in range(4)]
NOW_ONLY = ShedderSettings(history_percentage=0.0, min_throughput_mb=0.0)


def report(n: int, bundles: dict[str, float], cpu: float = 0.0, bw_in: float = 0.0) -> LoadReport:
    """A broker with these bundles (throughput in, bytes/s), CPU % of one core, bandwidth in % of its limit."""
    urls = BrokerUrls(f"h{n}:8080", f"pulsar://h{n}:6650", None, f"http://h{n}:8080", None)
    return LoadReport(urls, cpu_usage=cpu, msg_throughput_in=sum(bundles.values()), bundles=tuple(bundles),
                      bandwidth_in_usage=bw_in, bandwidth_in_limit=100.0 if bw_in else 0.0,
                      bundle_stats={b: BundleLoad(msg_throughput_in=t) for b, t in bundles.items()})


def with_rate(r: LoadReport, rate: float) -> LoadReport:
    """``r`` with ``rate`` msg/s in on each of its bundles (and a new lastUpdate: a report written again)."""
    stats = {b: dataclasses.replace(load, msg_rate_in=rate) for b, load in r.bundle_stats.items()}
    return dataclasses.replace(r, msg_rate_in=rate * len(stats), bundle_stats=stats,
                               last_update_ms=r.last_update_ms + 1)


def test_the_overloaded_broker_sheds_its_hottest_bundles_down_to_the_mark() -> None:
    brokers = {"a": report(1, {B[0]: 60 * MB, B[1]: 30 * MB, B[2]: 10 * MB}, cpu=90.0),
               "b": report(2, {B[3]: 1 * MB}, cpu=10.0)}
    # average 50 %, a at 90 %: shed (90 - 50 - 10 + 5) % = 35 % of its 100 MB/s, hottest first, at least that much.
    plan = ThresholdShedder(NOW_ONLY).find_bundles_for_unloading(brokers)
    assert plan == {"a": [B[0]]}
    # b is 40 points under the average: not overloaded, nothing.
    default = ThresholdShedder(ShedderSettings(history_percentage=0.0))
    assert default.find_bundles_for_unloading(brokers) == {"a": [B[0]]}


def test_within_the_threshold_recent_sole_bundle_and_minimum_throughput() -> None:
    even = {"a": report(1, {B[0]: 20 * MB, B[1]: 20 * MB}, cpu=55.0), "b": report(2, {B[2]: 20 * MB}, cpu=50.0)}
    assert ThresholdShedder(NOW_ONLY).find_bundles_for_unloading(even) == {}
    hot = {"a": report(1, {B[0]: 60 * MB, B[1]: 30 * MB}, cpu=90.0), "b": report(2, {B[3]: 0.0}, cpu=10.0)}
    s = ShedderSettings(history_percentage=0.0)
    # The hottest was unloaded recently: the next one goes.
    assert ThresholdShedder(s).find_bundles_for_unloading(hot, {B[0]}) == {"a": [B[1]]}
    # A sole bundle is never shed.
    sole = {"a": report(1, {B[0]: 90 * MB}, cpu=90.0), "b": report(2, {B[3]: 0.0}, cpu=10.0)}
    assert ThresholdShedder(s).find_bundles_for_unloading(sole) == {}
    # Less to shed than loadBalancerBundleUnloadMinThroughputThreshold (10 MB/s): nothing.
    small = {"a": report(1, {B[0]: 6 * MB, B[1]: 3 * MB}, cpu=90.0), "b": report(2, {B[3]: 0.0}, cpu=10.0)}
    assert ThresholdShedder(s).find_bundles_for_unloading(small) == {}
    # Idle brokers: average 0, nothing.
    idle = {"a": report(1, {B[0]: 0.0, B[1]: 0.0}), "b": report(2, {})}
    assert ThresholdShedder(s).find_bundles_for_unloading(idle) == {}


def test_a_broker_under_the_average_sheds_nothing() -> None:
    """Pulsar 4.0.7's ThresholdShedder skips every broker whose usage is under average + threshold (``currentUsage <
    avgUsage + threshold``): an idle broker far under the average keeps its bundles, even with the minimum
    throughput at 0 (its amount to shed, 0 bytes/s, is not under a minimum of 0)."""
    brokers = {"a": report(1, {B[0]: 60 * MB, B[1]: 30 * MB}, cpu=90.0),
               "b": report(2, {B[2]: 0.0, B[3]: 0.0}, cpu=0.0)}
    assert ThresholdShedder(NOW_ONLY).find_bundles_for_unloading(brokers) == {"a": [B[0]]}


def test_a_broker_first_seen_counts_with_its_current_usage() -> None:
    """Pulsar's updateAvgResourceUsage starts a broker's smoothed usage at its current usage (no history yet), not at
    0: a leader that just took over (or a broker that just joined) sees an overloaded broker as overloaded in its
    first round, instead of some twenty rounds (minutes) later with the default history of 0.9."""
    brokers = {"a": report(1, {B[0]: 60 * MB, B[1]: 30 * MB}, cpu=90.0), "b": report(2, {B[3]: 0.0}, cpu=10.0)}
    fresh = ThresholdShedder(ShedderSettings())  # history 0.9, minimum 10 MB/s
    assert fresh.find_bundles_for_unloading(brokers) == {"a": [B[0]]}


def test_history_smooths_a_spike_and_weights_pick_the_resources() -> None:
    calm = {"a": report(1, {B[0]: 60 * MB, B[1]: 30 * MB}, cpu=20.0), "b": report(2, {B[3]: 0.0}, cpu=20.0)}
    spike = {"a": report(1, {B[0]: 60 * MB, B[1]: 30 * MB}, cpu=100.0), "b": report(2, {B[3]: 0.0}, cpu=20.0)}
    shedder = ThresholdShedder(ShedderSettings(min_throughput_mb=0.0))  # history 0.9
    for _ in range(5):
        shedder.find_bundles_for_unloading(calm)
    # One spike moves a's smoothed usage by a tenth of the jump only: within the threshold.
    assert shedder.find_bundles_for_unloading(spike) == {}
    # Bandwidth counts with its weight (1.0 by default), memory not (0.0 in Pulsar 4.0).
    bw = {"a": report(1, {B[0]: 60 * MB, B[1]: 30 * MB}, bw_in=95.0), "b": report(2, {B[3]: 0.0})}
    assert ThresholdShedder(NOW_ONLY).find_bundles_for_unloading(bw) == {"a": [B[0]]}
    no_bw = ShedderSettings(history_percentage=0.0, min_throughput_mb=0.0,
                            weights=ResourceWeights(bandwidth_in=0.0))
    assert ThresholdShedder(no_bw).find_bundles_for_unloading(bw) == {}


def test_placement_of_a_shed_bundle() -> None:
    bundle = NamespaceBundle.parse(NS, B[0].rsplit("/", 1)[1])
    brokers = {"a": report(1, {B[0]: 60 * MB, B[1]: 30 * MB}, cpu=95.0), "b": report(2, {B[2]: 0.0, B[3]: 0.0})}
    placement = Placement(random.Random(1))
    # Both serve 2 bundles of the namespace; a is overloaded: b.
    assert placement.choose(bundle, brokers) == "b"
    # a serves fewer bundles of the namespace, but is overloaded: the choice is made again among all brokers.
    fewer = {"a": report(1, {B[0]: 60 * MB}, cpu=95.0), "b": report(2, {B[1]: 0.0, B[2]: 0.0, B[3]: 0.0})}
    assert placement.choose(bundle, fewer) == "b"
    # The affinity the leader set when it shed the bundle wins once, if that broker is registered.
    even = {"a": report(1, {}), "b": report(2, {B[1]: 0.0})}
    placement.set_affinity(str(bundle), "b")
    assert placement.select(bundle, even) == "b"
    assert "t/ns/" + bundle.range_name not in placement.affinity
    placement.set_affinity(str(bundle), "gone")
    assert placement.select(bundle, even) == "a"


def test_report_json_carries_last_stats_and_bandwidth() -> None:
    r = report(1, {B[0]: 2 * MB}, bw_in=50.0)
    back = LoadReport.from_bytes("h1:8080", r.to_bytes())
    assert back.bundle_stats == r.bundle_stats and back.bandwidth_in_usage == 50.0
    assert back.max_resource_usage == 0.5
    (stats,) = split_stats({"a": back})
    assert str(stats.bundle) == B[0] and stats.throughput == 2 * MB


def test_anti_affinity_spreads_a_groups_namespaces() -> None:
    from broker.cluster.placement import anti_affinity_allows_unload, spread_anti_affinity

    groups = {"t/a1": "g", "t/a2": "G", "t/a3": "g", "t/free": None}
    placement = Placement(random.Random(3))
    placement.group_of = groups.get
    a2 = NamespaceBundle.parse("t/a2", "0x00000000_0xffffffff")
    a3 = NamespaceBundle.parse("t/a3", "0x00000000_0xffffffff")
    # b is the least loaded, but a serves none of the group while b serves t/a1: a.
    brokers = {"a": report(1, {"t/free/0x00000000_0xffffffff": 0.0}, cpu=50.0),
               "b": report(2, {"t/a1/0x00000000_0xffffffff": 0.0})}
    assert placement.group_counts("g", brokers) == {"b": 1}
    for _ in range(5):
        assert placement.choose(a2, brokers) == "a"
    # Each broker serves one: the fewest wins again (any of the two: the least loaded, b).
    brokers["a"] = with_rate(report(1, {"t/a2/0x00000000_0xffffffff": 0.0}), 100.0)
    placement.history.observe(brokers)
    assert placement.choose(a3, brokers) == "b"
    assert spread_anti_affinity(["a", "b", "c"], {"a": 2, "b": 1}) == ["c"]
    assert spread_anti_affinity(["a", "b"], {"a": 2, "b": 1}) == ["b"]
    # Shedding a group's bundle: only when it may land somewhere less crowded with the group.
    assert anti_affinity_allows_unload("a", ["a", "b"], {"a": 2, "b": 1})
    assert not anti_affinity_allows_unload("a", ["a", "b"], {"a": 1, "b": 1})
    assert anti_affinity_allows_unload("a", ["a", "b"], {"a": 1})
    assert anti_affinity_allows_unload("a", ["a", "b"], {})


def test_failure_domains_come_first_for_a_groups_namespaces() -> None:
    """LoadManagerShared.filterDomainsNotHavingLeastNumberAntiAffinityNamespaces: with failure domains, a group's
    namespace goes to the domain whose brokers serve the fewest of the group, even when another broker serves none
    and is less loaded; a broker no domain lists is in the domain "default"."""
    from broker.cluster.placement import spread_anti_affinity

    groups = {"t/a1": "g", "t/a2": "g", "t/a3": "g"}
    placement = Placement(random.Random(5))
    placement.group_of = groups.get
    a2 = NamespaceBundle.parse("t/a2", "0x00000000_0xffffffff")
    a3 = NamespaceBundle.parse("t/a3", "0x00000000_0xffffffff")
    # a serves t/a1; b (same domain as a, idle) serves none; c (the other domain) is busier.
    brokers = {"a": report(1, {"t/a1/0x00000000_0xffffffff": 0.0}), "b": report(2, {}),
               "c": with_rate(report(3, {"t/other/0x00000000_0xffffffff": 0.0}), 500.0)}
    placement.history.observe(brokers)
    assert placement.choose(a2, brokers) == "b"  # (no domains: the idle broker serving none of the group)
    placement.failure_domains = lambda: {"a": "near", "b": "near", "c": "far"}
    for _ in range(5):
        assert placement.choose(a2, brokers) == "c"
    # c not listed: it is in "default", a domain of its own all the same.
    placement.failure_domains = lambda: {"a": "near", "b": "near"}
    assert placement.choose(a2, brokers) == "c"
    # One of the group in each domain: the domains tie, then the brokers' own counts decide (b serves none).
    brokers["c"] = with_rate(report(3, {"t/a2/0x00000000_0xffffffff": 0.0}), 500.0)
    placement.history.observe(brokers)
    placement.failure_domains = lambda: {"a": "near", "b": "near", "c": "far"}
    assert placement.choose(a3, brokers) == "b"
    # The domain counts are summed over its candidates only; none defined: the brokers' rule alone.
    domains = {"a": "x", "b": "x", "c": "y", "d": "y"}
    assert spread_anti_affinity(["a", "b", "c", "d"], {"a": 1, "c": 1, "d": 1}, domains) == ["b"]
    assert spread_anti_affinity(["b", "d"], {"a": 5, "d": 1}, domains) == ["b"]
    assert spread_anti_affinity(["a", "b", "c"], {"a": 1}, {}) == ["b", "c"]


def test_isolation_candidates_as_apply_namespace_policies() -> None:
    from broker.cluster.placement import isolation_candidates

    def policy(primary: list[str], secondary: list[str], min_limit: int = 1) -> dict[str, object]:
        return {"namespaces": ["t/iso.*"], "primary": primary, "secondary": secondary,
                "auto_failover_policy": {"policy_type": "min_available",
                                         "parameters": {"min_limit": str(min_limit), "usage_threshold": "80"}}}

    brokers = ["10.0.0.1:8080", "10.0.0.2:8080", "10.0.0.3:8080"]
    policies = {"p": policy(["10\\.0\\.0\\.1"], ["10\\.0\\.0\\.2"])}
    # Matched: its primaries; enough of them (min_limit 1): not the secondaries.
    assert isolation_candidates("t/iso-a", brokers, policies) == ["10.0.0.1:8080"]
    # Fewer primaries than min_limit: the secondaries too.
    assert isolation_candidates("t/iso-a", brokers, {"p": policy(["10\\.0\\.0\\.1"], ["10\\.0\\.0\\.2"], 2)}) == \
        ["10.0.0.1:8080", "10.0.0.2:8080"]
    assert isolation_candidates("t/iso-a", brokers[1:], policies) == ["10.0.0.2:8080"]
    # Not matched (the regex matches the whole name): the shared brokers, those no policy names as primary.
    assert isolation_candidates("t/other", brokers, policies) == ["10.0.0.2:8080", "10.0.0.3:8080"]
    assert isolation_candidates("x/t/iso", brokers, policies) == ["10.0.0.2:8080", "10.0.0.3:8080"]
    # No primary nor secondary up: nobody (the lookup fails, as in Pulsar).
    assert isolation_candidates("t/iso-a", ["10.0.0.3:8080"], policies) == []
    assert isolation_candidates("t/x", brokers, {}) == brokers
    # Placement keeps to them even when the others are idler.
    placement = Placement(random.Random(5))
    placement.isolation = lambda: policies
    reports = {b: dataclasses.replace(report(i, {}), urls=BrokerUrls(b, None, None, None, None))
               for i, b in enumerate(brokers)}
    reports["10.0.0.1:8080"] = with_rate(dataclasses.replace(
        report(0, {"t/other/0x00000000_0xffffffff": 0.0}), urls=reports["10.0.0.1:8080"].urls), 1000.0)
    placement.history.observe(reports)
    iso = NamespaceBundle.parse("t/iso-a", "0x00000000_0xffffffff")
    assert placement.choose(iso, reports) == "10.0.0.1:8080"
    assert placement.choose(iso, {"10.0.0.3:8080": reports["10.0.0.3:8080"]}) is None


async def test_only_the_leader_sheds_and_asks_the_owner() -> None:
    from broker.cluster.load_manager import LoadManager
    from broker.config import BrokerConfig

    config = BrokerConfig(loadBalancerHistoryResourcePercentage=0.0, loadBalancerBundleUnloadMinThroughputThreshold=0.0)
    reports = {"h1:8080": report(1, {B[0]: 60 * MB, B[1]: 30 * MB}, cpu=95.0),
               "h2:8080": report(2, {B[2]: 0.0, B[3]: 0.0})}
    registry = StubRegistry("h2:8080", reports, leader=False)
    placement = Placement(random.Random(2))
    manager = LoadManager(config, registry, placement, lambda ns: NamespaceBundles.equal(ns, 4))  # type: ignore[arg-type]
    asked: list[str] = []

    async def put(url: str) -> None:
        asked.append(url)

    manager._put = put  # type: ignore[method-assign]
    assert await manager.shed_once() == [] and asked == []  # not the leader: nothing, whatever the load
    registry.is_leader = True
    assert await manager.shed_once() == [B[0]]
    assert asked == [f"http://h1:8080/admin/v2/namespaces/{B[0]}/unload"]
    assert placement.affinity == {B[0]: "h2:8080"}  # the next lookup gives it to h2
    # Recently unloaded: not again (the next hottest goes instead, still away from h1).
    assert await manager.shed_once() == [B[1]]
    # Shedding off: nothing.
    manager.config = BrokerConfig(loadBalancerSheddingEnabled=False)
    assert await manager.shed_once() == []
