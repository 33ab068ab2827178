"""The WebSocket service's client of the binary protocol: one connection per WebSocket session (per partition of a
partitioned topic), to the broker that owns the topic, as Apache Pulsar's WebSocket service uses a Pulsar client
inside the broker.

The session's producer or consumer is an ordinary client of the broker: it connects with the broker client's
credentials (``brokerClientAuthenticationPlugin`` / ``...Parameters``), looks the topic up (following redirects to
the owner in cluster mode, as the official clients do), then creates its producer or subscribes. Every rule of the
broker (limits, flow control, schemas, deduplication, backlog quotas, authorization of the broker client's role)
applies unchanged, and the binary protocol's hot path knows nothing of the WebSocket service.

The connection is a ``peer_link.BrokerLink``, as the replicator's: the commands for the session's one producer or
consumer go to its ``on_command`` with their payload; its loss (the broker closed it, or closed the producer or
consumer: an unload, a bundle moving to another broker) is reported once to ``on_lost``, and the session then
reconnects (``reopen``) and makes its producer or consumer again, as the official clients do.
"""

from __future__ import annotations

from broker.protocol.limits import max_frame_size
from broker.service.consumer import WEBSOCKET_CLIENT_VERSION_PREFIX
from broker.service.peer_link import BrokerLink
from broker.service.remote_producer import RemoteSettings
from broker.version import __version__

CLIENT_VERSION = f"{WEBSOCKET_CLIENT_VERSION_PREFIX}{__version__}"
REQUEST_TIMEOUT_S = 30.0  # the Java client's operationTimeout (30 s): a lookup, a PRODUCER, a SUBSCRIBE


def session_link(settings: RemoteSettings, topic: str, max_message_size: int) -> BrokerLink:
    """A session's connection to the owner of ``topic`` (not open yet: ``partitions`` / ``open``)."""
    return BrokerLink(settings, topic, CLIENT_VERSION, REQUEST_TIMEOUT_S, max_frame_size(max_message_size))
