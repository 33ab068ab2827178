"""Broker-to-broker admin calls (Pulsar's ``pulsar().getAdminClient()``), for the operations over many topics that
cluster mode passes on to the owner of each bundle or partition: namespace clearBacklog / unsubscribe / unload /
delete, partitioned-stats and partitioned-internalStats, terminate/partitions, deleting a partitioned topic, creating
missing partitions, the calls made on each partition of a partitioned topic (its subscriptions, trim, compaction,
unload), listing non-persistent topics.

Credentials, as Pulsar's broker: its own, ``brokerClientAuthenticationPlugin`` / ``...Parameters`` (token or basic
become the Authorization header; tls a client certificate), with ``brokerClientTrustCertsFilePath`` /
``brokerClientCertificateFilePath`` / ``brokerClientKeyFilePath`` for HTTPS. Pulsar checks the caller's permission on
the broker it called and then calls the others as itself (a superuser). When no broker credentials are configured,
the caller's own Authorization header is carried instead, so that a cluster with authentication but without broker
credentials still works for a caller allowed everywhere.

Redirects (307, an owner that moved meanwhile; 301, 302, 303 and 308 as Pulsar's admin client follows them:
``REDIRECTS``) are followed here, at most ``MAX_REDIRECTS`` times, keeping the credentials (aiohttp drops the
Authorization header on a redirect to another port); any other 3xx is a failure (503), not a success. An error answer
of the other broker becomes ours (its status and reason); a broker that cannot be reached, or does not answer within
the call's time (``CALL_TIMEOUT_S``, redirects included), is a 503.

The TLS context of the calls over https is built once, and again only when its files change (``_ssl_context``).
"""

from __future__ import annotations

import asyncio
import json
import os
import ssl
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import aiohttp
from aiohttp import web
from yarl import URL

from broker.admin.common import HttpError
from broker.auth.tls import client_context
from broker.service.broker_service import broker_client_headers
from broker.service.peer_link import RemoteError
from broker.service.remote_producer import broker_client_credentials
from broker.topic_name import encode_local_name

if TYPE_CHECKING:
    from broker.config import BrokerConfig
    from broker.topic_name import TopicName

# How long one call to another broker may take (a namespace unload there closes every topic of a bundle).
CALL_TIMEOUT_S = 60.0
# Owners move (unload, failover) while a call is on its way: a few 307s in a row are normal, more is a loop (the
# async-http-client default maxRedirects of Pulsar's admin client).
MAX_REDIRECTS = 5
# The redirects Pulsar's admin client follows (AsyncHttpConnector.isRedirectStatusCode, with followRedirect off in
# async-http-client itself): 307 and 308 keep the method and body; 301, 302 and 303 turn a call other than GET, HEAD
# or OPTIONS into a GET without a body (executeRedirect, as browsers do). Any other 3xx is not followed: a failure.
REDIRECTS = frozenset({301, 302, 303, 307, 308})
SWITCH_TO_GET = frozenset({301, 302, 303})


def path_segment(value: str) -> str:
    """``value`` as one segment of a URL path: every reserved character percent-encoded, and so are the dots of a
    segment that is only dots (``..`` as a literal segment would climb one level wherever the URL is normalized:
    a subscription named ``..`` would turn ``.../subscription/../properties`` into the topic's ``.../properties``)."""
    if value in (".", ".."):
        return value.replace(".", "%2E")
    return quote(value, safe="")


def subscription_segment(subscription: str) -> str:
    """A subscription's name as the path segment of ``.../subscription/{sub}``, encoded as Pulsar's Java admin
    client encodes it (TopicsImpl: Codec.encode, then percent-encoded as a path segment), since Pulsar's
    PersistentTopics decodes it twice (as a path segment, then Codec.decode): ``s b+c`` is ``s%2Bb%252Bc``."""
    return path_segment(encode_local_name(subscription))


def topic_path(name: TopicName) -> str:
    """The admin v2 path of one topic (``/admin/v2/persistent/t/ns/local``), its local name URL-encoded."""
    return f"/admin/v2/{name.domain}/{name.tenant}/{name.namespace_part}/{path_segment(name.local_name)}"


