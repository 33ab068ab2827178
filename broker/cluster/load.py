"""The figures of a broker's load report: rates from counter deltas, this process's CPU and memory.

Pulsar reports CPU as usage and limit in percent of one core (the limit is 100 x the cores); memory in MB. Our
broker is one process on one event loop, so its limit is one core: a broker at 100 % of a core is full whatever
the machine has, and the leader's placement (``broker.cluster.placement``) should see it so.
"""

from __future__ import annotations

import os
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


class CpuMeter:
    """This process's CPU use since the previous look, per cent of one core. Each reader keeps its own meter."""

    def __init__(self) -> None:
        self._at, self._cpu = time.monotonic(), time.process_time()
        self.percent = 0.0  # (the last look's)

    def look(self) -> float:
        now, cpu = time.monotonic(), time.process_time()
        if now > self._at:
            self.percent = 100.0 * (cpu - self._cpu) / (now - self._at)
        self._at, self._cpu = now, cpu
        return self.percent


class LoadSampler:
    def __init__(self) -> None:
        self._at = time.monotonic()
        self._cpu = CpuMeter()
        self._counters = Counters(0, 0, 0, 0)
        self.rates = Rates()
        self._bundle_counters: Mapping[str, Counters] = {}
        self.bundle_rates: dict[str, Rates] = {}  # by bundle name, over the same interval

    def sample(self, counters: Counters, per_bundle: Mapping[str, Counters] | None = None) -> Rates:
        now = time.monotonic()
        elapsed = now - self._at
        if elapsed < MIN_SAMPLE_INTERVAL_S:
            return self.rates
        self.rates = _rates(self._counters, counters, elapsed, self._cpu.look())
        if per_bundle is not None:
            zero = Counters(0, 0, 0, 0)
            self.bundle_rates = {b: _rates(self._bundle_counters.get(b, zero), c, elapsed, 0.0)
                                 for b, c in per_bundle.items()}
            self._bundle_counters = per_bundle
        self._at, self._counters = now, counters
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


PAGE_MB = os.sysconf("SC_PAGE_SIZE") / (1024 * 1024)


def rss_mb() -> float:
    """This process's resident memory now (MB). (Now, not its peak: a broker that freed memory is not loaded.)"""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE_MB


def memory_limit_mb() -> float:
    """The machine's memory (MB): what this process could grow to."""
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 1024
    return 0.0
