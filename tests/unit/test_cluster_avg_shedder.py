"""Pulsar 4.0.7's AvgShedder (broker.cluster.shedding) as pure logic over hand-made load reports, its placement
(``loadBalancerLoadPlacementStrategy``), the load manager using one instance for both, and the other placement
strategy, LeastResourceUsageWithWeight."""

from __future__ import annotations

import logging
import random

import pytest

from broker.cluster.bundles import NamespaceBundles
from broker.cluster.data import BrokerUrls, BundleLoad, LoadReport
from broker.cluster.placement import LeastResourceUsageWithWeight, Placement
from broker.cluster.shedding import MB, AvgShedder, ShedderSettings, create_strategy
from broker.config import (
    AVG_SHEDDER,
    LEAST_LONG_TERM_MESSAGE_RATE,
    LEAST_RESOURCE_USAGE_WITH_WEIGHT,
    BrokerConfig,
    ConfigError,
)
from tests.unit.load_stubs import StubRegistry

NS = "t/ns"
X = [f"{NS}/0x{i * 0x01000000:08x}_0x{(i + 1) * 0x01000000:08x}" for i in range(16)]
HEARTBEAT = "pulsar/standalone/h9:8080/0x00000000_0xffffffff"


def report(n: int, cpu: float, rates: dict[str, float] | None = None,
           throughput: dict[str, float] | None = None) -> LoadReport:
    """Broker hN at ``cpu`` % of one core (its score with the default weights) owning these bundles: rate in
    (msg/s) and throughput in (bytes/s) per bundle, the broker's totals their sums."""
    rates = rates or {}
    throughput = throughput or {}
    names = tuple(dict.fromkeys([*rates, *throughput]))
    urls = BrokerUrls(f"h{n}:8080", f"pulsar://h{n}:6650", None, f"http://h{n}:8080", None)
    return LoadReport(urls, cpu_usage=cpu, msg_rate_in=sum(rates.values()),
                      msg_throughput_in=sum(throughput.values()), bundles=names,
                      bundle_stats={b: BundleLoad(msg_rate_in=rates.get(b, 0.0),
                                                  msg_throughput_in=throughput.get(b, 0.0)) for b in names})


def four_brokers() -> dict[str, LoadReport]:
    """Scores 10, 30, 60 and 90: pairs (h1, h4), 80 points apart (a high hit), and (h2, h3), 30 apart (a low hit)."""
    return {"h1": report(1, 10.0, {X[0]: 1000.0}),
            "h2": report(2, 30.0, {X[1]: 2000.0}),
            "h3": report(3, 60.0, {X[2]: 3000.0, X[3]: 3000.0}),
            "h4": report(4, 90.0, {X[4]: 9000.0, X[5]: 6000.0, X[6]: 3000.0, X[7]: 1000.0})}


def test_pairs_from_both_ends_and_the_high_threshold_acts_on_its_second_consecutive_round() -> None:
    shedder = AvgShedder()
    brokers = four_brokers()
    assert shedder.find_bundles_for_unloading(brokers) == {}
    assert (shedder.hits_high, shedder.hits_low) == ({"h1": 1, "h4": 1}, {"h1": 1, "h4": 1, "h2": 1, "h3": 1})
    # Second round: h1/h4 act (2 high hits). h4 moves 20 % of (19000 - 1000) msg/s = 3600: its bundles of more than
    # 0 and at most what is still wanted, highest first: 9000 and 6000 no, 3000 yes (600 left), 1000 no.
    assert shedder.find_bundles_for_unloading(brokers) == {"h4": [X[6]]}
    assert shedder.planned[X[6]][0] == "h1"
    # Acting forgot both brokers' counts; h2/h3 keep counting low hits.
    assert (shedder.hits_high, shedder.hits_low) == ({}, {"h2": 2, "h3": 2})


