"""What the admin layer works with: one typed context, handed to the web service when the broker
process builds it.

The admin layer sits on top of the service: it reads and changes the ``BrokerService`` (topics,
subscriptions, stats), the ``BrokerMetadata`` (through its named operations: tenants, namespaces,
policies, clusters...), the configuration and the security settings. What it needs from the running
process (bound ports and URLs, readiness, connection counts, listeners) it reads through the
``ServingProcess`` protocol, which ``broker.server.BrokerServer`` meets: the admin layer does not
import the server module (the server imports the admin layer to start it).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from broker.auth import Security
from broker.config import BrokerConfig
from broker.listeners import Listener
from broker.metadata.store import BrokerMetadata
from broker.service.broker_service import BrokerService

if TYPE_CHECKING:
    from broker.connection import ThrottleCounts


class ServingProcess(Protocol):
    """The broker process as the admin layer sees it (live values: ports are bound at start)."""

    @property
    def ready(self) -> bool: ...  # every listener is serving

    @property
    def advertised_host(self) -> str: ...

    @property
    def port(self) -> int: ...  # bound ports; 0 = that listener is off

    @property
    def tls_port(self) -> int: ...

    @property
    def web_port(self) -> int: ...

    @property
    def web_tls_port(self) -> int: ...

    @property
    def service_url(self) -> str: ...  # pulsar:// (pulsar+ssl:// when only TLS is served)

    @property
    def service_url_tls(self) -> str: ...  # "" when off

    @property
    def web_url(self) -> str: ...  # http:// (https:// when only HTTPS is served)

    @property
    def web_url_tls(self) -> str: ...  # "" when off

    @property
    def listeners(self) -> Mapping[str, Listener]: ...

    def listener(self, name: str | None) -> Listener | None: ...

    @property
    def connections(self) -> Collection[object]: ...  # the open client connections

    # Stop the broker as SIGTERM does (``brokers/shutdown``): its runner (``python -m broker``, BrokerThread) waits
    # for this; a program that runs a BrokerServer itself watches ``shutdown_requested``.
    def request_shutdown(self) -> None: ...

    @property
    def connections_created(self) -> int: ...

    @property
    def connections_closed(self) -> int: ...

    @property
    def connections_refused(self) -> int: ...

    @property
    def connections_throttled_by_buffer(self) -> int: ...

    @property
    def throttle_counts(self) -> ThrottleCounts: ...


@dataclass(frozen=True)
class AdminContext:
    """Everything an admin handler may reach, typed."""

    service: BrokerService
    metadata: BrokerMetadata
    config: BrokerConfig
    security: Security
    process: ServingProcess

    @property
    def cluster(self) -> str:
        """This broker's cluster (clusterName)."""
        return self.config.clusterName

    @property
    def broker_id(self) -> str:
        """host:port of the web service: Pulsar's broker id in admin answers."""
        return f"{self.process.advertised_host}:{self.process.web_port}"
