"""Our /admin/v3/transactions answers against Apache Pulsar 4.0.7's own.

A Pulsar standalone with transactionCoordinatorEnabled=true (the jars of `make pulsar-deps`) and our broker get the
same workload over the wire (tests/transactions/client.py, the commands the Java client sends): three messages
received on a subscription, one transaction left open (it acknowledged the first and produced to another topic), one
committed, one aborted. Then every call of Pulsar's Transactions resource (and the two topics' stats): the same
status, the same JSON shape (tests/admin/pulsar_answers.py), Pulsar's reason where it gives one in JSON; then the
open transaction is aborted over REST and the coordinators scaled, each answer compared the same way. Where ours
answers otherwise on purpose, ``DIFFERENCES`` says why.

Cost: one Pulsar standalone start (20-60 s) and a few seconds of calls.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from broker.transactions.model import ASSIGN_TOPIC
from tests.admin.metric_table import documented
from tests.admin.pulsar_answers import Answers, ask_both, assert_same_shape, json_or, request, samples
from tests.admin.test_pulsar_shapes import DISPATCHER_KEYS
from tests.transactions.client import Output, TxnWireClient, consume_and_produce, waiting_inputs

pytestmark = [pytest.mark.apache_pulsar, pytest.mark.timeout(600)]

IN = "persistent://public/default/txn-in"
OUT = "persistent://public/default/txn-out"
V3 = "/admin/v3/transactions"
TOPICS = "public/default"

# (method, path, body): ``{txn}`` is the open transaction (most/least), ``{m0}`` / ``{m2}`` the first and third
# input messages (ledger/entry), as each broker numbered them.
CALLS: list[tuple[str, str, Any]] = [
    ("GET", f"{V3}/coordinators", None),
    ("GET", f"{V3}/coordinatorStats", None),
    ("GET", f"{V3}/coordinatorStats?coordinatorId=0", None),
    ("GET", f"{V3}/transactionMetadata/{{txn}}", None),
    ("GET", f"{V3}/slowTransactions/1", None),
    ("GET", f"{V3}/slowTransactions/1?coordinatorId=0", None),
    ("GET", f"{V3}/transactionBufferStats/{TOPICS}/txn-out", None),
    ("GET", f"{V3}/transactionBufferStats/{TOPICS}/txn-out?lowWaterMarks=true", None),
    ("GET", f"{V3}/transactionInBufferStats/{TOPICS}/txn-out/{{txn}}", None),
    ("GET", f"{V3}/pendingAckStats/{TOPICS}/txn-in/work", None),
    ("GET", f"{V3}/pendingAckStats/{TOPICS}/txn-in/work?lowWaterMarks=true", None),
    ("GET", f"{V3}/transactionInPendingAckStats/{TOPICS}/txn-in/work/{{txn}}", None),
    ("GET", f"{V3}/coordinatorInternalStats/0", None),
    ("GET", f"{V3}/coordinatorInternalStats/0?metadata=true", None),
    ("GET", f"{V3}/transactionBufferInternalStats/{TOPICS}/txn-out", None),
    ("GET", f"{V3}/pendingAckInternalStats/{TOPICS}/txn-in/work", None),
    ("GET", f"{V3}/positionStatsInPendingAck/{TOPICS}/txn-in/work/{{m0}}", None),
    ("GET", f"{V3}/positionStatsInPendingAck/{TOPICS}/txn-in/work/{{m2}}", None),
    ("GET", f"{V3}/positionStatsInPendingAck/{TOPICS}/txn-in/work/{{m0}}?batchIndex=0", None),
    ("GET", f"/admin/v2/persistent/{TOPICS}/txn-out/stats", None),
    ("GET", f"/admin/v2/persistent/{TOPICS}/txn-in/stats", None),
    # what does not exist
    ("GET", f"{V3}/coordinatorStats?coordinatorId=5", None),
    ("GET", f"{V3}/transactionMetadata/0/987654", None),
    ("GET", f"{V3}/transactionMetadata/5/0", None),
    ("GET", f"{V3}/transactionBufferStats/{TOPICS}/missing", None),
    ("GET", f"{V3}/transactionInBufferStats/{TOPICS}/txn-out/0/987654", None),
    ("GET", f"{V3}/coordinatorInternalStats/7", None),
    ("GET", f"{V3}/transactionBufferInternalStats/{TOPICS}/txn-in", None),
    ("POST", f"{V3}/abortTransaction/0/987654", None),
    # the open transaction aborted over REST, then gone
    ("POST", f"{V3}/abortTransaction/{{txn}}", None),
    ("GET", f"{V3}/transactionMetadata/{{txn}}", None),
    ("POST", f"{V3}/abortTransaction/{{txn}}", None),
    ("GET", f"{V3}/positionStatsInPendingAck/{TOPICS}/txn-in/work/{{m0}}", None),
    # more coordinators, never fewer
    ("POST", f"{V3}/transactionCoordinator/replicas", 1),
    ("POST", f"{V3}/transactionCoordinator/replicas", 2),
    ("GET", f"{V3}/coordinators", None),
    ("GET", f"{V3}/coordinatorStats", None),
    ("GET", f"{V3}/coordinatorStats?coordinatorId=1", None),
]

_PROPERTIES = ".cursors.<cursor>.properties.<property>"
_SCHEMA_LEDGERS = {".schemaLedgers[]", *(f".schemaLedgers[].{k}" for k in (
    "entries", "ledgerId", "offloaded", "size", "underReplicated"))}

# "METHOD path" -> (key paths only ours has, key paths only Pulsar's has), each with the reason. (In internal stats the
# cursors' names and their properties' keys are made generic first: ``generic_cursors``.)
DIFFERENCES: dict[str, tuple[set[str], set[str]]] = {
    # Ours keeps the coordinator's last transaction id in its log cursor's properties.
    f"GET {V3}/coordinatorInternalStats/0": ({f".transactionLogStats.managedLedgerInternalStats{_PROPERTIES}"}, set()),
    # ... and keeps it in files here (BookKeeper's ledger metadata, ?metadata=true, is for BookKeeper storage).
    f"GET {V3}/coordinatorInternalStats/0?metadata=true": (
        {f".transactionLogStats.managedLedgerInternalStats{_PROPERTIES}"},
        {".transactionLogStats.managedLedgerInternalStats.ledgers[].metadata"}),
    # Ours keeps a topic's aborted transactions in its own snapshot cursor's properties (Pulsar: in its namespace's
    # __transaction_buffer_snapshot topic, which has a schema).
    f"GET {V3}/transactionBufferInternalStats/{TOPICS}/txn-out": (
        {f".singleSnapshotSystemTopicInternalStats.managedLedgerInternalStats{_PROPERTIES}"},
        {f".singleSnapshotSystemTopicInternalStats.managedLedgerInternalStats{k}" for k in _SCHEMA_LEDGERS}),
    # (and there, the stats of the topic's subscriptions: ours add the dispatcher's permit accounting to each, and
    # hold a subscription's pending acks in its cursor's properties)
    f"GET {V3}/transactionBufferInternalStats/{TOPICS}/txn-in": (
        {f".singleSnapshotSystemTopicInternalStats.managedLedgerInternalStats{k}" for k in (
            _PROPERTIES, *(f".cursors.<cursor>.{k}" for k in DISPATCHER_KEYS))},
        {f".singleSnapshotSystemTopicInternalStats.managedLedgerInternalStats{k}" for k in _SCHEMA_LEDGERS}),
    # Ours keeps the pending acks in the subscription cursor's properties (Pulsar: in a ledger of their own).
    f"GET {V3}/pendingAckInternalStats/{TOPICS}/txn-in/work": (
        {f".pendingAckLogStats.managedLedgerInternalStats{_PROPERTIES}"}, set()),
}

# index -> why Pulsar 4.0.7 fails where ours answers (compared as usual when Pulsar answers after all).
PULSAR_FAILS = {
    # internalGetTransactionMetadata waits on its own admin client's calls and timed out (500 TimeoutException).
    "03": "Pulsar timed out",
    # A coordinator added by scaling is served only once a client looked its partition up (Pulsar: 500 for every
    # coordinator's stats, 404 for its own); ours loads it on its first use.
    "36": "Pulsar has not loaded the new coordinator", "37": "Pulsar has not loaded the new coordinator",
}
# Where ours gives another reason than Pulsar's: "index" -> why.
REASON_DIFFERENCES = {
    # Pulsar: "The transaction with this txdID `(0,987654)`not found " (sic).
    "22": "clearer", "30": "clearer",
}


def _key(index: int) -> str:
    method, path, _ = CALLS[index]
    return f"{index:02d} {method} {path}"


async def workload(port: int) -> tuple[TxnWireClient, dict[str, str]]:
    """The same on both brokers; the client stays open (its consumer and producers show in the stats)."""
    client = await TxnWireClient.open(port)
    # As the clients do: a lookup of each topic first (Pulsar loads its bundle then, and answers ServiceNotReady
    # until it has).
    for topic in (f"{ASSIGN_TOPIC}-partition-0", IN, OUT):
        await client.lookup(topic)
    async with asyncio.timeout(60):
        while (await client.tc_connect(0)).HasField("error"):  # noqa: ASYNC110 - Pulsar tells nothing when ready
            await asyncio.sleep(0.1)
    m0, m1, m2 = await waiting_inputs(client, IN, 3)
    await client.producer(OUT, 2)
    out = [Output(client, 2, OUT)]
    left_open, _ = await consume_and_produce(client, client, IN, m0, out, 0, timeout_ms=600_000)
    committed, _ = await consume_and_produce(client, client, IN, m1, out, 1)
    assert not (await client.end_txn(committed, commit=True)).HasField("error")
    aborted = await client.new_txn()
    assert not (await client.add_partitions(aborted, OUT)).HasField("error")
    assert (await client.send(2, 2, "aborted", aborted)).HasField("send_receipt")
    assert not (await client.end_txn(aborted, commit=False)).HasField("error")
    return client, {"txn": "/".join(map(str, left_open)), "m0": "/".join(map(str, m0.id)),
                    "m2": "/".join(map(str, m2.id))}


def ask(service_url: str, web_url: str, metrics_path: str) -> Answers:
    """The workload on one broker, then every call (and /metrics), with the client still open."""
    async def run() -> dict[str, tuple[int, Any]]:
        client, names = await workload(int(service_url.rsplit(":", 1)[1]))
        try:
            answers: dict[str, tuple[int, Any]] = {}
            for i, (method, path, body) in enumerate(CALLS):
                status, text = await asyncio.to_thread(request, web_url, method, path.format(**names), body)
                answers[_key(i)] = (status, json_or(text, text))
            status, text = await asyncio.to_thread(request, web_url, "GET", metrics_path)
            answers["/metrics"] = (status, text)
            return answers
        finally:
            await client.close()
    return asyncio.run(run())


@pytest.fixture(scope="module")
def answers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Answers]:
    return ask_both(tmp_path_factory.mktemp("pulsar-txn-shapes"), ask, "transactionCoordinatorEnabled=true\n",
                    transactionCoordinatorEnabled=True)


@pytest.mark.parametrize("key", [_key(i) for i in range(len(CALLS))])
def test_call_has_pulsars_status_and_answer(answers: dict[str, dict[str, tuple[int, Any]]], key: str) -> None:
    (our_status, ours), (their_status, theirs) = answers["ours"][key], answers["pulsar"][key]
    index, call = key.split(" ", 1)
    if their_status >= 400 and index in PULSAR_FAILS:
        assert our_status == 200, ours
        return
    assert our_status == their_status, f"status: ours {our_status} ({ours}), Pulsar's {their_status} ({theirs})"
    if our_status >= 400:
        their_reason = theirs.get("reason") if isinstance(theirs, dict) else None
        our_reason = ours.get("reason") if isinstance(ours, dict) else None
        # (a 500 with Pulsar's stack trace as its reason is not compared; nor a reason ours words otherwise)
        if their_reason is not None and UNEXPECTED not in their_reason and index not in REASON_DIFFERENCES:
            assert our_reason == their_reason or str(our_reason).startswith(their_reason + ":"), (our_reason,
                                                                                                 their_reason)
        return
    assert_same_shape(generic_cursors(ours), generic_cursors(theirs), *DIFFERENCES.get(call, (set(), set())))


UNEXPECTED = "--- An unexpected error occurred in the server ---"


def generic_cursors(value: Any) -> Any:
    """``value`` with every set of cursors as one ``<cursor>`` holding the keys they have, and any properties as
    one ``<property>`` (the two brokers keep transaction state under cursors of other names)."""
    if isinstance(value, list):
        return [generic_cursors(v) for v in value]
    if not isinstance(value, dict):
        return value
    out = {k: generic_cursors(v) for k, v in value.items()}
    cursors = value.get("cursors")
    if isinstance(cursors, dict) and cursors:
        merged: dict[str, Any] = {}
        for cursor in cursors.values():
            merged.update(cursor)
        merged["properties"] = {"<property>": 0} if any(c.get("properties") for c in cursors.values()) else {}
        out["cursors"] = {"<cursor>": merged}
    return out


def test_transaction_metrics_have_pulsars_label_keys(answers: dict[str, dict[str, tuple[int, Any]]]) -> None:
    ours, theirs = samples(answers["ours"]["/metrics"][1]), samples(answers["pulsar"]["/metrics"][1])
    txn = sorted(name for name in theirs if name.startswith("pulsar_txn_"))
    assert txn, "Pulsar wrote no transaction metrics"

    def keys(name: str, of: dict[str, list[dict[str, str]]]) -> list[tuple[str, ...]]:
        return sorted({tuple(sorted(s)) for s in of[name]})

    differ = {name: (keys(name, ours), keys(name, theirs)) for name in txn
              if name in ours and keys(name, ours) != keys(name, theirs)}
    assert not differ, f"label keys (ours, Pulsar's): {differ}"
    undocumented = [name for name in txn if name not in ours and not documented(name)]
    assert not undocumented, f"families Pulsar writes, not here, and not in docs/metrics.md: {undocumented}"
