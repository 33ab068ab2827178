"""What the command handler (``ServerCnx``) needs from the TCP connection under it.

``broker.connection.Connection`` meets these protocols; the service layer names only them, so it
does not import the connection module (which imports the service: the connection is the floor
above, routing decoded commands down to ``ServerCnx``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from broker.auth import Security
from broker.listeners import Listener


class ServingBroker(Protocol):
    """The broker process as a connection sees it: its security (TLS, authentication,
    authorization) and its bound binary ports and named listeners, as a LOOKUP answers them."""

    @property
    def security(self) -> Security: ...

    @property
    def port(self) -> int: ...  # 0: the plain listener is off

    @property
    def tls_port(self) -> int: ...  # 0: the TLS listener is off

    @property
    def listeners(self) -> Mapping[str, Listener]: ...

    def listener(self, name: str | None) -> Listener | None: ...


class WireConnection(Protocol):
    """One client's TCP connection: writes (coalesced per loop turn), close, and the producer
    backpressure hooks (pause reading past the pending-send limits or while rate-throttled)."""

    @property
    def writable(self) -> bool: ...  # below the transport's write high-water mark

    @property
    def closed(self) -> bool: ...

    @property
    def remote_address(self) -> str: ...

    @property
    def local_host(self) -> str: ...

    @property
    def peer_cert(self) -> dict[str, Any] | None: ...  # (ssl's getpeercert() dict)

    @property
    def server(self) -> ServingBroker: ...

    def write(self, data: bytes) -> None: ...

    def write_many(self, frames: list[bytes]) -> None: ...

    def close(self) -> None: ...

    async def check_liveness(self) -> bool | None: ...  # (a PING answered or not: connection.py)

    def sends_started(self, count: int, nbytes: int) -> None: ...

    def sends_finished(self, count: int, nbytes: int) -> None: ...

    def set_rate_throttled(self, delta: int) -> None: ...
