"""Pulsar 4.0.7's other classic load-shedding strategies as pure logic (broker.cluster.shedding: OverloadShedder and
UniformLoadShedder, ``loadBalancerLoadSheddingStrategy``), over hand-made load reports, and the load manager using
the configured one."""

from __future__ import annotations

import logging
import random

import pytest

from broker.cluster.bundles import NamespaceBundles
from broker.cluster.data import BrokerUrls, BundleLoad, LoadReport, ResourceWeights
from broker.cluster.placement import Placement
from broker.cluster.shedding import (
    MB,
    OverloadShedder,
    ShedderSettings,
    ThresholdShedder,
    UniformLoadShedder,
    create_strategy,
)
from broker.config import (
    AVG_SHEDDER,
    OVERLOAD_SHEDDER,
    THRESHOLD_SHEDDER,
    UNIFORM_LOAD_SHEDDER,
    BrokerConfig,
    ConfigError,
)
from tests.unit.load_stubs import StubRegistry

NS = "t/ns"
X = [f"{NS}/0x{i * 0x01000000:08x}_0x{(i + 1) * 0x01000000:08x}" for i in range(8)]
HEARTBEAT = "pulsar/standalone/h1:8080/0x00000000_0xffffffff"
HEARTBEAT_V2 = "pulsar/h1:8080/0x00000000_0xffffffff"
SLA = "sla-monitor/standalone/h1:8080/0x00000000_0xffffffff"


def report(n: int, throughput: dict[str, float] | None = None, rates: dict[str, float] | None = None,
           cpu: float = 0.0, bw_in: float = 0.0, memory: float = 0.0) -> LoadReport:
    """A broker owning these bundles: throughput in (bytes/s) and rate in (msg/s) per bundle, the broker's totals
    their sums; CPU in % of one core, bandwidth in and memory in % of their limits."""
    throughput = throughput or {}
    rates = rates or {}
    names = tuple(dict.fromkeys([*throughput, *rates]))
    urls = BrokerUrls(f"h{n}:8080", f"pulsar://h{n}:6650", None, f"http://h{n}:8080", None)
    return LoadReport(urls, cpu_usage=cpu, memory_usage_mb=memory, memory_limit_mb=100.0,
                      msg_throughput_in=sum(throughput.values()), msg_rate_in=sum(rates.values()), bundles=names,
                      bandwidth_in_usage=bw_in, bandwidth_in_limit=100.0 if bw_in else 0.0,
                      bundle_stats={b: BundleLoad(msg_rate_in=rates.get(b, 0.0),
                                                  msg_throughput_in=throughput.get(b, 0.0)) for b in names})


# -- OverloadShedder -----------------------------------------------------------------------------------------------

def test_overload_an_overloaded_broker_sheds_its_hottest_bundles_until_enough() -> None:
    # a at 150 % CPU (threshold 85 %): shed (150 - 85 + 5) % = 70 % of its 100 MB/s, hottest first, until that much.
    brokers = {"a": report(1, {X[0]: 40 * MB, X[1]: 35 * MB, X[2]: 25 * MB}, cpu=150.0),
               "b": report(2, {X[3]: 1 * MB}, cpu=10.0)}
    assert OverloadShedder().find_bundles_for_unloading(brokers) == {"a": [X[0], X[1]]}
    # Exactly at the threshold counts as overloaded (5 % of 100 MB/s: the hottest covers it).
    brokers["a"] = report(1, {X[0]: 40 * MB, X[1]: 35 * MB, X[2]: 25 * MB}, cpu=85.0)
    assert OverloadShedder().find_bundles_for_unloading(brokers) == {"a": [X[0]]}
    # Under it: nothing. ThresholdShedder would shed here (a is 60 points above the average): not this one.
    brokers["a"] = report(1, {X[0]: 40 * MB, X[1]: 35 * MB, X[2]: 25 * MB}, cpu=84.0)
    assert OverloadShedder().find_bundles_for_unloading(brokers) == {}
    assert ThresholdShedder(ShedderSettings(history_percentage=0.0)).find_bundles_for_unloading(brokers) != {}


def test_overload_every_broker_over_the_threshold_sheds_and_the_threshold_is_the_setting() -> None:
    brokers = {"a": report(1, {X[0]: 40 * MB, X[1]: 35 * MB}, cpu=90.0),
               "b": report(2, {X[2]: 30 * MB, X[3]: 20 * MB}, cpu=95.0)}
    # (ThresholdShedder compares with the average: both are near it, nothing.)
    assert OverloadShedder().find_bundles_for_unloading(brokers) == {"a": [X[0]], "b": [X[2]]}
    assert OverloadShedder(ShedderSettings(overloaded_percent=92)).find_bundles_for_unloading(brokers) == \
        {"b": [X[2]]}


