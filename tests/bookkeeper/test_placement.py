"""Rack-aware ensembles (BookKeeper's RackawareEnsemblePlacementPolicy, Pulsar's default): the rule on hand-made
bookie sets with seeded randomness, and the client using it against in-process fakes (no Java)."""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator

import pytest

from managed_ledger.bookkeeper.client import NotEnoughBookiesError
from managed_ledger.bookkeeper.placement import (
    DEFAULT_RACK,
    RACKS_PATH,
    PlacementPolicy,
    RackMap,
    new_ensemble,
    parse_rack_configuration,
    replacement_bookie,
)
from metadata_store.factory import open_metadata_store
from tests.bookkeeper.fakes import FakeCluster
from tests.waiting import eventually

SEEDS = range(200)
ON = PlacementPolicy()
ENFORCED = PlacementPolicy(enforce_min_racks=True)


def racks(**by_rack: str) -> RackMap:
    """RackMap(r1="a b", r2="c"): bookies a and b on /r1, c on /r2 (one group)."""
    return RackMap({"default": {b: {"rack": rack} for rack, names in by_rack.items() for b in names.split()}})


def write_sets(ensemble: list[str], write_quorum: int) -> list[list[str]]:
    return [[ensemble[(e + i) % len(ensemble)] for i in range(write_quorum)] for e in range(len(ensemble))]


def test_two_racks_ensemble_of_two_spans_both() -> None:
    for seed in SEEDS:
        m = racks(r1="a b", r2="c")
        ensemble = new_ensemble(["a", "b", "c"], m.rack_of, 2, 2, ON, random.Random(seed))
        assert len(set(ensemble)) == 2 and {m.rack_of(b) for b in ensemble} == {"/r1", "/r2"}


def test_every_write_quorum_spans_two_racks() -> None:
    for seed in SEEDS:
        m = racks(r1="a b c", r2="d e f")
        ensemble = new_ensemble(list("abcdef"), m.rack_of, 4, 2, ON, random.Random(seed))
        assert len(set(ensemble)) == 4
        for quorum in write_sets(ensemble, 2):
            assert len({m.rack_of(b) for b in quorum}) == 2, ensemble


def test_the_lone_bookie_of_a_rack_is_always_taken() -> None:
    for seed in SEEDS:
        m = racks(r1="a b c", r2="d")
        assert "d" in new_ensemble(list("abcd"), m.rack_of, 3, 3, ON, random.Random(seed))


def test_three_racks_three_bookies_one_of_each() -> None:
    for seed in SEEDS:
        m = racks(r1="a b", r2="c d", r3="e f")
        ensemble = new_ensemble(list("abcdef"), m.rack_of, 3, 3, PlacementPolicy(min_racks_per_write_quorum=3),
                                random.Random(seed))
        assert sorted(m.rack_of(b) for b in ensemble) == ["/r1", "/r2", "/r3"]


def test_unmeetable_minimum_falls_back_unless_enforced() -> None:
    # An ensemble of 3 with write quorums of 2 round it cannot alternate two racks (odd cycle).
    m = racks(r1="a b", r2="c d")
    for seed in SEEDS:
        ensemble = new_ensemble(list("abcd"), m.rack_of, 3, 2, ON, random.Random(seed))
        assert len(set(ensemble)) == 3
        with pytest.raises(NotEnoughBookiesError):
            new_ensemble(list("abcd"), m.rack_of, 3, 2, ENFORCED, random.Random(seed))


def test_one_rack_is_a_random_pick_or_refused_when_enforced() -> None:
    m = racks(r1="a b c")
    picks = {tuple(new_ensemble(list("abc"), m.rack_of, 2, 2, ON, random.Random(seed))) for seed in SEEDS}
    assert len(picks) == 6  # every ordered pair
    with pytest.raises(NotEnoughBookiesError, match="1 rack"):
        new_ensemble(list("abc"), m.rack_of, 2, 2, ENFORCED, random.Random(0))
    # A minimum of one rack is always met.
    assert len(new_ensemble(list("abc"), m.rack_of, 2, 2, PlacementPolicy(min_racks_per_write_quorum=1,
                                                                         enforce_min_racks=True),
                            random.Random(0))) == 2


def test_enforced_minimum_never_takes_default_rack_bookies() -> None:
    for seed in SEEDS:
        m = racks(r1="a", r2="b")  # c and d have no rack
        assert m.rack_of("c") == DEFAULT_RACK
        assert sorted(new_ensemble(list("abcd"), m.rack_of, 2, 2, ENFORCED, random.Random(seed))) == ["a", "b"]


def test_too_few_bookies() -> None:
    m = racks(r1="a", r2="b")
    with pytest.raises(NotEnoughBookiesError):
        new_ensemble(["a", "b"], m.rack_of, 3, 2, ON, random.Random(0))


