"""Rate limits: publishing (PublishThrottle) and dispatching (DispatchRate), on token buckets;
subscribing (SubscribeRateLimiter), counted per consumer.

Publish rate limits (Pulsar's topic ``publishRate``, namespace ``publishMaxMessageRate`` and
broker ``maxPublishRatePerTopicInMessages`` / ``...InBytes``; 0 or less = no limit).

As in Pulsar (PIP-322), each limited topic has token buckets of one second's worth of messages and
bytes, refilled continuously. What a socket read published is taken from them afterwards (they
may go below zero); while a bucket is below zero, the connections that published to the topic are
not read (the same lever as producer backpressure: TCP then slows the producers, nobody gets an
error). Reading resumes when the buckets are back at zero. A connection is shared by all the
producers and consumers on it, so they all wait, as in Pulsar. A connection that closes while held
is let go at once (``forget``).

The broker-wide publish limit (``brokerPublisherThrottlingMaxMessageRate`` / ``...MaxByteRate``,
Pulsar's BrokerService.brokerPublishRateLimiter) is the same mechanism over everything published to
the broker: one pair of buckets that every topic's publishes are taken from; past it, the
connections that published are not read until the buckets are back at zero.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from broker.metadata.policy_table import PUBLISH_RATE

if TYPE_CHECKING:
    from broker.service.abstract_topic import AbstractTopic


class Throttleable(Protocol):
    """The connection side: reading stops while any publish rate limit throttles it. It is told which
    limit, so that when it closes it has each limit still holding it ``forget`` it at once."""

    def set_rate_throttled(self, delta: int, throttle: ConnectionThrottle) -> None: ...


class TokenBucket:
    __slots__ = ("capacity", "rate", "stamp", "tokens")

    def __init__(self, rate: float, now: float, capacity: float | None = None) -> None:
        self.rate = rate  # tokens per second
        self.capacity = rate if capacity is None else capacity  # default: one second's worth
        self.tokens = self.capacity
        self.stamp = now

    def refill(self, now: float) -> float:
        """The balance now (below zero while a deficit is being paid back)."""
        self.tokens = min(self.capacity, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        return self.tokens

    def consume(self, n: float, now: float) -> float:
        """Take n tokens (the balance may go below zero); the seconds until it is back at zero."""
        self.refill(now)
        self.tokens -= n
        return self.until(0.0)

    def until(self, level: float) -> float:
        """Seconds until the balance (as of the last refill) reaches ``level`` (0 if it has)."""
        return max(0.0, (level - self.tokens) / self.rate)


class _RateLimit:
    """Message and byte buckets whose limits follow the policies: re-read whenever the metadata
    changed, and rebuilt full when the limits differ. ``resolve`` gives (messages, bytes,
    period in seconds); 0 or less = no limit on that measure."""

    def __init__(self, metadata: Any, resolve: Callable[[], tuple[int, int, int]],
                 clock: Callable[[], float]) -> None:
        self._metadata = metadata
        self._resolve = resolve
        self._clock = clock
        self._generation = -1
        self._limits = (0, 0, 1)
        self._buckets: tuple[TokenBucket | None, TokenBucket | None] = (None, None)
        self._limited = False

    @property
    def limits(self) -> tuple[int, int, int]:
        """(messages, bytes, period) in force; 0 = no limit."""
        self._refresh()
        return self._limits

    def _refresh(self) -> None:
        if self._generation == self._metadata.generation:
            return
        self._generation = self._metadata.generation
        msgs, nbytes, period = self._resolve()
        self._set_limits((max(0, msgs), max(0, nbytes), max(1, period)), rebuild=True)

    def _set_limits(self, limits: tuple[int, int, int], rebuild: bool) -> None:
        """New limits: full new buckets (``rebuild``, a policy change), or the same buckets with
        the new rates and capacities, keeping what they hold (a limit that follows a measured rate)."""
        if limits == self._limits:
            return
        self._limits = limits
        now, period = self._clock(), limits[2]

        def bucket(n: int, old: TokenBucket | None) -> TokenBucket | None:
            if not n:
                return None
            if rebuild or old is None:
                return TokenBucket(n / period, now, capacity=n)
            old.refill(now)
            old.rate, old.capacity, old.tokens = n / period, n, min(old.tokens, n)
            return old

        self._buckets = (bucket(limits[0], self._buckets[0]), bucket(limits[1], self._buckets[1]))
        self._limited = bool(limits[0] or limits[1])
        if rebuild:
            self._limits_changed()

    def _limits_changed(self) -> None:
        """Hook: the limits changed (the buckets are new and full)."""


class ConnectionThrottle(_RateLimit):
    """A publish rate limit that stops reading the connections that publish past it, until its
    buckets are back at zero. ``resolve`` gives (messages, bytes, period); 0 = no limit."""

    def __init__(self, metadata: Any, resolve: Callable[[], tuple[int, int, int]],
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(metadata, resolve, clock)
        self._paused: set[Throttleable] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._until = 0.0
        self.throttled_times = 0  # Pulsar's publishRateLimitedTimes

    def _limits_changed(self) -> None:
        self.release()  # a new limit starts with full buckets

    def policies_changed(self) -> None:
        """The metadata (or the dynamic configuration) changed: a limit lifted or changed lets the connections it
        holds be read at once, not when the old limit's deficit would have been paid back."""
        if self._paused:
            self._refresh()

    def record(self, connection: Throttleable, messages: int, nbytes: int) -> None:
        """A read of ``connection`` published this: throttle it if over the limit.
        (Called for every stored batch: without a limit it costs a comparison and a test.)"""
        if self._generation != self._metadata.generation:
            self._refresh()
        if not self._limited:
            return
        by_msgs, by_bytes = self._buckets
        now = self._clock()
        wait = max(by_msgs.consume(messages, now) if by_msgs is not None else 0.0,
                   by_bytes.consume(nbytes, now) if by_bytes is not None else 0.0)
        if wait > 0:
            self._pause(connection, now + wait)

    def _pause(self, connection: Throttleable, until: float) -> None:
        if connection not in self._paused:
            if not self._paused:
                self.throttled_times += 1
            self._paused.add(connection)
            connection.set_rate_throttled(+1, self)
        if self._timer is None or until > self._until:
            if self._timer is not None:
                self._timer.cancel()
            self._until = until
            self._timer = asyncio.get_running_loop().call_later(max(0.0, until - self._clock()), self.release)

    @property
    def paused(self) -> int:
        """Connections held now."""
        return len(self._paused)

    def release(self) -> None:
        """Resume reading every throttled connection (the buckets are back at zero, the limit
        changed, or the topic or broker closes)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        paused, self._paused = self._paused, set()
        for connection in paused:
            connection.set_rate_throttled(-1, self)

    def forget(self, connection: Throttleable) -> None:
        """``connection`` closed: hold it no longer (kept until the timer, it and all it refers to would
        outlive it, for as long as other connections keep the limit busy and push the timer on)."""
        self._paused.discard(connection)
        if not self._paused and self._timer is not None:
            self._timer.cancel()
            self._timer = None


class PublishThrottle(ConnectionThrottle):
    """One topic's publish rate limit (per second)."""

    def __init__(self, topic: AbstractTopic, clock: Callable[[], float] = time.monotonic) -> None:
        policies = topic.service.policies
        super().__init__(topic.service.metadata, lambda: (*policies.get(topic.name, PUBLISH_RATE).as_tuple(), 1), clock)
        self.topic = topic