def test_overload_no_minimum_throughput_and_no_smoothing() -> None:
    """Unlike ThresholdShedder: no loadBalancerBundleUnloadMinThroughputThreshold, no history: the first report over
    the threshold sheds, however little traffic there is."""
    brokers = {"a": report(1, {X[0]: 2000.0, X[1]: 1000.0}, cpu=90.0), "b": report(2, {}, cpu=90.0)}
    assert OverloadShedder().find_bundles_for_unloading(brokers) == {"a": [X[0]]}


def test_overload_weights_count_cpu_and_bandwidth_not_heap_memory() -> None:
    """OverloadShedder calls the four-weight getMaxResourceUsageWithWeight (CPU, direct memory, bandwidth in, out)."""
    bw = {"a": report(1, {X[0]: 60 * MB, X[1]: 30 * MB}, bw_in=95.0), "b": report(2, {})}
    assert OverloadShedder().find_bundles_for_unloading(bw) == {"a": [X[0]]}
    no_bw = ShedderSettings(weights=ResourceWeights(bandwidth_in=0.0))
    assert OverloadShedder(no_bw).find_bundles_for_unloading(bw) == {}
    memory = {"a": report(1, {X[0]: 60 * MB, X[1]: 30 * MB}, memory=99.0), "b": report(2, {})}
    with_memory = ShedderSettings(weights=ResourceWeights(memory=1.0))
    assert OverloadShedder(with_memory).find_bundles_for_unloading(memory) == {}
    # (Nor does ThresholdShedder: Pulsar 4.0.7's calls the same four-weight form.)
    threshold = ShedderSettings(history_percentage=0.0, min_throughput_mb=0.0, weights=ResourceWeights(memory=1.0))
    assert ThresholdShedder(threshold).find_bundles_for_unloading(memory) == {}


def test_overload_sole_bundle_no_bundle_and_recently_unloaded(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="broker.cluster.shedding")
    sole = {"a": report(1, {X[0]: 90 * MB}, cpu=95.0), "b": report(2, {})}
    assert OverloadShedder().find_bundles_for_unloading(sole) == {}
    assert f"sole namespace bundle {X[0]} is overloading broker a" in caplog.text
    empty = {"a": report(1, {}, cpu=95.0), "b": report(2, {})}
    assert OverloadShedder().find_bundles_for_unloading(empty) == {}
    assert "broker a is overloaded despite having no bundles" in caplog.text
    hot = {"a": report(1, {X[0]: 60 * MB, X[1]: 30 * MB, X[2]: 10 * MB}, cpu=95.0), "b": report(2, {})}
    # The hottest was unloaded recently: the next ones go, until enough.
    assert OverloadShedder().find_bundles_for_unloading(hot, {X[0]}) == {"a": [X[1]]}
    # Every candidate recently unloaded: nothing.
    assert OverloadShedder().find_bundles_for_unloading(hot, set(X)) == {}


def test_heartbeat_and_sla_monitor_bundles_are_never_shed() -> None:
    """LoadData.getBundleDataForLoadShedding leaves out NamespaceService.isSLAOrHeartbeatNamespace's bundles (the
    heartbeat namespaces, both forms, and the SLA monitor's), for every strategy."""
    brokers = {"a": report(1, {SLA: 90 * MB, HEARTBEAT: 80 * MB, HEARTBEAT_V2: 70 * MB, X[0]: 1 * MB}, cpu=95.0),
               "b": report(2, {})}
    assert OverloadShedder().find_bundles_for_unloading(brokers) == {"a": [X[0]]}
    threshold = ShedderSettings(history_percentage=0.0, min_throughput_mb=0.0)
    assert ThresholdShedder(threshold).find_bundles_for_unloading(brokers) == {"a": [X[0]]}
    # A namespace that merely starts with pulsar/ is an ordinary one.
    other = "pulsar/system/0x00000000_0xffffffff"
    brokers = {"a": report(1, {other: 90 * MB, X[0]: 1 * MB}, cpu=95.0), "b": report(2, {})}
    assert OverloadShedder().find_bundles_for_unloading(brokers) == {"a": [other]}


# -- UniformLoadShedder ------------------------------------------------------------------------------------------

