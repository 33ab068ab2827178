"""Namespace bundles as Pulsar's: the hash (golden values computed with Guava's Hashing.crc32(),
what Pulsar's NamespaceBundleFactory uses), ranges and their names, BundlesData JSON both ways,
refusals, and the store: where bundles are read from and split by compare-and-set."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from broker.cluster.bundles import (
    FULL_UPPER,
    BundleError,
    NamespaceBundle,
    NamespaceBundles,
    hash_topic,
    parse_boundary,
)
from broker.metadata import policies as P
from broker.metadata.policy_values import PolicyError
from broker.metadata.store import BrokerMetadata, NotFoundError, TenantInfo
from metadata_store.memory import MemoryMetadataStore
from tests.waiting import eventually

NS = "public/default"

# Computed with Java 17 + Guava 32: Hashing.crc32().hashString(name, UTF_8).padToLong().
GOLDEN_HASHES = {
    "persistent://public/default/my-topic": 0x2BAD45F7,
    "persistent://public/default/my-topic-partition-0": 0x3D4B4235,
    "persistent://public/default/my-topic-partition-1": 0x4A4C72A3,
    "non-persistent://public/default/t": 0xC9179F49,
    "persistent://tenant/ns/café": 0x853F1080,
}


def test_hash_is_pulsars() -> None:
    for name, expected in GOLDEN_HASHES.items():
        assert hash_topic(name) == expected, name


def test_default_bundles_are_pulsars_layout() -> None:
    bundles = NamespaceBundles.equal(NS, 4)
    assert bundles.to_bundles_data() == {
        "boundaries": ["0x00000000", "0x40000000", "0x80000000", "0xc0000000", "0xffffffff"], "numBundles": 4}
    assert [b.range_name for b in bundles.bundles] == [
        "0x00000000_0x40000000", "0x40000000_0x80000000", "0x80000000_0xc0000000", "0xc0000000_0xffffffff"]
    assert str(bundles.bundles[0]) == "public/default/0x00000000_0x40000000"
    # Pulsar's getBundles(3): multiples of 2^32 // 3, the last boundary 0xffffffff
    assert NamespaceBundles.equal(NS, 3).to_bundles_data()["boundaries"] == [
        "0x00000000", "0x55555555", "0xaaaaaaaa", "0xffffffff"]
    assert NamespaceBundles.equal(NS, 1).to_bundles_data()["boundaries"] == ["0x00000000", "0xffffffff"]


def test_ranges_are_closed_open_except_the_last() -> None:
    first, *_, last = NamespaceBundles.equal(NS, 4).bundles
    assert first.contains(0) and first.contains(0x3FFFFFFF) and not first.contains(0x40000000)
    assert last.contains(0xC0000000) and last.contains(FULL_UPPER)
    bundles = NamespaceBundles.equal(NS, 4)
    assert bundles.bundle_of_hash(0x40000000).range_name == "0x40000000_0x80000000"
    assert bundles.bundle_of_hash(FULL_UPPER) == last
    # find: by the hash of the full name, each partition on its own
    assert bundles.find("persistent://public/default/my-topic").range_name == "0x00000000_0x40000000"
    assert bundles.find("persistent://public/default/my-topic-partition-1").range_name == "0x40000000_0x80000000"
    assert bundles.find("non-persistent://public/default/t") == last


def test_parse_and_get() -> None:
    bundles = NamespaceBundles.equal(NS, 4)
    b = NamespaceBundle.parse(NS, "0x40000000_0x80000000")
    assert (b.lower, b.upper) == (0x40000000, 0x80000000) and bundles.get("0x40000000_0x80000000") == b
    assert bundles.get("0X40000000_0x80000000") == b  # Long.decode reads either case
    assert bundles.get("0x40000000_0x90000000") is None  # well formed, not a bundle of the namespace
    for bad in ("0x40000000", "0x4_0x8_0x9", "zz_0x80000000", "0x80000000_0x40000000", "0x0_0x100000000",
                "0x40000000_0x40000000", ""):
        with pytest.raises(BundleError):
            NamespaceBundle.parse(NS, bad)
    assert parse_boundary("0x10") == parse_boundary("#10") == parse_boundary("16") == parse_boundary("020") == 16
    for bad in ("-1", "0x", "1_000", " 16", "0x1ffffffff"):
        with pytest.raises(BundleError):
            parse_boundary(bad)


def test_bundles_data_round_trip_and_refusals() -> None:
    doc = {"boundaries": ["0x00000000", "0x10000000", "0xffffffff"], "numBundles": 2}
    bundles = NamespaceBundles.from_bundles_data(NS, doc)
    assert bundles.boundaries == (0, 0x10000000, FULL_UPPER) and bundles.to_bundles_data() == doc
    assert NamespaceBundles.from_bundles_data(NS, json.loads(json.dumps(doc))) == bundles
    bad: list[Any] = [
        None, [], {"numBundles": 2}, {"boundaries": []}, {"boundaries": ["0x00000000"]},
        {"boundaries": ["0x00000001", "0xffffffff"]}, {"boundaries": ["0x00000000", "0xfffffffe"]},
        {"boundaries": ["0x00000000", "0x80000000", "0x80000000", "0xffffffff"]},
        {"boundaries": ["0x00000000", "0x90000000", "0x80000000", "0xffffffff"]},
        {"boundaries": ["0x00000000", 5, "0xffffffff"]},
    ]
    for d in bad:
        with pytest.raises(BundleError):
            NamespaceBundles.from_bundles_data(NS, d)
    for count in (0, -1, True, 1 << 17):
        with pytest.raises(BundleError):
            NamespaceBundles.equal(NS, count)


def test_split_cuts_one_bundle() -> None:
    bundles = NamespaceBundles.equal(NS, 4)
    target = bundles.bundles[1]
    new, children = bundles.split(target, [0x60000000])
    assert [c.range_name for c in children] == ["0x40000000_0x60000000", "0x60000000_0x80000000"]
    assert len(new) == 5 and new.bundles[0] == bundles.bundles[0] and new.bundles[4] == bundles.bundles[3]
    three, kids = bundles.split(target, [0x70000000, 0x50000000])
    assert [c.range_name for c in kids] == ["0x40000000_0x50000000", "0x50000000_0x70000000",
                                            "0x70000000_0x80000000"]
    assert len(three) == 6
    for points in ([], [0x40000000], [0x80000000], [0x90000000]):
        with pytest.raises(BundleError):
            bundles.split(target, points)
    with pytest.raises(BundleError):  # not a bundle of these
        bundles.split(NamespaceBundle(NS, 0x40000000, 0x90000000), [0x50000000])
    tiny = NamespaceBundles(NS, (0, 1, FULL_UPPER))
    assert not tiny.bundles[0].can_split
    with pytest.raises(BundleError, match="can't be split further"):
        tiny.split(tiny.bundles[0], [1])


def test_create_body_bundles_as_pulsars_validate_policies() -> None:
    assert P.parse_bundles({"numBundles": 8}) == NamespaceBundles.equal("", 8).to_bundles_data()
    assert P.parse_bundles({}) is None and P.parse_bundles({"numBundles": 0}) is None  # the default
    # boundaries: sorted, repeats dropped, numBundles follows them
    assert P.parse_bundles({"numBundles": 1, "boundaries": ["0xffffffff", "0x00000000", "0x20000000",
                                                            "0x20000000"]}) == {
        "boundaries": ["0x00000000", "0x20000000", "0xffffffff"], "numBundles": 2}
    bad_bodies: list[Any] = [{"numBundles": 2, "boundaries": ["0x00000000", "0x20000000"]}, {"numBundles": "x"},
                             {"numBundles": 2, "boundaries": ["junk", "0xffffffff"]}, {"numBundles": 1 << 20}, []]
    for bad in bad_bodies:
        with pytest.raises(PolicyError) as info:
            P.parse_bundles(bad)
        assert info.value.status == 400, bad


# -- the store ------------------------------------------------------------------------------------

@pytest.fixture
def tree() -> str:
    return f"test-{uuid.uuid4().hex}"


@pytest.fixture
async def metadata(tree: str) -> AsyncIterator[BrokerMetadata]:
    store = MemoryMetadataStore(tree)
    m = BrokerMetadata("standalone", default_bundles=4)
    await m.start(store)
    await m.create_tenant("acme", TenantInfo((), ("standalone",)))
    yield m
    await m.close()
    await store.close()


async def node(m: BrokerMetadata, path: str) -> Any:
    result = await m.cache.store.get(path)
    return None if result is None else json.loads(result.value)


async def test_namespace_bundles_default_and_created_counts(metadata: BrokerMetadata) -> None:
    m = metadata
    assert m.namespace_bundles(NS) == NamespaceBundles.equal(NS, 4)  # bootstrapped: nothing stored
    await m.create_namespace("acme/eight", {"bundles": NamespaceBundles.equal("", 8).to_bundles_data()})
    assert len(m.namespace_bundles("acme/eight")) == 8
    await m.create_namespace("acme/plain", {})
    assert (await node(m, "/admin/policies/acme/plain"))["bundles"]["numBundles"] == 4
    with pytest.raises(NotFoundError):
        m.namespace_bundles("acme/none")


async def test_split_writes_local_policies_and_policies(tree: str, metadata: BrokerMetadata) -> None:
    m = metadata
    await m.create_namespace("acme/ns", {"message_ttl_in_seconds": 5})
    parent = m.namespace_bundles("acme/ns").bundles[0]
    new = await m.split_bundle("acme/ns", parent, [0x20000000])
    assert m.namespace_bundles("acme/ns") == new and len(new) == 5
    local = await node(m, "/admin/local-policies/acme/ns")
    assert local == {"bundles": new.to_bundles_data(), "migrated": False}
    policies = await node(m, "/admin/policies/acme/ns")
    assert policies["bundles"] == new.to_bundles_data() and policies["message_ttl_in_seconds"] == 5
    # another broker sharing the store sees the split
    other_store = MemoryMetadataStore(tree)
    other = BrokerMetadata("standalone")
    await other.start(other_store)
    assert other.namespace_bundles("acme/ns") == new
    # LocalPolicies win over Policies (Pulsar reads LocalPolicies)
    await m.set_policy("acme/ns", "bundles", NamespaceBundles.equal("", 2).to_bundles_data())
    assert m.namespace_bundles("acme/ns") == new
    # the parent is gone: splitting it again is refused, nothing changes
    with pytest.raises(NotFoundError):
        await other.split_bundle("acme/ns", parent, [0x10000000])
    with pytest.raises(BundleError):
        await m.split_bundle("acme/ns", new.bundles[0], [0x30000000])
    assert m.namespace_bundles("acme/ns") == new
    await m.delete_namespace("acme/ns")
    assert await node(m, "/admin/local-policies/acme/ns") is None
    await other.close()
    await other_store.close()


async def test_concurrent_splits_of_two_bundles_both_land(tree: str, metadata: BrokerMetadata) -> None:
    """Two brokers split different bundles at once: compare-and-set keeps both."""
    other_store = MemoryMetadataStore(tree)
    other = BrokerMetadata("standalone")
    await other.start(other_store)
    first, second = metadata.namespace_bundles(NS).bundles[:2]
    store = metadata.cache.store
    orig_get = store.get
    rounds = 0

    async def get_then_other_splits(path: str, *, watch_missing: bool = True) -> Any:
        nonlocal rounds
        result = await orig_get(path, watch_missing=watch_missing)
        if path.startswith("/admin/local-policies"):
            rounds += 1
            if rounds == 1:  # the other broker writes between our read and our put
                await other.split_bundle(NS, second, [0x60000000])
        return result

    store.get = get_then_other_splits  # type: ignore[method-assign]
    new = await metadata.split_bundle(NS, first, [0x20000000])
    store.get = orig_get  # type: ignore[method-assign]
    assert rounds == 2
    assert [b.range_name for b in new.bundles[:4]] == [
        "0x00000000_0x20000000", "0x20000000_0x40000000", "0x40000000_0x60000000", "0x60000000_0x80000000"]
    await eventually(lambda: other.namespace_bundles(NS) == new, "the other broker sees both splits")
    policies = await node(metadata, "/admin/policies/public/default")
    assert policies["bundles"] == new.to_bundles_data()  # Policies.bundles has both splits too
    await other.close()
    await other_store.close()
