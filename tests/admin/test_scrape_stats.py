"""The light stats path of /metrics (scrape_stats.topic_counters) reads the same numbers as the
admin stats JSON (stats.topic_stats), for persistent and non-persistent topics under traffic."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pulsar
import pytest

from broker.admin.scrape_stats import topic_counters
from broker.admin.stats import topic_stats
from broker.embedded import BrokerThread
from broker.topic_name import TopicName

TIMEOUT_MS = 10_000


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerThread]:
    with BrokerThread(statsUpdateFrequencyInSecs=3600) as b:
        yield b


def _both(broker: BrokerThread, name: str) -> tuple[dict[str, Any], Any]:
    web = broker.server.web

    async def read() -> tuple[dict[str, Any], Any]:
        web.sampler.sample()
        topic = next(t for t in broker.server.service.all_topics() if t.full_name == name)
        return topic_stats(topic, web.sampler), topic_counters(topic, web.sampler)

    result: tuple[dict[str, Any], Any] = broker.run_coroutine(read())
    return result


@pytest.mark.parametrize("domain", ["persistent", "non-persistent"])
def test_counters_match_the_stats_json(broker: BrokerThread, domain: str) -> None:
    name = TopicName.parse(f"{domain}://public/default/light-{uuid.uuid4().hex[:8]}").full
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
    try:
        acked = client.subscribe(name, "acked", consumer_type=pulsar.ConsumerType.Shared)
        held = client.subscribe(name, "held", receiver_queue_size=5)
        producer = client.create_producer(name, batching_enabled=False)
        for i in range(12):
            producer.send(f"m{i}".encode())
        for _ in range(12):
            acked.acknowledge(acked.receive(TIMEOUT_MS))
        held.receive(TIMEOUT_MS)  # delivered, not acknowledged
        st, tc = _both(broker, name)
        for key, attr in (("msgRateIn", "rate_in"), ("msgThroughputIn", "throughput_in"),
                          ("msgRateOut", "rate_out"), ("msgThroughputOut", "throughput_out"),
                          ("msgInCounter", "msg_in"), ("bytesInCounter", "bytes_in"),
                          ("msgOutCounter", "msg_out"), ("bytesOutCounter", "bytes_out"),
                          ("averageMsgSize", "average_msg_size"), ("storageSize", "storage_size"),
                          ("backlogSize", "backlog_size"), ("publishRateLimitedTimes", "rate_limited_times")):
            assert getattr(tc, attr) == st[key], key
        assert tc.msg_in == 12 and tc.msg_out >= 13
        assert [s.name for s in tc.subscriptions] == sorted(st["subscriptions"])
        for s in tc.subscriptions:
            js = st["subscriptions"][s.name]
            for key, attr in (("msgRateOut", "rate_out"), ("msgThroughputOut", "throughput_out"),
                              ("msgOutCounter", "msg_out"), ("bytesOutCounter", "bytes_out"),
                              ("msgRateRedeliver", "rate_redeliver"), ("messageAckRate", "ack_rate"),
                              ("msgBacklog", "backlog"), ("unackedMessages", "unacked"),
                              ("blockedSubscriptionOnUnackedMsgs", "blocked"), ("msgRateExpired", "rate_expired"),
                              ("totalMsgExpired", "total_expired"), ("lastExpireTimestamp", "last_expire_ms"),
                              ("lastAckedTimestamp", "last_acked_ms"), ("lastConsumedTimestamp", "last_consumed_ms"),
                              ("lastMarkDeleteAdvancedTimestamp", "last_mark_delete_ms")):
                assert getattr(s, attr) == js[key], (s.name, key)
            assert s.consumers == len(js["consumers"])
            assert s.drop_rate == js.get("msgDropRate")
        if domain == "persistent":
            held_sub = next(s for s in tc.subscriptions if s.name == "held")
            assert held_sub.backlog == 12 and held_sub.unacked >= 1
    finally:
        client.close()
