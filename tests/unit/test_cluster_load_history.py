"""The leader's averages of the bundles' load over the brokers' reports (broker.cluster.load_history, Pulsar's
``LoadData.bundleData``), and who reads them: the shedding strategies (short term) and the default placement
strategy (long term, with the bundles just assigned)."""

from __future__ import annotations

import itertools
import random
from types import SimpleNamespace

import pytest

from broker.cluster.bundles import NamespaceBundles
from broker.cluster.data import BrokerUrls, BundleLoad, LoadReport
from broker.cluster.load_history import DEFAULT_LOAD, LONG_SAMPLES, SHORT_SAMPLES, LoadHistory, TimeAverage
from broker.cluster.placement import Placement
from broker.cluster.shedding import MB, ShedderSettings, ThresholdShedder
from broker.config import BrokerConfig
from tests.unit.load_stubs import StubRegistry

NS = "t/ns"
X = [f"{NS}/0x{i * 0x01000000:08x}_0x{(i + 1) * 0x01000000:08x}" for i in range(8)]
TIMES = itertools.count(1)


def report(n: int, loads: dict[str, BundleLoad], cpu: float = 0.0) -> LoadReport:
    """Broker hN's report as it writes it (a new lastUpdate each time) with these bundles' loads."""
    urls = BrokerUrls(f"h{n}:8080", f"pulsar://h{n}:6650", None, f"http://h{n}:8080", None)
    return LoadReport(urls, cpu_usage=cpu, bundles=tuple(loads), bundle_stats=dict(loads),
                      msg_rate_in=sum(v.msg_rate_in for v in loads.values()),
                      msg_throughput_in=sum(v.msg_throughput_in for v in loads.values()),
                      last_update_ms=next(TIMES))


def test_time_average_is_pulsars_running_average() -> None:
    average = TimeAverage(3)
    assert (average.msg_rate_in, average.msg_throughput_out) == (50.0, 50000.0)  # (the defaults, before a sample)
    average.update(BundleLoad(msg_rate_in=300.0))
    assert average.msg_rate_in == 300.0 and average.msg_throughput_out == 0.0  # (the first sample replaces them)
    average.update(BundleLoad(msg_rate_in=600.0))
    assert average.msg_rate_in == 450.0
    average.update(BundleLoad(msg_rate_in=0.0))
    assert average.msg_rate_in == 300.0
    # Past max_samples, each sample weighs 1 / max_samples: (2 x 300 + 900) / 3.
    average.update(BundleLoad(msg_rate_in=900.0))
    assert average.samples == 3 and average.msg_rate_in == 500.0


def test_a_sample_is_taken_only_when_a_report_is_new() -> None:
    history = LoadHistory()
    brokers = {"h1": report(1, {X[0]: BundleLoad(msg_rate_in=100.0)})}
    assert history.observe(brokers)
    assert not history.observe(brokers)  # (the same reports: no sample)
    assert history.bundles[X[0]].short.samples == 1
    # Another broker's new report samples every bundle again, this one's too (as Pulsar's updateBundleData).
    brokers["h2"] = report(2, {X[1]: BundleLoad(msg_rate_in=10.0)})
    assert history.observe(brokers)
    assert history.bundles[X[0]].short.samples == 2 and history.rounds == 2
    # A broker gone counts as a change as well.
    del brokers["h2"]
    assert history.observe(brokers)


def test_short_term_follows_the_last_ten_reports_and_long_term_the_last_thousand() -> None:
    history = LoadHistory()
    for _ in range(20):
        history.observe({"h1": report(1, {X[0]: BundleLoad(msg_rate_in=100.0)})})
    for _ in range(SHORT_SAMPLES):
        history.observe({"h1": report(1, {X[0]: BundleLoad(msg_rate_in=1100.0)})})
    bundle = history.bundles[X[0]]
    assert bundle.short.msg_rate_in == pytest.approx(1100.0 - 1000.0 * (0.9 ** SHORT_SAMPLES))
    assert bundle.long.msg_rate_in == pytest.approx(100.0 + 1000.0 * SHORT_SAMPLES / 30)
    assert bundle.long.max_samples == LONG_SAMPLES
    assert history.long_term_rate(X[0]) == pytest.approx(bundle.long.msg_rate_in)
    assert history.long_term_rate(X[5]) == DEFAULT_LOAD.msg_rate_in + DEFAULT_LOAD.msg_rate_out


