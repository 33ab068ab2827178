"""`make cluster-up BROKERS=2` (python -m cluster up): two brokers on one ZooKeeper and BookKeeper, distinct ports,
recorded in cluster.json, both registered and sharing the work; `cluster-down` stops exactly those pids."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pulsar
from kazoo.client import KazooClient

from cluster.__main__ import main as cluster_main
from tests.bookkeeper.conftest import require_cluster_deps


def test_cluster_up_with_two_brokers(tmp_path: Path) -> None:
    require_cluster_deps()
    state = tmp_path / "state"
    assert cluster_main(["up", "--state", str(state), "--bookies", "1", "--brokers", "2"]) == 0
    description = json.loads((state / "cluster.json").read_text())
    pids = [p["pid"] for p in [description["zookeeper"], *description["bookies"], *description["brokers"]]]
    try:
        brokers = description["brokers"]
        assert len(brokers) == 2
        assert len({b["service_url"] for b in brokers}) == 2 and len({b["web_url"] for b in brokers}) == 2
        zk = KazooClient(hosts=description["metadataStoreUrl"].removeprefix("zk:"))
        zk.start(timeout=30)
        try:
            assert set(zk.get_children("/loadbalance/brokers")) == {b["web_url"].removeprefix("http://")
                                                                   for b in brokers}
        finally:
            zk.stop()
            zk.close()
        client = pulsar.Client(brokers[1]["service_url"], operation_timeout_seconds=30)
        try:
            producer = client.create_producer("persistent://public/default/cluster-up")
            producer.send(b"hello")
            consumer = client.subscribe("persistent://public/default/cluster-up", "s",
                                        initial_position=pulsar.InitialPosition.Earliest)
            assert consumer.receive(30_000).data() == b"hello"
        finally:
            client.close()
    finally:
        assert cluster_main(["down", "--state", str(state)]) == 0
    running = [pid for pid in pids if runs(pid)]
    assert not running, f"pids {running} still run after cluster-down"


def runs(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie left for its parent to reap does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
