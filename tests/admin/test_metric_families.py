"""Every Apache Pulsar metric family docs/metrics.md lists is on /metrics when its row says so.

The main test runs a real Prometheus scraping a broker under traffic from the official client
(and transactions, from the project's wire client: the official Python client has none), and
checks through Prometheus's API that every family of the situations set up (topic level,
subscriptions, producer and consumer level, managed ledgers and cursors, the file ledger, a
non-persistent subscription, transactions) has been stored, that no value is negative (but where
the row says -1), that the traffic counters grow and that the families traffic moves have been
above zero. The namespace-level, idle-broker and authentication
situations are checked on one scrape each, parsed with prometheus_client's parser.
"""

from __future__ import annotations

import asyncio
import base64
import math
import time
import urllib.request
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path

import jwt
import pulsar
import pytest
from prometheus_client.parser import text_string_to_metric_families

from broker.admin.metric_families import FAMILIES, TXN_EXECUTION_LATENCY
from broker.embedded import BrokerThread
from broker.protocol import pulsar_api_pb2 as pb
from tests.admin.conftest import Admin
from tests.admin.metric_table import Row, expected, rows
from tests.admin.prometheus_server import PROMETHEUS_WAIT_S, metric_names, prometheus_server, query
from tests.transactions.client import TxnWireClient
from tests.waiting import wait_for

TIMEOUT_MS = 10_000
MAIN_SITUATIONS = ("always", "topic", "subscription", "producer", "consumer", "ml", "cursor", "file",
                   "non-persistent", "compaction", "schema", "transactions")
# Counters that must grow while messages flow (topic-scoped ones are read for the test's topic).
TRAFFIC_COUNTERS = ("pulsar_in_messages_total", "pulsar_in_bytes_total", "pulsar_out_messages_total",
                    "pulsar_out_bytes_total", "pulsar_broker_in_bytes_total", "pulsar_ml_cache_inserted_entries_total",
                    "pulsar_py_ledger_entries_written_total", "pulsar_py_ledger_bytes_written_total",
                    "pulsar_broker_publish_latency_count")
# Families the traffic makes non-zero at some scrape (rates and per-interval buckets are 0 in a quiet interval):
# cache hits (tailing consumers read what was just added), cursor state writes (acks), ledger rollovers (the
# broker rolls over every few entries), ends of transactions on a topic.
ONCE_ABOVE_ZERO = ("pulsar_ml_cache_hits_throughput", "pulsar_ml_MarkDeleteRate",
                   "pulsar_ml_LedgerSwitchLatencyBuckets", "pulsar_ml_cursor_persistLedgerSucceed",
                   "pulsar_ml_cursor_writeLedgerSize",
                   "pulsar_ml_cursor_writeLedgerLogicalSize", "pulsar_txn_tb_client_commit_latency_count",
                   "pulsar_txn_tb_client_commit_latency", "pulsar_txn_tp_commit_latency_count",
                   "pulsar_txn_tp_commit_latency", "pulsar_storage_backlog_quota_check_duration_seconds_count",
                   "pulsar_broker_publish_latency")
TXN_TOPIC = "persistent://public/default/families-txn"


class SchemaRecord(pulsar.schema.Record):  # type: ignore[misc]  # (the client's untyped base class)
    name = pulsar.schema.String()


