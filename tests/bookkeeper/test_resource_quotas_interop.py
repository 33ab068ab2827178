"""Resource quotas shared with Apache Pulsar's own broker on one ZooKeeper: what Pulsar 4.0.7 sets, ours reads, and
the other way round (Pulsar's nodes ``/loadbalance/resource-quota/default`` and ``.../<tenant>/<ns>/<range>``, its
ResourceQuota JSON, written by each side and read by the other through its admin REST API).

Pulsar comes from the jars of `make pulsar-deps` (cluster/apache_pulsar.py); without them, or without ZooKeeper and
BookKeeper, the test skips, except under CI=true, where it fails. Cost: ZooKeeper + 1 bookie,
PulsarClusterMetadataSetup (~15 s) and two starts of Pulsar's broker (30-75 s each on a busy 2-core machine).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from cluster.local import LocalCluster
from tests.bookkeeper.test_apache_pulsar_interop import cluster_set_up_by_pulsar, start_apache, start_our_broker

pytestmark = [pytest.mark.apache_pulsar, pytest.mark.timeout(900)]

ROOT = "/admin/v2/resource-quotas"
# (public/default as PulsarClusterMetadataSetup makes it: 16 bundles)
FIRST = f"{ROOT}/public/default/0x00000000_0x10000000"
SECOND = f"{ROOT}/public/default/0x10000000_0x20000000"
BY_PULSAR = {"msgRateIn": 1.0, "msgRateOut": 2.0, "bandwidthIn": 3.0, "bandwidthOut": 4.0, "memory": 5.0,
             "dynamic": False}
BY_PULSAR_FIRST = {**BY_PULSAR, "msgRateIn": 11.0, "dynamic": True}
BY_OURS = {"msgRateIn": 6.5, "msgRateOut": 7.0, "bandwidthIn": 8.0, "bandwidthOut": 9.0, "memory": 10.0,
           "dynamic": True}
BY_OURS_SECOND = {**BY_OURS, "memory": 0.5, "dynamic": False}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """ZooKeeper, a bookie, and the cluster's metadata written by Pulsar's own PulsarClusterMetadataSetup."""
    yield from cluster_set_up_by_pulsar(tmp_path_factory.mktemp("quota-interop"))


def call(web_url: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(web_url + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"} if data is not None else {})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            text = resp.read()
            return resp.status, json.loads(text) if text else None
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def znode(cluster: LocalCluster, path: str) -> Any:
    zk = KazooClient(hosts=cluster.zk_address)
    zk.start()
    try:
        found = zk.exists(path)
        return None if found is None else json.loads(zk.get(path)[0])
    finally:
        zk.stop()
        zk.close()


def test_quotas_set_by_either_broker_are_read_by_the_other(cluster: LocalCluster, tmp_path: Path) -> None:
    # 1. Pulsar sets the default quota and the first bundle's.
    apache = start_apache(cluster, tmp_path / "apache-1")
    try:
        assert call(apache.web_url, "POST", ROOT, BY_PULSAR) == (204, None)
        assert call(apache.web_url, "POST", FIRST, BY_PULSAR_FIRST) == (204, None)
    finally:
        apache.stop()
    assert znode(cluster, "/loadbalance/resource-quota/default") == BY_PULSAR

    # 2. Ours reads them, sets the second bundle's, resets the first and sets the default.
    ours, web = start_our_broker(cluster, tmp_path / "ours")
    try:
        assert call(web, "GET", ROOT) == (200, BY_PULSAR)
        assert call(web, "GET", FIRST) == (200, BY_PULSAR_FIRST)
        assert call(web, "GET", SECOND) == (200, BY_PULSAR)  # (none of its own: the default)
        assert call(web, "POST", SECOND, BY_OURS_SECOND) == (204, None)
        assert call(web, "DELETE", FIRST) == (204, None)
        assert call(web, "POST", ROOT, BY_OURS) == (204, None)
    finally:
        ours.stop()
    assert znode(cluster, "/loadbalance/resource-quota/public/default/0x00000000_0x10000000") is None
    assert znode(cluster, "/loadbalance/resource-quota/public/default/0x10000000_0x20000000") == BY_OURS_SECOND

    # 3. Pulsar reads what ours wrote.
    apache = start_apache(cluster, tmp_path / "apache-2")
    try:
        assert call(apache.web_url, "GET", ROOT) == (200, BY_OURS)
        assert call(apache.web_url, "GET", FIRST) == (200, BY_OURS)
        assert call(apache.web_url, "GET", SECOND) == (200, BY_OURS_SECOND)
    finally:
        apache.stop()