class BrokerPublishThrottle(ConnectionThrottle):
    """The broker-wide publish rate limit: ``brokerPublisherThrottlingMaxMessageRate`` and
    ``brokerPublisherThrottlingMaxByteRate`` per second, over every topic (0 = no limit on that
    measure). Not made at all while both are 0, so an unlimited broker pays nothing per publish; once made, its
    limits follow the configuration (the dynamic configuration moves the metadata generation)."""

    def __init__(self, metadata: Any, config: Any, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(metadata, lambda: (config.brokerPublisherThrottlingMaxMessageRate,
                                            config.brokerPublisherThrottlingMaxByteRate, 1), clock)

    @classmethod
    def from_config(cls, config: Any, metadata: Any) -> BrokerPublishThrottle | None:
        """The limiter the configuration asks for now; None when it sets no limit."""
        msgs, nbytes = config.brokerPublisherThrottlingMaxMessageRate, config.brokerPublisherThrottlingMaxByteRate
        return cls(metadata, config) if msgs > 0 or nbytes > 0 else None



# How often a dispatch rate relative to the publish rate re-measures the publish rate (seconds).
PUBLISH_RATE_SAMPLE_S = 1.0
# The longest a throttled dispatcher or replicator waits before it asks for budget again (seconds).
RATE_RECHECK_S = 1.0


class DispatchRate(_RateLimit):
    """A dispatch rate limit (Pulsar's DispatchRate: messages and bytes per ratePeriodInSecond),
    shared by whoever dispatches under it: all subscriptions of a topic, or one subscription.

    A dispatcher asks ``budget()`` before a read and sizes the read to it, or, with nothing left,
    retries after ``wait()``; it reports what it sent with ``consume()``. What one read sends may
    go past the budget by less than an entry (an entry is never split), paid back before the next.

    ``relativeToPublishRate``: each configured measure (messages, bytes) is raised by what the
    topic took over the same period at its current publish rate, measured every second from the
    topic's counters (``published``). Pulsar adds its 60-second stats average; a consumer that
    keeps up here follows the producers within a second.
    """

    def __init__(self, metadata: Any, resolve: Callable[[], tuple[int, int, int, bool]],
                 clock: Callable[[], float] = time.monotonic,
                 published: Callable[[], tuple[int, int]] | None = None) -> None:
        super().__init__(metadata, self._resolve_base, clock)
        self._resolve_with_flag = resolve
        self._published = published
        self.relative = False
        self._base = (0, 0, 1)
        self._sample: tuple[float, int, int] | None = None  # (time, messages, bytes) published
        self.publish_rate = (0.0, 0.0)  # messages, bytes per second at the last sample
        self.throttled_times = 0  # reads put off for lack of budget

    @classmethod
    def broker_wide(cls, config: Any, metadata: Any) -> DispatchRate | None:
        """The broker's own limit (``dispatchThrottlingRateIn{Msg,Byte}`` per second), following the configuration
        once made (the dynamic configuration moves the metadata generation); None while neither is set."""
        if config.dispatchThrottlingRateInMsg <= 0 and config.dispatchThrottlingRateInByte <= 0:
            return None
        return cls(metadata,
                   lambda: (config.dispatchThrottlingRateInMsg, config.dispatchThrottlingRateInByte, 1, False))

    def _resolve_base(self) -> tuple[int, int, int]:
        msgs, nbytes, period, relative = self._resolve_with_flag()
        self._base = (max(0, msgs), max(0, nbytes), max(1, period))
        self.relative = relative and self._published is not None and bool(self._base[0] or self._base[1])
        if self.relative and self._sample is None:
            self._measure(self._clock())
        return self._relative_limits()

    def _refresh(self) -> None:
        super()._refresh()
        if self.relative and self._sample is not None:
            now = self._clock()
            if now - self._sample[0] >= PUBLISH_RATE_SAMPLE_S:
                self._measure(now)
                self._set_limits(self._relative_limits(), rebuild=False)

    def _measure(self, now: float) -> None:
        assert self._published is not None
        msgs, nbytes = self._published()
        if self._sample is not None:
            then, msgs0, nbytes0 = self._sample
            elapsed = max(now - then, 1e-9)
            self.publish_rate = ((msgs - msgs0) / elapsed, (nbytes - nbytes0) / elapsed)
        self._sample = (now, msgs, nbytes)

    def _relative_limits(self) -> tuple[int, int, int]:
        msgs, nbytes, period = self._base
        if not self.relative:
            return self._base
        rate_msgs, rate_bytes = self.publish_rate
        return (msgs + round(rate_msgs * period) if msgs else 0,
                nbytes + round(rate_bytes * period) if nbytes else 0, period)

    @property
    def active(self) -> bool:
        """A limit is in force (as of the last budget())."""
        return self._limited

    @property
    def limits_messages(self) -> bool:
        """A limit on messages is in force (as of the last budget())."""
        return self._limited and self._buckets[0] is not None

    @property
    def limits_bytes(self) -> bool:
        """A limit on bytes is in force (as of the last budget())."""
        return self._limited and self._buckets[1] is not None

    def budget(self) -> tuple[int, int | None] | None:
        """(messages, bytes or None) that may be dispatched now; None = no limit at all."""
        self._refresh()
        if not self._limited:
            return None
        by_msgs, by_bytes = self._buckets
        now = self._clock()
        msgs = int(by_msgs.refill(now)) if by_msgs is not None else 1 << 30
        nbytes = int(by_bytes.refill(now)) if by_bytes is not None else None
        if msgs <= 0 or (nbytes is not None and nbytes <= 0):
            self.throttled_times += 1
            return 0, 0
        return msgs, nbytes

    def wait(self) -> float:
        """Seconds until there is budget again (a whole message and a whole byte), at most
        ``RATE_RECHECK_S``: a limit removed or raised meanwhile is seen within that (as Pulsar's
        dispatchers retry a throttled read after a second)."""
        return min(RATE_RECHECK_S, max(b.until(1.0) for b in self._buckets if b is not None))

    def consume(self, messages: int, nbytes: int) -> None:
        if not self._limited:
            return
        by_msgs, by_bytes = self._buckets
        now = self._clock()
        if by_msgs is not None:
            by_msgs.consume(messages, now)
        if by_bytes is not None:
            by_bytes.consume(nbytes, now)


# A subscribe needs a whole token (Pulsar's containsTokens() on its AsyncTokenBucket, which counts whole
# tokens in integers): the float refill lands a hair under 1 where Pulsar's nanosecond arithmetic makes exactly 1
# (11 s at 3 per 11 s gives 0.9999999999999999), so "whole" allows for that rounding, and no more.
WHOLE_TOKEN = 1.0 - 1e-9


class SubscribeRateLimiter:
    """Subscribes per consumer on one persistent topic (Pulsar's topic ``subscribeRate``, namespace
    ``clusterSubscribeRate``, broker ``subscribeThrottlingRatePerConsumer``): one consumer - its
    client's host, consumer name and consumer id - has a token bucket of ``rate`` subscribes that
    refills at ``rate`` per period, as Pulsar 4.0's SubscribeRateLimiter (an AsyncTokenBucket per
    consumer): a burst of ``rate``, then one every ``period / rate`` seconds. A subscribe takes a
    whole token (Pulsar's containsTokens(): its bucket holds whole tokens only). Buckets that are
    full again are dropped once a period (a full bucket is what a new consumer gets), so what is
    kept is one small bucket per consumer seen lately."""

    def __init__(self, resolve: Callable[[], tuple[int, int]], clock: Callable[[], float] = time.monotonic) -> None:
        self._resolve = resolve  # () -> (subscribes per consumer, period in seconds); 0 = no limit
        self._clock = clock
        self._limits = (0, 0)
        self._pruned = 0.0
        self._buckets: dict[tuple[str, str, int], TokenBucket] = {}
        self.refused = 0

    def try_acquire(self, consumer: tuple[str, str, int]) -> bool:
        """Take a subscribe of ``consumer``; False when its bucket has no whole token (nothing taken)."""
        rate, period = self._resolve()
        if rate <= 0 or period <= 0:
            self._buckets.clear()
            return True
        now = self._clock()
        if (rate, period) != self._limits:  # a new limit: every consumer starts with a full bucket
            self._limits = (rate, period)
            self._buckets.clear()
            self._pruned = now
        elif now - self._pruned >= period:
            self._pruned = now
            for key in [k for k, b in self._buckets.items() if b.refill(now) >= b.capacity]:
                del self._buckets[key]
        bucket = self._buckets.get(consumer)
        if bucket is None:
            bucket = self._buckets[consumer] = TokenBucket(rate / period, now, capacity=rate)
        if bucket.refill(now) < WHOLE_TOKEN:
            self.refused += 1
            return False
        bucket.tokens -= 1.0
        return True
