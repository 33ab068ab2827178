"""Shared helpers for the end-to-end tests (official pulsar-client against the pulsar_broker fixture)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pulsar
import pytest

from broker.embedded import BrokerThread


def topic_name(prefix: str) -> str:
    """A fresh topic per test, so tests sharing the session broker never interfere."""
    return f"persistent://public/default/{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def client(pulsar_broker: BrokerThread) -> Iterator[pulsar.Client]:
    c = pulsar.Client(pulsar_broker.service_url, operation_timeout_seconds=10)
    yield c
    c.close()
