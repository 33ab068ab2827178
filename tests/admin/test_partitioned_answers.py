"""Answers about partitioned topics as Apache Pulsar 4.0.7 gives them, each checked against a live 4.0.7 standalone
with the same requests (and read in its bytecode):

- PartitionedTopicMetadata is written by Pulsar's ObjectMapperFactory mapper, whose serialization inclusion is
  NON_NULL: ``partitions`` and ``deleted`` (a primitive boolean) always, ``properties`` whenever the metadata has a
  map, an empty one included (given empty at creation, or emptied by removing its last key); never given, none.
  GET .../partitions, partitioned-stats and partitioned-internalStats all show the whole object.
"""

from __future__ import annotations

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

    admin.ok("PUT", f"{base}/empty/partitions", {"partitions": 2, "properties": {}})
    assert admin.ok("GET", f"{base}/empty/partitions") == {"partitions": 2, "deleted": False, "properties": {}}
    admin.ok("PUT", f"{base}/propped/partitions", {"partitions": 2, "properties": {"a": "b"}})
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
