"""Transactions across two broker processes (ZooKeeper + bookies): the coordinator on one broker, topics and a
subscription on the other, so that ending a transaction goes over the wire (END_TXN_ON_PARTITION /
END_TXN_ON_SUBSCRIPTION from the coordinator's broker to the topic's owner). Placement is forced with authoritative
lookups, which make the broker asked take a bundle nobody owns. The raw-protocol client of tests/transactions plays
the Java client's part: look up, TC_CLIENT_CONNECT, NEW_TXN, ADD_*, END_TXN, and a producer with txn_enabled."""

from __future__ import annotations

import asyncio
import os
import random
import signal
from collections.abc import Awaitable, Callable

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from broker.protocol import pulsar_api_pb2 as pb
from cluster.local import BrokerInfo
from tests.cluster.conftest import Brokers, http_json, log_of
from tests.transactions.client import Output, TxnWireClient, consume_and_produce, waiting_inputs

E = pb.ServerError
ASSIGN_0 = "persistent://pulsar/system/transaction_coordinator_assign-partition-0"
QUIET_S = 0.5  # how long "nothing more arrives" is watched for
MOVE_S = 90.0  # a dead broker's session (6 s) expires and the survivor takes its bundles


def port_of(broker: BrokerInfo) -> int:
    return int(broker.service_url.rsplit(":", 1)[1])


async def connect(broker: BrokerInfo) -> TxnWireClient:
    return await TxnWireClient.open(port_of(broker))


async def take(client: TxnWireClient, broker: BrokerInfo, topic: str) -> bool:
    """Make ``broker`` (the one ``client`` is connected to) own the bundle of ``topic``, unless another owns it."""
    r = await client.lookup(topic, authoritative=True)
    assert r.response == pb.CommandLookupTopicResponse.Connect, r
    return r.brokerServiceUrl == broker.service_url


async def topic_on(client: TxnWireClient, broker: BrokerInfo, tag: str) -> str:
    """A new topic name whose bundle ``broker`` owns (names falling in the other broker's bundles are skipped)."""
    for _ in range(50):
        name = f"persistent://public/default/{tag}-{os.urandom(3).hex()}"
        if await take(client, broker, name):
            return name
    raise AssertionError(f"no topic name for {broker.service_url}")


async def coordinator_on(client: TxnWireClient, broker: BrokerInfo) -> None:
    """Make ``broker`` (the one ``client`` is connected to) serve coordinator 0, and connect ``client`` to it."""
    assert await take(client, broker, ASSIGN_0)
    assert not (await client.tc_connect()).HasField("error")


async def clients_with_coordinator_on(a: BrokerInfo, b: BrokerInfo,
                                      *tags: str) -> tuple[TxnWireClient, TxnWireClient, list[str]]:
    """A client of each broker (the caller closes them), coordinator 0 on A (its client connected to it) and, for
    each tag, a new topic whose bundle B owns."""
    ca, cb = await connect(a), await connect(b)
    try:
        await coordinator_on(ca, a)
        return ca, cb, [await topic_on(cb, b, tag) for tag in tags]
    except BaseException:
        await ca.close()
        await cb.close()
        raise


async def until(probe: Callable[[], Awaitable[bool]], what: str) -> None:
    """Await ``probe`` until it says yes, for up to MOVE_S (a probe is a request to a broker: there is no event to
    wait on)."""
    delay = 0.05
    try:
        async with asyncio.timeout(MOVE_S):
            while not await probe():
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
    except TimeoutError:
        raise AssertionError(f"timed out after {MOVE_S} s waiting for {what}") from None


@pytest.fixture
def txn_brokers(brokers: Brokers) -> Brokers:
    brokers.settings["transactionCoordinatorEnabled"] = "true"
    return brokers