def test_uniform_message_rate_branch() -> None:
    # Rates 20000 vs 10000 msg/s: 100 % apart (> 50 %). Up to 20 % of the difference, 2000 msg/s, is to move: a
    # bundle is taken when its rate is at most what is still wanted + 1000 (3000 first: only X[2]; then -1000).
    brokers = {"a": report(1, rates={X[0]: 9000.0, X[1]: 6000.0, X[2]: 3000.0, X[3]: 2000.0}),
               "b": report(2, rates={X[4]: 10000.0})}
    assert UniformLoadShedder().find_bundles_for_unloading(brokers) == {"a": [X[2]]}
    # 14000 instead: 42.9 % apart, nothing.
    brokers["b"] = report(2, rates={X[4]: 14000.0})
    assert UniformLoadShedder().find_bundles_for_unloading(brokers) == {}
    # A lower threshold: 6000 * 0.2 = 1200 wanted (+ 1000): X[3] (2000) fits, then nothing more.
    low = ShedderSettings(msg_rate_difference_percent=40)
    assert UniformLoadShedder(low).find_bundles_for_unloading(brokers) == {"a": [X[3]]}
    # The rate comparison off (0): nothing (throughputs are all 0).
    off = ShedderSettings(msg_rate_difference_percent=0)
    brokers["b"] = report(2, rates={X[4]: 10000.0})
    assert UniformLoadShedder(off).find_bundles_for_unloading(brokers) == {}


def test_uniform_an_idle_broker_counts_as_one() -> None:
    """A lowest rate (or throughput) within 1e-6 of 0 counts as 1 (EPS): no division by zero, a huge difference."""
    brokers = {"a": report(1, rates={X[0]: 4000.0, X[1]: 900.0}), "b": report(2)}
    # (4900 - 1) * 0.2 = 979 wanted, under minUnloadMessage (1000): nothing.
    assert UniformLoadShedder().find_bundles_for_unloading(brokers) == {}
    brokers["a"] = report(1, rates={X[0]: 4000.0, X[1]: 1100.0})
    assert UniformLoadShedder().find_bundles_for_unloading(brokers) == {"a": [X[1]]}


def test_uniform_rate_branch_wins_over_throughput_even_when_it_sheds_nothing() -> None:
    """When the rates are far apart the throughputs are not looked at, even if the rate branch finds too little to
    move (UniformLoadShedder's if/else)."""
    brokers = {"a": report(1, {X[0]: 60 * MB, X[1]: 10 * MB}, rates={X[0]: 2000.0, X[1]: 1000.0}),
               "b": report(2, {X[2]: 1 * MB}, rates={X[2]: 1000.0})}
    # Rates 200 % apart, 400 msg/s wanted < minUnloadMessage 1000: nothing, although throughput is 70 times apart.
    assert UniformLoadShedder().find_bundles_for_unloading(brokers) == {}
    # With the rate comparison off, the throughput branch moves bundles.
    off = ShedderSettings(msg_rate_difference_percent=0)
    assert UniformLoadShedder(off).find_bundles_for_unloading(brokers) == {"a": [X[1]]}


def test_uniform_throughput_branch_and_its_limits() -> None:
    # Throughput 52 MB/s vs 4 MB/s: 13 times (> 4). 20 % of 48 MB/s is wanted: the 4 and 3 MB/s bundles fit.
    brokers = {"a": report(1, {X[0]: 30 * MB, X[1]: 15 * MB, X[2]: 4 * MB, X[3]: 3 * MB}),
               "b": report(2, {X[4]: 4 * MB})}
    assert UniformLoadShedder().find_bundles_for_unloading(brokers) == {"a": [X[2], X[3]]}
    # maxUnloadBundleNumPerShedding: at most one.
    one = ShedderSettings(max_unload_bundle_num=1)
    assert UniformLoadShedder(one).find_bundles_for_unloading(brokers) == {"a": [X[2]]}
    # maxUnloadPercentage 0.5: 24 MB/s wanted: 30 MB/s does not fit, 15, 4 and 3 do.
    half = ShedderSettings(max_unload_percentage=0.5)
    assert UniformLoadShedder(half).find_bundles_for_unloading(brokers) == {"a": [X[1], X[2], X[3]]}
    # Recently unloaded: skipped.
    assert UniformLoadShedder().find_bundles_for_unloading(brokers, {X[2]}) == {"a": [X[3]]}
    # The multiplier threshold above 13, or off: nothing.
    assert UniformLoadShedder(ShedderSettings(msg_throughput_multiplier=13)).find_bundles_for_unloading(brokers) == {}
    assert UniformLoadShedder(ShedderSettings(msg_throughput_multiplier=0)).find_bundles_for_unloading(brokers) == {}
    # Less than minUnloadMessageThroughput (1 MB/s) to move: 20 % of 3.5 MB/s is 0.7 MB/s, nothing.
    small = {"a": report(1, {X[0]: 4 * MB, X[1]: 0.5 * MB}), "b": report(2, {X[4]: 1 * MB})}
    assert UniformLoadShedder().find_bundles_for_unloading(small) == {}
    assert UniformLoadShedder(ShedderSettings(min_unload_message_throughput=0)).find_bundles_for_unloading(small) \
        == {"a": [X[1]]}