def test_a_bundle_no_report_shows_any_more_is_forgotten(monkeypatch: pytest.MonkeyPatch) -> None:
    import broker.cluster.load_history as lh

    now = [1000.0]
    monkeypatch.setattr(lh, "time", SimpleNamespace(monotonic=lambda: now[0]))
    history = LoadHistory()
    history.observe({"h1": report(1, {X[0]: BundleLoad(), X[1]: BundleLoad()})})
    now[0] += lh.FORGET_AFTER_S - 1
    history.observe({"h1": report(1, {X[1]: BundleLoad()})})
    now[0] += 2
    history.observe({"h1": report(1, {X[1]: BundleLoad()})})
    assert set(history.bundles) == {X[1]}


def test_the_shedder_reads_the_short_term_average_not_the_last_report() -> None:
    """h1 is overloaded and sheds its hottest bundle by throughput. X[0] has carried 60 MB/s for ten reports and
    dips to 5 MB/s in the last one; X[1] is steady at 30 MB/s: averaged, X[0] is still the hottest."""
    history = LoadHistory()
    steady = {X[0]: BundleLoad(msg_throughput_in=60 * MB), X[1]: BundleLoad(msg_throughput_in=30 * MB)}
    idle = report(2, {X[2]: BundleLoad(msg_throughput_in=1 * MB)}, cpu=10.0)
    for _ in range(10):
        history.observe({"h1": report(1, steady, cpu=90.0), "h2": idle})
    dipped = {"h1": report(1, {X[0]: BundleLoad(msg_throughput_in=5 * MB), X[1]: BundleLoad(msg_throughput_in=30 * MB)},
                           cpu=90.0), "h2": idle}
    history.observe(dipped)
    shedder = ThresholdShedder(ShedderSettings(history_percentage=0.0, min_throughput_mb=0.0))
    assert shedder.find_bundles_for_unloading(dipped) == {"h1": [X[1]]}  # (the last report alone)
    assert shedder.find_bundles_for_unloading(dipped, short_term=history.short_term()) == {"h1": [X[0]]}


async def test_the_load_manager_samples_the_written_reports_and_sheds_on_the_averages() -> None:
    from broker.cluster.load_manager import LoadManager

    steady = {X[0]: BundleLoad(msg_throughput_in=60 * MB), X[1]: BundleLoad(msg_throughput_in=30 * MB)}
    reports = {"h1:8080": report(1, steady, cpu=90.0), "h2:8080": report(2, {X[2]: BundleLoad()}, cpu=10.0)}
    registry = StubRegistry("h2:8080", reports, leader=True)
    config = BrokerConfig(loadBalancerHistoryResourcePercentage=0.0, loadBalancerBundleUnloadMinThroughputThreshold=0.0)
    placement = Placement(random.Random(1))
    manager = LoadManager(config, registry, placement, lambda ns: NamespaceBundles.equal(ns, 256))  # type: ignore[arg-type]
    for _ in range(9):
        reports["h1:8080"] = report(1, steady, cpu=90.0)
        await manager.observe_reports()
    assert placement.history.rounds == 9
    registry.is_leader = False
    await manager.observe_reports()  # (only the leader samples)
    assert placement.history.rounds == 9
    registry.is_leader = True
    reports["h1:8080"] = report(1, {X[0]: BundleLoad(msg_throughput_in=5 * MB),
                                    X[1]: BundleLoad(msg_throughput_in=30 * MB)}, cpu=90.0)
    asked: list[str] = []

    async def put(url: str) -> None:
        asked.append(url)

    manager._put = put  # type: ignore[method-assign]
    assert await manager.shed_once() == [X[0]]
    assert placement.history.rounds == 10


def test_placement_counts_the_bundles_just_assigned_so_a_burst_spreads() -> None:
    """Three idle brokers and six new bundles of six namespaces, assigned before any report shows them: each
    assignment counts Pulsar's default 100 msg/s for its broker, so they go two to each broker (the namespaces'
    spreading plays no part: one bundle each). With the last reports' rates alone (0 for all), the picks were
    random ties."""
    placement = Placement(random.Random(11))
    brokers = {f"h{i}": report(i, {}) for i in (1, 2, 3)}
    placement.history.observe(brokers)
    picks = [placement.select(NamespaceBundles.equal(f"t/burst{i}", 1).bundles[0], brokers) for i in range(6)]
    assert sorted(str(p) for p in picks) == ["h1", "h1", "h2", "h2", "h3", "h3"]
