"""The publish rate limiter's arithmetic with a fake clock: token buckets of one second's worth,
which connections it holds, and when it lets them go; and the per-consumer subscribe counts."""

from __future__ import annotations

import asyncio
import gc
import weakref
from types import SimpleNamespace
from typing import Any

from broker.metadata.policy_values import PublishRate
from broker.service.rate_limits import RATE_RECHECK_S, DispatchRate, PublishThrottle, SubscribeRateLimiter, TokenBucket


class FakeConnection:
    def __init__(self) -> None:
        self.throttles = 0

    def set_rate_throttled(self, delta: int, throttle: object) -> None:
        self.throttles += delta
        assert self.throttles >= 0


class FakeTopic:
    def __init__(self, limits: tuple[int, int]) -> None:
        self.limits = limits
        self.name = "t"
        self.loop = asyncio.get_running_loop()
        policies = SimpleNamespace(get=lambda name, policy: PublishRate(*self.limits))
        self.service = SimpleNamespace(metadata=SimpleNamespace(generation=1), policies=policies)


def test_token_bucket_refills_continuously_up_to_one_second() -> None:
    bucket = TokenBucket(100, now=0.0)
    assert bucket.consume(100, now=0.0) == 0.0  # a full second's burst
    assert bucket.consume(50, now=0.0) == 0.5  # 50 short: half a second to pay back
    assert bucket.consume(0, now=0.5) == 0.0  # back at zero
    assert bucket.consume(0, now=10.0) == 0.0 and bucket.tokens == 100  # capped at one second


async def test_throttle_holds_the_publishing_connections_until_the_buckets_refill() -> None:
    now = [0.0]
    topic: Any = FakeTopic((100, 0))
    throttle = PublishThrottle(topic, clock=lambda: now[0])
    a, b = FakeConnection(), FakeConnection()
    throttle.record(a, 100, 1000)
    assert a.throttles == 0  # within the burst
    throttle.record(a, 20, 1000)
    throttle.record(b, 30, 1000)
    assert (a.throttles, b.throttles, throttle.throttled_times) == (1, 1, 1)
    assert throttle._timer is not None
    assert abs(throttle._until - 0.5) < 1e-9  # 50 messages short at 100 per second
    throttle.release()  # (what the timer does)
    assert (a.throttles, b.throttles) == (0, 0)
    # A new limit (the metadata changed) starts afresh: nobody held, full buckets.
    throttle.record(a, 500, 0)
    assert a.throttles == 1
    topic.limits = (0, 1000)
    topic.service.metadata.generation += 1
    assert throttle.limits == (0, 1000, 1) and a.throttles == 0
    throttle.record(a, 10_000, 999)
    assert a.throttles == 0
    throttle.record(a, 0, 2)
    assert a.throttles == 1
    throttle.release()


async def test_throttle_forgets_a_closed_connection() -> None:
    """A connection that closes while held is let go at once (not when the timer fires): nothing of it is
    kept, and with nobody left to hold, the timer goes too."""
    now = [0.0]
    throttle = PublishThrottle(FakeTopic((10, 0)), clock=lambda: now[0])  # type: ignore[arg-type]
    a, b = FakeConnection(), FakeConnection()
    throttle.record(a, 100, 0)
    throttle.record(b, 1, 0)
    assert throttle.paused == 2
    gone = weakref.ref(a)
    throttle.forget(a)
    del a
    gc.collect()
    assert gone() is None and throttle.paused == 1 and throttle._timer is not None
    throttle.forget(b)
    assert throttle.paused == 0 and throttle._timer is None


async def test_no_limit_costs_nothing_and_holds_nobody() -> None:
    topic: Any = FakeTopic((0, -1))
    throttle = PublishThrottle(topic)
    c = FakeConnection()
    for _ in range(1000):
        throttle.record(c, 1000, 1 << 20)
    assert c.throttles == 0 and throttle.throttled_times == 0


def test_dispatch_rate_budget_wait_and_period() -> None:
    now = [0.0]
    metadata = SimpleNamespace(generation=1)
    limits = [(100, 0, 2, False)]  # 100 messages per 2 s, no byte limit
    rate = DispatchRate(metadata, lambda: limits[0], clock=lambda: now[0])
    assert rate.budget() == (100, None)
    rate.consume(100, 10_000)
    assert rate.budget() == (0, 0) and rate.throttled_times == 1
    assert abs(rate.wait() - 0.02) < 1e-9  # at zero: the next whole message in 1/50 s
    now[0] = 1.0
    assert rate.budget() == (50, None)  # refilled at 50 per second
    rate.consume(80, 0)  # a read may overshoot by less than an entry: paid back first
    assert rate.budget() == (0, 0)
    assert abs(rate.wait() - 0.62) < 1e-9  # 30 short, then one whole message: 31 / 50 s
    # Bytes too; a change of limits starts with full buckets; no limit = no budget at all.
    limits[0] = (0, 1000, 1, False)
    metadata.generation += 1
    assert rate.budget() == (1 << 30, 1000)
    limits[0] = (-1, 0, 1, False)
    metadata.generation += 1
    assert rate.budget() is None
    rate.consume(10**9, 10**9)  # costs nothing, changes nothing
    assert rate.budget() is None
    # A long period: the wait is cut to a second, so a limit removed meanwhile is seen soon.
    limits[0] = (1, 0, 3600, False)
    metadata.generation += 1
    msgs, nbytes = rate.budget() or (0, 0)
    rate.consume(msgs, nbytes or 0)  # no byte limit: None in the budget
    assert rate.budget() == (0, 0) and rate.wait() == RATE_RECHECK_S == 1.0


