"""The stored queues of global topic policy changes waiting for another cluster (``broker.metadata.policy_copies``):
replacement, order and removal on the stored form, and the writes of two brokers at once (compare-and-set)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from broker.metadata import layout as L
from broker.metadata import policy_copies as C
from broker.metadata.policy_copies import PolicyCall
from broker.metadata.store import BrokerMetadata
from metadata_store.api import MetadataStore
from metadata_store.factory import open_metadata_store
from tests.waiting import eventually

TOPIC = "persistent://acme/ns/t"
OTHER = "persistent://acme/ns/u"
QUOTA = {"limitSize": -1, "limitTime": 600, "policy": "producer_exception"}


def read_back(doc: C.JsonDoc | None) -> Any:
    """A document as a reader of the store gets it (its JSON)."""
    assert doc is not None
    return L.decode_json(L.GLOBAL_POLICY_COPIES.encode(doc))


def waiting(doc: Any) -> list[tuple[str, str, str, object]]:
    return [(c.topic, c.call.method, c.call.policy_path, c.call.body) for c in C.changes(doc)]


def test_the_stored_form() -> None:
    doc = C.queued(None, TOPIC, [PolicyCall("POST", "backlogQuota", (("backlogQuotaType", "message_age"),), QUOTA)])
    assert read_back(doc) == {"changes": [{"topic": TOPIC, "method": "POST", "path": "backlogQuota",
                                           "query": [["backlogQuotaType", "message_age"]], "body": QUOTA}]}
    assert C.changes(read_back(doc)) == C.changes(doc)
    key = C.queue_key("acme/ns", "b")
    assert L.GLOBAL_POLICY_COPIES.path(key) == "/pulsar-py/global-policy-copies/acme/ns/b"
    assert L.classify("/pulsar-py/global-policy-copies/acme/ns/b") == (L.GLOBAL_POLICY_COPIES, key)
    assert C.queue_of(key) == ("acme/ns", "b")


def test_a_newer_change_of_a_waiting_policy_replaces_it_at_the_end() -> None:
    doc = C.queued(None, TOPIC, [PolicyCall("POST", "maxProducers", (), 1)])
    doc = C.queued(doc, TOPIC, [PolicyCall("POST", "messageTTL", (("messageTTL", "60"),))])
    doc = C.queued(doc, OTHER, [PolicyCall("POST", "maxProducers", (), 3)])  # (another topic's: its own policy)
    doc = C.queued(doc, TOPIC, [PolicyCall("POST", "maxProducers", (), 2)])
    assert waiting(read_back(doc)) == [(TOPIC, "POST", "messageTTL", None), (OTHER, "POST", "maxProducers", 3),
                                       (TOPIC, "POST", "maxProducers", 2)]
    # A removal is a change of the policy too; another value of a query parameter is the same policy.
    doc = C.queued(read_back(doc), TOPIC, [PolicyCall("DELETE", "maxProducers"),
                                           PolicyCall("POST", "messageTTL", (("messageTTL", "120"),))])
    assert waiting(doc) == [(OTHER, "POST", "maxProducers", 3), (TOPIC, "DELETE", "maxProducers", None),
                            (TOPIC, "POST", "messageTTL", None)]
    assert [c.call.query for c in C.changes(doc)][-1] == (("messageTTL", "120"),)


def test_each_backlog_quota_type_is_a_policy_of_its_own() -> None:
    age, size = (("backlogQuotaType", "message_age"),), (("backlogQuotaType", "destination_storage"),)
    doc = C.queued(None, TOPIC, [PolicyCall("POST", "backlogQuota", age, QUOTA),
                                 PolicyCall("POST", "backlogQuota", size, QUOTA),
                                 PolicyCall("DELETE", "backlogQuota", age)])
    assert [(c.call.method, c.call.query) for c in C.changes(read_back(doc))] == [("POST", size), ("DELETE", age)]


def test_a_sent_change_is_removed_unless_a_newer_one_replaced_it() -> None:
    doc = C.queued(None, TOPIC, [PolicyCall("POST", "maxProducers", (), 1), PolicyCall("POST", "maxConsumers", (), 5)])
    sent = C.first(doc)
    assert sent is not None and sent.call.body == 1
    assert waiting(C.taken(doc, sent)) == [(TOPIC, "POST", "maxConsumers", 5)]
    # Changed again while it was on its way: the newer one stays, to be sent after the others.
    newer = C.queued(doc, TOPIC, [PolicyCall("POST", "maxProducers", (), 2)])
    assert sent not in C.changes(newer)
    assert C.taken(newer, sent) == newer
    last = C.changes(newer)
    assert C.taken(C.taken(newer, last[0]), last[1]) is None  # (none left: the document goes)


def test_an_entry_that_does_not_read_as_a_change_is_left_out_and_dropped() -> None:
    doc = {"changes": [{"topic": "persistent://acme/ns/t", "method": "POST"}, 7,
                       {"topic": "persistent://bad", "method": "POST", "path": "maxProducers", "query": [], "body": 1},
                       *read_back(C.queued(None, TOPIC, [PolicyCall("POST", "maxProducers", (), 1)]))["changes"]]}
    assert waiting(doc) == [(TOPIC, "POST", "maxProducers", 1)]
    assert len(read_back(C.queued(doc, OTHER, [PolicyCall("DELETE", "maxProducers")]))["changes"]) == 2
    assert C.changes({"changes": "nothing"}) == [] and C.first(None) is None


# -- the named operations of BrokerMetadata, for two brokers on one store ------------------------------------------
@pytest.fixture
async def brokers(tmp_path: Path) -> AsyncIterator[tuple[BrokerMetadata, BrokerMetadata, MetadataStore]]:
    """Two brokers' metadata on one durable store, whose writes wait for its journal: a write started while another
    one waits has read the version before it, and its compare-and-set fails."""
    store = await open_metadata_store("local:", data_dir=tmp_path)
    a, b = BrokerMetadata("standalone"), BrokerMetadata("standalone")
    await a.start(store)
    await b.start(store)
    yield a, b, store
    for m in (a, b):
        await m.close()
    await store.close()


async def test_two_brokers_queueing_at_once_keep_every_change(
        brokers: tuple[BrokerMetadata, BrokerMetadata, MetadataStore]) -> None:
    a, b, store = brokers
    key = C.queue_key("acme/ns", "b")
    path = L.GLOBAL_POLICY_COPIES.path(key)
    await asyncio.gather(*(broker.queue_global_policy_copies("acme/ns", "b", topic, [PolicyCall("POST", p, (), i)])
                           for i, p in enumerate(("maxProducers", "maxConsumers", "messageTTL"))
                           for broker, topic in ((a, TOPIC), (b, OTHER))))
    expected = [(topic, "POST", p, i) for i, p in enumerate(("maxProducers", "maxConsumers", "messageTTL"))
                for topic in (TOPIC, OTHER)]
    got = await store.get(path)
    assert got is not None and sorted(waiting(json.loads(got.value))) == sorted(expected)
    await eventually(lambda: waiting(a.global_policy_copies.get(key)) == waiting(json.loads(got.value))
                     == waiting(b.global_policy_copies.get(key)), "both caches agree with the store")
    # Sent and taken, one after the other (by either broker): the node goes with the last.
    for i, sent in enumerate(C.changes(a.global_policy_copies[key])):
        await (a, b)[i % 2].global_policy_copy_taken("acme/ns", "b", sent)
    assert await store.get(path) is None
    await eventually(lambda: key not in a.global_policy_copies and key not in b.global_policy_copies,
                     "both see the queue go")
    await a.queue_global_policy_copies("acme/ns", "c", TOPIC, [PolicyCall("DELETE", "maxProducers")])
    await b.drop_global_policy_copies("acme/ns", "c")
    assert await store.get(L.GLOBAL_POLICY_COPIES.path(C.queue_key("acme/ns", "c"))) is None
