"""The figures of a broker's load report: rates from counter deltas, this process's CPU and memory.

Pulsar reports CPU as usage and limit in percent of one core (the limit is 100 x the cores); memory in MB. Our
broker is one process on one event loop, so its limit is one core: a broker at 100 % of a core is full whatever
the machine has, and the leader's placement (``broker.cluster.placement``) should see it so.
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Counters:
    msg_in: int
    bytes_in: int
    msg_out: int
    bytes_out: int


@dataclass(frozen=True)
class Rates:
    msg_rate_in: float = 0.0
    msg_rate_out: float = 0.0
    throughput_in: float = 0.0
    throughput_out: float = 0.0
    cpu_percent: float = 0.0  # of one core


ONE_CORE_PERCENT = 100.0
# A sample closer than this to the previous one keeps the previous rates (they would be noise).
MIN_SAMPLE_INTERVAL_S = 1.0


class LoadSampler:
    def __init__(self) -> None:
        self._at = time.monotonic()
        self._cpu = time.process_time()
        self._counters = Counters(0, 0, 0, 0)
        self.rates = Rates()
        self._bundle_counters: Mapping[str, Counters] = {}
        self.bundle_rates: dict[str, Rates] = {}  # by bundle name, over the same interval

    def sample(self, counters: Counters, per_bundle: Mapping[str, Counters] | None = None) -> Rates:
        now, cpu = time.monotonic(), time.process_time()
        elapsed = now - self._at
        if elapsed < MIN_SAMPLE_INTERVAL_S:
            return self.rates
        self.rates = _rates(self._counters, counters, elapsed, 100.0 * (cpu - self._cpu) / elapsed)
        if per_bundle is not None:
            zero = Counters(0, 0, 0, 0)
            self.bundle_rates = {b: _rates(self._bundle_counters.get(b, zero), c, elapsed, 0.0)
                                 for b, c in per_bundle.items()}
            self._bundle_counters = per_bundle
        self._at, self._cpu, self._counters = now, cpu, counters
        return self.rates


def _rates(before: Counters, after: Counters, elapsed: float, cpu_percent: float) -> Rates:
    # (a counter may go down when topics unload: a negative delta is taken as nothing)
    return Rates(max(0, after.msg_in - before.msg_in) / elapsed, max(0, after.msg_out - before.msg_out) / elapsed,
                 max(0, after.bytes_in - before.bytes_in) / elapsed,
                 max(0, after.bytes_out - before.bytes_out) / elapsed, cpu_percent)


def bandwidth_kbps(bytes_per_s: float) -> float:
    """Pulsar's bandwidth usage unit (kilobits per second, as LinuxBrokerHostUsageImpl reports it)."""
    return bytes_per_s * 8 / 1024


def nic_limit_kbps(gbps: float) -> float:
    """Pulsar's getTotalNicLimitWithConfiguration: loadBalancerOverrideBrokerNicSpeedGbps in Kbit/s."""
    return gbps * 1000 * 1000


def memory_mb() -> tuple[float, float]:
    """(this process's peak resident memory, the machine's memory), in MB."""
    rss_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # (kilobytes on Linux)
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / (1024 * 1024)
    except (ValueError, OSError):
        total = 0.0
    return rss_kb / 1024, total
