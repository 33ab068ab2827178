"""One real ZooKeeper + 3 bookies shared by the BookKeeper tests of this package (started once, stopped by pid)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from cluster.local import LocalCluster, missing_dependencies, running_cluster
from tests.needs import unavailable


def require_cluster_deps(javac: bool = False) -> None:
    """Skip (locally) or fail (CI=true) when the Java side cannot run here."""
    why = missing_dependencies()
    if why is None and javac and shutil.which("javac") is None:
        why = "no `javac` on PATH (a JDK is needed to compile the Java interoperability check)"
    if why is not None:
        unavailable(f"real BookKeeper unavailable: {why}")


@pytest.fixture(scope="package")
def bk_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    require_cluster_deps()
    state: Path = tmp_path_factory.mktemp("bk-cluster")
    with running_cluster(state, bookies=3) as cluster:
        yield cluster