async def test_commit_and_abort_with_the_coordinator_on_another_broker(txn_brokers: Brokers) -> None:
    a, b = txn_brokers.start(2)
    ca, cb = await connect(a), await connect(b)
    try:
        await coordinator_on(ca, a)  # the coordinator and one output on A
        out_a = await topic_on(ca, a, "out-a")
        in_topic = await topic_on(cb, b, "in")  # the input (and its subscription) and the other output on B
        out_b = await topic_on(cb, b, "out-b")
        # Only A serves coordinator 0: B answers as a Pulsar broker that does not own the partition.
        refused = await cb.tc_connect()
        assert refused.error == E.ServiceNotReady, refused
        assert (await cb.new_txn_raw()).error == E.TransactionCoordinatorNotFound

        await ca.subscribe(out_a, "check", 30)
        await cb.subscribe(out_b, "check", 31)
        first, second = await waiting_inputs(cb, in_topic, 2)
        outputs = [Output(ca, 2, out_a), Output(cb, 3, out_b)]
        for out in outputs:
            await out.client.producer(out.topic, out.producer_id, txn_enabled=True)

        # Commit: consume in-0, produce out-0 to both outputs.
        txn, _ = await consume_and_produce(ca, cb, in_topic, first, outputs, 0)
        assert txn[0] == 0
        for consumer, client in ((30, ca), (31, cb)):
            with pytest.raises(TimeoutError):  # nothing before the commit
                await client.receive(consumer, wait_s=QUIET_S)
        assert not (await ca.end_txn(txn, commit=True)).HasField("error")
        assert (await ca.receive(30)).body == "out-0"
        assert (await cb.receive(31)).body == "out-0"

        # Abort: consume in-1, produce out-1; nothing of it is seen, in-1 comes again.
        txn2, _ = await consume_and_produce(ca, cb, in_topic, second, outputs, 1)
        assert not (await ca.end_txn(txn2, commit=False)).HasField("error")
        # Ordinary messages after the aborted ones are delivered; the aborted ones never.
        assert (await ca.send(2, 2, "after")).HasField("send_receipt")
        assert (await cb.send(3, 2, "after")).HasField("send_receipt")
        assert (await ca.receive(30)).body == "after"
        assert (await cb.receive(31)).body == "after"
        again = await cb.receive(10)  # (the abort delivers its acknowledged messages again)
        assert again.body == "in-1"  # in-0 was acknowledged by the committed transaction, in-1 was not
        with pytest.raises(TimeoutError):
            await cb.receive(10, wait_s=QUIET_S)
        # The ends went over the wire: A's coordinator opened a link to B.
        assert f"transaction link to {b.service_url} open" in log_of(a)
    finally:
        await ca.close()
        await cb.close()


async def coordinator_broker(client_of: Callable[[], Awaitable[TxnWireClient]], expected: BrokerInfo) -> bool:
    """Whether a lookup of coordinator 0's partition (asked of ``expected``) now lands on ``expected``."""
    client = await client_of()
    try:
        r = await client.lookup(ASSIGN_0)
        return r.response == pb.CommandLookupTopicResponse.Connect and r.brokerServiceUrl == expected.service_url
    finally:
        await client.close()


async def test_kill9_of_the_coordinators_broker_in_the_middle_of_commits(txn_brokers: Brokers) -> None:
    """Three transactions (each: consume one input, produce one output) are committed at once and the broker of
    their coordinator is killed with kill -9 a random moment later. The other broker, which owns the topics, takes
    the coordinator when the client looks it up again, recovers its log and finishes what was logged; the client
    asks for the commits again (as the Java client's retry does). In the end every output is there exactly once and
    every input acknowledged: all of each transaction or nothing, never twice."""
    rounds = 3
    a, b = txn_brokers.start(2)
    ca, cb, (in_topic, out_b) = await clients_with_coordinator_on(a, b, "k9-in", "k9-out")
    try:
        await cb.subscribe(out_b, "check", 31, permits=0)  # (keeps the outputs until they are checked)
        inputs = await waiting_inputs(cb, in_topic, rounds)
        await cb.producer(out_b, 3, txn_enabled=True)
        txns = [(await consume_and_produce(ca, cb, in_topic, msg, [Output(cb, 3, out_b)], r))[0]
                for r, msg in enumerate(inputs)]
        for txn in txns:
            ca.end_txn_nowait(txn, commit=True)
        await asyncio.sleep(random.uniform(0, 0.05))  # where the kill lands, not a wait for anything
        txn_brokers.kill(a)
        await ca.close()

        # The client looks coordinator 0 up again, through B: once A's session has expired, B takes it.
        await until(lambda: coordinator_broker(lambda: connect(b), b), "B to serve coordinator 0")
        ca = await connect(b)
        assert not (await ca.tc_connect()).HasField("error")
        for txn in txns:
            again = await ca.end_txn(txn, commit=True)
            # Finished by the recovered coordinator (then forgotten: TransactionNotFound), or still open (the
            # kill came before COMMITTING was logged) and committed now.
            assert not again.HasField("error") or again.error == E.TransactionNotFound, again

        cb.flow(31, 100)
        got = [m.body for m in await cb.receive_n(31, rounds)]
        assert got == [f"out-{r}" for r in range(rounds)]
        with pytest.raises(TimeoutError):  # and nothing twice
            await cb.receive(31, wait_s=QUIET_S)
        await cb.close()
        cb = await connect(b)  # every input was acknowledged by its transaction: nothing comes again
        await cb.subscribe(in_topic, "work", 10)
        with pytest.raises(TimeoutError):
            await cb.receive(10, wait_s=QUIET_S)
    finally:
        await ca.close()
        await cb.close()


