"""Bookie isolation groups (Pulsar 4.0.7's IsolatedBookieEnsemblePlacementPolicy): which bookies a ledger with
groups may use, on hand-made racks-info configurations, and the client keeping to them (new ensembles, ensemble
changes, the groups recorded in the ledger's custom metadata) against in-process fakes (no Java)."""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator

import pytest

from managed_ledger.api import ManagedLedgerConfig
from managed_ledger.bookkeeper.client import NotEnoughBookiesError
from managed_ledger.bookkeeper.placement import (
    ISOLATED_POLICY_CLASS,
    PLACEMENT_POLICY_CONFIG_KEY,
    IsolationGroups,
    RackConfiguration,
    isolation_excluded,
    isolation_of,
)
from tests.bookkeeper.fakes import FakeCluster

# Two groups of two bookies, and one bookie in no group.
GROUPS: RackConfiguration = {
    "g1": {"a:1": {"rack": "r1"}, "b:1": {"rack": "r2"}},
    "g2": {"c:1": {"rack": "r1"}, "d:1": {"rack": "r2"}},
}
ALL = ["a:1", "b:1", "c:1", "d:1", "e:1"]


def usable(groups: IsolationGroups, ensemble_size: int, configuration: RackConfiguration = GROUPS,
           known: list[str] = ALL) -> set[str]:
    return set(known) - isolation_excluded(groups, configuration, known, ensemble_size)


def test_primary_group_only() -> None:
    assert usable(IsolationGroups("g1"), 2) == {"a:1", "b:1"}
    assert usable(IsolationGroups("g2", "g1"), 2) == {"c:1", "d:1"}
    # several groups, comma-separated
    assert usable(IsolationGroups("g1,g2"), 3) == {"a:1", "b:1", "c:1", "d:1"}


def test_secondary_group_when_the_primary_is_short() -> None:
    """Fewer writable primary bookies than the ensemble: the secondary groups' bookies join."""
    assert usable(IsolationGroups("g1", "g2"), 3) == {"a:1", "b:1", "c:1", "d:1"}
    # a primary bookie that is not writable does not count
    assert usable(IsolationGroups("g1", "g2"), 2, known=["a:1", "c:1", "d:1", "e:1"]) == {"a:1", "c:1", "d:1"}


def test_bookies_of_no_group_last_and_other_groups_never() -> None:
    """Primary and secondary still short: the bookies in no group join, those of other groups never do."""
    assert usable(IsolationGroups("g1"), 3) == {"a:1", "b:1", "e:1"}
    assert usable(IsolationGroups("g1", "g2"), 5) == set(ALL)
    assert usable(IsolationGroups("nope"), 2) == {"e:1"}


def test_no_group_configuration_or_any_group() -> None:
    assert usable(IsolationGroups("g1"), 2, configuration={}) == set(ALL)
    assert usable(IsolationGroups("*"), 2) == set(ALL)
    # strictBookieAffinityEnabled without an affinity group: ("", ""): the bookies of no group only
    assert usable(IsolationGroups("", ""), 1) == {"e:1"}


def test_a_bookie_in_the_primary_and_another_group_is_usable() -> None:
    config: RackConfiguration = {"g1": {"a:1": {}}, "g2": {"a:1": {}, "c:1": {}}}
    assert usable(IsolationGroups("g1"), 1, configuration=config) == {"a:1"}


def test_ledger_metadata_round_trip_as_pulsar_writes_it() -> None:
    groups = IsolationGroups("g1", "g2")
    doc = json.loads(groups.encode())
    assert doc == {"policyClass": ISOLATED_POLICY_CLASS,
                   "properties": {"isolationBookieGroups": "g1", "secondaryIsolationBookieGroups": "g2"}}
    assert IsolationGroups.of_ledger([("application", b"pulsar"), (PLACEMENT_POLICY_CONFIG_KEY, groups.encode())]) \
        == groups
    other = json.dumps({"policyClass": "x.Other", "properties": {"isolationBookieGroups": "g1"}}).encode()
    assert IsolationGroups.of_ledger([(PLACEMENT_POLICY_CONFIG_KEY, other)]) is None
    assert IsolationGroups.of_ledger([(PLACEMENT_POLICY_CONFIG_KEY, b"not json")]) is None
    assert isolation_of(ManagedLedgerConfig()) is None
    assert isolation_of(ManagedLedgerConfig(bookie_affinity=("g1", ""))) == IsolationGroups("g1", "")