def test_uniform_a_sole_bundle_is_not_shed() -> None:
    brokers = {"a": report(1, rates={X[0]: 20000.0}), "b": report(2, rates={X[4]: 1000.0})}
    assert UniformLoadShedder().find_bundles_for_unloading(brokers) == {}


def test_uniform_counts_in_java_ints() -> None:
    """Pulsar keeps the rate still wanted in a MutableInt: the start truncates ((int) 3000.2 = 3000) and so does each
    bundle taken off it (3000 - (int) 2000.5 = 1000): 1999.9 then still fits under 1000 + 1000."""
    brokers = {"a": report(1, rates={X[0]: 16000.6, X[1]: 2000.5, X[2]: 1999.9}),
               "b": report(2, rates={X[4]: 5000.0})}
    assert UniformLoadShedder().find_bundles_for_unloading(brokers) == {"a": [X[1], X[2]]}
    # (int) 2000.8 = 2000: a bundle of 3000.5 does not fit under 2000 + 1000.
    brokers = {"a": report(1, rates={X[0]: 7004.5, X[1]: 3000.5}), "b": report(2)}
    assert UniformLoadShedder().find_bundles_for_unloading(brokers) == {}


# -- configuration and the load manager -------------------------------------------------------------------------

def test_the_four_class_names_are_accepted_and_no_other() -> None:
    for name in (THRESHOLD_SHEDDER, OVERLOAD_SHEDDER, UNIFORM_LOAD_SHEDDER, AVG_SHEDDER):
        assert BrokerConfig.load(None, loadBalancerLoadSheddingStrategy=name).loadBalancerLoadSheddingStrategy == name
    # Pulsar loads the class by its full name (Reflections.createInstance): no short forms.
    with pytest.raises(ConfigError):
        BrokerConfig.load(None, loadBalancerLoadSheddingStrategy="OverloadShedder")
    with pytest.raises(ValueError):
        create_strategy("org.example.MyShedder", ShedderSettings())
    c = BrokerConfig()
    assert (c.loadBalancerMsgRateDifferenceShedderThreshold,
            c.loadBalancerMsgThroughputMultiplierDifferenceShedderThreshold, c.maxUnloadPercentage,
            c.minUnloadMessage, c.minUnloadMessageThroughput, c.maxUnloadBundleNumPerShedding) == \
        (50, 4, 0.2, 1000, 1024 * 1024, -1)
    with pytest.raises(ConfigError, match=r"^maxUnloadBundleNumPerShedding=-2: "):
        BrokerConfig.load(None, maxUnloadBundleNumPerShedding=-2)


async def test_the_load_manager_uses_the_configured_strategy(caplog: pytest.LogCaptureFixture) -> None:
    from broker.cluster.load_manager import LoadManager

    caplog.set_level(logging.INFO, logger="broker.cluster.load_manager")
    # Both near their average (ThresholdShedder: nothing), one over 85 % CPU (OverloadShedder: its hottest bundle);
    # rates 300 % apart (UniformLoadShedder: the 1200 msg/s bundle).
    reports = {"h1:8080": report(1, {X[0]: 60 * MB, X[1]: 30 * MB}, rates={X[0]: 6000.0, X[1]: 1200.0}, cpu=90.0),
               "h2:8080": report(2, {X[2]: 1 * MB, X[3]: 1 * MB}, rates={X[2]: 900.0, X[3]: 900.0}, cpu=80.0)}
    expected = {THRESHOLD_SHEDDER: ("ThresholdShedder", []), OVERLOAD_SHEDDER: ("OverloadShedder", [X[0]]),
                UNIFORM_LOAD_SHEDDER: ("UniformLoadShedder", [X[1]])}
    for class_name, (name, shed) in expected.items():
        config = BrokerConfig(loadBalancerLoadSheddingStrategy=class_name, loadBalancerHistoryResourcePercentage=0.0,
                              loadBalancerBundleUnloadMinThroughputThreshold=0.0)
        manager = LoadManager(config, StubRegistry("h2:8080", reports, leader=True), Placement(random.Random(2)),  # type: ignore[arg-type]
                              lambda ns: NamespaceBundles.equal(ns, 4))
        assert manager.shedder.name == name
        asked: list[str] = []

        async def put(url: str, asked: list[str] = asked) -> None:
            asked.append(url)

        manager._put = put  # type: ignore[method-assign]
        assert await manager.shed_once() == shed
        assert asked == [f"http://h1:8080/admin/v2/namespaces/{b}/unload" for b in shed]
        for b in shed:
            assert f"{name}: unloading bundle {b} from broker h1:8080 to broker h2:8080" in caplog.text