async def test_kill9_after_one_of_two_owners_heard_the_commit(txn_brokers: Brokers) -> None:
    """The commit made certainly half done: of the two topics a transaction produced to, B's has its commit marker
    (its consumer sees the message) while C's owner is paused (SIGSTOP) and has not heard; then the coordinator's
    broker A is killed with kill -9. B takes the coordinator, recovers COMMITTING from the log and tells both topics
    again: B's topic ends once (no message twice), C's gets its marker once C runs again."""
    a, b, c = txn_brokers.start(3)
    ca, cb, cc = await connect(a), await connect(b), await connect(c)
    paused = False
    try:
        await coordinator_on(ca, a)
        in_topic = await topic_on(cb, b, "half-in")
        out_b = await topic_on(cb, b, "half-out-b")
        out_c = await topic_on(cc, c, "half-out-c")
        await cb.subscribe(out_b, "check", 31)
        await cc.subscribe(out_c, "check", 32)
        (msg,) = await waiting_inputs(cb, in_topic, 1)
        outputs = [Output(cb, 3, out_b), Output(cc, 4, out_c)]
        for out in outputs:
            await out.client.producer(out.topic, out.producer_id, txn_enabled=True)
        txn, _ = await consume_and_produce(ca, cb, in_topic, msg, outputs, 0)

        os.kill(c.pid, signal.SIGSTOP)
        paused = True
        ca.end_txn_nowait(txn, commit=True)
        assert (await cb.receive(31)).body == "out-0"  # B heard: COMMITTING is logged, C cannot hear
        txn_brokers.kill(a)
        await ca.close()
        os.kill(c.pid, signal.SIGCONT)
        paused = False

        await until(lambda: take_with(b), "B to take coordinator 0")
        ca = await connect(b)
        assert not (await ca.tc_connect()).HasField("error")
        again = await ca.end_txn(txn, commit=True)
        assert not again.HasField("error") or again.error == E.TransactionNotFound, again

        out_c_owner = await owner(cb, out_c)
        if out_c_owner != c.service_url:  # (C's session ran out while it was paused: the topic moved)
            await cc.close()
            cc = await connect(b if out_c_owner == b.service_url else c)
            await cc.subscribe(out_c, "check", 32)
        assert (await cc.receive(32, wait_s=MOVE_S)).body == "out-0"
        for client, consumer in ((cb, 31), (cc, 32)):
            with pytest.raises(TimeoutError):  # once each
                await client.receive(consumer, wait_s=QUIET_S)
        await cb.close()
        cb = await connect(b)
        await cb.subscribe(in_topic, "work", 10)
        with pytest.raises(TimeoutError):  # the input was acknowledged by the transaction
            await cb.receive(10, wait_s=QUIET_S)
    finally:
        if paused:
            os.kill(c.pid, signal.SIGCONT)
        for client in (ca, cb, cc):
            await client.close()


async def take_with(broker: BrokerInfo) -> bool:
    """An authoritative lookup of coordinator 0's partition at ``broker``: it takes the bundle once nobody owns it."""
    client = await connect(broker)
    try:
        return await take(client, broker, ASSIGN_0)
    finally:
        await client.close()


async def owner(client: TxnWireClient, topic: str) -> str:
    for _ in range(10):
        r = await client.lookup(topic)
        if r.response == pb.CommandLookupTopicResponse.Connect:
            return r.brokerServiceUrl
        assert r.response == pb.CommandLookupTopicResponse.Redirect, r
        other = await TxnWireClient.open(int(r.brokerServiceUrl.rsplit(":", 1)[1]))
        try:
            r2 = await other.lookup(topic, authoritative=r.authoritative)
        finally:
            await other.close()
        if r2.response == pb.CommandLookupTopicResponse.Connect:
            return r2.brokerServiceUrl
    raise AssertionError(f"no owner found for {topic}")


