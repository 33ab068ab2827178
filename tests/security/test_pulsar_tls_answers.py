"""TLS client certificates as credentials (AuthenticationProviderTls: the role is the certificate's CN), against
Apache Pulsar 4.0.7's own answers.

A real Pulsar standalone (cluster/apache_pulsar.py) and our broker get the settings of
tests/security/test_pulsar_auth_answers.py with the tls provider added, in three TLS configurations (one Pulsar start
each: neither key is dynamic in Pulsar; the three that give a client certificate another meaning):

- ``verified``: ``tlsRequireTrustedClientCertOnConnect=false``, Pulsar's default: a certificate is asked for, not
  required; one that is sent must chain to ``tlsTrustCertsFilePath``;
- ``required``: ``tlsRequireTrustedClientCertOnConnect=true``: no handshake without a trusted certificate (and the
  token provider listed first, where the others list tls first: which credentials count when a request has both);
- ``insecure``: ``tlsAllowInsecureConnection=true``: the broker trusts any certificate.

Both get tenant ``acme``, namespace ``acme/ns`` with ``produce`` granted to the role ``tls-client`` and the topic
``acme/ns/t``. Clients present certificates from the test CA (CN ``tls-client``, the super user ``admin``, a role
with no grant, no CN, expired, a CN with a comma, two CNs), one from another CA, the broker's own (made for servers
only) or none, and:

1. on pulsar+ssl with raw frames: CONNECT with the method ``tls`` (and a token, no method; ``tls`` on the plain port),
   then a LOOKUP and a PRODUCER on the topic;
2. the official Python client with ``pulsar.AuthenticationTLS`` (or no authentication): whether it produces;
3. HTTPS admin calls: a super-user call, the namespace's topic list (a produce grant allows it), with a certificate
   and, for two, a bearer token too; the super-user call's refusal names the role a certificate gives.

Each answer is what a client acts on: a refused TLS handshake, the frame's type and error code and whether the
connection then closes, the HTTP status and JSON reason, the official client's exception. ``DIFFERENCES`` lists where
ours answers otherwise on purpose, with the reason (each must still differ). Timing is never compared.

Cost: three Pulsar standalone starts (5-60 s each), then about 20 s of calls per broker and configuration (the
official client's refused cases wait for its operation timeout, all at once).
"""

from __future__ import annotations

import asyncio
import http.client
import ssl
import urllib.error
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pulsar
import pytest

from broker.protocol import pulsar_api_pb2 as pb
from tests.security.conftest import SUPER_USER, token
from tests.security.pki import CLIENT_ROLE, Pki, client_certificate
from tests.security.test_pulsar_auth_answers import SERVER_PAGES, Answers, Endpoints, admin, ask_both, call, summary
from tests.security.test_pulsar_refresh_answers import Session
from tests.security.test_wire import connect_cmd
from tests.transactions.client import T

pytestmark = [pytest.mark.apache_pulsar, pytest.mark.timeout(900)]

TLS_PROVIDER = "org.apache.pulsar.broker.authentication.AuthenticationProviderTls"
TOKEN_PROVIDER = "org.apache.pulsar.broker.authentication.AuthenticationProviderToken"
TENANT = "acme"
NS = f"{TENANT}/ns"
TOPIC = f"persistent://{NS}/t"
STRANGER = "stranger"  # a role with no grant
WAIT_S = 10.0  # an answer that should come
CLOSE_WAIT_S = 5.0  # how long a refused connection is watched for the broker to close it (never asserted on time)
CLIENT_TIMEOUT_S = 10  # the official client's operation timeout: how long a refused client retries before it gives up
REFUSED = "refused at the TLS handshake"

CLOSED = "closed with no TLS alert"  # (and no frame, no HTTP answer)
TLS_FIRST = {"authenticationProviders": f"{TLS_PROVIDER},{TOKEN_PROVIDER}"}
CONFIGS: dict[str, dict[str, Any]] = {
    "verified": {**TLS_FIRST, "tlsRequireTrustedClientCertOnConnect": False},
    # (the token provider first here: which credentials of a request with both a certificate and a token count)
    "required": {"authenticationProviders": f"{TOKEN_PROVIDER},{TLS_PROVIDER}",
                 "tlsRequireTrustedClientCertOnConnect": True},
    "insecure": {**TLS_FIRST, "tlsAllowInsecureConnection": True},
}

Cert = tuple[Path, Path] | None  # (certificate, key) or none