# -- the client ----------------------------------------------------------------------------------------------------


@pytest.fixture
async def env() -> AsyncIterator[FakeCluster]:
    async with FakeCluster.running(bookies=5) as cluster:
        cluster.bk.rng = random.Random(11)
        yield cluster


def two_groups(env: FakeCluster) -> tuple[set[str], set[str]]:
    """Bookies 0-1 in group g1, 2-3 in g2 (each group over two racks), bookie 4 in none."""
    ids = sorted(env.bookies)
    g1, g2 = ids[:2], ids[2:4]
    env.bk.racks.set({"g1": {b: {"rack": f"r{i}"} for i, b in enumerate(g1)},
                      "g2": {b: {"rack": f"r{i}"} for i, b in enumerate(g2)}})
    return set(g1), set(g2)


async def test_client_ledgers_with_groups_use_their_bookies(env: FakeCluster) -> None:
    _, g2 = two_groups(env)
    for _ in range(20):
        lh = await env.bk.create_ledger(2, 2, 2, isolation=IsolationGroups("g2"))
        assert set(lh.metadata.last_ensemble.ensemble) == g2
        assert IsolationGroups.of_ledger(lh.metadata.custom_metadata) == IsolationGroups("g2")
        await lh.close()
    # A ledger without groups: any bookie, as before, and nothing recorded.
    seen: set[str] = set()
    for _ in range(30):
        lh = await env.bk.create_ledger(2, 2, 2)
        seen.update(lh.metadata.last_ensemble.ensemble)
        assert IsolationGroups.of_ledger(lh.metadata.custom_metadata) is None
        await lh.close()
    assert seen - g2


async def test_client_default_groups_apply_to_ledgers_without_their_own(env: FakeCluster) -> None:
    """bookkeeperClientIsolationGroups: the client's groups, for the ledgers with none of their own."""
    g1, g2 = two_groups(env)
    env.bk.isolation = IsolationGroups("g1")
    for _ in range(10):
        lh = await env.bk.create_ledger(2, 2, 2)
        assert set(lh.metadata.last_ensemble.ensemble) == g1
        await lh.close()
        lh = await env.bk.create_ledger(2, 2, 2, isolation=IsolationGroups("g2"))
        assert set(lh.metadata.last_ensemble.ensemble) == g2
        await lh.close()


async def test_client_group_short_of_bookies(env: FakeCluster) -> None:
    g1, g2 = two_groups(env)
    lh = await env.bk.create_ledger(3, 2, 2, isolation=IsolationGroups("g1", "g2"))
    assert set(lh.metadata.last_ensemble.ensemble) <= g1 | g2
    await lh.close()
    with pytest.raises(NotEnoughBookiesError):  # g1 and the bookie of no group: 3 of 4 needed
        await env.bk.create_ledger(4, 2, 2, isolation=IsolationGroups("g1"))


async def test_ensemble_change_keeps_to_the_ledgers_group(env: FakeCluster) -> None:
    _, g2 = two_groups(env)
    lh = await env.bk.create_ledger(1, 1, 1, isolation=IsolationGroups("g2"))
    await lh.add_entry(b"before")
    victim = lh.metadata.last_ensemble.ensemble[0]

    env.bookies[victim].fail_adds()
    assert await lh.add_entry(b"after") == 1
    assert lh.metadata.segments[1].ensemble == tuple(g2 - {victim})
    await lh.close()
