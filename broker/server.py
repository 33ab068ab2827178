"""The standalone broker process: binary protocol server + HTTP server around one BrokerService.

Each may listen twice: plain (brokerServicePort / webServicePort) and TLS (brokerServicePortTls /
webServicePortTls), on the same BrokerService; an empty port disables that listener.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

from broker.admin.context import AdminContext
from broker.admin.http import WebService
from broker.auth import Security
from broker.auth.tls import HANDSHAKE_TIMEOUT_S
from broker.cluster.data import BrokerUrls, ListenerUrls
from broker.config import BrokerConfig, ConfigError
from broker.connection import Connection, ThrottleCounts
from broker.listeners import Listener, parse_advertised_listeners, parse_bind_addresses
from broker.service.broker_service import BrokerService
from broker.service.periodic import PeriodicTask
from broker.service.remote_producer import own_broker_settings

log = logging.getLogger(__name__)

# How long a graceful stop waits for in-flight handler tasks before closing sockets anyway.
SHUTDOWN_GRACE_S = 5.0
# On shutdown, a closed connection's transport first sends what is queued for its client; those still sending
# after this long (a client that reads nothing) are cut.
SHUTDOWN_FLUSH_S = 1.0
# publish_buffer_room without a limit (maxMessagePublishBufferSizeInMB 0): more than any read holds.
_NO_LIMIT = 1 << 62


class BrokerServer:
    def __init__(self, config: BrokerConfig) -> None:
        config.check()  # every value in range (ConfigError), before anything is built on them
        self.config = config
        data_dir = Path(config.dataDir) if config.dataDir else None
        self.data_dir = data_dir
        self.service = BrokerService(config, data_dir)
        # TLS context, authentication and authorization; raises ConfigError before anything listens.
        self.security = Security(config, self.service.metadata)
        # Named listeners (broker.listeners) and the extra sockets opened for them.
        self.listeners, self.internal_listener = parse_advertised_listeners(config.advertisedListeners,
                                                                            config.internalListenerName)
        self.bind_addresses = parse_bind_addresses(config.bindAddresses, self.listeners)
        if any(b.tls for b in self.bind_addresses) and self.security.tls_context is None:
            raise ConfigError("bindAddresses: a pulsar+ssl address needs the broker's TLS settings "
                              "(brokerServicePortTls or webServicePortTls, and the certificate)")
        self.web = WebService(AdminContext(self.service, self.service.metadata, config, self.security, self))
        self.connections: set[Connection] = set()
        self._all_closed: asyncio.Event | None = None  # set by connection_closed once none is left (stop only)
        self._per_ip: dict[str, int] = {}
        # Broker-wide bytes of publishes not yet persisted, and the connections paused because of it.
        self.publish_buffer_bytes = 0
        self.publish_buffer_limit = config.maxMessagePublishBufferSizeInMB * 1024 * 1024
        self._buffer_paused: set[Connection] = set()
        self.service.dynamic_config.on_change(("maxMessagePublishBufferSizeInMB",), self._publish_buffer_limit_changed)
        self.connections_created = 0
        self.connections_closed = 0
        self.connections_refused = 0  # opened, then refused (brokerMaxConnections[PerIp])
        self.throttle_counts = ThrottleCounts()
        self._servers: list[asyncio.Server] = []
        # Set by request_shutdown (the admin API's brokers/shutdown): whoever runs the server stops it then, as on
        # SIGTERM (broker/__main__.py, broker/embedded.py).
        self.shutdown_requested = asyncio.Event()
        # Bound ports; 0 = that listener is off.
        self.port = 0
        self.tls_port = 0
        self.web_port = 0
        self.web_tls_port = 0
        # Live connections whose credentials expire (tokens) are re-checked by this task (broker.auth).
        self._auth_refresh = (PeriodicTask("auth-refresh", config.authenticationRefreshCheckSeconds,
                                           self._refresh_authentication)
                              if self.security.authentication.refreshes else None)
        self.started_at = 0.0

    # -- lifecycle ---------------------------------------------------------------------------------
    async def start(self) -> None:
        t0 = time.perf_counter()
        cfg = self.config
        cfg.report_unknown()
        if cfg.brokerServicePort is None and cfg.brokerServicePortTls is None:
            raise ConfigError("brokerServicePort and brokerServicePortTls are both empty: nothing to serve")
        await self.service.open()  # the metadata first: nothing is served without it
        loop = asyncio.get_running_loop()
        if cfg.brokerServicePort is not None:
            server = await loop.create_server(
                lambda: Connection(self), host=cfg.bindAddress, port=cfg.brokerServicePort,
                reuse_address=True, backlog=1024,
            )
            self._servers.append(server)
            self.port = server.sockets[0].getsockname()[1]
        if cfg.brokerServicePortTls is not None:
            server = await loop.create_server(
                lambda: Connection(self), host=cfg.bindAddress, port=cfg.brokerServicePortTls,
                reuse_address=True, backlog=1024, ssl=self.security.tls_context,
                ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S,
            )
            self._servers.append(server)
            self.tls_port = server.sockets[0].getsockname()[1]
        for bind in self.bind_addresses:
            server = await loop.create_server(
                lambda: Connection(self), host=bind.host, port=bind.port, reuse_address=True, backlog=1024,
                ssl=self.security.tls_context if bind.tls else None,
                ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S if bind.tls else None)
            self._servers.append(server)
        self.web_port, self.web_tls_port = await self.web.start(cfg.bindAddress, cfg.webServicePort,
                                                                cfg.webServicePortTls, self.security.tls_context)
        # Cluster mode (a ZooKeeper metadata store): register, run for leader, own bundles. Before this, lookups
        # answer ServiceNotReady (clients retry).
        await self.service.serve_as(self.advertised_urls(),
                                    lambda: own_broker_settings(self.config, self.port, self.tls_port))
        if self._auth_refresh is not None:
            self._auth_refresh.start()
        self.security.authentication.start()
        self.service.start()
        self.started_at = time.time()
        # Plain URLs first: tools parse "pulsar://host:port  http://host:port" from this line.
        urls = [self.service_url if self.port else "", self.web_url if self.web_port else "",
                self.service_url_tls, self.web_url_tls]
        log.info("broker ready in %.3f s: %s  (data dir %s, storage %s)", time.perf_counter() - t0,
                 "  ".join(u for u in urls if u), self.data_dir, cfg.managedLedgerStorage)

    @property
    def advertised_host(self) -> str:
        if self.config.advertisedAddress:
            return self.config.advertisedAddress
        bind = self.config.bindAddress
        return "127.0.0.1" if bind in ("0.0.0.0", "::", "") else bind

    @property
    def service_url(self) -> str:
        """pulsar:// URL, or the pulsar+ssl:// one when only TLS is served."""
        return f"pulsar://{self.advertised_host}:{self.port}" if self.port else self.service_url_tls

    @property
    def service_url_tls(self) -> str:
        return f"pulsar+ssl://{self.advertised_host}:{self.tls_port}" if self.tls_port else ""

    @property
    def web_url(self) -> str:
        """http:// URL, or the https:// one when only HTTPS is served."""
        return f"http://{self.advertised_host}:{self.web_port}" if self.web_port else self.web_url_tls

    @property
    def web_url_tls(self) -> str:
        return f"https://{self.advertised_host}:{self.web_tls_port}" if self.web_tls_port else ""

    def advertised_urls(self) -> BrokerUrls:
        """This broker as others see it: Pulsar's broker id (advertised host : web port) and its URLs."""
        listeners = {name: ListenerUrls(lst.url, lst.url_tls) for name, lst in self.listeners.items()}
        return BrokerUrls(f"{self.advertised_host}:{self.web_port or self.web_tls_port}",
                          f"pulsar://{self.advertised_host}:{self.port}" if self.port else None,
                          self.service_url_tls or None,
                          f"http://{self.advertised_host}:{self.web_port}" if self.web_port else None,
                          self.web_url_tls or None, listeners)

    def listener(self, name: str | None) -> Listener | None:
        """The listener a lookup names, or the internal one when it names none; None when the
        broker has no such listener (or none at all)."""
        return self.listeners.get(name or self.internal_listener or "")

    def request_shutdown(self) -> None:
        self.shutdown_requested.set()

    @property
    def ready(self) -> bool:
        return bool(self._servers) and all(s.is_serving() for s in self._servers)

    async def _refresh_authentication(self) -> None:
        for conn in list(self.connections):
            if not conn.closed:
                conn.cnx.refresh_authentication()

    async def stop(self) -> None:
        """Graceful: stop accepting, close client connections, flush and close storage."""
        if not self._servers:
            return
        servers, self._servers = self._servers, []
        for server in servers:
            server.close()
        # The heartbeat topic goes (Pulsar's HealthChecker.close), while this broker still owns it.
        if self.service.health_checker is not None:
            await self.service.health_checker.delete_topic()
        # Cluster mode: release the bundles first (their topics close, their clients move to other brokers) while
        # the connections are still up; standalone: nothing to do here.
        try:
            await self.service.ownership.close()
        except Exception as exc:  # (the session ends below anyway: the ownership nodes go with it)
            log.warning("shutdown: releasing the bundles failed: %s", exc)
        if self._auth_refresh is not None:
            await self._auth_refresh.stop()
        await self.security.authentication.stop()
        for conn in list(self.connections):
            conn.close()
        waits = [c.cnx.wait_tasks() for c in list(self.connections)]
        if waits:
            try:
                await asyncio.wait_for(asyncio.gather(*waits, return_exceptions=True), SHUTDOWN_GRACE_S)
            except TimeoutError:
                log.warning("shutdown: request handlers still running after %.0f s; closing anyway",
                            SHUTDOWN_GRACE_S)
        await self._cut_connections_left()
        for server in servers:
            await server.wait_closed()
        await self.web.stop()
        await self.service.close()
        log.info("broker stopped")

    async def _cut_connections_left(self) -> None:
        """Wait up to SHUTDOWN_FLUSH_S for the closed connections to end, then cut (abort) those still sending to a
        client that does not read. Else shutdown would wait for that client: asyncio's Server.wait_closed waits for
        every connection from Python 3.12 on (uvloop's does not). Pulsar's broker closes its channels at once."""
        if self.connections:
            self._all_closed = asyncio.Event()
            try:
                await asyncio.wait_for(self._all_closed.wait(), SHUTDOWN_FLUSH_S)
            except TimeoutError:
                pass
        for conn in list(self.connections):
            log.info("shutdown: cutting the connection of %s (its client did not read what was sent to it)",
                     conn.remote_address)
            conn.close(abort=True)

    # -- connection bookkeeping -----------------------------------------------------------------------
    def connection_opened(self, conn: Connection) -> None:
        self.connections.add(conn)
        self.connections_created += 1
        ip = conn.remote_address.rsplit(":", 1)[0]
        self._per_ip[ip] = self._per_ip.get(ip, 0) + 1

    def connection_refusal(self, ip: str) -> str | None:
        """Why a just-opened connection must be refused (brokerMaxConnections[PerIp]), else None."""
        cfg = self.config
        refusal = None
        if 0 < cfg.brokerMaxConnections < len(self.connections):
            refusal = "Reached the maximum number of connections"
        elif 0 < cfg.brokerMaxConnectionsPerIp < self._per_ip.get(ip, 0):
            refusal = "Reached the maximum number of connections from this address"
        if refusal is not None:
            self.connections_refused += 1
        return refusal

    @property
    def connections_throttled_by_buffer(self) -> int:
        """Connections not read because the broker-wide publish buffer is full."""
        return len(self._buffer_paused)

    def connection_closed(self, conn: Connection) -> None:
        if conn in self.connections:
            self.connections.discard(conn)
            self.connections_closed += 1
            ip = conn.remote_address.rsplit(":", 1)[0]
            left = self._per_ip.get(ip, 1) - 1
            if left:
                self._per_ip[ip] = left
            else:
                self._per_ip.pop(ip, None)
        self._buffer_paused.discard(conn)
        if self._all_closed is not None and not self.connections:
            self._all_closed.set()

    @property
    def publish_buffer_room(self) -> int:
        """Bytes publishers may still add before the buffer is over its limit (and pauses them)."""
        limit = self.publish_buffer_limit
        return limit - self.publish_buffer_bytes if limit > 0 else _NO_LIMIT

    def publish_buffer_add(self, conn: Connection, nbytes: int) -> None:
        """Track in-flight publish bytes; pause publishers above the limit, resume them at half."""
        self.publish_buffer_bytes += nbytes
        if nbytes > 0 and self.publish_buffer_bytes > self.publish_buffer_limit > 0:
            self._buffer_paused.add(conn)
            conn.set_paused_for_buffer(True)
        elif nbytes < 0 and self._buffer_paused and self.publish_buffer_bytes <= self.publish_buffer_limit // 2:
            self._resume_buffer_paused()

    def _resume_buffer_paused(self) -> None:
        for c in self._buffer_paused:
            c.set_paused_for_buffer(False)
        self._buffer_paused.clear()

    def _publish_buffer_limit_changed(self) -> None:
        """maxMessagePublishBufferSizeInMB changed while the broker runs (a dynamic setting): the publishers it
        paused are read again at once when the buffer is at or under half the new limit, or there is none; a lower
        limit pauses them at their next publish over it."""
        self.publish_buffer_limit = self.config.maxMessagePublishBufferSizeInMB * 1024 * 1024
        if self._buffer_paused and (self.publish_buffer_limit <= 0
                                    or self.publish_buffer_bytes <= self.publish_buffer_limit // 2):
            self._resume_buffer_paused()
