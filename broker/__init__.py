"""A lightweight message broker that speaks the Apache Pulsar binary protocol.

Embedded use::

    async with Broker() as broker:            # or: with BrokerThread() as broker:
        client = pulsar.Client(broker.service_url)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from broker.version import __version__

if TYPE_CHECKING:
    from broker.config import BrokerConfig
    from broker.embedded import Broker, BrokerThread

__all__ = ["Broker", "BrokerConfig", "BrokerThread", "__version__"]


def __getattr__(name: str) -> Any:
    # Imported lazily so `import broker` stays cheap and free of import cycles.
    if name in ("Broker", "BrokerThread"):
        from broker import embedded

        return getattr(embedded, name)
    if name == "BrokerConfig":
        from broker.config import BrokerConfig

        return BrokerConfig
    raise AttributeError(name)
