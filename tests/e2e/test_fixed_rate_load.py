"""The fixed-rate latency load generator (bench/go_load, the official Go client) against our broker: it
reports what it measured, and fails loudly (exit status 3, the reason in its report) when the rate
offered was not achieved. Needs Go (skipped without it, except under CI)."""

from __future__ import annotations

import pytest

from bench import fixed_rate
from broker.embedded import BrokerThread
from tests.e2e.conftest import topic_name


@pytest.fixture(scope="module")
def load_generator() -> None:
    try:
        fixed_rate.build()
    except fixed_rate.LoadGeneratorUnavailable as exc:
        if fixed_rate.required():
            raise
        pytest.skip(str(exc))


def test_every_message_is_measured_and_received(pulsar_broker: BrokerThread, load_generator: None) -> None:
    run = fixed_rate.run(pulsar_broker.service_url, topic_name("fixed-rate"), rate=200, seconds=1.0, size=100)
    assert run.figure("messages") == 200
    assert run.figure("received") == 200  # end to end: the consumer got every measured message
    assert run.figure("send_errors") == 0
    assert 0 < run.ms("publish_ms", "p50") <= run.ms("publish_ms", "p99") <= run.ms("publish_ms", "max")
    assert 0 < run.ms("end_to_end_ms", "p50") <= run.ms("end_to_end_ms", "max")
    assert run.client_cpu_s > 0
    # (Whether 200 msg/s were achieved depends on this machine's load: the report and the verdict agree.)
    achieved = run.figure("achieved")
    assert (run.failure is None) == (achieved >= fixed_rate.MIN_RATIO * 200), (run.failure, achieved)


def test_a_rate_not_achieved_fails_the_run(pulsar_broker: BrokerThread, load_generator: None) -> None:
    # A million messages a second: no client sends and has receipted 2,000 messages in 2 ms.
    run = fixed_rate.run(pulsar_broker.service_url, topic_name("fixed-rate"), rate=1_000_000, seconds=0.002, size=100,
                         warmup_s=0)
    assert run.failure is not None and "offered 1000000 msg/s, achieved" in run.failure
    assert 0 < run.figure("achieved") < fixed_rate.MIN_RATIO * 1_000_000
    assert run.figure("received") == 2000  # the run still finished: every message was sent and received


def test_fan_out_counts_every_delivery_of_every_subscription(pulsar_broker: BrokerThread,
                                                             load_generator: None) -> None:
    run = fixed_rate.fan_out(pulsar_broker.service_url, topic_name("go-fanout"), subscriptions=3, messages=500,
                             size=100)
    assert run.failure is None, run.failure
    assert (run.figure("subscriptions"), run.figure("messages"), run.figure("deliveries")) == (3, 500, 1500)
    assert run.figure("rate") == pytest.approx(1500 / run.figure("seconds"))
    assert run.client_cpu_s > 0


def test_a_fan_out_that_cannot_start_fails_with_the_reason(pulsar_broker: BrokerThread, load_generator: None) -> None:
    run = fixed_rate.fan_out(pulsar_broker.service_url, "persistent://no-such-tenant/ns/t", subscriptions=2,
                             messages=10, size=100)
    assert run.failure is not None and run.failure.startswith("subscribe: "), run.failure
    assert run.figure("deliveries") == 0


@pytest.mark.parametrize("batched", [True, False])
def test_produce_counts_every_receipt(pulsar_broker: BrokerThread, load_generator: None, batched: bool) -> None:
    run = fixed_rate.produce(pulsar_broker.service_url, topic_name("go-produce"), messages=700, size=100,
                             batched=batched)
    assert run.failure is None, run.failure
    assert (run.figure("messages"), run.report["batched"]) == (700, batched)
    assert run.figure("rate") == pytest.approx(700 / run.figure("seconds"))


def test_produce_with_several_producers_spreads_over_their_topics(pulsar_broker: BrokerThread,
                                                                  load_generator: None) -> None:
    """-producers 3: three producers at once, each on a topic of its own (<topic>-<i>), the messages shared out."""
    topic = topic_name("go-produce-many")
    run = fixed_rate.produce(pulsar_broker.service_url, topic, messages=900, size=100, batched=True, producers=3)
    assert run.failure is None, run.failure
    assert (run.figure("messages"), run.report["producers"]) == (900, 3)
    service = pulsar_broker.server.service
    assert [service.topics[f"{topic}-{i}"].ledger.number_of_entries > 0 for i in range(3)] == [True] * 3
