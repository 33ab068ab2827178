"""The leader's averages of each bundle's load over the brokers' reports: Pulsar's ``LoadData.bundleData``
(a ``BundleData`` per bundle, each a short-term and a long-term ``TimeAverageMessageData``), as its
``ModularLoadManagerImpl.updateBundleData`` keeps them.

Each time the leader sees a report that is new (a broker wrote its ``LocalBrokerData`` again: its ``lastUpdate``
changed, or a broker came or went), every bundle in every report's ``lastStats`` counts one sample: the average of
the last ``n`` samples, ``n`` growing up to 10 (short term) and 1000 (long term), then a running average of that
weight (``TimeAverageMessageData.update``). A bundle not seen yet counts Pulsar's defaults (50 msg/s and 50,000 B/s
in and out each) until its first sample replaces them.

Who reads them, as in Pulsar: the shedding strategies take a bundle's load from its short-term average
(``getShortTermData``); the default placement strategy (``LeastLongTermMessageRate``) scores a broker by the
long-term message rate of its bundles (``TimeAverageBrokerData``) plus that of the bundles just assigned to it
(``preallocatedBundleData``: the defaults for a new bundle, so a burst of assignments spreads over the brokers
instead of all going to the one idle a moment ago).

Not kept: Pulsar writes these to ``/loadbalance/bundle-data`` and ``/loadbalance/broker-time-average`` for the
next leader; here a new leader starts from the reports (the defaults, then the samples it sees). A bundle no report
has shown for ``FORGET_AFTER_S`` is forgotten (a split's parent, a deleted namespace's).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

from broker.cluster.data import BundleLoad, LoadReport

# ModularLoadManagerImpl.NUM_SHORT_SAMPLES / NUM_LONG_SAMPLES.
SHORT_SAMPLES = 10
LONG_SAMPLES = 1000
# ModularLoadManagerImpl.DEFAULT_MESSAGE_RATE / DEFAULT_MESSAGE_THROUGHPUT: a bundle's load before its first sample.
DEFAULT_LOAD = BundleLoad(msg_rate_in=50.0, msg_rate_out=50.0, msg_throughput_in=50000.0, msg_throughput_out=50000.0)
FORGET_AFTER_S = 3600.0


@dataclass
class TimeAverage:
    """Pulsar's TimeAverageMessageData: rates and throughputs averaged over the last ``samples`` (at most
    ``max_samples``) samples; starts at a default that the first sample replaces."""

    max_samples: int
    samples: int = 0
    msg_rate_in: float = DEFAULT_LOAD.msg_rate_in
    msg_rate_out: float = DEFAULT_LOAD.msg_rate_out
    msg_throughput_in: float = DEFAULT_LOAD.msg_throughput_in
    msg_throughput_out: float = DEFAULT_LOAD.msg_throughput_out

    def update(self, load: BundleLoad) -> None:
        n = self.samples = min(self.samples + 1, self.max_samples)
        self.msg_rate_in = ((n - 1) * self.msg_rate_in + load.msg_rate_in) / n
        self.msg_rate_out = ((n - 1) * self.msg_rate_out + load.msg_rate_out) / n
        self.msg_throughput_in = ((n - 1) * self.msg_throughput_in + load.msg_throughput_in) / n
        self.msg_throughput_out = ((n - 1) * self.msg_throughput_out + load.msg_throughput_out) / n

    def as_load(self) -> BundleLoad:
        return BundleLoad(msg_rate_in=self.msg_rate_in, msg_rate_out=self.msg_rate_out,
                          msg_throughput_in=self.msg_throughput_in, msg_throughput_out=self.msg_throughput_out)

    @property
    def msg_rate(self) -> float:
        return self.msg_rate_in + self.msg_rate_out


class BundleHistory:
    __slots__ = ("long", "seen", "short")

    def __init__(self) -> None:
        self.short = TimeAverage(SHORT_SAMPLES)
        self.long = TimeAverage(LONG_SAMPLES)
        self.seen = 0.0  # (time.monotonic() of its last sample)


class LoadHistory:
    """bundle name -> its averages; ``observe`` samples the reports when one of them is new."""

    def __init__(self) -> None:
        self.bundles: dict[str, BundleHistory] = {}
        self._seen_reports: dict[str, int] = {}  # broker id -> the lastUpdate of its report last sampled
        self.rounds = 0  # how many times the reports were sampled (tests, logs)

    def observe(self, brokers: Mapping[str, LoadReport]) -> bool:
        """Sample every reported bundle's load when a report is new since the last call; True when it did."""
        seen = {broker_id: report.last_update_ms for broker_id, report in brokers.items()}
        if seen == self._seen_reports:
            return False
        self._seen_reports = seen
        now = time.monotonic()
        bundles = self.bundles
        for report in brokers.values():
            for name, load in report.bundle_stats.items():
                history = bundles.get(name)
                if history is None:
                    history = bundles[name] = BundleHistory()
                history.short.update(load)
                history.long.update(load)
                history.seen = now
        horizon = now - FORGET_AFTER_S
        for name in [name for name, h in bundles.items() if h.seen < horizon]:
            del bundles[name]
        self.rounds += 1
        return True

    def short_term(self) -> dict[str, BundleLoad]:
        """Every known bundle's short-term average (what the shedding strategies read)."""
        return {name: h.short.as_load() for name, h in self.bundles.items()}

    def long_term_rate(self, bundle: str) -> float:
        """The bundle's long-term message rate in + out (Pulsar's defaults for one not seen yet)."""
        history = self.bundles.get(bundle)
        return history.long.msg_rate if history is not None else DEFAULT_LOAD.msg_rate_in + DEFAULT_LOAD.msg_rate_out

    def broker_long_term_rate(self, report: LoadReport) -> float:
        """Pulsar's TimeAverageBrokerData long-term message rate: the sum over the broker's bundles."""
        return sum(self.long_term_rate(b) for b in report.bundles)
