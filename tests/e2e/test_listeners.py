"""Multiple advertised listeners: the official client's ``listener_name`` picks the address lookups
answer, and its connections go to the socket opened for that listener."""

from __future__ import annotations

import json
import socket
import urllib.request
from collections.abc import Iterator

import pulsar
import pytest

from broker.config import ConfigError
from broker.embedded import BrokerThread
from broker.listeners import parse_advertised_listeners, parse_bind_addresses

LOOKUP = "/lookup/v2/topic/persistent/public/default/listened"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def broker() -> Iterator[tuple[BrokerThread, int, int]]:
    internal, external = free_port(), free_port()
    with BrokerThread(brokerServicePort=internal,
                      advertisedListeners=f"internal:pulsar://127.0.0.1:{internal},"
                                          f"external:pulsar://localhost:{external}",
                      bindAddresses=f"external:pulsar://127.0.0.1:{external}") as b:
        yield b, internal, external


def ports_in_use(b: BrokerThread) -> set[int]:
    """The broker-side ports of its client connections."""
    return {c.local_port for c in b.server.connections}


def test_listener_name_picks_the_address(broker: tuple[BrokerThread, int, int]) -> None:
    b, internal, external = broker
    topic = "persistent://public/default/listened"
    inside = pulsar.Client(f"pulsar://127.0.0.1:{internal}", operation_timeout_seconds=10)
    outside = pulsar.Client(f"pulsar://127.0.0.1:{internal}", listener_name="external", operation_timeout_seconds=10)
    try:
        consumer = inside.subscribe(topic, "s")
        assert ports_in_use(b) == {internal}
        producer = outside.create_producer(topic)  # looked up on the internal port, produced on the external one
        assert external in ports_in_use(b)
        producer.send(b"from outside")
        assert consumer.receive(5000).data() == b"from outside"
    finally:
        inside.close()
        outside.close()


def test_an_unknown_listener_is_refused(broker: tuple[BrokerThread, int, int]) -> None:
    _, internal, _ = broker
    client = pulsar.Client(f"pulsar://127.0.0.1:{internal}", listener_name="nowhere", operation_timeout_seconds=2)
    try:
        with pytest.raises(pulsar.PulsarException):  # ServiceNotReady: the client retries until its timeout
            client.create_producer("persistent://public/default/listened")
    finally:
        client.close()


def test_http_lookup_by_listener(broker: tuple[BrokerThread, int, int]) -> None:
    b, internal, external = broker

    def lookup(query: str = "", header: str | None = None) -> tuple[int, dict[str, str]]:
        req = urllib.request.Request(b.web_url + LOOKUP + query,
                                     headers={"X-Pulsar-ListenerName": header} if header else {})
        try:
            with urllib.request.urlopen(req, timeout=5) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    assert lookup()[1]["brokerUrl"] == f"pulsar://127.0.0.1:{internal}"
    assert lookup("?listenerName=external")[1]["brokerUrl"] == f"pulsar://localhost:{external}"
    assert lookup(header="external")[1]["nativeUrl"] == f"pulsar://localhost:{external}"
    status, body = lookup("?listenerName=nowhere")
    assert status == 404 and "nowhere" in body["reason"]


@pytest.mark.parametrize("listeners, internal, message", [
    ("internal:pulsar://a:1,internal:pulsar://b:2", "", "redundant configure for listener `internal`"),
    ("one:pulsar://a:1,two:pulsar+ssl://a:1", "", "must not specify `a:1` to different listener"),
    ("one:pulsar://a:1", "two", "do not contain `internalListenerName`"),
    ("pulsar://a:1", "", "is invalid"),
    ("one:http://a:1", "", "is invalid"),
    ("one:pulsar://a", "", "is invalid"),
])
def test_listener_configuration_errors(listeners: str, internal: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_advertised_listeners(listeners, internal)


def test_listener_parsing() -> None:
    listeners, internal = parse_advertised_listeners(
        " in:pulsar://10.0.0.5:6650, in:pulsar+ssl://10.0.0.5:6651 ,out:pulsar+ssl://broker.example:16651", "")
    assert internal == "in"  # the first, when internalListenerName is empty
    assert listeners["in"].url == "pulsar://10.0.0.5:6650" and listeners["in"].url_tls == "pulsar+ssl://10.0.0.5:6651"
    assert listeners["out"].url is None and listeners["out"].url_tls == "pulsar+ssl://broker.example:16651"
    (bind,) = parse_bind_addresses("out:pulsar+ssl://0.0.0.0:16651", listeners)
    assert (bind.listener, bind.tls, bind.host, bind.port) == ("out", True, "0.0.0.0", 16651)
    with pytest.raises(ConfigError, match="not one of advertisedListeners"):
        parse_bind_addresses("elsewhere:pulsar://0.0.0.0:1", listeners)
    assert parse_advertised_listeners("", "") == ({}, None)