def test_dispatch_rate_relative_to_the_publish_rate() -> None:
    now = [0.0]
    metadata = SimpleNamespace(generation=1)
    published = [(0, 0)]  # the topic's counters: messages, bytes
    rate = DispatchRate(metadata, lambda: (100, 0, 2, True), clock=lambda: now[0], published=lambda: published[0])
    assert rate.budget() == (100, None) and rate.relative  # nothing measured yet: the base
    rate.consume(100, 0)
    # 300 messages a second were published over the next second: the limit becomes 100 + 2 s of
    # them per 2 s. The bucket keeps its balance (refilled at the old rate until now, not to
    # the new capacity) and refills at the new rate from here.
    now[0] = 1.0
    published[0] = (300, 30_000)
    assert rate.budget() == (50, None)
    assert rate.limits == (700, 0, 2) and rate.publish_rate == (300.0, 30_000.0)
    rate.consume(50, 0)
    now[0] = 1.5
    assert rate.budget() == (175, None)  # half a second at 350 per second
    # Producers stopped: back to the base rate, balance capped at the smaller capacity.
    now[0] = 2.5
    assert rate.budget() == (100, None) and rate.limits == (100, 0, 2)
    # Without a configured measure there is nothing to raise; without relativeToPublishRate the
    # counters are never read.
    plain = DispatchRate(metadata, lambda: (0, 500, 1, False), clock=lambda: now[0],
                         published=lambda: (_ for _ in ()).throw(AssertionError("read")))
    assert plain.budget() == (1 << 30, 500) and not plain.relative


def test_subscribe_rate_is_a_token_bucket_per_consumer() -> None:
    """Pulsar 4.0's SubscribeRateLimiter: an AsyncTokenBucket per consumer, ``rate`` tokens refilled
    over the period: a burst of ``rate`` subscribes, then one every period / rate. The limiter used
    to count subscribes in a fixed window that started over for everyone when it rolled: no
    subscribe in the middle of the window, then a whole new burst at its end."""
    now = [100.0]
    limits = [(2, 10)]
    limiter = SubscribeRateLimiter(lambda: limits[0], clock=lambda: now[0])
    a, b = ("10.0.0.1", "c", 0), ("10.0.0.1", "c", 1)
    assert limiter.try_acquire(a) and limiter.try_acquire(a)
    assert not limiter.try_acquire(a)  # the burst is spent
    assert limiter.try_acquire(b)  # another consumer id is another consumer
    now[0] += 4.9
    assert not limiter.try_acquire(a)  # not yet a whole token back (one every 5 s)
    now[0] += 0.1
    assert limiter.try_acquire(a) and not limiter.try_acquire(a)
    now[0] += 5.0  # (one token back, not a new burst of 2)
    assert limiter.try_acquire(a) and not limiter.try_acquire(a)
    assert limiter.refused == 4
    now[0] += 100.0  # full again: dropped at the next subscribe past a period
    assert limiter.try_acquire(b) and set(limiter._buckets) == {b}
    limits[0] = (0, 10)  # no limit
    assert all(limiter.try_acquire(a) for _ in range(10))
    limits[0] = (1, 10)  # a new limit: full buckets
    assert limiter.try_acquire(a) and not limiter.try_acquire(a)


def test_subscribe_rate_admits_at_exactly_one_token_as_pulsars_integer_bucket() -> None:
    """Pulsar 4.0's containsTokens() asks for a whole token (its AsyncTokenBucket counts whole tokens and
    carries the rest as nanoseconds), so a fraction is refused, and a token is back exactly one period / rate
    after it was spent. Refilled in floating point, 11 s at 3 per 11 s came to 0.9999999999999999 tokens, and
    a subscribe Pulsar admits there was refused."""
    now = [0.0]
    limiter = SubscribeRateLimiter(lambda: (3, 11), clock=lambda: now[0])
    a = ("10.0.0.1", "c", 0)
    assert all(limiter.try_acquire(a) for _ in range(3)) and not limiter.try_acquire(a)
    now[0] = 11 / 3 - 1e-3
    assert not limiter.try_acquire(a)  # most of a token is not one
    now[0] = 11 / 3
    assert limiter.try_acquire(a) and not limiter.try_acquire(a)