def test_the_low_threshold_needs_its_count_of_consecutive_rounds_and_a_gap_starts_again() -> None:
    # h2 and h3 30 points apart: low hits only; 8 consecutive rounds (the default) before they act.
    brokers = {"h2": report(2, 30.0, {X[1]: 1000.0}), "h3": report(3, 60.0, {X[2]: 4000.0, X[3]: 3000.0})}
    shedder = AvgShedder()
    for _ in range(7):
        assert shedder.find_bundles_for_unloading(brokers) == {}
    # A round within 15 points of each other forgets their counts (a spike filtered out)...
    calm = {"h2": report(2, 50.0, {X[1]: 1000.0}), "h3": report(3, 60.0, {X[2]: 4000.0, X[3]: 3000.0})}
    assert shedder.find_bundles_for_unloading(calm) == {}
    assert shedder.hits_low == {}
    for _ in range(7):
        assert shedder.find_bundles_for_unloading(brokers) == {}
    # ... so the eighth consecutive round acts: 20 % of 6000 msg/s = 1200: the 4000 and 3000 msg/s bundles are larger.
    assert shedder.find_bundles_for_unloading(brokers) == {}
    assert shedder.hits_low == {}  # (it acted, and found nothing small enough: counts forgotten all the same)
    shedder = AvgShedder(ShedderSettings(avg_hit_count_low=2, max_unload_percentage=0.5))
    assert shedder.find_bundles_for_unloading(brokers) == {}
    assert shedder.find_bundles_for_unloading(brokers) == {"h3": [X[3]]}  # (half of 6000: 3000)


def test_a_middle_broker_of_an_odd_count_is_its_own_pair_and_counts_nothing() -> None:
    brokers = four_brokers()
    del brokers["h2"]  # scores 10, 60, 90: (h1, h4) and h3 alone
    shedder = AvgShedder(ShedderSettings(avg_hit_count_high=1))
    assert shedder.find_bundles_for_unloading(brokers) == {"h4": [X[6]]}
    assert "h3" not in shedder.hits_low


def test_rate_first_then_throughput_then_nothing(caplog: pytest.LogCaptureFixture) -> None:
    settings = ShedderSettings(avg_hit_count_high=1)
    # Rates 100 msg/s apart (20 % is 20, under minUnloadMessage 1000); throughput 50 MB/s apart: 10 MB/s moved.
    brokers = {"h1": report(1, 10.0, {X[0]: 100.0}, {X[0]: 1 * MB}),
               "h2": report(2, 90.0, {X[1]: 100.0, X[2]: 100.0},
                            {X[1]: 40 * MB, X[2]: 8 * MB, X[3]: 3 * MB})}
    assert AvgShedder(settings).find_bundles_for_unloading(brokers) == {"h2": [X[2]]}
    # Both under their minimum: nothing, and a line says why.
    caplog.set_level(logging.INFO, logger="broker.cluster.shedding")
    brokers["h2"] = report(2, 90.0, {X[1]: 100.0, X[2]: 100.0}, {X[1]: 2 * MB, X[2]: 1 * MB})
    assert AvgShedder(settings).find_bundles_for_unloading(brokers) == {}
    assert "nothing unloaded" in caplog.text


def test_recently_unloaded_exempt_and_idle_bundles_are_not_picked_and_a_sole_bundle_is() -> None:
    settings = ShedderSettings(avg_hit_count_high=1, max_unload_percentage=1.0)
    brokers = {"h1": report(1, 10.0), "h2": report(2, 90.0, {X[1]: 3000.0, X[2]: 2000.0, X[3]: 0.0, HEARTBEAT: 10.0})}
    assert AvgShedder(settings).find_bundles_for_unloading(brokers) == {"h2": [X[1], X[2]]}
    assert AvgShedder(settings).find_bundles_for_unloading(brokers, recently_unloaded={X[1]}) == {"h2": [X[2]]}
    # A broker with a single bundle is warned about, not spared (unlike the classic strategies).
    brokers["h2"] = report(2, 90.0, {X[1]: 3000.0})
    assert AvgShedder(settings).find_bundles_for_unloading(brokers) == {"h2": [X[1]]}


def test_placement_sends_a_shed_bundle_where_it_was_planned_and_any_other_at_random_remembered() -> None:
    shedder = AvgShedder(ShedderSettings(avg_hit_count_high=1), rng=random.Random(5))
    assert shedder.find_bundles_for_unloading(four_brokers()) == {"h4": [X[6]]}
    assert shedder.select_broker(["h1", "h2", "h3"], X[6]) == "h1"
    # The planned broker gone: another at random, and the bundle keeps it.
    other = shedder.select_broker(["h2", "h3"], X[6])
    assert other in ("h2", "h3")
    assert all(shedder.select_broker(["h2", "h3"], X[6]) == other for _ in range(10))
    # A bundle it never planned: at random among the candidates, then the same while that one is a candidate.
    picks = {shedder.select_broker(["h1", "h2", "h3", "h4"], X[i]) for i in range(8, 16)}
    assert len(picks) > 1
    assert shedder.select_broker([], X[8]) is None