class PeerAdmin:
    """One HTTP session for every call this broker makes to the others' admin API; closed with the web service."""

    def __init__(self, config: BrokerConfig) -> None:
        self._config = config
        self._session: aiohttp.ClientSession | None = None
        self._ssl: ssl.SSLContext | None = None
        self._ssl_stamp: tuple[tuple[str, tuple[int, int] | None], ...] = ()

    def _ssl_context(self) -> ssl.SSLContext:
        """The TLS context of the calls over https: built once, and again only when one of its files (trust
        certificates, certificate, key) has changed since (its modification time or size), as Pulsar's admin client
        refreshes its SSL context when the files change (PulsarSslFactory, checked every
        tlsCertRefreshCheckDurationSec there; here at each call, a stat of each file), or another client certificate
        is named (the authentication parameters, a dynamic setting)."""
        files = self._tls_files()
        stamp = tuple((f, _file_stamp(f)) for f in files)
        if self._ssl is None or stamp != self._ssl_stamp:
            self._ssl, self._ssl_stamp = self._build_ssl_context(), stamp
        return self._ssl

    def _client_cert(self) -> tuple[str, str] | None:
        """The client certificate and key: those the tls authentication plugin names, else the broker client's."""
        cfg = self._config
        try:
            _, _, cert = broker_client_credentials(cfg)
        except RemoteError:  # (refused at start by the broker service; a dynamic change is logged by the calls)
            cert = None
        return cert or ((cfg.brokerClientCertificateFilePath, cfg.brokerClientKeyFilePath)
                        if cfg.brokerClientCertificateFilePath and cfg.brokerClientKeyFilePath else None)

    def _tls_files(self) -> list[str]:
        cfg = self._config
        trust = cfg.brokerClientTrustCertsFilePath or cfg.tlsTrustCertsFilePath
        return [f for f in (trust, *(self._client_cert() or ())) if f]

    def _build_ssl_context(self) -> ssl.SSLContext:
        cfg = self._config
        # (Pulsar's broker clients do not verify host names by default)
        return client_context(cfg.brokerClientTrustCertsFilePath or cfg.tlsTrustCertsFilePath, check_hostname=False,
                              insecure=cfg.tlsAllowInsecureConnection, cert=self._client_cert())

    def headers(self, caller: web.Request | None) -> dict[str, str]:
        """The broker client's credentials as they are now (a token file read again, as Pulsar's token supplier
        does; a dynamic change seen), else the caller's."""
        try:
            authorization = broker_client_headers(self._config).get("Authorization")
        except RemoteError as exc:
            raise HttpError(500, f"the broker client's credentials cannot be used: {exc}") from None
        if authorization is not None:
            return {"Authorization": authorization}
        if caller is not None and "Authorization" in caller.headers:
            return {"Authorization": caller.headers["Authorization"]}
        return {}

    async def call(self, method: str, url: str, caller: web.Request | None = None, body: object = None,
                   headers: Mapping[str, str] | None = None, ssl_context: ssl.SSLContext | None = None) -> Any:
        """``method`` on another broker's admin ``url``: its JSON answer (None when empty). HttpError with the other
        broker's status and reason when it refuses; 503 when it cannot be reached, or has not answered within
        ``CALL_TIMEOUT_S``, redirects included (each hop had that time before: six hops, six times as long).
        ``headers``: the call's own (credentials for another cluster, a Content-Type for the body) instead of
        this broker's credentials. ``ssl_context``: the call's own TLS settings over https (another cluster's)
        instead of this broker's.

        ``url`` is sent exactly as given, already encoded (``path_segment``, ``urlencode``), and so is a redirect's
        Location: neither is decoded and normalized on the way (yarl would decode ``%2E%2E`` and drop it with the
        segment before, sending the call, with the broker's credentials, to another route)."""
        try:
            async with asyncio.timeout(CALL_TIMEOUT_S):
                return await self._call(method, url, dict(headers) if headers is not None else self.headers(caller),
                                        body, ssl_context)
        except TimeoutError:
            raise HttpError(503, f"{method} {url}: no answer within {CALL_TIMEOUT_S:g} s") from None

    async def _call(self, method: str, url: str, headers: dict[str, str], body: object,
                    ssl_context: ssl.SSLContext | None) -> Any:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=CALL_TIMEOUT_S))
        data = None if body is None else json.dumps(body).encode()
        if data is not None:
            headers.setdefault("Content-Type", "application/json")
        target = URL(url, encoded=True)
        for _ in range(MAX_REDIRECTS + 1):
            try:
                ssl_arg: ssl.SSLContext | bool = True
                if target.scheme == "https":
                    ssl_arg = ssl_context or self._ssl_context()
                async with self._session.request(method, target, headers=headers, data=data, ssl=ssl_arg,
                                                 allow_redirects=False) as answer:
                    if answer.status in REDIRECTS:
                        location = answer.headers.get("Location")
                        if not location:
                            raise HttpError(503, f"{method} {target}: a redirect ({answer.status}) without a Location")
                        target = target.join(URL(location, encoded=True))
                        if answer.status in SWITCH_TO_GET and method not in ("GET", "HEAD", "OPTIONS"):
                            method, data = "GET", None
                            headers.pop("Content-Type", None)
                        continue
                    text = await answer.text()
            except (aiohttp.ClientError, TimeoutError, OSError, ssl.SSLError) as exc:
                raise HttpError(503, f"{method} {target}: {exc or type(exc).__name__}") from None
            if answer.status >= 400:
                raise HttpError(answer.status, f"{method} {target}: {reason_of(text)}")
            if answer.status >= 300:  # (not a redirect: Pulsar's admin client fails it too; no answer to pass on)
                raise HttpError(503, f"{method} {target}: an unexpected answer {answer.status}")
            if not text:
                return None
            try:
                return json.loads(text)
            except ValueError:
                return text
        raise HttpError(503, f"{method} {url}: more than {MAX_REDIRECTS} redirects")

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def _file_stamp(path: str) -> tuple[int, int] | None:
    """(modification time, size) of a TLS file, None when it cannot be read (the context build then says why)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


def reason_of(text: str) -> str:
    """The ``reason`` of a Pulsar error body, else the body itself."""
    try:
        doc = json.loads(text)
    except ValueError:
        return text
    return str(doc.get("reason", text)) if isinstance(doc, dict) else text
