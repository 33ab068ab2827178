"""Answers about partitioned topics as Apache Pulsar 4.0.7 gives them, each checked against a live 4.0.7 standalone
with the same requests (and read in its bytecode):

- PartitionedTopicMetadata is written by Pulsar's ObjectMapperFactory mapper, whose serialization inclusion is
  NON_NULL: ``partitions`` and ``deleted`` (a primitive boolean) always, ``properties`` whenever the metadata has a
  map, an empty one included (given empty at creation, or emptied by removing its last key); never given, none.
  GET .../partitions, partitioned-stats and partitioned-internalStats all show the whole object.
- PUT .../partitions: PersistentTopics / NonPersistentTopics.createPartitionedTopic bind the body to an
  ``int numPartitions``, so a JSON object sent as application/json is a 400 (Jackson cannot read an int from it);
  only ExtPersistentTopics / ExtNonPersistentTopics, which consume application/vnd.partitioned-topic-metadata+json,
  read a PartitionedTopicMetadata object (the admin client's form when the topic has properties).
- The stats of a non-persistent partition that is not live: BrokerService.getTopic, which the admin's
  getTopicReferenceAsync calls with createIfMissing=false, creates a non-persistent partition within its partitioned
  topic's count anyway; so the answer is 200 with empty stats, and the partition is live afterwards.
"""

from __future__ import annotations

import http.client
import json
import uuid
from typing import Any

import pytest
from yarl import URL

from broker.admin import partitioned_topics
from broker.admin.common import read_body
from broker.admin.partitioned_topics import PARTITIONED_METADATA_TYPE
from broker.embedded import BrokerThread
from tests.admin.conftest import Admin


def test_partitioned_metadata_fields(admin: Admin) -> None:
    ns = admin.new_namespace()
    base = f"/admin/v2/persistent/{ns}"
    admin.ok("PUT", f"{base}/plain/partitions", 2)
    assert admin.ok("GET", f"{base}/plain/partitions") == {"partitions": 2, "deleted": False}
    admin.ok("PUT", f"{base}/plain/properties", {})  # (nothing to add: still no map)
    assert admin.ok("GET", f"{base}/plain/partitions") == {"partitions": 2, "deleted": False}
    admin.ok("PUT", f"{base}/plain/properties", {"k": "v"})
    assert admin.ok("GET", f"{base}/plain/partitions") == {"partitions": 2, "deleted": False, "properties": {"k": "v"}}
    admin.ok("DELETE", f"{base}/plain/properties?key=k")
    assert admin.ok("GET", f"{base}/plain/partitions") == {"partitions": 2, "deleted": False, "properties": {}}
    assert admin.ok("GET", f"{base}/plain/properties") == {}

    # (sent as the admin client sends a partitioned topic with properties)
    for name, properties in (("empty", {}), ("propped", {"a": "b"})):
        body = json.dumps({"partitions": 2, "properties": properties}).encode()
        assert admin.call("PUT", f"{base}/{name}/partitions", raw=body,
                          content_type=PARTITIONED_METADATA_TYPE).status == 204
    assert admin.ok("GET", f"{base}/empty/partitions") == {"partitions": 2, "deleted": False, "properties": {}}
    expected = {"partitions": 2, "deleted": False, "properties": {"a": "b"}}
    assert admin.ok("GET", f"{base}/propped/partitions") == expected
    admin.ok("POST", f"{base}/propped/partitions", 3)
    expected["partitions"] = 3
    assert admin.ok("GET", f"{base}/propped/partitions") == expected
    assert admin.ok("GET", f"{base}/propped/partitioned-stats")["metadata"] == expected
    assert admin.ok("GET", f"{base}/propped/partitioned-internalStats")["metadata"] == expected

    # A name with no partitions of its own: 0, not deleted, no properties (a partition's are its topic's).
    assert admin.ok("GET", f"{base}/propped-partition-0/partitions") == {"partitions": 0, "deleted": False}
    admin.ok("PUT", f"{base}/single")
    assert admin.ok("GET", f"{base}/single/partitions") == {"partitions": 0, "deleted": False}
    assert admin.ok("GET", f"{base}/absent/partitions?checkAllowAutoCreation=true") == {
        "partitions": 0, "deleted": False}