def test_replacement_prefers_the_failed_bookies_rack_then_another_rack() -> None:
    for seed in SEEDS:
        m = racks(r1="a b", r2="c d", r3="e")
        rng = random.Random(seed)
        assert replacement_bookie(["b", "d", "e"], m.rack_of, ["a", "c"], "c", ON, rng) == "d"
        # No other bookie of the failed one's rack: one of a rack the rest of the ensemble is not on.
        assert replacement_bookie(["b", "e"], m.rack_of, ["a", "c"], "c", ON, rng) == "e"
        # Only the survivor's rack left: taken unless the minimum is enforced.
        assert replacement_bookie(["b"], m.rack_of, ["a", "c"], "c", ON, rng) == "b"
        with pytest.raises(NotEnoughBookiesError):
            replacement_bookie(["b"], m.rack_of, ["a", "c"], "c", ENFORCED, rng)


def test_rack_names_and_lookups_as_pulsar_reads_them() -> None:
    m = RackMap({"g1": {"10.0.0.1:3181": {"rack": "r1"}, "10.0.0.2:3181": {"rack": "/"},
                        "10.0.0.3:3181": {"rack": ""}},
                 "g2": {"10.0.0.4:3181": {"rack": "/r2", "hostname": "bk4.example"}}})
    assert m.rack_of("10.0.0.1:3181") == "/r1"  # a leading "/" added
    assert m.rack_of("10.0.0.2:3181") == DEFAULT_RACK and m.rack_of("10.0.0.3:3181") == DEFAULT_RACK
    assert m.rack_of("10.0.0.1:3182") == "/r1"  # another bookie of that host
    assert m.rack_of("bookie-4", "bk4.example:3181") == "/r2"  # a custom bookie id, found by its address
    assert m.rack_of("10.0.0.9:3181") == DEFAULT_RACK
    assert not RackMap({}) and bool(m)
    assert parse_rack_configuration(b"") == {} and parse_rack_configuration(b"[1]") == {}
    assert parse_rack_configuration(b'{"g": {"b:1": {"rack": "r"}, "x": 1}, "y": 2}') == {"g": {"b:1": {"rack": "r"}}}


# -- the client ----------------------------------------------------------------------------------------------------


@pytest.fixture
async def env() -> AsyncIterator[FakeCluster]:
    async with FakeCluster.running(bookies=4) as cluster:
        cluster.bk.rng = random.Random(7)
        yield cluster


def split_racks(env: FakeCluster) -> dict[str, str]:
    """Two bookies on /r1, two on /r2, set in the client: bookie -> rack."""
    ids = sorted(env.bookies)
    rack_of = {b: "/r1" if i < 2 else "/r2" for i, b in enumerate(ids)}
    env.bk.racks.set({"default": {b: {"rack": rack} for b, rack in rack_of.items()}})
    return rack_of


async def test_client_ensembles_span_the_racks(env: FakeCluster) -> None:
    rack_of = split_racks(env)
    for _ in range(30):
        lh = await env.bk.create_ledger(2, 2, 2)
        assert {rack_of[b] for b in lh.metadata.last_ensemble.ensemble} == {"/r1", "/r2"}
        await lh.close()


async def test_client_without_racks_picks_as_before(env: FakeCluster) -> None:
    """No rack configured: exactly the random pick of writable bookies it always was."""
    available = await env.bk.writable_bookies()
    env.bk.rng = random.Random(3)
    expected = random.Random(3)
    for _ in range(10):
        lh = await env.bk.create_ledger(2, 2, 2)
        assert list(lh.metadata.last_ensemble.ensemble) == expected.sample(available, 2)
        await lh.close()


async def test_client_enforced_minimum_without_racks_creates_nothing(env: FakeCluster) -> None:
    env.bk.placement = ENFORCED
    with pytest.raises(NotEnoughBookiesError):
        await env.bk.create_ledger(2, 2, 2)


async def test_ensemble_change_keeps_the_racks(env: FakeCluster) -> None:
    rack_of = split_racks(env)
    lh = await env.bk.create_ledger(2, 2, 2)
    await lh.add_entry(b"before")
    victim = lh.metadata.last_ensemble.ensemble[1]

    env.bookies[victim].fail_adds()
    assert await lh.add_entry(b"after") == 1
    replacement = lh.metadata.segments[1].ensemble[1]
    assert replacement != victim and rack_of[replacement] == rack_of[victim]
    await lh.close()


async def test_racks_follow_the_metadata_store(env: FakeCluster) -> None:
    store = await open_metadata_store("memory:")
    try:
        await env.bk.racks.follow(store)
        assert not env.bk.racks.map
        bookie = sorted(env.bookies)[0]
        await store.put(RACKS_PATH, json.dumps({"g": {bookie: {"rack": "r9"}}}).encode(), -1)
        await eventually(lambda: env.bk.rack_of(bookie) == "/r9", "the new rack to be in force")
        await store.delete(RACKS_PATH)
        await eventually(lambda: not env.bk.racks.map, "the racks to be gone")
    finally:
        await env.bk.racks.close()
        await store.close()
