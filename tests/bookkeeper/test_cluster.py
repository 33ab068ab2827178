"""The local cluster: what `make cluster-up` starts is a formatted BookKeeper cluster BookKeeper's own tools accept."""

from __future__ import annotations

import json
from pathlib import Path

from kazoo.client import KazooClient

from cluster.__main__ import main as cluster_main
from cluster.local import LocalCluster, run_bookkeeper_tool


def test_metadata_formatted_and_bookies_registered(bk_cluster: LocalCluster) -> None:
    zk = KazooClient(hosts=bk_cluster.zk_address)
    zk.start(timeout=10)
    try:
        layout, _ = zk.get("/ledgers/LAYOUT")
        assert layout == b"2\norg.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory:1"
        assert zk.exists("/ledgers/INSTANCEID") is not None
        available = set(zk.get_children("/ledgers/available"))
        # A bookie killed by an earlier test stays registered until its ZooKeeper session expires.
        assert {b.address for b in bk_cluster.bookies} | {"readonly"} <= available
    finally:
        zk.stop()
        zk.close()


def test_bookkeeper_shell_lists_the_bookies(bk_cluster: LocalCluster) -> None:
    conf = bk_cluster.bookie_conf(bk_cluster.bookies[0].address)
    done = run_bookkeeper_tool(Path(bk_cluster.state_dir), conf, "listbookies", "-rw")
    assert done.returncode == 0, done.stderr
    for bookie in bk_cluster.bookies:
        assert bookie.address in done.stdout + done.stderr


def test_cluster_json_round_trip(bk_cluster: LocalCluster) -> None:
    body = json.loads(bk_cluster.to_json())
    assert body["metadataStoreUrl"] == f"zk:{bk_cluster.zk_address}"
    assert [b["role"] for b in body["bookies"]] == ["bookie"] * 3
    assert LocalCluster.from_json(bk_cluster.to_json()) == bk_cluster


def test_brokers_other_than_zero_are_refused(tmp_path: Path) -> None:
    assert cluster_main(["up", "--state", str(tmp_path), "--brokers", "1"]) == 2
    assert not (tmp_path / "cluster.json").exists()
