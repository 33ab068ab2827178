"""The replicator's client side of the binary protocol: one producer on a remote cluster's broker.

It looks the topic up from the cluster's broker service URL (following redirects, as the official
client does), connects to the owning broker with TLS and credentials when the cluster or the
broker settings ask for them, creates the producer and sends stored entries; receipts go back to
the replicator in order, keep-alive pings and authentication challenges are answered.

Where the settings come from (as in Pulsar's replication client): the cluster data's
``brokerClientTlsEnabled`` / ``authenticationPlugin`` / ``authenticationParameters`` /
``brokerClientTrustCertsFilePath`` / ``brokerClientCertificateFilePath`` /
``brokerClientKeyFilePath`` / ``tlsAllowInsecureConnection`` when set, else the broker's keys of
the same names (``brokerClientAuthenticationPlugin`` / ``...Parameters``). With TLS the cluster's
``brokerServiceUrlTls`` is used. Authentication plugins: token (``token:<jwt>``, ``file:<path>``
or ``{"token": ...}``), basic (``{"userId": ..., "password": ...}``) and tls (the client
certificate, ``{"tlsCertFile": ..., "tlsKeyFile": ...}`` or ``tlsCertFile:...,tlsKeyFile:...``).
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from broker.auth.tls import client_context
from broker.protocol import commands
from broker.protocol import pulsar_api_pb2 as pb
from broker.service.peer_link import CommandReader, close_writer, connect_command, keepalive_reply
from broker.version import __version__

if TYPE_CHECKING:
    from broker.config import BrokerConfig

T = pb.BaseCommand.Type
CLIENT_VERSION = f"pulsar-py-broker-replicator/{__version__}"
CONNECT_TIMEOUT_S = 10.0
MAX_LOOKUP_HOPS = 5


class RemoteError(Exception):
    """The remote broker refused or broke off (the replicator reconnects after a backoff)."""


@dataclass(frozen=True)
class RemoteSettings:
    """How to reach a remote cluster: its broker service URL, TLS, and the authentication plugin and parameters of
    the credentials (read when sent: ``credentials``)."""

    url: str
    ssl_context: ssl.SSLContext | None
    auth_plugin: str = ""
    auth_params: str = ""

    def credentials(self) -> tuple[str | None, bytes]:
        """(auth method, auth data) as they are now: a token file is read again (``peer_link.Credentials``);
        RemoteError when they cannot be used."""
        method, data, _ = client_credentials(self.auth_plugin, self.auth_params)
        return method, data


def cluster_setting(cluster: Mapping[str, Any], cfg: BrokerConfig, key: str) -> Any:
    """The cluster data's value of ``key`` when set, else the broker's."""
    value = cluster.get(key)
    return value if value not in (None, "") else getattr(cfg, key)


def remote_settings(cfg: BrokerConfig, name: str, cluster: Mapping[str, Any]) -> RemoteSettings:
    """The settings for reaching cluster ``name`` (its cluster data ``cluster``); RemoteError when
    they are incomplete or unusable."""
    tls = bool(cluster_setting(cluster, cfg, "brokerClientTlsEnabled"))
    url = cluster.get("brokerServiceUrlTls" if tls else "brokerServiceUrl")
    if not url:
        raise RemoteError(f"cluster {name} has no {'brokerServiceUrlTls' if tls else 'brokerServiceUrl'}")
    if cluster.get("authenticationPlugin"):
        plugin, params = cluster["authenticationPlugin"], cluster.get("authenticationParameters", "")
    else:
        plugin, params = cfg.brokerClientAuthenticationPlugin, cfg.brokerClientAuthenticationParameters
    method, _, client_cert = client_credentials(plugin, params)  # (unusable: an error now; sent as read then)
    context = None
    if tls:
        context = cluster_tls_context(cfg, name, cluster, client_cert)
    elif method == "tls":
        raise RemoteError(f"cluster {name}: tls authentication needs brokerClientTlsEnabled")
    return RemoteSettings(url, context, plugin, params)


def cluster_tls_context(cfg: BrokerConfig, name: str, cluster: Mapping[str, Any],
                        client_cert: tuple[str, str] | None) -> ssl.SSLContext:
    """The TLS context towards cluster ``name``: its cluster data's trust certificates, client certificate and key,
    and ``tlsAllowInsecureConnection``, each else the broker's (``client_cert``: the one its tls authentication names,
    first); RemoteError when they cannot be used."""
    try:
        cert = client_cert or (cluster_setting(cluster, cfg, "brokerClientCertificateFilePath"),
                               cluster_setting(cluster, cfg, "brokerClientKeyFilePath"))
        # (Pulsar's broker clients do not verify host names by default)
        return client_context(cluster_setting(cluster, cfg, "brokerClientTrustCertsFilePath")
                              or cfg.tlsTrustCertsFilePath, check_hostname=False,
                              insecure=bool(cluster_setting(cluster, cfg, "tlsAllowInsecureConnection")),
                              cert=(cert[0], cert[1]) if cert[0] and cert[1] else None)
    except (OSError, ssl.SSLError) as exc:
        raise RemoteError(f"TLS settings for cluster {name}: {exc}") from None


def client_credentials(plugin: str, params: str) -> tuple[str | None, bytes, tuple[str, str] | None]:
    """(auth method name, auth data, client certificate and key) for an authentication plugin
    (Pulsar's client class names or tls / token / basic); RemoteError for others."""
    kind = plugin_kind(plugin)
    if kind is None:
        return None, b"", None
    if kind == "token":
        return "token", _token(params).encode(), None
    if kind == "basic":
        doc = _params(params)
        return "basic", f"{doc.get('userId', '')}:{doc.get('password', '')}".encode(), None
    doc = _params(params)  # (tls)
    if not doc.get("tlsCertFile") or not doc.get("tlsKeyFile"):
        raise RemoteError("tls authentication needs tlsCertFile and tlsKeyFile")
    return "tls", b"", (doc["tlsCertFile"], doc["tlsKeyFile"])


def broker_client_credentials(cfg: BrokerConfig) -> tuple[str | None, bytes, tuple[str, str] | None]:
    """``client_credentials`` of the broker client's own plugin and parameters, as they are now (a dynamic setting;
    a token file read again)."""
    return client_credentials(cfg.brokerClientAuthenticationPlugin, cfg.brokerClientAuthenticationParameters)


def plugin_kind(plugin: str) -> str | None:
    """token, basic or tls for an authentication plugin (those words, or Pulsar's client class names); None for no
    credentials (empty, or Pulsar's AuthenticationDisabled, its default); RemoteError for any other."""
    if not plugin:
        return None
    kind = plugin.rsplit(".", 1)[-1].lower().removeprefix("authentication")
    if kind == "disabled":
        return None
    if kind not in ("token", "basic", "tls"):
        raise RemoteError(f"unsupported authentication plugin {plugin!r} (token, basic or tls)")
    return kind


def _params(params: str) -> dict[str, str]:
    """Plugin parameters as JSON or ``key:value,key:value``."""
    params = params.strip()
    if params.startswith("{"):
        try:
            doc = json.loads(params)
        except ValueError:
            raise RemoteError("authentication parameters are not valid JSON") from None
        return {str(k): str(v) for k, v in doc.items()}
    return dict(item.split(":", 1) for item in params.split(",") if ":" in item)


def _token(params: str) -> str:
    params = params.strip()
    if params.startswith("{"):
        return _params(params).get("token", "")
    if params.startswith("token:"):
        return params[len("token:"):]
    if params.startswith("file:"):
        path = params[len("file:"):]
        path = path[2:] if path.startswith("//") else path
        try:
            return Path(path).read_text().strip()
        except OSError as exc:
            raise RemoteError(f"token file {path}: {exc}") from None
    return params


Address = tuple[str, int, bool]  # host, port, TLS


def _addresses(url: str) -> list[Address]:
    """(host, port, TLS) of each broker a pulsar:// or pulsar+ssl:// URL names: Pulsar's service
    URLs may name several (``pulsar://host1:6650,host2:6650``), as a cluster's brokerServiceUrl
    may. RemoteError for a URL that cannot be used."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in ("pulsar", "pulsar+ssl"):
        raise RemoteError(f"unsupported broker service URL {url!r}")
    tls = scheme == "pulsar+ssl"
    out = []
    for host_port in rest.split("/", 1)[0].split(","):
        try:
            parsed = urlparse(f"{scheme}://{host_port.strip()}")
            host, port = parsed.hostname, parsed.port
        except ValueError as exc:  # (a port that is not a number, or out of range)
            raise RemoteError(f"unsupported broker service URL {url!r}: {exc}") from None
        if not host:
            raise RemoteError(f"unsupported broker service URL {url!r}")
        out.append((host, port or (6651 if tls else 6650), tls))
    return out


def _address(url: str) -> Address:
    """The first broker of a service URL (txn_buffer_client.py's single broker URLs)."""
    return _addresses(url)[0]


class RemoteProducer:
    """One producer on a remote cluster's broker, over its own connection (see the module
    docstring)."""

    def __init__(self, settings: RemoteSettings, topic: str, producer_name: str,
                 on_receipt: Callable[[int], None], on_lost: Callable[[BaseException], None]) -> None:
        self.settings = settings
        self.url = settings.url
        self.topic = topic
        self.producer_name = producer_name
        self._on_receipt = on_receipt
        self._on_lost = on_lost
        self._writer: asyncio.StreamWriter | None = None
        self._connected_to: Address | None = None  # the broker of the URL this connection went to
        self._reader_task: asyncio.Task[None] | None = None
        # Requests on the producer's connection (schema registrations): request id -> answer.
        self._requests: dict[int, asyncio.Future[pb.BaseCommand]] = {}
        self._next_request = 10
        self.closed = False

    async def connect(self) -> None:
        """Connect to the broker that owns the topic (found by LOOKUP, following redirects as
        the official client does), then create the producer there."""
        authoritative = False
        for _ in range(MAX_LOOKUP_HOPS):
            reader = await self._open()
            lookup = pb.BaseCommand(type=T.LOOKUP)
            lookup.lookupTopic.topic, lookup.lookupTopic.request_id = self.topic, 2
            lookup.lookupTopic.authoritative = authoritative
            self._write(commands.frame(lookup))
            r = (await self._expect(reader, T.LOOKUP_RESPONSE)).lookupTopicResponse
            if r.response == pb.CommandLookupTopicResponse.Failed:
                raise RemoteError(f"lookup failed: {pb.ServerError.Name(r.error)}: {r.message}")
            owner = (r.brokerServiceUrlTls if self.settings.ssl_context is not None else r.brokerServiceUrl) or self.url
            if r.response == pb.CommandLookupTopicResponse.Connect and (
                    _addresses(owner)[0] == self._connected_to or r.proxy_through_service_url):
                break
            await self._close_connection()
            self.url = owner
            if r.response == pb.CommandLookupTopicResponse.Connect:
                reader = await self._open()
                break
            authoritative = r.authoritative  # a redirect: ask the broker it names
        else:
            raise RemoteError(f"lookup of {self.topic} redirected more than {MAX_LOOKUP_HOPS} times")
        producer = pb.BaseCommand(type=T.PRODUCER)
        p = producer.producer
        p.topic, p.producer_id, p.request_id, p.producer_name = self.topic, 1, 1, self.producer_name
        self._write(commands.frame(producer))
        await self._expect(reader, T.PRODUCER_SUCCESS)
        self._reader_task = asyncio.get_running_loop().create_task(self._read(reader))

    async def _open(self) -> CommandReader:
        """A new connection to ``self.url`` (the first of its brokers that answers, as Pulsar's
        client tries a service URL's hosts in turn), past CONNECT / CONNECTED."""
        addresses = _addresses(self.url)
        for i, (host, port, tls) in enumerate(addresses):
            context = self.settings.ssl_context
            if tls and context is None:
                context = client_context()
            try:
                async with asyncio.timeout(CONNECT_TIMEOUT_S):  # (not wait_for: on 3.11 it can swallow a cancel)
                    reader, self._writer = await asyncio.open_connection(host, port, ssl=context if tls else None)
            except (OSError, TimeoutError):
                if i == len(addresses) - 1:
                    raise
                continue
            self._connected_to = (host, port, tls)
            break
        commands_in = CommandReader(reader, lambda: RemoteError("connection closed by the remote broker"))
        self._write(connect_command(CLIENT_VERSION, self.settings.credentials))
        await self._expect(commands_in, T.CONNECTED)
        return commands_in

    def _write(self, data: bytes) -> None:
        writer = self._writer
        if writer is None or writer.is_closing():
            # (The connection went away and its loss is about to be reported, or was.)
            raise RemoteError("connection to the remote broker is closed")
        writer.write(data)

    async def _expect(self, reader: CommandReader, wanted: int) -> pb.BaseCommand:
        while True:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                cmd = await reader.next_command()
            if cmd.type == wanted:
                if cmd.type != T.PRODUCER_SUCCESS or cmd.producer_success.producer_ready:
                    return cmd
                continue  # (an exclusive producer waiting: not used here)
            if cmd.type == T.ERROR:
                raise RemoteError(f"{pb.ServerError.Name(cmd.error.error)}: {cmd.error.message}")
            self._answer(cmd)

    def _answer(self, cmd: pb.BaseCommand) -> None:
        """Keep-alive pings and authentication challenges (the credentials as they are now)."""
        reply = keepalive_reply(cmd, CLIENT_VERSION, self.settings.credentials)
        if reply is not None:
            self._write(reply)

    async def _read(self, reader: CommandReader) -> None:
        try:
            while True:
                cmd = await reader.next_command()
                if cmd.type == T.SEND_RECEIPT:
                    self._on_receipt(cmd.send_receipt.sequence_id)
                elif cmd.type == T.SEND_ERROR:
                    raise RemoteError(f"send refused: {pb.ServerError.Name(cmd.send_error.error)}: "
                                      f"{cmd.send_error.message}")
                elif cmd.type == T.CLOSE_PRODUCER:
                    raise RemoteError("the remote broker closed the producer")
                elif cmd.type == T.GET_OR_CREATE_SCHEMA_RESPONSE:
                    waiter = self._requests.pop(cmd.getOrCreateSchemaResponse.request_id, None)
                    if waiter is not None and not waiter.done():
                        waiter.set_result(cmd)
                else:
                    self._answer(cmd)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # (OSError, RemoteError, ProtocolError, or anything: the link is lost)
            if self._writer is not None:
                self._writer.close()  # half-open or not, nothing more is written to it
            for waiter in self._requests.values():
                if not waiter.done():
                    waiter.set_exception(RemoteError(f"connection lost: {exc}"))
            self._requests.clear()
            if not self.closed:
                self._on_lost(exc)

    async def schema_version(self, schema: pb.Schema) -> bytes:
        """The remote topic's version of ``schema``, registering it there if need be
        (GET_OR_CREATE_SCHEMA); RemoteError when the remote refuses it."""
        request_id = self._next_request
        self._next_request += 1
        cmd = pb.BaseCommand(type=T.GET_OR_CREATE_SCHEMA)
        g = cmd.getOrCreateSchema
        g.request_id, g.topic = request_id, self.topic
        g.schema.CopyFrom(schema)
        waiter: asyncio.Future[pb.BaseCommand] = asyncio.get_running_loop().create_future()
        self._requests[request_id] = waiter
        self._write(commands.frame(cmd))
        async with asyncio.timeout(CONNECT_TIMEOUT_S):
            r = (await waiter).getOrCreateSchemaResponse
        if r.HasField("error_code"):
            raise RemoteError(f"schema refused: {pb.ServerError.Name(r.error_code)}: {r.error_message}")
        return r.schema_version

    def send(self, sequence_id: int, num_messages: int, payload: bytes, is_chunk: bool) -> None:
        cmd = pb.BaseCommand(type=T.SEND)
        s = cmd.send
        s.producer_id, s.sequence_id, s.num_messages = 1, sequence_id, num_messages
        if is_chunk:
            s.is_chunk = True
        self._write(commands.frame_with_payload(cmd, payload))

    async def close(self) -> None:
        self.closed = True
        try:
            if self._reader_task is not None:
                self._reader_task.cancel()
                await asyncio.gather(self._reader_task, return_exceptions=True)
        finally:
            # (Also when this close is cancelled: the replicator's own close cancels its loop, which
            # may be here. A connection left open keeps the producer on the remote broker, which
            # then refuses the next one of that name as busy.)
            writer = self._writer
            if writer is not None and not writer.is_closing():
                writer.close()
        await self._close_connection()

    async def _close_connection(self) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            await close_writer(writer)
