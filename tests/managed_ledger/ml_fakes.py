"""Test doubles shared by the managed-ledger tests."""

from __future__ import annotations


class FakeClock:
    """A settable clock (seconds) for rollover and retention tests."""

    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