@pytest.mark.parametrize("route", ["stats", "internalStats"])
def test_stats_of_a_non_persistent_partition_that_is_not_live(admin: Admin, pulsar_broker: BrokerThread,
                                                              route: str) -> None:
    ns = admin.new_namespace()
    live = f"non-persistent://{ns}/live-{uuid.uuid4().hex[:6]}"
    path = f"/admin/v2/non-persistent/{ns}/{live.rsplit('/', 1)[1]}"
    admin.ok("PUT", f"{path}/partitions", 2)

    def live_topics() -> set[str]:
        return {t for t in list(pulsar_broker.server.service.non_persistent_topics) if t.startswith(live)}

    assert live_topics() == set()
    stats = admin.ok("GET", f"{path}-partition-1/{route}")
    if route == "stats":
        assert stats["publishers"] == [] and stats["subscriptions"] == {} and stats["msgInCounter"] == 0
    else:
        assert stats["cursors"] == {} and stats["entriesAddedCounter"] == 0
    assert live_topics() == {f"{live}-partition-1"}
    # Past the count, or of a topic that is not partitioned: still Pulsar's 404s (nothing is brought to life).
    assert admin.call("GET", f"{path}-partition-2/{route}").status == 404
    assert admin.call("GET", f"/admin/v2/non-persistent/{ns}/plain-partition-0/{route}").status == 404
    assert live_topics() == {f"{live}-partition-1"}


def test_partitioned_stats_of_a_non_persistent_topic_ask_every_partition(admin: Admin,
                                                                         pulsar_broker: BrokerThread) -> None:
    """Pulsar's NonPersistentTopics.getPartitionedStats asks the stats of each partition (bringing it to life)."""
    ns = admin.new_namespace()
    topic = f"non-persistent://{ns}/all"
    admin.ok("PUT", f"/admin/v2/non-persistent/{ns}/all/partitions", 3)
    stats = admin.ok("GET", f"/admin/v2/non-persistent/{ns}/all/partitioned-stats")
    parts = {f"{topic}-partition-{i}" for i in range(3)}
    assert set(stats["partitions"]) == parts
    assert {t for t in list(pulsar_broker.server.service.non_persistent_topics) if t.startswith(topic)} == parts


def put_without_content_type(admin: Admin, path: str, body: bytes) -> int:
    """A PUT with a body and no Content-Type at all (urllib would add a form type)."""
    url = URL(admin.web_url)
    assert url.host is not None and url.port is not None
    conn = http.client.HTTPConnection(url.host, url.port, timeout=10)
    try:
        conn.request("PUT", path, body=body)  # (http.client adds Content-Length only)
        return conn.getresponse().status
    finally:
        conn.close()


def test_the_body_of_a_partitioned_topic_create(admin: Admin, monkeypatch: pytest.MonkeyPatch) -> None:
    ns = admin.new_namespace()
    base = f"/admin/v2/persistent/{ns}"
    reads: list[str] = []

    async def counted(request: Any) -> object:
        reads.append(request.path)
        return await read_body(request)

    monkeypatch.setattr(partitioned_topics, "read_body", counted)
    # A JSON object as application/json (or any type but PartitionedTopicMetadata's): Pulsar's int binding, a 400.
    for content_type in ("application/json", "text/plain"):
        reply = admin.call("PUT", f"{base}/obj/partitions", {"partitions": 2}, content_type=content_type)
        assert reply.status == 400, content_type
    assert admin.get(f"{base}/obj/partitions").status == 404
    # A bare number: as the Java admin client and pulsar-admin send it (application/json), and in the other forms
    # taken before; PartitionedTopicMetadata's type with a number too (its int constructor).
    for name, content_type in (("json", "application/json"), ("text", "text/plain"),
                               ("form", "application/x-www-form-urlencoded"), ("meta", PARTITIONED_METADATA_TYPE)):
        assert admin.call("PUT", f"{base}/{name}/partitions", raw=b"3", content_type=content_type).status == 204
        assert admin.ok("GET", f"{base}/{name}/partitions") == {"partitions": 3, "deleted": False}
    assert put_without_content_type(admin, f"{base}/none/partitions", b"3") == 204
    assert admin.ok("GET", f"{base}/none/partitions") == {"partitions": 3, "deleted": False}
    # The body is parsed once per request (the cluster-first check read it before the handler, which read it again).
    reads.clear()
    assert admin.put(f"{base}/once/partitions", 2).status == 204
    assert reads == [f"{base}/once/partitions"]
