"""IntervalBuckets: a batch of observations lands in the buckets it would one at a time."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from managed_ledger.stats import IntervalBuckets

BOUNDS = (128, 512, 1024, 2048)


@given(st.lists(st.lists(st.integers(0, 5000), max_size=20), max_size=5))
def test_add_each_counts_as_adding_one_at_a_time(batches: list[list[int]]) -> None:
    together, alone = IntervalBuckets(BOUNDS), IntervalBuckets(BOUNDS)
    for values in batches:
        together.add_each(values)
        for v in values:
            alone.add(v, 1)
    together.refresh()
    alone.refresh()
    assert (together.counts, together.sum) == (alone.counts, alone.sum)