def certificates(pki: Pki) -> dict[str, Cert]:
    """The client certificates by name (made once per PKI: the files are written next to it)."""
    if not (pki.dir / "expired-cert.pem").exists():
        client_certificate(pki, "super-user", SUPER_USER)
        client_certificate(pki, "no-grants", STRANGER)
        client_certificate(pki, "no-cn", None)
        client_certificate(pki, "expired", CLIENT_ROLE, expired=True)
        client_certificate(pki, "comma", "tls, client")
        client_certificate(pki, "two-cns", ("outer", "inner"))

    def pair(name: str) -> tuple[Path, Path]:
        return pki.dir / f"{name}-cert.pem", pki.dir / f"{name}-key.pem"

    return {
        "granted": (pki.client_cert, pki.client_key),  # CN tls-client: produce on NS
        "super_user": pair("super-user"),
        "no_grants": pair("no-grants"),
        "no_cn": pair("no-cn"),
        "expired": pair("expired"),
        "other_ca": (pki.rogue_cert, pki.rogue_key),  # CN tls-client, from a CA the brokers do not trust
        "server_only": (pki.server_cert, pki.server_key),  # the broker's own: extended key usage serverAuth only
        "none": None,
        "cn_with_a_comma": pair("comma"),  # CN "tls, client"
        "two_cns": pair("two-cns"),  # CN=outer, then CN=inner
    }


def client_context(pki: Pki, cert: Cert) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki.ca_cert))
    if cert is not None:
        ctx.load_cert_chain(str(cert[0]), str(cert[1]))
    return ctx


def tls_refusal(exc: BaseException) -> str | None:
    """The TLS alert (or error) of an exception, or of the one it wraps; None when it is no TLS error."""
    cause: object = exc
    while isinstance(cause, BaseException):
        if isinstance(cause, ssl.SSLError):
            return str(cause.reason or cause)
        cause = cause.reason if isinstance(cause, urllib.error.URLError) else cause.__cause__
    return None


# -- 1. the binary protocol ------------------------------------------------------------------------------------------
async def wire_case(e: Endpoints, cert: Cert, cmd: pb.BaseCommand, tls: bool = True) -> tuple[tuple[str, ...], str]:
    """A connection with ``cert`` (on the TLS port, or the plain one), ``cmd``; then, once CONNECTED, a LOOKUP and a
    PRODUCER on TOPIC. What the client saw, and notes for a failure's explanation (the TLS alert, ERRORs' words)."""
    ctx = client_context(e.pki, cert) if tls else None
    try:
        r, w = await asyncio.wait_for(asyncio.open_connection(
            "127.0.0.1", e.tls_port if tls else e.port, ssl=ctx, server_hostname="localhost" if tls else None), WAIT_S)
    except (ssl.SSLError, ConnectionError) as exc:  # (TLS 1.2: the client learns of a refusal in its handshake)
        return (REFUSED,), str(tls_refusal(exc) or repr(exc))
    s = Session(r, w)
    try:
        s.send(cmd)
        first = await s.seen()
        if first == "closed":  # (before any frame: the handshake failed, and no alert said why)
            return (CLOSED,), ""
        if first != "CONNECTED":
            return (first, *await s.until_closed(CLOSE_WAIT_S)), " | ".join(s.notes)
        looked = await s.lookup(TOPIC)
        producer = pb.BaseCommand(type=T.PRODUCER)
        producer.producer.topic, producer.producer.producer_id = TOPIC, 1
        return (first, looked, await s.request(producer, producer.producer)), " | ".join(s.notes)
    except ssl.SSLError as exc:  # (TLS 1.3: the server's alert comes after the client's side of the handshake)
        return (REFUSED,), str(tls_refusal(exc))
    finally:
        try:
            await s.close()
        except ssl.SSLError:  # (the alert, again)
            pass


WireCase = tuple[str, Callable[[], pb.BaseCommand], bool]  # (certificate name, CONNECT, on the TLS port)
CERT_NAMES = ("granted", "super_user", "no_grants", "no_cn", "expired", "other_ca", "server_only", "none")
WIRE_CASES: dict[str, WireCase] = {
    **{f"{name} certificate, method tls": (name, lambda: connect_cmd("tls"), True) for name in CERT_NAMES},
    "granted certificate, token of a role with no grant": (
        "granted", lambda: connect_cmd("token", token(STRANGER).encode()), True),
    "no certificate, token of the super user": ("none", lambda: connect_cmd("token", token(SUPER_USER).encode()), True),
    "granted certificate, no method": ("granted", lambda: connect_cmd(), True),
    "method tls on the plain port": ("none", lambda: connect_cmd("tls"), False),
}


