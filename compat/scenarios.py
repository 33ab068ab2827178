"""The scenarios every client suite runs, by id, and what the broker does not support yet.

A client test is named after its scenario id (Java: the JUnit method name; Go: ``Test_<id>``).
A scenario listed in UNSUPPORTED has a test that asserts the clear error a user gets; when that
test passes, the matrix says "unsupported" with the note, never "pass".
"""

from __future__ import annotations

SCENARIOS: dict[str, str] = {
    "connect_lookup": "connect, topic lookup, produce and consume",
    "http_service_url": "lookups over an http:// service URL",
    "sub_exclusive": "Exclusive subscription (a second consumer is refused)",
    "sub_shared": "Shared subscription, two consumers",
    "sub_failover": "Failover subscription, two consumers",
    "sub_key_shared": "Key_Shared subscription, one key to one consumer",
    "batching_codecs": "batching with each codec the client has (none, LZ4, ZLIB, ZSTD; SNAPPY in Java)",
    "partitioned": "partitioned topics: produce, consume, partition list",
    "partitions_no_autocreate": "partition metadata without auto-creation (PIP-344)",
    "schema_avro": "Avro schema, evolution and an incompatible producer refused",
    "schema_json": "JSON schema, evolution and an incompatible producer refused",
    "reader_earliest": "reader from earliest",
    "reader_latest": "reader from latest",
    "reader_message_id": "reader from a message id",
    "reader_rollback": "reader from N seconds back (Java startMessageFromRollbackDuration; Go SeekByTime)",
    "seek": "seek by message id and by time",
    "negative_ack": "negative ack and redelivery count",
    "dlq": "dead-letter topic after max redeliveries",
    "retry_topic": "retry topic (reconsumeLater)",
    "delayed_delivery": "delayed delivery on Shared",
    "chunking": "chunked messages",
    "chunking_shared": "chunked messages on Shared with two consumers",
    "deduplication": "producer deduplication across a reconnect",
    "regex_new_topic": "pattern consumer sees a topic created later",
    "table_view": "TableView",
    "token_tls": "token authentication over TLS (binary and admin)",
    "subscription_properties": "subscription properties",
    "initial_subscription_refused": "initial subscription refused when auto subscription creation is off",
    "out_counters": "msgOutCounter after the consumer left",
    "broker_entry_metadata": "broker entry metadata (publish time, index)",
    "end_of_topic": "a terminated topic read to its end: the consumer and a reader learn it (hasReachedEndOfTopic)",
    "transactions": "transactions: commit and abort of produce + ack across two topics and a subscription, timeout",
    "cluster_lookup": "two brokers in cluster mode: given the first one's URL, produce and consume on topics and a "
                      "partitioned topic owned by both (lookups followed)",
    "cluster_transactions": "two brokers in cluster mode: a transaction coordinated on one broker commits and aborts "
                            "produce + ack on topics of both",
    "admin_tenants": "admin: tenants",
    "admin_namespaces": "admin: namespaces and their policies",
    "admin_topics": "admin: topics and partitioned topics",
    "admin_topic_policies": "admin: topic-level policies (topicPolicies()), a subscription's own dispatch rate too",
    "admin_stats": "admin: topic, partitioned and internal stats",
    "admin_subscriptions": "admin: subscriptions (create, peek, skip, reset, delete)",
    "admin_schemas": "admin: schemas",
    "admin_v3": "admin: /admin/v3 families (functions, sources, sinks, packages) give a clear error",
}

# scenario id -> how it fails for the user (the test asserts exactly this).
UNSUPPORTED: dict[str, str] = {
    "admin_v3": "404 with a JSON reason: functions, sources, sinks and packages are not served",
}

# scenario id -> the clients it is for (the others show "n/a"): the admin scenarios are the Java admin client's;
# cluster_lookup and cluster_transactions are written for Java and Go (compat/run.py starts its cluster only for them).
ONLY: dict[str, set[str]] = {sid: {"Java"} for sid in SCENARIOS if sid.startswith("admin_")}
ONLY["cluster_lookup"] = {"Java", "Go"}
ONLY["cluster_transactions"] = {"Java", "Go"}
# (REACHED_END_OF_TOPIC, which tells it, is understood by the Java client only: the broker sends it to no other)
ONLY["end_of_topic"] = {"Java"}