def test_configuration_keys_and_the_two_strategies_must_agree() -> None:
    c = BrokerConfig()
    assert (c.loadBalancerAvgShedderLowThreshold, c.loadBalancerAvgShedderHighThreshold,
            c.loadBalancerAvgShedderHitCountLowThreshold,
            c.loadBalancerAvgShedderHitCountHighThreshold) == (15, 40, 8, 2)
    assert c.loadBalancerLoadPlacementStrategy == LEAST_LONG_TERM_MESSAGE_RATE
    assert create_strategy(AVG_SHEDDER, ShedderSettings()).name == "AvgShedder"
    # AvgShedder sheds with the default placement (its plans then go unused), and does both.
    BrokerConfig.load(None, loadBalancerLoadSheddingStrategy=AVG_SHEDDER).check()
    BrokerConfig.load(None, loadBalancerLoadSheddingStrategy=AVG_SHEDDER,
                      loadBalancerLoadPlacementStrategy=AVG_SHEDDER).check()
    # Placing with it while another strategy sheds: refused at start, as Pulsar's ModularLoadManagerImpl does.
    with pytest.raises(ConfigError, match=r"The load shedding strategy: .*ThresholdShedder can't work with the "
                                          r"placement strategy: .*AvgShedder"):
        BrokerConfig.load(None, loadBalancerLoadPlacementStrategy=AVG_SHEDDER).check()
    with pytest.raises(ConfigError, match=r"^loadBalancerLoadPlacementStrategy=LeastResourceUsageWithWeight: "
                                          r"expected one of .*\(the full class name\)"):
        BrokerConfig.load(None, loadBalancerLoadPlacementStrategy="LeastResourceUsageWithWeight")
    assert c.loadBalancerAverageResourceUsageDifferenceThresholdPercentage == 10
    with pytest.raises(ConfigError, match=r"^loadBalancerAvgShedderHitCountLowThreshold=-1: "):
        BrokerConfig.load(None, loadBalancerAvgShedderHitCountLowThreshold=-1)


@pytest.mark.parametrize("placement_strategy", [AVG_SHEDDER, LEAST_LONG_TERM_MESSAGE_RATE])
async def test_the_load_manager_sends_the_bundle_to_the_planned_broker_only_when_avg_shedder_places(
        placement_strategy: str, caplog: pytest.LogCaptureFixture) -> None:
    """h1 busy (score 90), h2 idle (10) but with the highest message rate of the other two, h3 in the middle (50)
    with the lowest. AvgShedder pairs h2 with h1 and plans h1's bundle for h2; LeastLongTermMessageRate would send it
    to h3 (the lowest rate). Each of h2 and h3 serves one bundle of the namespace, h1 two."""
    from broker.cluster.load_manager import LoadManager

    caplog.set_level(logging.INFO, logger="broker.cluster.load_manager")
    reports = {"h1:8080": report(1, 90.0, {X[0]: 20000.0, X[1]: 3000.0}),
               "h2:8080": report(2, 10.0, {X[2]: 5000.0}),
               "h3:8080": report(3, 50.0, {X[3]: 100.0})}
    config = BrokerConfig.load(None, loadBalancerLoadSheddingStrategy=AVG_SHEDDER,
                               loadBalancerLoadPlacementStrategy=placement_strategy,
                               loadBalancerAvgShedderHitCountHighThreshold=1)
    placement = Placement(random.Random(2))
    manager = LoadManager(config, StubRegistry("h2:8080", reports, leader=True), placement,  # type: ignore[arg-type]
                          lambda ns: NamespaceBundles.equal(ns, 16))
    assert manager.shedder.name == "AvgShedder"
    assert (placement.strategy is not None) == (placement_strategy == AVG_SHEDDER)
    assert placement.strategy is None or placement.strategy is manager.shedder  # type: ignore[comparison-overlap]
    asked: list[str] = []

    async def put(url: str) -> None:
        asked.append(url)

    manager._put = put  # type: ignore[method-assign]
    # 20 % of (23000 - 5000) = 3600 msg/s: the 3000 msg/s bundle.
    assert await manager.shed_once() == [X[1]]
    assert asked == [f"http://h1:8080/admin/v2/namespaces/{X[1]}/unload"]
    dest = "h2:8080" if placement_strategy == AVG_SHEDDER else "h3:8080"
    assert placement.affinity == {X[1]: dest}
    assert f"AvgShedder: unloading bundle {X[1]} from broker h1:8080 to broker {dest}" in caplog.text