# -- 2. the official client ------------------------------------------------------------------------------------------
OFFICIAL_CERTS = ("granted", "no_grants", "expired", "other_ca", "none")


def official_client(e: Endpoints, cert: Cert) -> str:
    """pulsar-client over pulsar+ssl with AuthenticationTLS(cert) (none: no authentication): "sent", or the
    exception's type (a refused connection is retried until the operation timeout)."""
    auth = pulsar.AuthenticationTLS(str(cert[0]), str(cert[1])) if cert is not None else None
    client = pulsar.Client(f"pulsar+ssl://127.0.0.1:{e.tls_port}", tls_trust_certs_file_path=str(e.pki.ca_cert),
                           authentication=auth, operation_timeout_seconds=CLIENT_TIMEOUT_S)
    try:
        producer = client.create_producer(TOPIC)
        producer.send(b"m")
        return "sent"
    except Exception as exc:  # (the answer is which exception)
        return type(exc).__name__
    finally:
        client.close()


# -- 3. HTTPS ----------------------------------------------------------------------------------------------------------
HTTP_CALLS = {
    "super-user call": "/admin/v2/tenants",
    "topics of the namespace": f"/admin/v2/persistent/{NS}",
}
# The role a certificate gives shows in the super-user call's refusal ("... clientAppId [<role>] ...").
ROLE_CERTS = ("cn_with_a_comma", "two_cns")
HTTP_WITH_TOKEN = {  # (certificate, the bearer token's role)
    "granted certificate and the super user's token": ("granted", SUPER_USER),
    "super_user certificate and the token of a role with no grant": ("super_user", STRANGER),
}


def https(e: Endpoints, cert: Cert, path: str, role: str | None = None) -> tuple[Any, ...]:
    try:
        return summary(call(e.web_url_tls, "GET", path, role, context=client_context(e.pki, cert)), e)
    except (OSError, http.client.HTTPException) as exc:  # (URLError, SSLError: an alert while the answer is read)
        return (REFUSED,) if tls_refusal(exc) is not None else (CLOSED,)


# -- asking one broker everything --------------------------------------------------------------------------------------
def setup(e: Endpoints) -> None:
    admin(e, "PUT", f"/admin/v2/tenants/{TENANT}", {"adminRoles": [], "allowedClusters": ["standalone"]})
    admin(e, "PUT", f"/admin/v2/namespaces/{NS}")
    admin(e, "POST", f"/admin/v2/namespaces/{NS}/permissions/{CLIENT_ROLE}", ["produce"])
    admin(e, "PUT", f"/admin/v2/persistent/{NS}/t")


def ask_everything(e: Endpoints) -> Answers:
    setup(e)
    certs = certificates(e.pki)

    async def wire() -> Answers:
        out: Answers = {}
        for name, (cert, cmd, tls) in WIRE_CASES.items():
            seen, notes = await wire_case(e, certs[cert], cmd(), tls)
            out[f"wire {name}"] = (seen, notes)
        return out

    out = asyncio.run(wire())
    with ThreadPoolExecutor(len(OFFICIAL_CERTS)) as pool:
        results = {name: pool.submit(official_client, e, certs[name]) for name in OFFICIAL_CERTS}
        for name, result in results.items():
            out[f"official client, {name} certificate"] = ((result.result(),), "")
    for name in CERT_NAMES:
        for what, path in HTTP_CALLS.items():
            out[f"https {what}, {name} certificate"] = (https(e, certs[name], path), "")
    for name in ROLE_CERTS:
        out[f"https role of the {name} certificate"] = (https(e, certs[name], HTTP_CALLS["super-user call"]), "")
    for what, (cert, role) in HTTP_WITH_TOKEN.items():
        out[f"https super-user call, {what}"] = (https(e, certs[cert], HTTP_CALLS["super-user call"], role), "")
    return out


