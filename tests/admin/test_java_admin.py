"""The official Java admin client (pulsar-client-admin 4.0.7, tests/admin/java/AdminOps.java, ResetCursorOps.java,
SubscriptionNames.java and DynamicConfigOps.java) against our broker: analyzeSubscriptionBacklog, expireMessages by
message id, truncate, resetCursor to a message inside a batch, the subscription calls on names that need encoding,
and the dynamic configuration calls, as pulsar-admin sends and parses them.

Needs ``java``/``javac`` and the Pulsar jars of ``make pulsar-deps``."""

from __future__ import annotations

import shutil
import subprocess
import uuid
from pathlib import Path

import pulsar
import pytest

from cluster.apache_pulsar import missing_dependencies, pulsar_lib
from tests.admin.conftest import Admin, rest_path
from tests.needs import unavailable
from tests.waiting import wait_for

JAVA_SOURCES = [Path(__file__).parent / "java" / name
                for name in ("AdminOps.java", "ResetCursorOps.java", "SubscriptionNames.java", "DynamicConfigOps.java")]
JAVA_TIMEOUT_S = 300  # a cold JVM on a busy 2-core machine
TIMEOUT_MS = 10_000


@pytest.fixture(scope="module")
def admin_ops_classes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    reason = missing_dependencies() or (None if shutil.which("javac") else "no `javac` on PATH")
    if reason is not None:
        unavailable(f"Java admin client test: {reason}")
    out = tmp_path_factory.mktemp("admin-ops-classes")
    subprocess.run(["javac", "-nowarn", "-cp", f"{pulsar_lib()}/*", "-d", str(out), *map(str, JAVA_SOURCES)],
                   check=True, capture_output=True, timeout=JAVA_TIMEOUT_S)
    return out


def test_pulsar_admin_analyze_expire_and_truncate(admin_ops_classes: Path, admin: Admin, client: pulsar.Client) -> None:
    topic = f"persistent://public/default/java-admin-{uuid.uuid4().hex[:8]}"
    base = f"/admin/v2/{rest_path(topic)}"
    admin.ok("PUT", f"{base}/subscription/s", {"ledgerId": -1, "entryId": -1})
    producer = client.create_producer(topic, batching_enabled=False)
    ids = [producer.send(f"m{i}".encode()) for i in range(5)]
    producer.close()
    run = subprocess.run(
        ["java", "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
         "-cp", f"{admin_ops_classes}:{pulsar_lib()}/*", "AdminOps",
         admin.web_url, topic, str(ids[1].ledger_id()), str(ids[1].entry_id())],
        capture_output=True, text=True, timeout=JAVA_TIMEOUT_S)
    calls = ("before", "from", "expired", "truncated")
    lines = [line for line in run.stdout.splitlines() if line.split(" ")[0] in calls]
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]

    def at(i: int) -> str:
        return f"{ids[i].ledger_id()}:{ids[i].entry_id()}"

    assert lines == [
        f"before entries=5 messages=5 accepted=5 aborted=false first={at(0)} last={at(4)}",
        f"from entries=4 messages=4 accepted=4 aborted=false first={at(1)} last={at(4)}",
        # excluded: Pulsar expires the next message too
        f"expired entries=2 messages=2 accepted=2 aborted=false first={at(3)} last={at(4)}",
        "truncated entries=0 messages=0 accepted=0 aborted=false first=null last=null",
    ]


def test_pulsar_admin_reset_cursor_inside_a_batch(admin_ops_classes: Path, admin: Admin, client: pulsar.Client) -> None:
    # pulsar-admin topics reset-cursor with a message id inside a batch: the batch from that message on (excluded:
    # from the one after it).
    topic = f"persistent://public/default/java-reset-{uuid.uuid4().hex[:8]}"
    base = f"/admin/v2/{rest_path(topic)}"
    for sub in ("at", "after"):
        admin.ok("PUT", f"{base}/subscription/{sub}")  # at the end
    producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=4,
                                      batching_max_publish_delay_ms=60_000)
    sent: list[pulsar.MessageId] = []
    for i in range(4):
        producer.send_async(f"b{i}".encode(), lambda res, mid: sent.append(mid))
    producer.flush()
    wait_for(lambda: len(sent) == 4, what="the batch's receipts")
    producer.close()
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"m0")  # its own entry, after the batch
    producer.close()
    run = subprocess.run(
        ["java", "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
         "-cp", f"{admin_ops_classes}:{pulsar_lib()}/*", "ResetCursorOps",
         admin.web_url, topic, str(sent[0].ledger_id()), str(sent[0].entry_id()), "1"],
        capture_output=True, text=True, timeout=JAVA_TIMEOUT_S)
    assert run.returncode == 0 and "reset" in run.stdout.splitlines(), run.stdout[-3000:] + run.stderr[-3000:]
    for sub, expected in (("at", [b"b1", b"b2", b"b3", b"m0"]), ("after", [b"b2", b"b3", b"m0"])):
        consumer = client.subscribe(topic, sub)
        assert [consumer.receive(TIMEOUT_MS).data() for _ in expected] == expected, sub
        consumer.close()


def test_pulsar_admin_on_subscriptions_whose_names_need_encoding(admin_ops_classes: Path, admin: Admin,
                                                                 client: pulsar.Client) -> None:
    # pulsar-admin encodes .../subscription/{sub} twice (Codec.encode, then as a segment: "s b+c" is s%2Bb%252Bc),
    # as Pulsar's PersistentTopics decodes it twice. Read once, the subscription made was `s+b%2Bc`, not `s b+c`.
    topic = f"persistent://public/default/java-subs-{uuid.uuid4().hex[:8]}"
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(3):
        producer.send(f"m{i}".encode())
    producer.close()
    names = ["s b+c", "ü:x", "100%", "a/b"]
    run = subprocess.run(
        ["java", "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
         "-cp", f"{admin_ops_classes}:{pulsar_lib()}/*", "SubscriptionNames", admin.web_url, topic, *names],
        capture_output=True, text=True, timeout=JAVA_TIMEOUT_S)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert [line for line in run.stdout.splitlines() if line.startswith("sub ")] == [
        f"sub [{name}] peeked=m0,m1 skipped=2 reset=3 property=[{name}] listed=true gone=true" for name in names]
    assert admin.ok("GET", f"/admin/v2/{rest_path(topic)}/subscriptions") == []


def test_pulsar_admin_dynamic_configuration(admin_ops_classes: Path, admin: Admin) -> None:
    run = subprocess.run(
        ["java", "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
         "-cp", f"{admin_ops_classes}:{pulsar_lib()}/*", "DynamicConfigOps", admin.web_url],
        capture_output=True, text=True, timeout=JAVA_TIMEOUT_S)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    steps = ("names", "stored", "in", "refused", "deleted")
    lines = [line for line in run.stdout.splitlines() if line.split(" ")[0] in steps]
    assert lines[:4] == [
        "names maxTopicsPerNamespace=true clusterName=false",
        "stored {maxTopicsPerNamespace=5000, supportedNamespaceBundleSplitAlgorithms=range_equally_divide,"
        "topic_count_equally_divide}",
        "in force 5000",
        "refused clusterName 412 Can't update non-dynamic configuration",
    ], run.stdout
    assert lines[4].startswith("refused maxTopicsPerNamespace 412 Invalid dynamic-config value: "), lines
    assert lines[5:] == ["deleted {} in force 0"], lines
