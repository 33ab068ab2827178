"""Re-stamping stored entries for geo-replication, the replicated-subscription snapshot cache, the
replicator's reconnect backoff, and which clusters a topic replicates to (pure: no broker)."""

from __future__ import annotations

import asyncio
import struct
import time
from types import SimpleNamespace
from typing import Any, cast

import pytest

from broker.protocol import pulsar_api_pb2 as pb
from broker.protocol import pulsar_markers_pb2 as mk
from broker.protocol.checksum import crc32c
from broker.protocol.entry import REQUEST, SNAPSHOT, parse_payload
from broker.service.peer_link import RemoteError
from broker.service.replicated_subscriptions import SnapshotCache, marker_entry, marker_payload
from broker.service.replication import BACKOFF_MIN_S, PersistentReplicator, Replicator, remote_clusters, restamp
from managed_ledger import Position


def stamp(entry: bytes, cluster: str) -> bytes | None:
    return restamp(entry, parse_payload(entry, verify=False).metadata, cluster)


def test_restamp_for_replication() -> None:
    md = pb.MessageMetadata(producer_name="p", sequence_id=3, publish_time=5, num_messages_in_batch=2)
    meta = md.SerializeToString()
    tail = struct.pack(">I", len(meta)) + meta + b"body"
    entry = b"\x0e\x01" + struct.pack(">I", crc32c(tail)) + tail
    payload = stamp(entry, "east")
    assert payload is not None
    parsed = parse_payload(payload)
    assert parsed.checksum_ok and parsed.metadata.replicated_from == "east"
    assert parsed.metadata.sequence_id == 3 and parsed.metadata.num_messages_in_batch == 2
    assert payload.endswith(b"body")
    # Already replicated here from elsewhere, or a marker that stays local: not sent on.
    assert stamp(payload, "west") is None
    marker = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=5, marker_type=1).SerializeToString()
    assert stamp(struct.pack(">I", len(marker)) + marker, "east") is None
    assert stamp(marker_entry(SNAPSHOT, b"", ["east"]), "east") is None
    # A snapshot request travels, its payload intact.
    request = mk.SnapshotRequest(snapshot_id="s1", source_cluster="east").SerializeToString()
    travelled = stamp(marker_entry(REQUEST, request), "east")
    assert travelled is not None and marker_payload(travelled) == request
    assert parse_payload(travelled).metadata.marker_type == REQUEST
    # An entry stored without a checksum gets one.
    plain = stamp(tail, "east")
    assert plain is not None and parse_payload(plain).checksum_ok


def test_snapshot_cache_gives_the_newest_snapshot_passed() -> None:
    cache = SnapshotCache(size=3)

    def at(entry_id: int) -> list[mk.ClusterPosition]:
        return [mk.ClusterPosition(cluster="b", message_id=mk.Position(ledger_id=7, entry_id=entry_id))]

    for entry_id in (10, 20, 30, 40):  # the oldest goes beyond three
        cache.add(Position(1, entry_id), at(entry_id))
    cache.add(Position(1, 35), at(35))  # out of order: ignored
    assert len(cache) == 3
    assert cache.passed(Position(1, 15)) is None
    passed = cache.passed(Position(1, 31))
    assert passed is not None and passed[0].message_id.entry_id == 30
    assert len(cache) == 1  # 20 and 30 are gone, 40 waits
    assert cache.passed(Position(1, 40)) is not None and len(cache) == 0


async def test_reconnect_backoff_starts_again_after_a_connection_that_lasted(monkeypatch: pytest.MonkeyPatch) -> None:
    # The remote was away for a while (the backoff grew), came back, and the link stayed up (idle:
    # no receipts) until it broke again: the next attempt comes after the shortest backoff, as
    # Pulsar resets its backoff once connected, not after the longest one reached before.
    delays: list[float] = []
    rep = cast(Replicator, object.__new__(PersistentReplicator))
    rep.topic = cast(Any, SimpleNamespace(name="persistent://t/ns/x"))
    rep.remote_cluster, rep.closed, rep.connected, rep.last_error = "b", False, False, ""
    rep._progress = False
    attempts = iter([False] * 6 + [True, True])

    async def connect() -> None:
        if not next(attempts):
            raise RemoteError("connection refused")
        rep.connected, rep.connected_since = True, time.time() - 3600  # (up for an hour)

    async def replicate() -> None:
        raise RemoteError("connection closed by the remote broker")

    async def disconnect() -> None:
        rep.connected = False

    async def sleep(delay: float) -> None:
        delays.append(delay)
        if len(delays) == 8:
            rep.closed = True

    monkeypatch.setattr(rep, "_connect", connect)
    monkeypatch.setattr(rep, "_replicate", replicate)
    monkeypatch.setattr(rep, "_disconnect", disconnect)
    monkeypatch.setattr(asyncio, "sleep", sleep)  # (the backoff waits, recorded rather than waited)
    await rep._run()
    assert delays[:6] == [BACKOFF_MIN_S * 2 ** i for i in range(6)]
    assert delays[6:] == [BACKOFF_MIN_S, BACKOFF_MIN_S]


@pytest.mark.parametrize("persistent", [True, False])
def test_remote_clusters_as_pulsar_checks_replication(persistent: bool) -> None:
    # The local cluster in the list: every other one, whatever the allowed clusters.
    assert remote_clusters("a", ["a", "b", "c"], (), persistent=persistent) == ["b", "c"]
    assert remote_clusters("a", ["a"], ("a", "b"), persistent=persistent) == []
    # Only among the allowed clusters (PIP-321): Pulsar 4.0.7's loop starts a replicator for every cluster of the
    # list but the local one, and does not ask whether the local one is in it.
    assert remote_clusters("a", ["b", "c"], ("a", "b", "c"), persistent=persistent) == ["b", "c"]
    # A single cluster: PersistentTopic skips the loop (size() == 1 && replicators.isEmpty()); NonPersistentTopic
    # has no such shortcut.
    assert remote_clusters("a", ["b"], ("a", "b"), persistent=persistent) == ([] if persistent else ["b"])
    # In neither: nothing (Pulsar deletes such a persistent topic; its lookups send every client elsewhere).
    assert remote_clusters("a", ["b", "c"], ("b", "c"), persistent=persistent) == []
    assert remote_clusters("a", ["b", "c"], (), persistent=persistent) == []
