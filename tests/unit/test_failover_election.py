"""Which consumer a Failover subscription makes active (broker/dispatch/single_active.elect_active)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from broker.dispatch.single_active import elect_active

# The active consumer Apache Pulsar 4.0.7 standalone chose (activeConsumerName in the topic's stats) with consumers
# a, b and c on a Failover subscription of each non-partitioned topic public/default/fo-check-<i> (run here on
# 2026-12-03; before this broker elected "a", the first name, for every one of them).
APACHE_PULSAR_4_0_7 = {"fo-check-0": "a", "fo-check-1": "a", "fo-check-2": "c", "fo-check-3": "c", "fo-check-4": "b",
                       "fo-check-5": "a", "fo-check-6": "b", "fo-check-7": "b", "fo-check-8": "b", "fo-check-9": "a"}


def consumers(*names: str, priority: int = 0) -> list[SimpleNamespace]:
    return [SimpleNamespace(name=n, priority_level=priority) for n in names]


@pytest.mark.parametrize("topic, expected", sorted(APACHE_PULSAR_4_0_7.items()))
def test_a_non_partitioned_topic_elects_as_apache_pulsar_does(topic: str, expected: str) -> None:
    """A hash ring of the consumers' names (100 points each), read at the topic name's hash (Pulsar's
    AbstractDispatcherSingleActiveConsumer.pickAndScheduleActiveConsumer), whatever order they came in."""
    for names in (("a", "b", "c"), ("c", "a", "b")):
        chosen = elect_active(consumers(*names), -1, f"persistent://public/default/{topic}")
        assert chosen is not None and chosen.name == expected


def test_partitions_spread_by_index_and_priority_comes_first() -> None:
    members = consumers("b", "a", "c") + consumers("z", priority=1)
    assert [elect_active(members, k).name for k in range(4)] == ["a", "b", "c", "a"]  # type: ignore[union-attr]
    # only the highest priority level (the lowest number) is on the ring
    only_z_low = consumers("z", priority=1) + consumers("y", priority=0)
    assert elect_active(only_z_low, -1, "persistent://public/default/any").name == "y"  # type: ignore[union-attr]
    assert elect_active([], -1, "persistent://public/default/any") is None
