"""Namespace policy validation (pure): accepted shapes, 400 for malformed, 412 for out of range."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from broker.metadata import policies as P
from broker.metadata.bundles import NamespaceBundles
from broker.metadata.policy_values import AutoTopicCreation, BacklogQuota, Retention


def status_of(fn: Callable[..., object], *args: object) -> int:
    with pytest.raises(P.PolicyError) as info:
        fn(*args)
    return info.value.status


def test_retention_values() -> None:
    assert Retention.from_json({"retentionTimeInMinutes": 60, "retentionSizeInMB": -1}).to_json() == {
        "retentionTimeInMinutes": 60, "retentionSizeInMB": -1}
    assert Retention.from_json({"retentionTimeInMinutes": 0, "retentionSizeInMB": 0}).size_mb == 0
    assert status_of(Retention.from_json, {"retentionTimeInMinutes": -2, "retentionSizeInMB": 1}) == 400
    assert status_of(Retention.from_json, {"retentionTimeInMinutes": 0, "retentionSizeInMB": 10}) == 400
    assert status_of(Retention.from_json, {"retentionTimeInMinutes": "1h", "retentionSizeInMB": 10}) == 400
    assert status_of(Retention.from_json, [1, 2]) == 400


def test_message_ttl_values() -> None:
    assert P.parse_message_ttl(30) == 30
    assert status_of(P.parse_message_ttl, -1) == 412
    assert status_of(P.parse_message_ttl, True) == 400
    assert status_of(P.parse_message_ttl, "30") == 400


def test_backlog_quota_values() -> None:
    q = BacklogQuota.from_json({"limitSize": 1024, "policy": "producer_exception"})
    # (a limit left out is 0, as Pulsar reads the body: the comparison with Pulsar in test_pulsar_shapes reads it back)
    assert q.to_json() == {"limit": 1024, "limitSize": 1024, "limitTime": 0, "policy": "producer_exception"}
    assert BacklogQuota.from_json({"limitTime": 60, "policy": "producer_exception"}).limit_size == 0
    assert BacklogQuota.from_json({"limit": 5, "limitTime": 60, "policy": "consumer_backlog_eviction"}).limit_size == 5
    assert status_of(BacklogQuota.from_json, {"limitSize": 1, "policy": "drop_everything"}) == 400
    assert status_of(BacklogQuota.from_json, {"limitSize": 1}) == 400
    assert status_of(BacklogQuota.from_json, {"limitSize": -5, "policy": "producer_request_hold"}) == 412
    assert P.parse_backlog_quota_type(None) == "destination_storage"
    assert P.parse_backlog_quota_type("message_age") == "message_age"
    assert status_of(P.parse_backlog_quota_type, "size") == 400


def test_backlog_quota_must_stay_below_retention() -> None:
    retention = Retention(time_minutes=10, size_mb=1)
    hold = "producer_request_hold"
    assert BacklogQuota(1000, -1, hold).within(retention)
    assert not BacklogQuota(2 * 1024 * 1024, -1, hold).within(retention)
    assert not BacklogQuota(-1, 600, hold).within(retention)
    assert BacklogQuota(10**12, 10**6, hold).within(None)


def test_auto_topic_creation_values() -> None:
    assert AutoTopicCreation.from_json({"allowAutoTopicCreation": True, "topicType": "partitioned",
                                        "defaultNumPartitions": 3}).default_partitions == 3
    assert AutoTopicCreation.from_json({"allowAutoTopicCreation": False}).to_json() == {"allowAutoTopicCreation": False}
    bad = [
        {"allowAutoTopicCreation": True, "topicType": "sharded"},
        {"allowAutoTopicCreation": True, "topicType": "partitioned"},
        {"allowAutoTopicCreation": True, "topicType": "partitioned", "defaultNumPartitions": 0},
        {"allowAutoTopicCreation": True, "topicType": "non-partitioned", "defaultNumPartitions": 2},
    ]
    for body in bad:
        assert status_of(AutoTopicCreation.from_json, body) == 412, body
    assert status_of(AutoTopicCreation.from_json, {"allowAutoTopicCreation": "yes"}) == 400


def test_policies_view_has_pulsar_defaults_and_stored_values() -> None:
    view = P.policies_view({"message_ttl_in_seconds": 30}, "standalone", NamespaceBundles.equal("t/ns", 4))
    assert view["message_ttl_in_seconds"] == 30
    assert view["replication_clusters"] == ["standalone"]
    assert view["bundles"]["numBundles"] == 4 and view["bundles"]["boundaries"][-1] == "0xffffffff"
    assert view["backlog_quota_map"] == {} and view["schema_compatibility_strategy"] == "UNDEFINED"
    stored = P.validate_policies({"retention_policies": {"retentionTimeInMinutes": 5, "retentionSizeInMB": 5},
                                  "message_ttl_in_seconds": None, "custom": 1})
    assert "message_ttl_in_seconds" not in stored and stored["custom"] == 1
    assert status_of(P.validate_policies, {"message_ttl_in_seconds": -3}) == 412