async def test_unloading_the_coordinators_bundle_moves_it_with_its_open_transactions(txn_brokers: Brokers) -> None:
    """The namespace pulsar/system is unloaded on A: A closes coordinator 0 (its requests now answer
    TransactionCoordinatorNotFound, on which the Java client looks up again), B takes the bundle and recovers the
    coordinator from its log, open transaction included, which then commits through B."""
    a, b = txn_brokers.start(2)
    ca, cb = await connect(a), await connect(b)
    try:
        await coordinator_on(ca, a)
        out = await topic_on(ca, a, "moved-out")
        await ca.subscribe(out, "check", 30)
        await ca.producer(out, 2, txn_enabled=True)
        txn = await ca.new_txn(timeout_ms=300_000)
        assert not (await ca.add_partitions(txn, out)).HasField("error")
        assert (await ca.send(2, 0, "out-0", txn)).HasField("send_receipt")

        http_json(f"{a.web_url}/admin/v2/namespaces/pulsar/system/unload", method="PUT")
        assert "transaction coordinator 0 released with its bundle" in log_of(a)
        assert (await ca.new_txn_raw()).error == E.TransactionCoordinatorNotFound
        assert (await ca.tc_connect()).error == E.ServiceNotReady
        await coordinator_on(cb, b)
        assert not (await cb.end_txn(txn, commit=True)).HasField("error")  # (B's coordinator knew it: open)
        assert (await ca.receive(30)).body == "out-0"
        assert (await cb.new_txn())[1] > txn[1]  # ids go on from the log: never reused
    finally:
        await ca.close()
        await cb.close()


async def take_topic(broker: BrokerInfo, topic: str) -> bool:
    """An authoritative lookup of ``topic`` at ``broker``: it takes the bundle once nobody owns it."""
    client = await connect(broker)
    try:
        return await take(client, broker, topic)
    finally:
        await client.close()


async def test_producers_without_txn_enabled_on_another_broker_than_the_coordinator(txn_brokers: Brokers) -> None:
    """The Go client's way: its producers never set txn_enabled and its SENDs carry the transaction in CommandSend
    only. Topics on B, coordinator on A: B's topics are prepared by their first transactional SEND (Pulsar's first
    snapshot), not refused; commit and abort are seen right. Then B is killed with kill -9 while a transaction is
    open on a topic whose first transactional SEND it was: A takes the topic, and its buffer, recovered from the
    snapshot that SEND took, still holds the transaction open, so its abort drops the message."""
    a, b = txn_brokers.start(2)
    ca, cb, (out, fresh) = await clients_with_coordinator_on(a, b, "go-out", "go-fresh")
    try:
        await cb.subscribe(out, "check", 31)
        await cb.subscribe(fresh, "check", 32)
        await cb.producer(out, 3)
        await cb.producer(fresh, 4)

        committed = await ca.new_txn()
        assert not (await ca.add_partitions(committed, out)).HasField("error")
        assert (await cb.send(3, 0, "committed", committed, txn_in_metadata=False)).HasField("send_receipt")
        aborted = await ca.new_txn()
        assert not (await ca.add_partitions(aborted, out)).HasField("error")
        assert (await cb.send(3, 1, "aborted", aborted, txn_in_metadata=False)).HasField("send_receipt")
        assert (await cb.send(3, 2, "plain")).HasField("send_receipt")
        with pytest.raises(TimeoutError):
            await cb.receive(31, wait_s=QUIET_S)
        assert not (await ca.end_txn(committed, commit=True)).HasField("error")
        assert not (await ca.end_txn(aborted, commit=False)).HasField("error")
        assert [m.body for m in await cb.receive_n(31, 2)] == ["committed", "plain"]

        open_txn = await ca.new_txn(timeout_ms=300_000)
        assert not (await ca.add_partitions(open_txn, fresh)).HasField("error")
        assert (await cb.send(4, 0, "open", open_txn, txn_in_metadata=False)).HasField("send_receipt")
        assert (await cb.send(4, 1, "after")).HasField("send_receipt")
        with pytest.raises(TimeoutError):
            await cb.receive(32, wait_s=QUIET_S)
        txn_brokers.kill(b)
        await cb.close()

        await until(lambda: take_topic(a, fresh), "A to take the topic of the killed broker")
        await ca.subscribe(fresh, "check", 40)
        with pytest.raises(TimeoutError):  # still open on A: it holds back what follows it
            await ca.receive(40, wait_s=QUIET_S)
        assert not (await ca.end_txn(open_txn, commit=False)).HasField("error")
        assert [m.body for m in await ca.receive_n(40, 1)] == ["after"]
        with pytest.raises(TimeoutError):
            await ca.receive(40, wait_s=QUIET_S)
    finally:
        await ca.close()
        await cb.close()


