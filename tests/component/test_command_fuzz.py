"""Random commands on many connections (command_fuzz.py): whatever a client sends, the broker answers it, refuses it
or closes that connection, and never fails unexpectedly (no error logged, no task dying), hangs a connection, or
hurts the others; the dispatchers' permit invariant holds throughout. Seeded, so a failure repeats:
PULSAR_FUZZ_SEED=<n> runs another seed, PULSAR_FUZZ_SESSIONS=<n> more connections. The same on BookKeeper:
tests/bookkeeper/test_command_fuzz_bookkeeper.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from broker.embedded import Broker
from tests.component.command_fuzz import check_random_commands

SEED = int(os.environ.get("PULSAR_FUZZ_SEED", "6650"))
SESSIONS = int(os.environ.get("PULSAR_FUZZ_SESSIONS", "2000"))


async def test_random_commands_are_answered_refused_or_closed_and_never_fail_the_broker(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    broker = Broker(data_dir=tmp_path, transactionCoordinatorEnabled=True, topicLevelPoliciesEnabled=True)
    await check_random_commands(broker, SEED, SESSIONS, caplog, monkeypatch)
