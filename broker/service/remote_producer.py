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

import json
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from broker.auth.tls import client_context
from broker.protocol import client_commands
from broker.protocol import pulsar_api_pb2 as pb
from broker.protocol.frames import Frame
from broker.service.peer_link import BrokerLink, RemoteError
from broker.version import __version__

if TYPE_CHECKING:
    from broker.config import BrokerConfig

T = pb.BaseCommand.Type
CLIENT_VERSION = f"pulsar-py-broker-replicator/{__version__}"
REQUEST_TIMEOUT_S = 10.0  # for the lookups, the PRODUCER and a schema's registration
PRODUCER_ID = 1


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


def own_broker_settings(cfg: BrokerConfig, port: int, tls_port: int) -> RemoteSettings:
    """How a client inside the broker (the WebSocket service's sessions, the health check) reaches this broker, as
    Pulsar's internal client does: the broker client's credentials and TLS settings, the plain port unless
    ``brokerClientTlsEnabled`` (or only TLS is served), at the bind address (loopback for a wildcard one). Read for
    each new connection: the settings are dynamic. RemoteError when they cannot be used."""
    plugin, params = cfg.brokerClientAuthenticationPlugin, cfg.brokerClientAuthenticationParameters
    _, _, client_cert = client_credentials(plugin, params)  # (unusable: an error now; sent as read then)
    tls = cfg.brokerClientTlsEnabled or not port
    host = cfg.bindAddress if cfg.bindAddress not in ("", "0.0.0.0", "::") else "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    url = f"pulsar+ssl://{host}:{tls_port}" if tls else f"pulsar://{host}:{port}"
    context = cluster_tls_context(cfg, cfg.clusterName, {}, client_cert) if tls else None
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


class RemoteProducer:
    """One producer on a remote cluster's broker, over a connection of its own to the topic's owner (see the module
    docstring); RemoteError (a ``peer_link.LinkError``) when refused, ``on_lost`` once the connection or the
    producer is lost."""

    def __init__(self, settings: RemoteSettings, topic: str, producer_name: str,
                 on_receipt: Callable[[int], None], on_lost: Callable[[BaseException], None]) -> None:
        self.topic = topic
        self.producer_name = producer_name
        self._on_receipt = on_receipt
        self._link = BrokerLink(settings, topic, CLIENT_VERSION, REQUEST_TIMEOUT_S, on_command=self._command,
                                on_lost=on_lost)

    @property
    def url(self) -> str:
        """The broker it produces on (its service URL until connected)."""
        return self._link.url

    async def connect(self) -> None:
        """Connect to the broker that owns the topic, then create the producer there."""
        await self._link.open()
        await self._link.request(*client_commands.producer(self.topic, PRODUCER_ID, self.producer_name))

    def _command(self, frame: Frame) -> None:
        cmd = frame.command
        if cmd.type == T.SEND_RECEIPT:
            self._on_receipt(cmd.send_receipt.sequence_id)
        elif cmd.type == T.SEND_ERROR:
            self._link.lost(RemoteError(f"send refused: {pb.ServerError.Name(cmd.send_error.error)}: "
                                        f"{cmd.send_error.message}"))
        elif cmd.type == T.CLOSE_PRODUCER:
            self._link.lost(RemoteError("the remote broker closed the producer"))

    async def schema_version(self, schema: pb.Schema) -> bytes:
        """The remote topic's version of ``schema``, registering it there if need be
        (GET_OR_CREATE_SCHEMA); RemoteError when the remote refuses it."""
        cmd = pb.BaseCommand(type=T.GET_OR_CREATE_SCHEMA)
        g = cmd.getOrCreateSchema
        g.topic = self.topic
        g.schema.CopyFrom(schema)
        r = (await self._link.request(cmd, g)).getOrCreateSchemaResponse
        if r.HasField("error_code"):
            raise RemoteError(f"schema refused: {pb.ServerError.Name(r.error_code)}: {r.error_message}")
        return r.schema_version

    def send(self, sequence_id: int, num_messages: int, payload: bytes, is_chunk: bool) -> None:
        self._link.write(client_commands.send(PRODUCER_ID, sequence_id, num_messages, payload, is_chunk=is_chunk))

    async def close(self) -> None:
        await self._link.close()