def no_redirect(url: str) -> requests.Response:
    return requests.get(url, allow_redirects=False, timeout=30)


async def test_admin_v3_coordinator_reads_go_to_the_coordinators_broker(txn_brokers: Brokers) -> None:
    """Coordinator 0 on A, a transaction producing to a topic of B and acknowledging on B's subscription. Asked of
    B, as Pulsar's TransactionsBase answers: a read of coordinator 0 is a 307 to A; without coordinatorId,
    coordinatorStats and slowTransactions gather A's answers; coordinators names A; the transaction's topic and
    subscription are described by B, their owner, even when A answers. A topic read asked of A is a 307 to B.
    pulsar_txn_* metrics: each broker its own coordinators (A lists coordinator 0, B does not)."""
    a, b = txn_brokers.start(2)
    ca, cb, (out, in_topic) = await clients_with_coordinator_on(a, b, "admin-out", "admin-in")
    try:
        (msg,) = await waiting_inputs(cb, in_topic, 1)
        await cb.producer(out, 2)
        txn, (receipt,) = await consume_and_produce(ca, cb, in_topic, msg, [Output(cb, 2, out)], 0, cumulative=True)
        v3a, v3b = f"{a.web_url}/admin/v3/transactions", f"{b.web_url}/admin/v3/transactions"
        most, least = txn

        for path in ("coordinatorStats?coordinatorId=0", f"transactionMetadata/{most}/{least}",
                     "slowTransactions/0?coordinatorId=0", "coordinatorInternalStats/0"):
            moved = no_redirect(f"{v3b}/{path}")
            assert moved.status_code == 307 and moved.headers["Location"].startswith(a.web_url), (path, moved.text)
        assert http_json(f"{v3b}/coordinatorStats?coordinatorId=0")["ongoingTxnSize"] == 1  # (the 307 followed)
        assert http_json(f"{v3b}/coordinatorStats") == {"0": http_json(f"{v3a}/coordinatorStats?coordinatorId=0")}
        assert http_json(f"{v3b}/coordinators") == [{"id": 0, "brokerServiceUrl": a.service_url}]

        position = receipt.send_receipt.message_id
        metadata = http_json(f"{v3b}/transactionMetadata/{most}/{least}")
        assert metadata["status"] == "OPEN"
        assert metadata["producedPartitions"] == {
            out: {"startPosition": f"{position.ledgerId}:{position.entryId}", "aborted": False}}
        acked = msg.message_id
        assert metadata["ackedPartitions"] == {
            in_topic: {"work": {"cumulativeAckPosition": f"{acked.ledgerId}:{acked.entryId}"}}}
        slow = http_json(f"{v3b}/slowTransactions/0")
        assert list(slow) == [metadata["txnId"]] and slow[metadata["txnId"]] == metadata

        local = out.removeprefix("persistent://")
        moved = no_redirect(f"{v3a}/transactionBufferStats/{local}")
        assert moved.status_code == 307 and moved.headers["Location"].startswith(b.web_url), moved.text
        assert http_json(f"{v3a}/transactionBufferStats/{local}")["ongoingTxnSize"] == 1

        def coordinators_in_metrics(broker: BrokerInfo) -> set[str]:
            text = requests.get(f"{broker.web_url}/metrics", timeout=30).text
            return {s.labels["coordinator_id"] for f in text_string_to_metric_families(text)
                    if f.name == "pulsar_txn_active_count" for s in f.samples}

        assert coordinators_in_metrics(a) == {"0"}
        assert coordinators_in_metrics(b) == set()
        assert not (await ca.end_txn(txn, commit=False)).HasField("error")
    finally:
        await ca.close()
        await cb.close()
