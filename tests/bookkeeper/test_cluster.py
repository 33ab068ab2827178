"""The local cluster: what `make cluster-up` starts is a formatted BookKeeper cluster BookKeeper's own tools accept."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pulsar
import pytest
from kazoo.client import KazooClient

from cluster.__main__ import main as cluster_main
from cluster.local import LocalCluster, broker_settings, kill_broker, run_bookkeeper_tool, start_broker


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


def test_a_negative_broker_count_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cluster_main(["up", "--state", str(tmp_path), "--brokers", "-1"]) == 2
    assert "BROKERS=-1" in capsys.readouterr().err
    assert not (tmp_path / "cluster.json").exists()


def test_a_broker_on_the_cluster_is_recorded_and_serves(bk_cluster: LocalCluster) -> None:
    """What `make cluster-up` does for BROKERS=1: a broker subprocess on BookKeeper storage and ZooKeeper metadata,
    in cluster.json (role, pid, URLs), stopped by pid."""
    cluster = LocalCluster(bk_cluster.state_dir, bk_cluster.zookeeper, list(bk_cluster.bookies))
    info = start_broker(cluster, broker_settings(cluster, f"/cluster-json-{uuid.uuid4().hex[:6]}"), "json-broker")
    try:
        body = json.loads(cluster.to_json())
        assert body["brokers"] == [{"role": "broker", "pid": info.pid, "service_url": info.service_url,
                                    "web_url": info.web_url, "directory": info.directory, "log": info.log}]
        assert LocalCluster.from_json(cluster.to_json()).pids()[0] == info.pid
        client = pulsar.Client(info.service_url, operation_timeout_seconds=30)
        try:
            topic = f"persistent://public/default/cluster-json-{uuid.uuid4().hex[:6]}"
            consumer = client.subscribe(topic, "s")
            client.create_producer(topic).send(b"hello")
            assert consumer.receive(timeout_millis=10_000).data() == b"hello"
        finally:
            client.close()
    finally:
        kill_broker(cluster, info)