# -- loadBalancerSheddingExcludedNamespaces (PIP-380) --------------------------------------------------------------

EXCLUDED = "t/excluded"
E = [f"{EXCLUDED}/0x{i * 0x01000000:08x}_0x{(i + 1) * 0x01000000:08x}" for i in range(4)]


@pytest.mark.parametrize("class_name", [THRESHOLD_SHEDDER, OVERLOAD_SHEDDER, UNIFORM_LOAD_SHEDDER])
async def test_the_bundles_of_an_excluded_namespace_are_never_shed(class_name: str) -> None:
    """loadBalancerSheddingExcludedNamespaces: whatever the strategy picks of such a namespace is skipped, as
    Pulsar's ModularLoadManagerImpl.doLoadShedding does after findBundlesForUnloading (the strategy's other picks
    are unloaded; no other bundle takes the skipped one's place). Each strategy here picks the excluded namespace's
    hot bundle and, Threshold/OverloadShedder, one more."""
    from broker.cluster.load_manager import LoadManager

    # h1 at 150 % CPU with 100 MB/s: Overload- and ThresholdShedder pick E[0] (40 MB/s) then X[1] (35 MB/s).
    # Rates 9000 against 1000 msg/s: UniformLoadShedder wants 20 % of the 8000 difference, 1600, and takes each
    # bundle of at most that + 1000: X[1] (6000) no, E[0] (2500) yes, then nothing more.
    reports = {"h1:8080": report(1, {E[0]: 40 * MB, X[1]: 35 * MB, X[2]: 25 * MB},
                                 rates={E[0]: 2500.0, X[1]: 6000.0, X[2]: 500.0}, cpu=150.0),
               "h2:8080": report(2, {X[3]: 1 * MB, X[4]: 1 * MB}, rates={X[3]: 500.0, X[4]: 500.0}, cpu=10.0)}

    picked = [E[0]] if class_name == UNIFORM_LOAD_SHEDDER else [E[0], X[1]]
    strategy = create_strategy(class_name, ShedderSettings(history_percentage=0.0, min_throughput_mb=0.0))
    assert strategy.find_bundles_for_unloading(reports) == {"h1:8080": picked}

    async def unloaded(**overrides: object) -> list[str]:
        config = BrokerConfig.load(None, loadBalancerLoadSheddingStrategy=class_name,
                                   loadBalancerHistoryResourcePercentage=0.0,
                                   loadBalancerBundleUnloadMinThroughputThreshold=0.0, **overrides)
        manager = LoadManager(config, StubRegistry("h2:8080", reports, leader=True), Placement(random.Random(2)),  # type: ignore[arg-type]
                              lambda ns: NamespaceBundles.equal(ns, 4))
        asked: list[str] = []

        async def put(url: str) -> None:
            asked.append(url)

        manager._put = put  # type: ignore[method-assign]
        done = await manager.shed_once()
        assert asked == [f"http://h1:8080/admin/v2/namespaces/{b}/unload" for b in done]
        return done

    assert await unloaded() == picked  # (without the key: all of them)
    assert await unloaded(loadBalancerSheddingExcludedNamespaces=f"t/other,{EXCLUDED}") == picked[1:]
    assert await unloaded(loadBalancerSheddingExcludedNamespaces=NS) == [E[0]]


def test_the_excluded_namespaces_key_is_a_list_empty_by_default() -> None:
    """Pulsar's ServiceConfiguration (PIP-380): a set of namespace names, empty by default; comma-separated in a
    configuration file."""
    assert BrokerConfig().loadBalancerSheddingExcludedNamespaces == []
    assert BrokerConfig.load(None, loadBalancerSheddingExcludedNamespaces=" a/b , c/d,").\
        loadBalancerSheddingExcludedNamespaces == ["a/b", "c/d"]