def test_placement_with_avg_shedder_for_a_lookup_keeps_the_namespace_spreading_first() -> None:
    """Pulsar's pipeline narrows the candidates (fewest bundles of the namespace) before the strategy picks: a new
    bundle lands on a broker serving none of its namespace, whichever the strategy would pick of all."""
    reports = {"h1:8080": report(1, 90.0, {X[0]: 20000.0}), "h2:8080": report(2, 10.0, {X[2]: 5000.0}),
               "h3:8080": report(3, 50.0)}
    placement = Placement(random.Random(1))
    placement.strategy = AvgShedder(rng=random.Random(3))
    bundle = NamespaceBundles.equal(NS, 16).bundles[9]
    assert placement.select(bundle, reports) == "h3:8080"
    # The strategy remembers it for the bundle.
    assert placement.strategy.planned[str(bundle)][0] == "h3:8080"


# -- LeastResourceUsageWithWeight --------------------------------------------------------------------------------

def busy(n: int, cpu: float) -> LoadReport:
    """A broker with a bundle and some messages (so its usage is smoothed from round to round)."""
    return report(n, cpu, {X[n]: 100.0})


def test_least_resource_usage_picks_among_those_well_under_the_average() -> None:
    strategy = LeastResourceUsageWithWeight(rng=random.Random(4))
    brokers = {"h1": busy(1, 10.0), "h2": busy(2, 15.0), "h3": busy(3, 70.0)}
    # Average 31.7 %: h1 and h2 are 10 points or more under it, h3 is not.
    assert {strategy.select_broker(["h1", "h2", "h3"], X[9], brokers) for _ in range(20)} == {"h1", "h2"}
    # Among h1 and h2 alone (average 12.5 %), neither is 10 points under: any of them, at random.
    assert {strategy.select_broker(["h1", "h2"], X[9], brokers) for _ in range(20)} == {"h1", "h2"}
    assert strategy.select_broker([], X[9], brokers) is None


def test_least_resource_usage_smooths_the_usage_at_each_choice_and_restarts_an_idle_broker() -> None:
    strategy = LeastResourceUsageWithWeight(rng=random.Random(4))
    brokers = {"h1": busy(1, 0.0), "h2": busy(2, 50.0)}
    assert strategy.select_broker(["h1", "h2"], X[9], brokers) == "h1"
    # h1 jumps to 90 %: smoothed, 0.9 x 0 + 0.1 x 90 = 9 %; h2 at 50 % still: h1 is still the one.
    brokers["h1"] = busy(1, 90.0)
    assert strategy.select_broker(["h1", "h2"], X[9], brokers) == "h1"
    assert strategy.avg_usage["h1"] == pytest.approx(0.09)
    # A broker with no messages in or out (or no bundles) starts again from its usage now.
    brokers["h1"] = report(1, 90.0, {X[1]: 0.0})
    assert strategy.select_broker(["h1", "h2"], X[9], brokers) == "h2"
    assert strategy.avg_usage["h1"] == pytest.approx(0.9)
    # A broker gone from the registry is forgotten.
    del brokers["h1"]
    strategy.select_broker(["h2"], X[9], brokers)
    assert set(strategy.avg_usage) == {"h2"}


def test_the_load_manager_installs_least_resource_usage_with_its_settings() -> None:
    from broker.cluster.load_manager import LoadManager

    reports = {"h1:8080": busy(1, 10.0)}
    config = BrokerConfig.load(None, loadBalancerLoadPlacementStrategy=LEAST_RESOURCE_USAGE_WITH_WEIGHT,
                               loadBalancerAverageResourceUsageDifferenceThresholdPercentage=25,
                               loadBalancerHistoryResourcePercentage=0.5)
    placement = Placement(random.Random(2))
    LoadManager(config, StubRegistry("h1:8080", reports, leader=True), placement,  # type: ignore[arg-type]
                lambda ns: NamespaceBundles.equal(ns, 16))
    assert isinstance(placement.strategy, LeastResourceUsageWithWeight)
    assert (placement.strategy.difference, placement.strategy.history) == (0.25, 0.5)
    # A lookup's placement asks it: h2 at 20 % is not 25 points under the average of 10 and 20: either.
    reports["h2:8080"] = busy(2, 20.0)
    bundle = NamespaceBundles.equal(NS, 16).bundles[9]
    assert placement.choose(bundle, reports) in reports
    assert set(placement.strategy.avg_usage) == {"h1:8080", "h2:8080"}
