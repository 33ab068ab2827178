"""The latency summary behind pulsar_broker_lookup and pulsar_topic_load_times."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.service.operation_stats import WINDOW_LIMIT, LatencySummary, LookupStats


def test_quantiles_cover_the_last_interval_only() -> None:
    s = LatencySummary()
    assert math.isnan(s.quantile(0.5))  # nothing rotated in yet: NaN, as Pulsar's summaries
    for ms in range(1, 101):
        s.observe(float(ms))
    assert math.isnan(s.quantile(0.5))  # still the interval being filled
    s.rotate()
    assert (s.quantile(0.5), s.quantile(0.99), s.quantile(1.0)) == (50.0, 99.0, 100.0)
    assert s.mean() == 50.5 and s.last_count == 100
    s.rotate()  # an interval without observations
    assert math.isnan(s.quantile(0.5)) and s.last_count == 0
    assert (s.count, s.sum_ms) == (100, 5050.0)  # count and sum run since start


def test_window_stays_bounded() -> None:
    s = LatencySummary()
    for ms in range(10 * WINDOW_LIMIT):
        s.observe(float(ms))
    s.rotate()
    assert s.last_count <= WINDOW_LIMIT
    assert abs(s.quantile(0.5) - 5 * WINDOW_LIMIT) < WINDOW_LIMIT / 10
    assert s.count == 10 * WINDOW_LIMIT


def test_lookup_outcomes() -> None:
    stats = LookupStats()
    a, b, c = stats.start(), stats.start(), stats.start()
    assert stats.pending == 3
    stats.done(a)
    stats.done(b, redirect=True)
    stats.done(c, failed=True)
    assert (stats.answers, stats.redirects, stats.failures, stats.pending) == (1, 1, 1, 0)
    assert stats.latency.count == 2  # a failure has no latency, as in Pulsar
    stats.start()
    stats.skipped()  # (ended before the owner lookup: in none of the counts)
    assert (stats.answers, stats.redirects, stats.failures, stats.pending, stats.latency.count) == (1, 1, 1, 0, 2)


@given(st.lists(st.tuples(st.floats(0, 1e4, allow_nan=False), st.integers(0, 3000)), max_size=12))
@settings(max_examples=60, deadline=None)
def test_observe_n_keeps_what_n_observes_would(groups: list[tuple[float, int]]) -> None:
    """A group of adds made durable together (observe_n, the publish-latency path) keeps the same samples,
    count and sum as one observe() per add, also past the window's halving."""
    grouped, one_by_one = LatencySummary(), LatencySummary()
    for ms, n in groups:
        grouped.observe_n(ms, n)
        for _ in range(n):
            one_by_one.observe(ms)
    assert grouped.count == one_by_one.count
    assert math.isclose(grouped.sum_ms, one_by_one.sum_ms, rel_tol=1e-9, abs_tol=1e-6)
    grouped.rotate()
    one_by_one.rotate()
    quantiles = (0.0, 0.5, 0.99, 1.0)
    assert [grouped.quantile(q) for q in quantiles] == [one_by_one.quantile(q) for q in quantiles]
    assert grouped.last_count == one_by_one.last_count
