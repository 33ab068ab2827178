"""Transactions on BookKeeper storage: the coordinator's log, the transaction buffer's snapshot
cursor and the pending acks live in BookKeeper and ZooKeeper; a second broker picks them up; the
Java consume-transform-produce loop under kill -9 ends exactly once on bookies too."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from broker.embedded import BrokerThread
from broker.protocol import pulsar_api_pb2 as pb
from cluster.local import LocalCluster
from tests.transactions.client import TxnWireClient
from tests.transactions.test_java_ctp_kill9 import compile_loop, run_loop_under_kills

E = pb.ServerError
QUIET_S = 0.3


def port(broker: BrokerThread) -> int:
    return int(broker.service_url.rsplit(":", 1)[1])


def test_transactions_survive_a_broker_change_on_bookkeeper(bk_cluster: LocalCluster) -> None:
    tag = uuid.uuid4().hex[:8]
    src, dst = f"persistent://public/default/bk-txn-in-{tag}", f"persistent://public/default/bk-txn-out-{tag}"

    async def first(b: BrokerThread) -> tuple[int, int]:
        c = await TxnWireClient.open(port(b))
        assert not (await c.tc_connect()).HasField("error")
        await c.subscribe(dst, "watch", 11, permits=0)
        await c.producer(src, 1)
        await c.send(1, 0, "in-0")
        await c.subscribe(src, "work", 10)
        (msg,) = await c.receive_n(10, 1)
        await c.producer(dst, 2)
        aborted = await c.new_txn()
        await c.add_partitions(aborted, dst)
        await c.send(2, 0, "aborted", aborted)
        await c.end_txn(aborted, commit=False)
        open_txn = await c.new_txn(timeout_ms=300_000)
        await c.add_partitions(open_txn, dst)
        await c.add_subscription(open_txn, src, "work")
        await c.send(2, 1, "committed-later", open_txn)
        assert not (await c.ack(10, msg, txn=open_txn)).HasField("error")
        await c.close()
        return open_txn

    async def second(b: BrokerThread, open_txn: tuple[int, int]) -> None:
        c = await TxnWireClient.open(port(b))
        assert not (await c.tc_connect()).HasField("error")
        await c.subscribe(dst, "watch", 11)
        try:
            await c.receive(11, wait_s=QUIET_S)
            raise AssertionError("a message of an open or aborted transaction was delivered")
        except TimeoutError:
            pass
        assert not (await c.end_txn(open_txn, commit=True)).HasField("error")
        assert [m.body for m in await c.receive_n(11, 1)] == ["committed-later"]
        await c.subscribe(src, "work", 10)
        try:
            await c.receive(10, wait_s=QUIET_S)
            raise AssertionError("the input acknowledged by the committed transaction came back")
        except TimeoutError:
            pass
        await c.close()

    with bookkeeper_broker(bk_cluster) as b:
        open_txn = asyncio.run(first(b))
    with bookkeeper_broker(bk_cluster) as b:
        asyncio.run(second(b, open_txn))


def bookkeeper_broker(cluster: LocalCluster) -> BrokerThread:
    return BrokerThread(managedLedgerStorage="bookkeeper",
                        bookkeeperMetadataServiceUri=f"zk+hierarchical://{cluster.zk_address}/ledgers",
                        managedLedgerDefaultEnsembleSize=3, managedLedgerDefaultWriteQuorum=2,
                        managedLedgerDefaultAckQuorum=2, transactionCoordinatorEnabled=True)


@pytest.mark.timeout(900)
def test_java_loop_under_kill9_exactly_once_on_bookkeeper(bk_cluster: LocalCluster, tmp_path: Path) -> None:
    """tests/transactions/test_java_ctp_kill9.py's scenario (the Java consume-transform-produce loop
    killed with kill -9, then its broker) with the topics and the coordinator's log on bookies."""
    classes = compile_loop(tmp_path)
    asyncio.run(run_loop_under_kills(tmp_path, classes, {
        "managedLedgerStorage": "bookkeeper",
        "bookkeeperMetadataServiceUri": f"zk+hierarchical://{bk_cluster.zk_address}/ledgers",
        "managedLedgerDefaultEnsembleSize": "2", "managedLedgerDefaultWriteQuorum": "2",
        "managedLedgerDefaultAckQuorum": "2"}))