@pytest.fixture(scope="module")
def answers(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> dict[str, dict[str, Answers]]:
    """{config: {"pulsar": ..., "ours": ...}}"""
    return {config: ask_both(tmp_path_factory.mktemp(f"pulsar-tls-{config}"), pki, ask_everything, settings)
            for config, settings in CONFIGS.items()}


KEYS = ([f"wire {name}" for name in WIRE_CASES] + [f"official client, {n} certificate" for n in OFFICIAL_CERTS]
        + [f"https {what}, {name} certificate" for name in CERT_NAMES for what in HTTP_CALLS]
        + [f"https role of the {name} certificate" for name in ROLE_CERTS]
        + [f"https super-user call, {what}" for what in HTTP_WITH_TOKEN])

# Where ours answers otherwise on purpose: (config, key) -> why.
_NO_ALERT = ("a refused handshake: Pulsar's Netty and Jetty send the TLS alert that says why (certificate expired, "
             "unknown, required), ours closes the connection without it. asyncio's SSL transport, and uvloop's after "
             "it, force-close at a failed handshake without flushing the alert OpenSSL wrote (CPython gh-98078); the "
             "certificate and the connection are refused either way, and the official clients retry both alike "
             "(the 'official client' keys)")
_INSECURE = ("tlsAllowInsecureConnection=true: Pulsar 4.0.7 trusts any client certificate (expired, from any CA, "
             "self-made) and takes its CN as the role, so anyone can claim any role, the super user's too. Ours asks "
             "for no certificate then (Python's ssl cannot accept one it has not verified: no verify callback), so "
             "the tls provider authenticates no one and tokens are the only credentials that count")
_COMMA = ("Pulsar 4.0.7's AuthenticationProviderTls splits the RFC 2253 subject at every comma, escaped ones too: "
          "the CN 'tls, client' becomes the role 'tls\\', and every CN 'tls, <anything>' the same role. Ours takes "
          "the CN as it is: distinct certificates never collapse into one role")
_REFUSED_HANDSHAKES = {"verified": ("expired", "other_ca", "server_only"),
                       "required": ("expired", "other_ca", "server_only", "none")}
_TRUSTED_ANYWAY = ("granted", "super_user", "no_grants", "expired", "other_ca", "server_only")
DIFFERENCES: dict[tuple[str, str], str] = {
    **{(config, f"wire {cert} certificate, method tls"): _NO_ALERT
       for config, certs in _REFUSED_HANDSHAKES.items() for cert in certs},
    **{(config, f"https {what}, {cert} certificate"): _NO_ALERT
       for config, certs in _REFUSED_HANDSHAKES.items() for cert in certs for what in HTTP_CALLS},
    ("required", "wire no certificate, token of the super user"): _NO_ALERT,
    **{("insecure", f"wire {cert} certificate, method tls"): _INSECURE for cert in _TRUSTED_ANYWAY},
    **{("insecure", f"official client, {cert} certificate"): _INSECURE for cert in OFFICIAL_CERTS if cert != "none"},
    **{("insecure", f"https {what}, {cert} certificate"): _INSECURE for cert in _TRUSTED_ANYWAY for what in HTTP_CALLS},
    **{("insecure", f"https role of the {cert} certificate"): _INSECURE for cert in ROLE_CERTS},
    **{("insecure", f"https super-user call, {what}"): _INSECURE for what in HTTP_WITH_TOKEN},
    ("verified", "https role of the cn_with_a_comma certificate"): _COMMA,
    ("required", "https role of the cn_with_a_comma certificate"): _COMMA,
}


@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize("config", CONFIGS)
def test_tls_answer_is_pulsars(answers: dict[str, dict[str, Answers]], config: str, key: str) -> None:
    (ours, our_notes), (theirs, their_notes) = answers[config]["ours"][key], answers[config]["pulsar"][key]
    if (config, key) in DIFFERENCES:
        assert ours != theirs, f"ours now answers as Pulsar: {ours}; remove it from DIFFERENCES"
        return
    # Where Pulsar's answer is its web server's error page (Jetty's HTML for the AuthenticationFilter's 401), ours is
    # its usual JSON reason: the status alone is compared (as in tests/security/test_pulsar_auth_answers.py).
    if len(theirs) == 3 and theirs[1] in SERVER_PAGES and theirs[0] >= 400:
        assert ours[0] == theirs[0], f"status: ours {ours}; Pulsar's {theirs}"
        return
    assert ours == theirs, f"ours {ours} ({our_notes}); Pulsar's {theirs} ({their_notes})"


def test_the_comparison_saw_certificates_accepted_and_refused(answers: dict[str, dict[str, Answers]]) -> None:
    """Pulsar's side really authenticated by certificate (a run that let everyone in, or no one, compares little)."""
    theirs = answers["verified"]["pulsar"]
    assert theirs["wire granted certificate, method tls"][0][-1] == "PRODUCER_SUCCESS"
    assert theirs["wire no_grants certificate, method tls"][0][-1] == "ERROR AuthorizationError"
    assert theirs["wire other_ca certificate, method tls"][0] == (REFUSED,)
    assert theirs["https super-user call, super_user certificate"][0][0] == 200
    assert theirs["https super-user call, none certificate"][0][0] == 401
    assert answers["required"]["pulsar"]["wire none certificate, method tls"][0] == (REFUSED,)
