"""Multiple advertised listeners (Pulsar's PIP-61): one broker, reached under different addresses
by different networks (inside a Kubernetes cluster and from outside it, say).

``advertisedListeners`` names them: ``internal:pulsar://10.0.0.5:6650,internal:pulsar+ssl://10.0.0.5:6651,
external:pulsar://broker.example.com:16650`` (at most one ``pulsar://`` and one ``pulsar+ssl://`` URL
per listener, and one listener per host:port). A client that asks for a listener by name (the
official clients' ``listener_name``) is answered that listener's URLs by LOOKUP and by the HTTP
lookup (``?listenerName=`` or the ``X-Pulsar-ListenerName`` header); one that names none gets the
``internalListenerName`` listener's (by default the first listed). ``bindAddresses`` opens more
sockets, each for a listener: ``external:pulsar://0.0.0.0:16650`` (``pulsar+ssl`` serves TLS with the
broker's certificate).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from broker.config import ConfigError

SCHEMES = ("pulsar", "pulsar+ssl")


@dataclass(frozen=True)
class Listener:
    name: str
    url: str | None  # pulsar://host:port
    url_tls: str | None  # pulsar+ssl://host:port


@dataclass(frozen=True)
class BindAddress:
    listener: str
    tls: bool
    host: str
    port: int


def _entries(value: str, key: str) -> list[tuple[str, str, str, int]]:
    """(listener name, scheme, host, port) of each ``name:scheme://host:port``."""
    out = []
    for raw in value.split(","):
        item = raw.strip()
        if not item:
            continue
        name, sep, url = item.partition(":")
        name = name.strip()
        if not sep or not name:
            raise ConfigError(f"{key}: {item!r} has no listener name (expected name:scheme://host:port)")
        try:
            parts = urlsplit(url.strip())
            port = parts.port
        except ValueError as exc:
            raise ConfigError(f"{key}: {item!r} is invalid: {exc}") from None
        if parts.scheme.lower() not in SCHEMES or not parts.hostname or port is None:
            raise ConfigError(f"{key}: {item!r} is invalid: expected name:pulsar://host:port or "
                              "name:pulsar+ssl://host:port")
        out.append((name, parts.scheme.lower(), parts.hostname, port))
    return out


def parse_advertised_listeners(value: str, internal_name: str) -> tuple[dict[str, Listener], str | None]:
    """The listeners by name, and the internal one's name (None when there are no listeners)."""
    urls: dict[str, dict[str, str]] = {}
    owner: dict[tuple[str, int], str] = {}
    for name, scheme, host, port in _entries(value, "advertisedListeners"):
        by_scheme = urls.setdefault(name, {})
        if scheme in by_scheme:
            raise ConfigError(f"advertisedListeners: there are redundant configure for listener `{name}`")
        shown = f"[{host}]" if ":" in host else host
        by_scheme[scheme] = f"{scheme}://{shown}:{port}"
        if owner.setdefault((host, port), name) != name:
            raise ConfigError(f"advertisedListeners: must not specify `{host}:{port}` to different listener.")
    if not urls:
        return {}, None
    internal = internal_name.strip() or next(iter(urls))
    if internal not in urls:
        raise ConfigError("the `advertisedListeners` configure do not contain `internalListenerName` entry")
    listeners = {name: Listener(name, u.get("pulsar"), u.get("pulsar+ssl")) for name, u in urls.items()}
    return listeners, internal


def parse_bind_addresses(value: str, listeners: dict[str, Listener]) -> list[BindAddress]:
    out = []
    for name, scheme, host, port in _entries(value, "bindAddresses"):
        if name not in listeners:
            raise ConfigError(f"bindAddresses: listener {name!r} is not one of advertisedListeners")
        out.append(BindAddress(name, scheme == "pulsar+ssl", host, port))
    return out
