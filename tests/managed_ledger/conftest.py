"""Fixtures of the managed-ledger contract suite: every implementation runs every test.

The BookKeeper implementation runs against one real ZooKeeper + 3 bookies shared by the whole session (started
once, stopped by pid); each test gets its own root znode, so names never collide between tests.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from cluster.local import LocalCluster, running_cluster
from managed_ledger import ManagedLedgerFactory
from tests.bookkeeper.conftest import require_cluster_deps
from tests.managed_ledger.ml_support import BOOKKEEPER, IMPLEMENTATIONS, FakeClock, bookkeeper_factory


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(scope="session")
def ml_bk_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    require_cluster_deps()
    with running_cluster(tmp_path_factory.mktemp("ml-bk-cluster"), bookies=3) as cluster:
        yield cluster


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Every test taking ``factory`` runs on every local implementation; the contract suite on BookKeeper too. (The
    nesting stress tests chain 100,000 adds and reads: minutes on bookies; test_bk_ledger.py runs a shorter chain.)"""
    if "factory" in metafunc.fixturenames:
        backends = sorted(IMPLEMENTATIONS)
        if metafunc.module.__name__.rsplit(".", 1)[-1] == "test_contract":
            backends.append(BOOKKEEPER)
        metafunc.parametrize("factory", backends, indirect=True)


@pytest.fixture
async def factory(
    request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock
) -> AsyncIterator[ManagedLedgerFactory]:
    built: ManagedLedgerFactory
    if request.param == BOOKKEEPER:
        cluster: LocalCluster = request.getfixturevalue("ml_bk_cluster")
        built = bookkeeper_factory(cluster.zk_address, clock)
    else:
        built = IMPLEMENTATIONS[request.param](tmp_path, clock)
    yield built
    await built.close()
