"""Transactions over the wire against an in-process broker (transactionCoordinatorEnabled=true):
the coordinator's requests and errors, transactional produce (the buffer, its read limit and
markers) and acknowledge (pending acks, conflicts), commit and abort, timeouts, restarts."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from broker.embedded import Broker
from broker.protocol import pulsar_api_pb2 as pb
from broker.protocol import pulsar_markers_pb2 as mk
from broker.protocol.entry import entry_body, peek_broker_entry_metadata, read_entry_metadata
from broker.service.replicated_subscriptions import ReplicatedSubscriptionsController, marker_entry
from broker.service.topic import PersistentTopic
from broker.topic_name import TopicName
from broker.transactions.model import ASSIGN_TOPIC, TxnID, TxnStatus
from broker.vocabulary import BROKER_ENTRY_INTERCEPTORS
from managed_ledger import ManagedLedger, Position
from managed_ledger.api import AddCallback
from tests.admin.metric_table import expected
from tests.component.wire import port_of
from tests.transactions.client import Output, T, TxnWireClient, consume_and_produce, waiting_inputs
from tests.waiting import eventually

E = pb.ServerError
IN = "persistent://public/default/txn-in"
OUT1 = "persistent://public/default/txn-out-1"
OUT2 = "persistent://public/default/txn-out-2"
QUIET_S = 0.3  # how long "nothing arrives" is watched for (never asserted on time)


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    async with Broker(data_dir=tmp_path, transactionCoordinatorEnabled=True) as b:
        yield b


@pytest.fixture
async def client(broker: Broker) -> AsyncIterator[TxnWireClient]:
    c = await TxnWireClient.open(port_of(broker))
    assert not (await c.tc_connect(0)).HasField("error")
    yield c
    await c.close()


async def nothing_arrives(c: TxnWireClient, consumer_id: int) -> None:
    with pytest.raises(TimeoutError):
        await c.receive(consumer_id, wait_s=QUIET_S)


async def test_disabled_by_default_refuses_every_transaction_command(tmp_path: Path) -> None:
    async with Broker(data_dir=tmp_path) as b:
        c = await TxnWireClient.open(port_of(b))
        cmd = pb.BaseCommand(type=T.TC_CLIENT_CONNECT_REQUEST)
        cmd.tcClientConnectRequest.tc_id = 0
        reply = await c.request(cmd, cmd.tcClientConnectRequest)
        assert reply.type == T.ERROR and reply.error.error == E.NotAllowedError
        await c.producer(OUT1, 1)
        receipt = await c.send(1, 0, "x", txn=(0, 0))
        assert receipt.type == T.SEND_ERROR and receipt.send_error.error == E.NotAllowedError
        meta = pb.BaseCommand(type=T.PARTITIONED_METADATA)
        meta.partitionMetadata.topic = "persistent://pulsar/system/transaction_coordinator_assign"
        reply = await c.request(meta, meta.partitionMetadata)
        # No assignment topic: the Java and Go clients then refuse to start transactions.
        assert reply.partitionMetadataResponse.partitions == 0
        await c.close()


async def test_assign_topic_has_one_partition_and_unknown_coordinator_is_refused(client: TxnWireClient) -> None:
    meta = pb.BaseCommand(type=T.PARTITIONED_METADATA)
    meta.partitionMetadata.topic = "persistent://pulsar/system/transaction_coordinator_assign"
    reply = await client.request(meta, meta.partitionMetadata)
    assert reply.partitionMetadataResponse.partitions == 1
    assert (await client.tc_connect(1)).error == E.TransactionCoordinatorNotFound
    assert (await client.new_txn_raw(tc_id=5)).error == E.TransactionCoordinatorNotFound


async def test_new_txn_ids_and_status_errors(client: TxnWireClient) -> None:
    t1 = await client.new_txn()
    t2 = await client.new_txn()
    assert t1 == (0, 0) and t2 == (0, 1)  # most = coordinator id, least = its sequence
    assert (await client.add_partitions((0, 99), OUT1)).error == E.TransactionNotFound
    assert not (await client.end_txn(t1, commit=True)).HasField("error")
    # Ended: forgotten (Pulsar answers TransactionNotFound for it from then on)
    assert (await client.end_txn(t1, commit=False)).error == E.TransactionNotFound
    assert (await client.add_partitions(t1, OUT1)).error == E.TransactionNotFound


async def topic_of(broker: Broker, name: str) -> PersistentTopic:
    assert broker.server is not None
    return await broker.server.service.get_persistent_topic(TopicName.parse(name), create=False)


async def test_commit_across_two_topics_and_a_subscription(broker: Broker, client: TxnWireClient) -> None:
    inputs = await waiting_inputs(client, IN, 2)
    # observers: a durable consumer on each output topic and a reader
    await client.subscribe(OUT1, "watch", 11)
    await client.subscribe(OUT2, "watch", 12)
    await client.subscribe(OUT1, "reader", 13, durable=False)

    txn = await client.new_txn()
    assert not (await client.add_partitions(txn, OUT1, OUT2)).HasField("error")
    assert not (await client.add_subscription(txn, IN, "work")).HasField("error")
    await client.producer(OUT1, 2)
    await client.producer(OUT2, 3)
    assert (await client.send(2, 0, "out-a", txn)).type == T.SEND_RECEIPT
    assert (await client.send(3, 0, "out-b", txn)).type == T.SEND_RECEIPT
    ack = await client.ack(10, *inputs, txn=txn)
    assert not ack.HasField("error") and (ack.txnid_most_bits, ack.txnid_least_bits) == txn
    # Uncommitted: nobody sees the outputs, GET_LAST_MESSAGE_ID does not show them, and the
    # inputs stay unacknowledged.
    await nothing_arrives(client, 11)
    await nothing_arrives(client, 13)
    assert (await client.last_message_id(11))[1] < 0
    work = (await topic_of(broker, IN)).subscriptions["work"]
    assert work.cursor.number_of_entries_in_backlog() == 2

    assert not (await client.end_txn(txn, commit=True)).HasField("error")
    assert [m.body for m in await client.receive_n(11, 1)] == ["out-a"]
    assert [m.body for m in await client.receive_n(12, 1)] == ["out-b"]
    assert [m.body for m in await client.receive_n(13, 1)] == ["out-a"]
    assert work.cursor.number_of_entries_in_backlog() == 0
    # the commit markers are never delivered
    await nothing_arrives(client, 11)


async def test_abort_drops_messages_and_redelivers_acked_inputs(broker: Broker, client: TxnWireClient) -> None:
    (first,) = await waiting_inputs(client, IN, 1, pb.CommandSubscribe.Shared)
    await client.subscribe(OUT1, "watch", 11)
    await client.subscribe(OUT1, "reader", 13, durable=False)
    await client.producer(OUT1, 2)

    txn = await client.new_txn()
    await client.add_partitions(txn, OUT1)
    await client.add_subscription(txn, IN, "work")
    assert (await client.send(2, 0, "aborted", txn)).type == T.SEND_RECEIPT
    # as the Go client sends: the transaction only in CommandSend
    assert (await client.send(2, 2, "aborted-go", txn, txn_in_metadata=False)).type == T.SEND_RECEIPT
    assert not (await client.ack(10, first, txn=txn)).HasField("error")
    # Ordinary messages after the open transaction's first entry wait behind it (order is kept).
    assert (await client.send(2, 3, "plain")).type == T.SEND_RECEIPT
    await nothing_arrives(client, 11)

    assert not (await client.end_txn(txn, commit=False)).HasField("error")
    (plain,) = await client.receive_n(11, 1)
    assert plain.body == "plain"
    assert [m.body for m in await client.receive_n(13, 1)] == ["plain"]
    # The input the aborted transaction acknowledged comes back.
    assert [m.body for m in await client.receive_n(10, 1)] == ["in-0"]
    await nothing_arrives(client, 11)
    # The aborted entry and the marker were acknowledged by the broker itself: acking "plain"
    # leaves no backlog.
    await client.ack(11, plain)
    watch = (await topic_of(broker, OUT1)).subscriptions["watch"]
    await eventually(lambda: watch.cursor.number_of_entries_in_backlog() == 0, "no backlog")


async def test_conflicting_acks_are_refused(client: TxnWireClient) -> None:
    msgs = await waiting_inputs(client, IN, 3, pb.CommandSubscribe.Shared)
    t1, t2 = await client.new_txn(), await client.new_txn()
    for t in (t1, t2):
        await client.add_subscription(t, IN, "work")
    assert not (await client.ack(10, msgs[0], txn=t1)).HasField("error")
    assert (await client.ack(10, msgs[0], txn=t2)).error == E.TransactionConflict
    # An ordinary ack, then a transactional one of the same message: already acknowledged.
    await client.ack(10, msgs[1])
    assert (await client.ack(10, msgs[1], txn=t2)).error == E.TransactionConflict
    # Cumulative transactional acks are for Exclusive and Failover subscriptions only.
    assert (await client.ack(10, msgs[2], txn=t2, cumulative=True)).error == E.NotAllowedError
    # After t1 aborts, t2 may take the message.
    await client.end_txn(t1, commit=False)
    assert not (await client.ack(10, msgs[0], txn=t2)).HasField("error")


async def test_cumulative_ack_in_transaction(broker: Broker, client: TxnWireClient) -> None:
    msgs = await waiting_inputs(client, IN, 3)
    t1, t2 = await client.new_txn(), await client.new_txn()
    for t in (t1, t2):
        await client.add_subscription(t, IN, "work")
    assert not (await client.ack(10, msgs[1], txn=t1, cumulative=True)).HasField("error")
    assert (await client.ack(10, msgs[2], txn=t2, cumulative=True)).error == E.TransactionConflict
    work = (await topic_of(broker, IN)).subscriptions["work"]
    assert work.cursor.number_of_entries_in_backlog() == 3
    await client.end_txn(t1, commit=True)
    assert work.cursor.number_of_entries_in_backlog() == 1


async def test_timeout_aborts_the_transaction(broker: Broker, client: TxnWireClient) -> None:
    await client.subscribe(OUT1, "watch", 11)
    await client.producer(OUT1, 2)
    txn = await client.new_txn(timeout_ms=5000)  # (room for the SENDs on a loaded machine)
    await client.add_partitions(txn, OUT1)
    assert (await client.send(2, 0, "late", txn)).type == T.SEND_RECEIPT
    assert (await client.send(2, 1, "plain")).type == T.SEND_RECEIPT
    # Aborted by the coordinator: the ordinary message behind it is released, the other never is.
    assert [m.body for m in await client.receive_n(11, 1)] == ["plain"]
    assert broker.server is not None and broker.server.service.transactions is not None
    tc = broker.server.service.transactions.coordinators[0]
    assert tc.timed_out == 1
    await eventually(lambda: txn not in tc.txns, "the abort logged")
    assert (await client.end_txn(txn, commit=True)).error == E.TransactionNotFound
    # A SEND in the aborted transaction is refused.
    receipt = await client.send(2, 2, "later", txn)
    assert receipt.type == T.SEND_ERROR and receipt.send_error.error == E.NotAllowedError


async def test_first_transactional_send_takes_the_first_snapshot_in_send_order(tmp_path: Path) -> None:
    """A topic gets its buffer's snapshot cursor from its first transactional SEND (as Pulsar's first snapshot),
    whoever told the coordinator about the topic and whether the producer said txn_enabled (the Go client does
    not): it is not refused. SENDs written behind it in the same go, ordinary or not, wait for it and are stored
    and receipted in SEND order. The snapshot sees the transaction's entry: after a restart the open transaction
    still holds back what follows it."""
    data = tmp_path / "data"
    async with Broker(data_dir=data, transactionCoordinatorEnabled=True) as b:
        c = await TxnWireClient.open(port_of(b))
        await c.tc_connect()
        await c.producer(OUT2, 2)  # (no txn_enabled, as the Go client)
        assert (await c.send(2, 0, "plain-0")).HasField("send_receipt")
        assert b.server is not None
        topic = b.server.service.topics[OUT2]
        assert isinstance(topic, PersistentTopic) and not topic.txn_buffer.prepared
        txn = await c.new_txn()
        sent = [c.send_nowait(2, 1, "plain-1"), c.send_nowait(2, 2, "txn-2", txn, txn_in_metadata=False),
                c.send_nowait(2, 3, "plain-3"), c.send_nowait(2, 4, "txn-4", txn, txn_in_metadata=False),
                c.send_nowait(2, 5, "plain-5")]
        receipts = [await asyncio.wait_for(f, 10) for f in sent]
        assert all(r.HasField("send_receipt") for r in receipts), receipts
        assert c.receipt_order[-5:] == [(2, seq) for seq in range(1, 6)]
        ids = [(r.send_receipt.message_id.ledgerId, r.send_receipt.message_id.entryId) for r in receipts]
        assert ids == sorted(ids) and len(set(ids)) == 5
        assert topic.txn_buffer.prepared
        cursor = topic.ledger.cursors["pulsar.txn.buffer"]
        assert cursor.mark_delete_position < Position(*ids[1])  # (the replay at load starts before txn-2)
        # The coordinator hears of the topic after the SENDs (the Go client adds partitions concurrently).
        assert not (await c.add_partitions(txn, OUT2)).HasField("error")
        await c.subscribe(OUT2, "s", 11)
        assert [m.body for m in await c.receive_n(11, 2)] == ["plain-0", "plain-1"]
        await nothing_arrives(c, 11)
        await c.close()
    async with Broker(data_dir=data, transactionCoordinatorEnabled=True) as b:
        c = await TxnWireClient.open(port_of(b))
        await c.tc_connect()
        await c.subscribe(OUT2, "s", 11)
        # (not acknowledged: delivered again) and nothing more: the open transaction holds back what follows it
        assert [m.body for m in await c.receive_n(11, 2)] == ["plain-0", "plain-1"]
        await nothing_arrives(c, 11)
        assert not (await c.end_txn(txn, commit=True)).HasField("error")
        assert [m.body for m in await c.receive_n(11, 4)] == ["txn-2", "plain-3", "txn-4", "plain-5"]
        await c.close()


async def test_open_and_aborted_transactions_survive_a_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    async with Broker(data_dir=data, transactionCoordinatorEnabled=True) as b:
        c = await TxnWireClient.open(port_of(b))
        await c.tc_connect()
        await c.producer(OUT1, 2)
        aborted = await c.new_txn()
        await c.add_partitions(aborted, OUT1)
        await c.send(2, 0, "aborted", aborted)
        await c.end_txn(aborted, commit=False)
        await c.send(2, 1, "plain-1")
        open_txn = await c.new_txn()
        await c.add_partitions(open_txn, OUT1)
        await c.send(2, 2, "committed-later", open_txn)
        await c.send(2, 3, "plain-2")
        await c.close()
    async with Broker(data_dir=data, transactionCoordinatorEnabled=True) as b:
        c = await TxnWireClient.open(port_of(b))
        await c.tc_connect()
        await c.subscribe(OUT1, "after", 11)
        # The open transaction holds back what follows it; the aborted message stays dropped.
        assert [m.body for m in await c.receive_n(11, 1)] == ["plain-1"]
        await nothing_arrives(c, 11)
        assert not (await c.end_txn(open_txn, commit=True)).HasField("error")
        assert [m.body for m in await c.receive_n(11, 2)] == ["committed-later", "plain-2"]
        # Ids are not reused after a restart.
        assert await c.new_txn() == (0, 2)
        await c.close()


async def test_compaction_keeps_neither_aborted_nor_uncommitted_messages(broker: Broker, client: TxnWireClient) -> None:
    await client.producer(OUT1, 2)
    await client.send(2, 0, "v1", key="k")
    aborted = await client.new_txn()
    await client.add_partitions(aborted, OUT1)
    await client.send(2, 1, "v2-aborted", aborted, key="k")
    await client.end_txn(aborted, commit=False)
    open_txn = await client.new_txn()
    await client.add_partitions(open_txn, OUT1)
    first_open = await client.send(2, 2, "v3-open", open_txn, key="k")
    topic = await topic_of(broker, OUT1)
    view = await topic.compactor.compact()
    records, _ = await view.read(Position(-1, -1), len(view) + 1)
    kept = [entry_body(c.entry.data).decode() for c in records]
    assert kept == ["v1"]  # the aborted and the uncommitted value of k are not in the view
    open_id = first_open.send_receipt.message_id
    assert view.horizon < Position(open_id.ledgerId, open_id.entryId)


async def test_ending_on_a_deleted_topic_does_not_block_the_commit(broker: Broker, client: TxnWireClient) -> None:
    await client.producer(OUT2, 2)
    txn = await client.new_txn()
    await client.add_partitions(txn, OUT1, OUT2)
    await client.send(2, 0, "x", txn)
    assert broker.server is not None
    await broker.server.service.delete_topic(TopicName.parse(OUT1))
    assert not (await client.end_txn(txn, commit=True)).HasField("error")


async def test_ending_on_a_non_persistent_topic_does_not_block_the_commit(client: TxnWireClient) -> None:
    """A non-persistent topic added to a transaction (as a partition, or for a subscription) has nothing to end:
    the END_TXN is answered (it was retried for ever, never answered)."""
    txn = await client.new_txn()
    await client.add_partitions(txn, "non-persistent://public/default/txn-np")
    await client.add_subscription(txn, "non-persistent://public/default/txn-np", "s")
    assert not (await client.end_txn(txn, commit=True)).HasField("error")


async def http_get(broker: Broker, path: str) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as http, http.get(broker.web_url + path) as resp:
        return resp.status, await resp.json(content_type=None)


async def test_admin_v3_transactions_and_metrics(broker: Broker, client: TxnWireClient) -> None:
    (msg,) = await waiting_inputs(client, IN, 1)
    await client.producer(OUT1, 2)
    txn, (receipt,) = await consume_and_produce(client, client, IN, msg, [Output(client, 2, OUT1)], 0,
                                                timeout_ms=600_000, cumulative=True)
    base = "/admin/v3/transactions"

    status, coordinators = await http_get(broker, base + "/coordinators")
    assert status == 200 and [c["id"] for c in coordinators] == [0]
    status, stats = await http_get(broker, base + "/coordinatorStats")
    assert status == 200 and stats["0"]["ongoingTxnSize"] == 1 and stats["0"]["state"] == "Ready"
    assert (await http_get(broker, base + "/coordinatorStats?coordinatorId=3"))[0] == 404

    status, meta = await http_get(broker, f"{base}/transactionMetadata/{txn[0]}/{txn[1]}")
    assert status == 200 and meta["status"] == "OPEN" and meta["txnId"] == "(0,0)"
    mid = receipt.send_receipt.message_id
    assert meta["producedPartitions"][OUT1] == {"startPosition": f"{mid.ledgerId}:{mid.entryId}", "aborted": False}
    assert meta["ackedPartitions"][IN]["work"]["cumulativeAckPosition"] == f"{msg.id[0]}:{msg.id[1]}"
    assert (await http_get(broker, f"{base}/transactionMetadata/0/77"))[0] == 404
    status, slow = await http_get(broker, f"{base}/slowTransactions/0")
    assert status == 200 and list(slow) == ["(0,0)"]

    status, buffer = await http_get(broker, f"{base}/transactionBufferStats/public/default/txn-out-1")
    assert status == 200 and buffer["ongoingTxnSize"] == 1
    assert buffer["maxReadPosition"] == f"{mid.ledgerId}:{mid.entryId - 1}"
    status, pending = await http_get(broker, f"{base}/pendingAckStats/public/default/txn-in/work")
    assert status == 200 and pending["ongoingTxnSize"] == 1
    assert (await http_get(broker, f"{base}/pendingAckStats/public/default/txn-in/nope"))[0] == 404
    assert (await http_get(broker, f"{base}/transactionBufferStats/public/default/missing"))[0] == 404

    await client.end_txn(txn, commit=False)
    async with aiohttp.ClientSession() as http, http.get(broker.web_url + "/metrics") as resp:
        text = await resp.text()
    samples = {(s.name, s.labels.get("coordinator_id"), s.labels.get("topic")): s.value
               for family in text_string_to_metric_families(text) for s in family.samples}
    assert samples[("pulsar_txn_created_total", "0", None)] == 1
    assert samples[("pulsar_txn_aborted_total", "0", None)] == 1
    # The subscription's pending acks of the aborted transaction (Pulsar's PendingAckHandleStats).
    tp = {(s.name, s.labels.get("subscription"), s.labels.get("status")): s.value
          for family in text_string_to_metric_families(text) for s in family.samples
          if s.name.startswith("pulsar_txn_tp_") and s.labels.get("topic") == "persistent://public/default/txn-in"}
    assert tp[("pulsar_txn_tp_aborted_count_total", "work", "succeed")] == 1
    assert tp[("pulsar_txn_tp_aborted_count_total", "work", "failed")] == 0
    assert tp[("pulsar_txn_tp_committed_count_total", "work", "succeed")] == 0
    assert samples[("pulsar_txn_active_count", "0", None)] == 0
    out_topic = "persistent://public/default/txn-out-1"
    assert samples[("pulsar_txn_tb_aborted_total", None, out_topic)] == 1
    assert samples[("pulsar_txn_tb_active_total", None, out_topic)] == 0
    # The coordinator ended the aborted transaction on the topic it produced to (Pulsar's transaction buffer client).
    assert samples[("pulsar_txn_tb_client_abort_latency_count", None, out_topic)] == 1
    assert samples[("pulsar_txn_tb_client_abort_failed_total", None, out_topic)] == 0
    assert samples[("pulsar_txn_tb_client_pending_requests", None, None)] == 0
    # Every coordinator family docs/metrics.md lists for a broker with transactions is there.
    assert set(expected("transactions")) <= {name for name, _, _ in samples}


async def test_admin_v3_transactions_answer_503_when_disabled(tmp_path: Path) -> None:
    async with Broker(data_dir=tmp_path) as b:
        status, body = await http_get(b, "/admin/v3/transactions/coordinatorStats")
        assert status == 503 and "transactionCoordinatorEnabled" in body["reason"]


async def test_commit_logged_but_markers_not_written_is_finished_after_restart(tmp_path: Path) -> None:
    """The broker stops after the coordinator logged COMMITTING and before any topic was told
    (the topics' END_TXN_ON_PARTITION never completes): the restarted coordinator finishes it."""
    data = tmp_path / "data"
    async with Broker(data_dir=data, transactionCoordinatorEnabled=True) as b:
        c = await TxnWireClient.open(port_of(b))
        await c.tc_connect()
        await c.subscribe(OUT1, "watch", 11)
        await c.producer(OUT1, 2)
        txn = await c.new_txn()
        await c.add_partitions(txn, OUT1)
        await c.send(2, 0, "committed", txn)
        assert b.server is not None and b.server.service.transactions is not None
        ts = b.server.service.transactions
        stuck = asyncio.Event()

        async def never(topic: str, txn_id: TxnID, commit: bool, low_watermark: int | None = None) -> None:
            stuck.set()
            await asyncio.Event().wait()  # (cancelled when the broker stops)

        ts.end_on_partition = never  # type: ignore[method-assign,assignment]
        end = asyncio.ensure_future(c.end_txn(txn, commit=True))
        await asyncio.wait_for(stuck.wait(), 10)
        assert ts.coordinators[0].get(TxnID(*txn)).status is TxnStatus.COMMITTING
        await nothing_arrives(c, 11)
        end.cancel()
        await c.close()
    async with Broker(data_dir=data, transactionCoordinatorEnabled=True) as b:
        c = await TxnWireClient.open(port_of(b))
        await c.tc_connect()
        await c.subscribe(OUT1, "watch", 11)
        assert [m.body for m in await c.receive_n(11, 1)] == ["committed"]
        # The client's retry: the same outcome (still finishing), or already forgotten.
        again = await c.end_txn(txn, commit=True)
        assert not again.HasField("error") or again.error == E.TransactionNotFound
        assert (await c.end_txn(txn, commit=False)).error in (E.TransactionNotFound, E.InvalidTxnStatus)
        await c.close()


async def test_plain_ack_of_a_message_pending_in_a_transaction_is_ignored(broker: Broker,
                                                                            client: TxnWireClient) -> None:
    (msg,) = await waiting_inputs(client, IN, 1, pb.CommandSubscribe.Shared)
    txn = await client.new_txn()
    await client.add_subscription(txn, IN, "work")
    await client.ack(10, msg, txn=txn)
    await client.ack(10, msg)  # the transaction decides, not this
    await client.end_txn(txn, commit=False)
    assert [m.body for m in await client.receive_n(10, 1)] == ["in-0"]


async def test_buffer_snapshot_follows_the_oldest_open_transaction(broker: Broker, client: TxnWireClient) -> None:
    await client.producer(OUT1, 2)
    old = await client.new_txn()
    await client.add_partitions(old, OUT1)
    await client.send(2, 0, "plain-0")
    first_old = (await client.send(2, 1, "old", old)).send_receipt.message_id
    for i in range(3):  # later transactions come and go while the old one stays open
        t = await client.new_txn()
        await client.add_partitions(t, OUT1)
        await client.send(2, 2 + i, f"t{i}", t)
        await client.end_txn(t, commit=i % 2 == 0)
    topic = await topic_of(broker, OUT1)
    snapshot = topic.ledger.cursors["pulsar.txn.buffer"]
    assert snapshot.mark_delete_position == topic.ledger.previous_position(
        Position(first_old.ledgerId, first_old.entryId))
    await client.end_txn(old, commit=True)
    assert snapshot.mark_delete_position == topic.ledger.last_confirmed_entry


async def test_batch_index_acks_in_a_transaction(broker: Broker, client: TxnWireClient) -> None:
    await client.producer(IN, 1)
    assert (await client.send_batch(1, 0, ["m0", "m1", "m2", "m3"])).type == T.SEND_RECEIPT
    await client.subscribe(IN, "work", 10, sub_type=pb.CommandSubscribe.Shared)
    (batch,) = await client.receive_n(10, 1)
    assert batch.ack_set == []
    t1, t2 = await client.new_txn(), await client.new_txn()
    for t in (t1, t2):
        await client.add_subscription(t, IN, "work")
    # t1 acknowledges messages 0 and 1 (bit set = still unacknowledged)
    assert not (await client.ack(10, batch, txn=t1, ack_set=[0b1100], batch_size=4)).HasField("error")
    overlap = await client.ack(10, batch, txn=t2, ack_set=[0b1010], batch_size=4)  # message 0 again
    assert overlap.error == E.TransactionConflict
    assert not (await client.ack(10, batch, txn=t2, ack_set=[0b0111], batch_size=4)).HasField("error")
    # Redelivered: without the indexes the open transactions hold.
    client.redeliver_unacknowledged(10)
    (again,) = await client.receive_n(10, 1)
    assert again.ack_set == [0b0100]
    await client.end_txn(t1, commit=True)
    await client.end_txn(t2, commit=False)
    client.redeliver_unacknowledged(10)
    (last,) = await client.receive_n(10, 1)
    assert last.ack_set == [0b1100]  # t1's acks applied, t2's dropped


async def http_post(broker: Broker, path: str) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as http, http.post(broker.web_url + path) as resp:
        body = await resp.text()
        return resp.status, (await resp.json(content_type=None)) if body else None


async def test_admin_v3_abort_transaction_and_internal_stats(broker: Broker, client: TxnWireClient) -> None:
    base = "/admin/v3/transactions"
    (msg,) = await waiting_inputs(client, IN, 1)
    await client.producer(OUT1, 2)
    txn, _ = await consume_and_produce(client, client, IN, msg, [Output(client, 2, OUT1)], 0, timeout_ms=600_000)

    # Internal stats: the ledgers that hold the coordinator's log, the buffer's snapshot and the pending acks.
    status, tc = await http_get(broker, f"{base}/coordinatorInternalStats/0")
    log_stats = tc["transactionLogStats"]
    assert status == 200 and log_stats["managedLedgerName"] == "pulsar/system/persistent/__transaction_log_0"
    assert log_stats["managedLedgerInternalStats"]["numberOfEntries"] >= 3  # new, partitions, subscriptions
    assert "transaction.subscription" in log_stats["managedLedgerInternalStats"]["cursors"]
    assert (await http_get(broker, f"{base}/coordinatorInternalStats/7"))[0] == 404
    status, tb = await http_get(broker, f"{base}/transactionBufferInternalStats/public/default/txn-out-1")
    assert status == 200 and tb["snapshotType"] == "Single"
    snapshot = tb["singleSnapshotSystemTopicInternalStats"]
    assert snapshot["managedLedgerName"] == "public/default/persistent/txn-out-1"
    assert "pulsar.txn.buffer" in snapshot["managedLedgerInternalStats"]["cursors"]
    # A topic that never had a transaction: its own stats, no snapshot cursor yet (Pulsar 4.0.7 answers with its
    # namespace's snapshot topic, there once any topic of the namespace had a transaction).
    status, tb = await http_get(broker, f"{base}/transactionBufferInternalStats/public/default/txn-in")
    assert status == 200 and "pulsar.txn.buffer" not in tb["singleSnapshotSystemTopicInternalStats"][
        "managedLedgerInternalStats"]["cursors"]
    assert (await http_get(broker, f"{base}/transactionBufferInternalStats/public/default/nope"))[1] == {
        "reason": "Topic not found persistent://public/default/nope"}
    status, pa = await http_get(broker, f"{base}/pendingAckInternalStats/public/default/txn-in/work")
    assert status == 200 and "work" in pa["pendingAckLogStats"]["managedLedgerInternalStats"]["cursors"]
    assert (await http_get(broker, f"{base}/pendingAckInternalStats/public/default/txn-in/nope"))[0] == 404

    # abortTransaction: 204, then the transaction is gone; its ack is dropped (the input comes back)
    # and its message is never delivered.
    assert await http_post(broker, f"{base}/abortTransaction/{txn[0]}/{txn[1]}") == (204, None)
    status, body = await http_post(broker, f"{base}/abortTransaction/{txn[0]}/{txn[1]}")
    assert status == 500 and body["reason"]  # Pulsar's answer to an unknown transaction
    assert (await http_post(broker, f"{base}/abortTransaction/4/0"))[0] == 404
    assert (await http_post(broker, f"{base}/abortTransaction/{1 << 31}/0"))[0] == 500
    assert (await http_post(broker, f"{base}/abortTransaction/x/0"))[0] == 400
    (again,) = await client.receive_n(10, 1)
    assert again.body == "in-0"
    await client.subscribe(OUT1, "check", 20)
    await nothing_arrives(client, 20)
    # A committed transaction cannot be aborted afterwards.
    committing = await client.new_txn(timeout_ms=600_000)
    await client.end_txn(committing, commit=True)
    assert (await http_post(broker, f"{base}/abortTransaction/{committing[0]}/{committing[1]}"))[0] == 500


async def test_admin_v3_position_in_pending_ack(broker: Broker, client: TxnWireClient) -> None:
    """positionStatsInPendingAck: where a position (or a message of its batch) stands on a subscription."""
    m0, m1, m2 = await waiting_inputs(client, IN, 3)
    assert not (await client.ack(10, m0)).HasField("error")
    assert (await client.send_batch(1, 3, ["b0", "b1", "b2", "b3"])).type == T.SEND_RECEIPT
    (batch,) = await client.receive_n(10, 1)
    txn = await client.new_txn(timeout_ms=600_000)
    await client.add_subscription(txn, IN, "work")
    assert not (await client.ack(10, m2, txn=txn)).HasField("error")
    # messages 0 and 1 of the batch acknowledged in the transaction (bit set = still unacknowledged)
    assert not (await client.ack(10, batch, txn=txn, ack_set=[0b1100], batch_size=4)).HasField("error")
    base = "/admin/v3/transactions/positionStatsInPendingAck/public/default/txn-in/work"

    async def state(message: Any, query: str = "") -> str:
        status, body = await http_get(broker, f"{base}/{message.id[0]}/{message.id[1]}{query}")
        assert status == 200, body
        return str(body["state"])

    assert await state(m0) == "MarkDelete"
    assert await state(m1) == "NotInPendingAck"
    assert await state(m2) == "PendingAck"
    assert await state(batch) == "PendingAck"
    assert [await state(batch, f"?batchIndex={i}") for i in range(5)] == [
        "PendingAck", "PendingAck", "NotInPendingAck", "NotInPendingAck", "InvalidPosition"]
    assert await state(m2, "?batchIndex=0") == "InvalidPosition"  # (no batch: no index, as Pulsar 4.0.7)
    assert (await http_get(broker, f"{base.replace('/work', '/nope')}/{m2.id[0]}/{m2.id[1]}"))[0] == 404
    status, body = await http_get(broker, f"{base}/x/0")
    assert status == 400 and "ledgerId" in body["reason"]
    assert (await http_get(broker, f"{base}/0/0?batchIndex=x"))[0] == 400
    await client.end_txn(txn, commit=True)
    assert await state(m2) == "NotInPendingAck"  # (acknowledged now; the mark-delete waits for m1)
    assert not (await client.ack(10, m1)).HasField("error")
    assert await state(m2) == "MarkDelete"


async def test_admin_v3_scale_transaction_coordinators(broker: Broker, client: TxnWireClient) -> None:
    """transactionCoordinator/replicas: more coordinators, each served at once; never fewer."""
    url = broker.web_url + "/admin/v3/transactions/transactionCoordinator/replicas"

    async def scale(body: str) -> tuple[int, Any]:
        async with aiohttp.ClientSession() as http, http.post(
                url, data=body, headers={"Content-Type": "application/json"}) as resp:
            text = await resp.text()
            return resp.status, (await resp.json(content_type=None)) if text else None

    status, body = await scale("1")
    assert status == 406 and "more than the current number" in body["reason"]
    assert (await scale('"x"'))[0] == 400
    assert (await scale("1000000"))[0] == 406
    assert await scale("3") == (204, None)
    status, coordinators = await http_get(broker, "/admin/v3/transactions/coordinators")
    assert status == 200 and [c["id"] for c in coordinators] == [0, 1, 2]
    assert not (await client.tc_connect(2)).HasField("error")
    assert (await client.new_txn(tc_id=2))[0] == 2
    status, stats = await http_get(broker, "/admin/v3/transactions/coordinatorStats")
    assert status == 200 and sorted(stats) == ["0", "1", "2"] and stats["2"]["ongoingTxnSize"] == 1
    assert (await scale("3"))[0] == 406


async def test_admin_v3_abort_and_internal_stats_answer_503_when_disabled(tmp_path: Path) -> None:
    async with Broker(data_dir=tmp_path) as b:
        status, body = await http_post(b, "/admin/v3/transactions/abortTransaction/0/0")
        assert status == 503 and "transactionCoordinatorEnabled" in body["reason"]
        assert (await http_get(b, "/admin/v3/transactions/coordinatorInternalStats/0"))[0] == 503
        assert (await http_get(b, "/admin/v3/transactions/transactionBufferInternalStats/public/default/t"))[0] == 503
        assert (await http_get(b, "/admin/v3/transactions/positionStatsInPendingAck/public/default/t/s/0/0"))[0] == 503
        assert (await http_post(b, "/admin/v3/transactions/transactionCoordinator/replicas"))[0] == 503


async def test_markers_carry_broker_entry_metadata_when_configured(tmp_path: Path) -> None:
    """Commit and abort markers (and replicated-subscription markers) are stamped like every other
    entry, each counted as one message: Pulsar 4.0's managed ledger hands every add to its
    interceptor, a marker with one message. The index stays continuous across them."""
    async with Broker(data_dir=tmp_path, transactionCoordinatorEnabled=True,
                      brokerEntryMetadataInterceptors=list(BROKER_ENTRY_INTERCEPTORS)) as b:
        c = await TxnWireClient.open(port_of(b))
        assert not (await c.tc_connect()).HasField("error")
        await c.producer(OUT1, 1)
        await c.send(1, 0, "plain-0")
        for seq, commit in ((1, True), (2, False)):
            txn = await c.new_txn()
            await c.add_partitions(txn, OUT1)
            await c.send(1, seq, f"txn-{seq}", txn)
            assert not (await c.end_txn(txn, commit=commit)).HasField("error")
        await c.send(1, 3, "plain-3")
        topic = await topic_of(b, OUT1)
        assert topic.replicated_subscriptions is None
        before = topic.ledger.last_confirmed_entry
        ReplicatedSubscriptionsController(topic).write(marker_entry(mk.REPLICATED_SUBSCRIPTION_SNAPSHOT_REQUEST, b""))
        await eventually(lambda: topic.ledger.last_confirmed_entry > before, "the replicated-subscription marker")
        kinds = []
        pos = topic.ledger.first_position
        for i in range(7):
            if i:
                pos = topic.ledger.next_valid_position(pos)
            e = await topic.ledger.read_entry(pos)
            bem = peek_broker_entry_metadata(e.data)
            assert bem is not None and bem.HasField("broker_timestamp")
            meta = read_entry_metadata(e.data)
            kinds.append((bem.index, meta.marker_type if meta.HasField("marker_type") else None))
        assert kinds == [(0, None), (1, None), (2, mk.TXN_COMMIT), (3, None), (4, mk.TXN_ABORT), (5, None),
                         (6, mk.REPLICATED_SUBSCRIPTION_SNAPSHOT_REQUEST)]
        await c.close()


async def test_low_watermark_aborts_what_a_topic_and_a_subscription_never_heard_ended(
        broker: Broker, client: TxnWireClient) -> None:
    """A transaction whose end never reaches a topic or a subscription (here: it sent and acked
    there without telling the coordinator, which then ended it elsewhere) would hold the topic's
    read limit and the acked input forever. The next end there from the same coordinator carries
    its low watermark (every transaction at or below it has ended): the buffer aborts the stray
    one (an ABORT marker) and the subscription drops its acks, as Pulsar's do."""
    first, second = await waiting_inputs(client, IN, 2, pb.CommandSubscribe.Shared)
    await client.subscribe(OUT1, "watch", 11)
    await client.producer(OUT1, 2)

    stray = await client.new_txn(timeout_ms=600_000)
    later = await client.new_txn(timeout_ms=600_000)
    assert not (await client.add_partitions(later, OUT1)).HasField("error")  # (prepares OUT1's buffer)
    assert not (await client.add_subscription(later, IN, "work")).HasField("error")
    # The stray transaction sends and acks where it never registered, then ends.
    assert (await client.send(2, 0, "stray", stray)).type == T.SEND_RECEIPT
    assert not (await client.ack(10, first, txn=stray)).HasField("error")
    assert not (await client.end_txn(stray, commit=True)).HasField("error")
    assert (await client.send(2, 1, "plain")).type == T.SEND_RECEIPT
    buffer = (await topic_of(broker, OUT1)).txn_buffer
    assert TxnID(*stray) in buffer.ongoing  # (the limit is held: nothing is delivered)
    await nothing_arrives(client, 11)

    assert not (await client.ack(10, second, txn=later)).HasField("error")
    assert not (await client.end_txn(later, commit=True)).HasField("error")
    (plain,) = await client.receive_n(11, 1)
    assert plain.body == "plain" and not buffer.ongoing and TxnID(*stray) in buffer.aborted
    await nothing_arrives(client, 11)
    # The stray ack was dropped: its input comes back; the committed one does not.
    assert [m.body for m in await client.receive_n(10, 1)] == ["in-0"]
    work = (await topic_of(broker, IN)).subscriptions["work"]
    assert work.pending_acks is not None and not work.pending_acks


async def test_coordinator_low_watermark(broker: Broker, client: TxnWireClient) -> None:
    assert broker.server is not None and broker.server.service.transactions is not None
    tc = broker.server.service.transactions.coordinators[0]
    assert tc.low_watermark == -1  # (nothing given yet)
    a = await client.new_txn()
    b = await client.new_txn()
    assert tc.low_watermark == a[1] - 1
    await client.end_txn(a, commit=True)
    assert tc.low_watermark == b[1] - 1
    await client.end_txn(b, commit=False)
    assert tc.low_watermark == b[1]


async def test_a_batch_index_acknowledged_already_conflicts_with_a_transactional_ack(
        broker: Broker, client: TxnWireClient) -> None:
    """As Pulsar's PendingAckHandleImpl (the cursor's batch ack set overlapping the transaction's: "already acked
    before"): a message of a batch acknowledged by index outside the transaction may not be acknowledged in one."""
    await client.producer(IN, 1)
    assert (await client.send_batch(1, 0, ["m0", "m1", "m2", "m3"])).type == T.SEND_RECEIPT
    await client.subscribe(IN, "work", 10, sub_type=pb.CommandSubscribe.Shared)
    (batch,) = await client.receive_n(10, 1)
    assert not (await client.ack(10, batch, ack_set=[0b1110], batch_size=4)).HasField("error")  # message 0
    txn = await client.new_txn()
    await client.add_subscription(txn, IN, "work")
    again = await client.ack(10, batch, txn=txn, ack_set=[0b1100], batch_size=4)  # messages 0 and 1
    assert again.error == E.TransactionConflict
    assert not (await client.ack(10, batch, txn=txn, ack_set=[0b1101], batch_size=4)).HasField("error")  # message 1


async def test_batch_indexes_acked_in_a_transaction_unblock_a_consumer_at_its_unacked_limit(tmp_path: Path) -> None:
    """As Pulsar's individualAckWithTransaction: the acked batch indexes stop counting as unacked at once, so a
    consumer blocked on maxUnackedMessagesPerConsumer gets more before the transaction ends."""
    async with Broker(data_dir=tmp_path, transactionCoordinatorEnabled=True, maxUnackedMessagesPerConsumer=10) as b:
        c = await TxnWireClient.open(port_of(b))
        try:
            assert not (await c.tc_connect(0)).HasField("error")
            await c.producer(IN, 1)
            await c.subscribe(IN, "work", 10, sub_type=pb.CommandSubscribe.Shared)
            # (one batch at a time: entries read together go out together, past the limit, as in Pulsar)
            assert (await c.send_batch(1, 0, [f"b0-{i}" for i in range(10)])).type == T.SEND_RECEIPT
            (first,) = await c.receive_n(10, 1)
            assert (await c.send_batch(1, 1, [f"b1-{i}" for i in range(10)])).type == T.SEND_RECEIPT
            await nothing_arrives(c, 10)  # 10 unacked: at the limit
            txn = await c.new_txn()
            await c.add_subscription(txn, IN, "work")
            # messages 0-5 acknowledged in the transaction (a set bit: still unacknowledged): 4 left, under half
            assert not (await c.ack(10, first, txn=txn, ack_set=[0b1111000000], batch_size=10)).HasField("error")
            (second,) = await c.receive_n(10, 1)
            assert second.message_id.entryId != first.message_id.entryId
            assert not (await c.end_txn(txn, commit=True)).HasField("error")
        finally:
            await c.close()


class SlowConfirms:
    """A topic's storage confirming its adds late but in order, as BookKeeper's round trips do (the in-process
    file ledger confirms so soon that a SEND is hardly ever in flight when another transaction ends): each add's
    callback runs ``latency_s`` (the loop's clock) after the ledger stored it, in the order of the adds."""

    def __init__(self, ledger: ManagedLedger, latency_s: float) -> None:
        self.loop = asyncio.get_running_loop()
        self.latency_s = latency_s
        self.held: deque[tuple[float, AddCallback, Position | None, BaseException | None]] = deque()
        self.timer: asyncio.TimerHandle | None = None
        add_entries = ledger.add_entries
        # (on this ledger object only: the topic and its transaction buffer call these)
        setattr(ledger, "add_entries", lambda data, callback: add_entries(data, self._later(callback)))  # noqa: B010
        setattr(ledger, "add_entry", lambda data, callback: add_entries([data], self._later(callback)))  # noqa: B010

    def _later(self, callback: AddCallback) -> AddCallback:
        def stored(position: Position | None, exc: BaseException | None) -> None:
            self.held.append((self.loop.time() + self.latency_s, callback, position, exc))
            self._arm()
        return stored

    def _arm(self) -> None:
        if self.timer is None and self.held:
            self.timer = self.loop.call_at(self.held[0][0], self._confirm)

    def _confirm(self) -> None:
        self.timer = None
        now = self.loop.time()
        while self.held and self.held[0][0] <= now:
            _, callback, position, exc = self.held.popleft()
            callback(position, exc)
        self._arm()


STORAGE_LATENCY_S = 0.005  # a BookKeeper add's round trip on a LAN, give or take


async def test_buffer_snapshot_keeps_up_with_a_continuous_stream_of_transactions(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Small transactions from several producers at once, without a pause, on storage that confirms late: a
    transaction's first entry is often in flight when another one ends. The snapshot moves past the ended
    transactions while more keep coming (it used to wait for a moment with no first entry in flight), and what
    it saved then is right: loaded from the last snapshot the stream took (none at close, as after a crash), a
    reader sees every committed message once and no aborted one."""
    data = tmp_path / "data"
    workers = 8
    committed: list[str] = []
    async with Broker(data_dir=data, transactionCoordinatorEnabled=True) as b:
        assert b.server is not None
        await b.server.service.metadata.set_partitions(ASSIGN_TOPIC, workers)  # a coordinator each: no lockstep
        c = await TxnWireClient.open(port_of(b))
        for w in range(workers):
            await c.tc_connect(w)
            await c.producer(OUT1, 10 + w)
        topic = await topic_of(b, OUT1)
        SlowConfirms(topic.ledger, STORAGE_LATENCY_S)
        stop = asyncio.Event()
        ended = 0

        async def stream(w: int) -> None:
            nonlocal ended
            seq = 0
            while not stop.is_set():
                txn = await c.new_txn(tc_id=w)
                await c.add_partitions(txn, OUT1)
                commit = seq % 3 != 1
                bodies = []
                for _ in range(1 + w % 3):  # (workers out of step: one's first SEND comes as another ends)
                    bodies.append(f"w{w}-{seq}")
                    await c.send(10 + w, seq, bodies[-1], txn)
                    seq += 1
                assert not (await c.end_txn(txn, commit)).HasField("error")
                if commit:
                    committed.extend(bodies)
                ended += 1

        streams = [asyncio.create_task(stream(w)) for w in range(workers)]
        try:
            await eventually(lambda: ended >= 20, "twenty transactions ended")
            snapshot = topic.ledger.cursors["pulsar.txn.buffer"]
            passed = topic.ledger.last_confirmed_entry
            await eventually(lambda: snapshot.mark_delete_position >= passed,
                             "the snapshot passing the transactions ended so far while more come")
            assert not any(s.done() for s in streams)  # (the stream never paused)
        finally:
            stop.set()
            await asyncio.gather(*streams)
        monkeypatch.setattr(topic.txn_buffer, "snapshot_idle", lambda: None)
        await c.close()
    async with Broker(data_dir=data, transactionCoordinatorEnabled=True) as b:
        c = await TxnWireClient.open(port_of(b))
        await c.subscribe(OUT1, "after", 11)
        got = [m.body for m in await c.receive_n(11, len(committed))]
        assert sorted(got) == sorted(committed)
        await nothing_arrives(c, 11)
        await c.close()