def scrape(web_url: str) -> dict[str, list[float]]:
    """Family (or histogram sample) name -> every value on one scrape."""
    with urllib.request.urlopen(f"{web_url}/metrics", timeout=10) as r:
        text = r.read().decode()
    out: dict[str, list[float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append(s.value)
    return out


def present(name: str, names: set[str] | dict[str, list[float]]) -> bool:
    return name in names or f"{name}_bucket" in names


def assert_plausible(name: str, row: Row, values: list[float]) -> None:
    floor = -1.0 if row.may_be_negative else 0.0
    for v in values:
        if math.isnan(v) and row.may_be_nan:
            continue
        assert not math.isnan(v) and v >= floor, f"{name} = {v}"


def test_table_and_code_agree() -> None:
    listed = {n for r in rows() for n in r.names}
    assert set(FAMILIES) <= listed, f"families missing from docs/metrics.md: {sorted(set(FAMILIES) - listed)}"
    declared = {n for r in rows() if r.conditions for n in r.names if not n.startswith("process_")}
    assert declared <= set(FAMILIES), f"rows without code: {sorted(declared - set(FAMILIES))}"


@pytest.fixture
def busy_broker() -> Iterator[BrokerThread]:
    # (Ledgers of 4 entries, rolled over at once: the ledger-switch series see rollovers.)
    with BrokerThread(statsUpdateFrequencyInSecs=0.5, exposeConsumerLevelMetricsInPrometheus=True,
                      exposeProducerLevelMetricsInPrometheus=True, exposeManagedCursorMetricsInPrometheus=True,
                      managedLedgerMaxEntriesPerLedger=4, managedLedgerMinLedgerRolloverTimeMinutes=0,
                      transactionCoordinatorEnabled=True, backlogQuotaCheckIntervalInSeconds=1,
                      healthCheckMetricsUpdateTimeInSeconds=1) as b:
        yield b


async def commit_one_transaction(port: int, seq: int) -> None:
    """One transaction that publishes a message and acknowledges one, and commits (the coordinator ends it on the
    topic and on the subscription)."""
    client = await TxnWireClient.open(port)
    try:
        await client.producer(TXN_TOPIC, 1, txn_enabled=True)
        # (Shared: the previous round's consumer may not have left yet.)
        await client.subscribe(TXN_TOPIC, "txn-sub", 1, sub_type=pb.CommandSubscribe.Shared)
        await client.send(1, 2 * seq, "plain")
        txn = await client.new_txn()
        await client.add_partitions(txn, TXN_TOPIC)
        await client.add_subscription(txn, TXN_TOPIC, "txn-sub")
        await client.send(1, 2 * seq + 1, "t", txn)
        await client.ack(1, await client.receive(1), txn=txn)
        assert not (await client.end_txn(txn, commit=True)).HasField("error")
    finally:
        await client.close()


def test_every_family_under_traffic_in_prometheus(busy_broker: BrokerThread, prometheus_bin: str,
                                                  tmp_path: Path) -> None:
    want = expected(*MAIN_SITUATIONS)
    topic = f"persistent://public/default/families-{uuid.uuid4().hex[:8]}"
    client = pulsar.Client(busy_broker.service_url, operation_timeout_seconds=10)
    try:
        consumer = client.subscribe(topic, "fam-sub", consumer_name="fam-consumer")
        producer = client.create_producer(topic, producer_name="fam-producer", batching_enabled=False)
        client.subscribe(f"non-persistent://public/default/np-{uuid.uuid4().hex[:8]}", "np-sub")

        port = int(busy_broker.service_url.rsplit(":", 1)[1])
        rounds = iter(range(1_000_000))

        def traffic() -> None:
            for _ in range(5):
                producer.send(b"m" * 300)
            for _ in range(5):
                consumer.acknowledge(consumer.receive(TIMEOUT_MS))
            asyncio.run(commit_one_transaction(port, next(rounds)))

        traffic()
        compact = urllib.request.Request(f"{busy_broker.web_url}/admin/v2/persistent/{topic.removeprefix('persistent://')}"
                                         "/compaction", method="PUT")
        urllib.request.urlopen(compact, timeout=10).close()
        # Schema registry traffic: a put (a producer with a schema), a get (the admin API), a refused put.
        typed = f"persistent://public/default/schema-{uuid.uuid4().hex[:8]}"
        client.create_producer(typed, schema=pulsar.schema.StringSchema())
        urllib.request.urlopen(f"{busy_broker.web_url}/admin/v2/schemas/{typed.removeprefix('persistent://')}/schema",
                               timeout=10).close()
        with pytest.raises(Exception):  # noqa: B017  # the client's error for an incompatible schema
            client.create_producer(typed, schema=pulsar.schema.JsonSchema(SchemaRecord))
        target = busy_broker.web_url.removeprefix("http://")
        with prometheus_server(prometheus_bin, target, tmp_path) as prom:
            def all_stored() -> set[str] | None:
                traffic()
                names = metric_names(prom)
                return names if all(present(n, names) for n in want) else None

            names = wait_for(all_stored, PROMETHEUS_WAIT_S * 2, "every family stored by Prometheus")
            assert not [n for n in want if not present(n, names)]
            for name, row in want.items():
                series = name if name in names else f"{name}_bucket"
                values = [float(r["value"][1]) for r in query(prom, series)]  # type: ignore[index]
                assert values, name
                assert_plausible(name, row, values)

            def total(name: str) -> float:
                selector = f'{{topic="{topic}"}}' if name.startswith(("pulsar_in_", "pulsar_out_")) else ""
                result = query(prom, f"sum({name}{selector})")
                return float(result[0]["value"][1]) if result else 0.0  # type: ignore[index]

            before = {name: total(name) for name in TRAFFIC_COUNTERS}

            def grown() -> bool:
                traffic()
                return all(total(name) > before[name] for name in TRAFFIC_COUNTERS)

            wait_for(grown, PROMETHEUS_WAIT_S, "traffic counters growing in Prometheus")

            def ever_above_zero() -> list[str]:
                traffic()
                window = f"{PROMETHEUS_WAIT_S * 4:.0f}s"
                # (">= 0" leaves out the NaN of a summary quantile over an interval without observations.)
                return [n for n in ONCE_ABOVE_ZERO if not total(f"max_over_time(sum({n} >= 0)[{window}:1s])") > 0]

            wait_for(lambda: not ever_above_zero(), PROMETHEUS_WAIT_S * 2, "traffic-moved families above zero once")
            # The test's subscribes looked topics up and loaded them: Pulsar's lookup and topic-load series count them.
            assert total("pulsar_broker_lookup_answers_total") >= 2
            assert total("pulsar_broker_lookup_count") >= 2
            assert total("pulsar_topic_load_times_count") >= 1
            assert total("pulsar_broker_lookup_failures_total") == 0
            for name in ("pulsar_metadata_store_ops_latency_ms_count", "pulsar_metadata_store_put_bytes_total",
                         "pulsar_schema_put_ops_latency_count", "pulsar_schema_get_ops_latency_count",
                         "pulsar_schema_incompatible_total", "pulsar_schema_put_ops_failed_total",
                         'pulsar_txn_tp_committed_count_total{status="succeed"}', "pulsar_txn_committed_total"):
                assert total(name) >= 1, name
            assert total('pulsar_txn_tp_committed_count_total{status="failed"}') == 0
            # Transactions ended since the previous scrape, by how long they were open: some scrape saw each.
            window = f"{PROMETHEUS_WAIT_S * 4:.0f}s"

            def some_ended() -> bool:
                traffic()
                return sum(total(f"sum(sum_over_time({name}[{window}]))") for name in TXN_EXECUTION_LATENCY) >= 1

            wait_for(some_ended, PROMETHEUS_WAIT_S * 2, "ended transactions in the execution-latency buckets")
            assert total("pulsar_version_info") == 1
            # (A periodic check that timed out on a loaded machine reads 0 until the next one passes.)
            wait_for(lambda: total("pulsar_health") == 1, PROMETHEUS_WAIT_S * 2, "pulsar_health 1")
            # No read in flight is shared here: every entry a cache miss wanted was read from storage. (One query:
            # two could straddle a scrape.)
            assert total("sum(pulsar_ml_cache_pendingreads_entries_read_total) - "
                         "sum(pulsar_ml_cache_pendingreads_missed_total)") == 0
    finally:
        client.close()


def test_namespace_level_families() -> None:
    want = expected("namespace")
    with BrokerThread(exposeTopicLevelMetricsInPrometheus=False) as b:
        client = pulsar.Client(b.service_url, operation_timeout_seconds=10)
        try:
            topic = f"persistent://public/default/ns-{uuid.uuid4().hex[:8]}"
            consumer = client.subscribe(topic, "s")
            client.create_producer(topic).send(b"x")
            consumer.acknowledge(consumer.receive(TIMEOUT_MS))
            got = scrape(b.web_url)
        finally:
            client.close()
    assert not [n for n in want if not present(n, got)]
    for name, row in want.items():
        assert_plausible(name, row, got.get(name, []))
    topic_only = {n for r in rows() if r.conditions and r.conditions <= {"topic", "subscription", "producer",
                                                                         "consumer"} for n in r.names}
    assert not [n for n in topic_only if n in got and n not in want], "topic-level series with topic level off"


def test_idle_broker_families() -> None:
    with BrokerThread() as b:
        got = scrape(b.web_url)
    want = expected("idle", "always")
    assert not [n for n in want if not present(n, got)]
    for name, row in want.items():
        assert_plausible(name, row, got.get(name, []))
    assert got["pulsar_topics_count"] == [0.0]  # Pulsar 2.x's cluster-only zero series
    assert got["pulsar_broker_topics_count"] == [0.0]
    assert got["pulsar_health"] == [-1.0]  # (healthCheckMetricsUpdateTimeInSeconds=-1: no periodic check)


def test_authentication_families() -> None:
    secret = b"metrics-test-secret-0123456789abcdef"
    with BrokerThread(authenticationEnabled=True, authenticationProviders=["token"],
                      tokenSecretKey="data:;base64," + base64.b64encode(secret).decode()) as b:
        now = int(time.time())
        good = pulsar.Client(b.service_url, operation_timeout_seconds=10, authentication=pulsar.AuthenticationToken(
            jwt.encode({"sub": "u", "exp": now + 7200}, secret, "HS256")))  # expires in 120 minutes
        bad = pulsar.Client(b.service_url, operation_timeout_seconds=3,
                            authentication=pulsar.AuthenticationToken("not-a-token"))
        expired = pulsar.Client(b.service_url, operation_timeout_seconds=3, authentication=pulsar.AuthenticationToken(
            jwt.encode({"sub": "u", "exp": now - 600}, secret, "HS256")))
        try:
            good.create_producer(f"persistent://public/default/auth-{uuid.uuid4().hex[:8]}")
            for refused in (bad, expired):
                with pytest.raises(Exception):  # noqa: B017  # the client's own error type for a refused CONNECT
                    refused.create_producer(f"persistent://public/default/auth-{uuid.uuid4().hex[:8]}")
            got = scrape(b.web_url)
        finally:
            good.close()
            bad.close()
            expired.close()
    for name, row in expected("auth").items():
        assert present(name, got), name
        values = got.get(name) or got[f"{name}_count"]  # (a histogram's observations)
        assert_plausible(name, row, values)
        assert sum(values) >= 1, name
    # The accepted token had 120 minutes left: counted from the le="240.0" bucket on, not in le="60.0".
    assert got["pulsar_expiring_token_minutes_bucket"][:5] == [0.0, 0.0, 0.0, 1.0, 1.0]
    assert got["pulsar_expired_token_total"][0] >= 1  # (the client retries a refused CONNECT)


def scrape_with(web_url: str, names: Iterable[str], what: str) -> dict[str, list[float]]:
    """The first scrape where every one of ``names`` is present."""
    def complete() -> dict[str, list[float]] | None:
        got = scrape(web_url)
        return got if all(present(n, got) for n in names) else None

    return wait_for(complete, 30, what)


def test_offloader_families(tmp_path: Path) -> None:
    """brk_ledgeroffloader_*: a topic offloaded, its local copies deleted and read back from the copies, the topic
    deleted with its copies ("offload"); then a copy gone behind the broker's back is read, and the tier made
    unwritable for the next copy ("offload errors")."""
    data = tmp_path / "data"
    with BrokerThread(data_dir=data, managedLedgerStorage="file", managedLedgerOffloadDriver="filesystem",
                      managedLedgerMaxEntriesPerLedger=5, managedLedgerMinLedgerRolloverTimeMinutes=0,
                      retentionCheckIntervalInSeconds=1, statsUpdateFrequencyInSecs=0.5) as b:
        admin, path = Admin(b.web_url), "/admin/v2/persistent/public/default/"
        client = pulsar.Client(b.service_url, operation_timeout_seconds=10)
        try:
            def offload(local: str) -> None:
                topic = f"persistent://public/default/{local}"
                client.subscribe(topic, "keeps", initial_position=pulsar.InitialPosition.Earliest)
                producer = client.create_producer(topic, batching_enabled=False)
                last = [producer.send(b"o%d" % i) for i in range(12)][-1]
                producer.close()
                admin.ok("PUT", f"{path}{local}/offload", {"ledgerId": last.ledger_id(), "entryId": last.entry_id()})
                wait_for(lambda: admin.ok("GET", f"{path}{local}/offload")["status"] != "RUNNING", 30,
                         "the offload run to end")

            offload("offloaded")
            admin.ok("PUT", "/admin/v2/namespaces/public/default/offloadDeletionLagMs", 0)
            reader = client.subscribe("persistent://public/default/offloaded", "reads",
                                      initial_position=pulsar.InitialPosition.Earliest)
            assert [reader.receive(TIMEOUT_MS).data() for _ in range(12)] == [b"o%d" % i for i in range(12)]
            admin.ok("DELETE", f"{path}offloaded?force=true")
            want = expected("offload")
            got = scrape_with(b.web_url, want, "the offloader's families")
            for name, row in want.items():
                assert_plausible(name, row, got.get(name, []))
            assert sum(got["brk_ledgeroffloader_read_bytes_total"]) > 0
            assert sum(got["brk_ledgeroffloader_delete_offload_ops_total"]) >= 2  # (the two offloaded ledgers)

            offload("broken")
            tier = data / "offloaded"
            ledger_dir = tier / "public" / "default" / "persistent" / "broken"
            for copy in ledger_dir.iterdir():  # (gone behind the broker's back: the reads from the copies fail)
                for f in copy.iterdir():
                    f.unlink()
            broken_reader = client.subscribe("persistent://public/default/broken", "reads",
                                             initial_position=pulsar.InitialPosition.Earliest)
            with pytest.raises(pulsar.Timeout):
                broken_reader.receive(1000)
            tier.rename(tmp_path / "tier-moved")
            tier.write_bytes(b"")  # (a file where the tier's directory was: the next copy cannot be written)
            offload("unwritable")
            want = expected("offload errors")
            got = scrape_with(b.web_url, want, "the offloader's error families")
            for name in want:
                assert sum(got[name]) >= 1, name
        finally:
            client.close()
