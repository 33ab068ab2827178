"""pytest plugin shipped with the package: fixtures that give tests a real broker.

Installed as the ``pulsar_broker`` pytest plugin (entry point), so any project that installs this
package can write::

    def test_roundtrip(pulsar_broker):
        client = pulsar.Client(pulsar_broker.service_url)

``pulsar_broker`` is shared by the whole session (fast); ``pulsar_broker_fresh`` starts a new
broker for one test. Both bind ephemeral ports on 127.0.0.1 and use a temporary data directory.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from broker.embedded import BrokerThread


@pytest.fixture(scope="session")
def pulsar_broker() -> Iterator[BrokerThread]:
    from broker.embedded import BrokerThread  # imported on use: loading the plugin stays cheap

    with BrokerThread() as broker:
        yield broker


@pytest.fixture
def pulsar_broker_fresh() -> Iterator[BrokerThread]:
    from broker.embedded import BrokerThread

    with BrokerThread() as broker:
        yield broker
