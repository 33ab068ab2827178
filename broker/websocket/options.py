"""The query options of a WebSocket session, parsed and checked as Pulsar's handlers and its Java client's builders
check them (ProducerHandler.getProducerBuilder, ConsumerHandler.getConsumerConfiguration, ReaderHandler).

A value Pulsar refuses raises OptionError with Pulsar's words; the handler answers 400 "Invalid query params: ..."
before the upgrade, as Pulsar does. Options Pulsar ignores (a value it cannot use without failing) are ignored here
too; options Pulsar does not know are ignored.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from broker.vocabulary import JAVA_LONG
from compression_codecs import LZ4, NONE, SNAPPY, ZLIB, ZSTD

INT_MIN, INT_MAX = -(2**31), 2**31 - 1
LONG_MIN, LONG_MAX = JAVA_LONG
_INTEGER = re.compile(r"[+-]?[0-9]+")

# Pulsar's WebSocket handlers cap a consumer's and a reader's receiver queue at 1000 (and default to 1000).
MAX_RECEIVER_QUEUE = 1000
# The Java client's defaults the handlers start from.
DEFAULT_SEND_TIMEOUT_MS = 30_000
DEFAULT_MAX_PENDING_MESSAGES = 0  # the Java client's default since 2.10: no count limit (memory limit instead)
DEFAULT_BATCHING_MAX_MESSAGES = 1000
DEFAULT_BATCHING_MAX_PUBLISH_DELAY_MS = 1  # 1 ms (batchingMaxPublishDelayMicros = 1000)
DEFAULT_BATCHING_MAX_BYTES = 128 * 1024
DEFAULT_NEGATIVE_ACK_DELAY_MS = 60_000
MIN_ACK_TIMEOUT_MS = 1000  # ConsumerBuilderImpl.ackTimeout: "Ack timeout should be greater than 1000 ms"

COMPRESSION_TYPES = {"NONE": NONE, "LZ4": LZ4, "ZLIB": ZLIB, "ZSTD": ZSTD, "SNAPPY": SNAPPY}
ROUTING_MODES = ("RoundRobinPartition", "SinglePartition", "CustomPartition")
HASHING_SCHEMES = ("JavaStringHash", "Murmur3_32Hash")
SUBSCRIPTION_TYPES = ("Exclusive", "Shared", "Failover", "Key_Shared")
SUBSCRIPTION_MODES = ("Durable", "NonDurable")
INITIAL_POSITIONS = ("Latest", "Earliest")


class OptionError(ValueError):
    """A query option Pulsar refuses (its words: the handler prefixes "Invalid query params: ")."""


def parse_int(text: str, low: int = INT_MIN, high: int = INT_MAX) -> int:
    """Java's Integer.parseInt / Long.parseLong: digits with an optional sign, in range; else its words."""
    if not _INTEGER.fullmatch(text) or not low <= int(text) <= high:
        raise OptionError(f'For input string: "{text}"')
    return int(text)


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise OptionError(message)


def _enum(params: Mapping[str, str], key: str, values: tuple[str, ...]) -> str | None:
    value = params.get(key)
    if value is not None:
        _check(value in values, f"Invalid {key} {value}")
    return value


def _receiver_queue_size(text: str) -> int:
    """The handlers' min(receiverQueueSize, 1000), then the builder's check."""
    size = min(parse_int(text), MAX_RECEIVER_QUEUE)
    _check(size >= 0, "receiverQueueSize needs to be >= 0")
    return size


@dataclass(frozen=True)
class ProducerOptions:
    producer_name: str | None = None
    initial_sequence_id: int | None = None
    send_timeout_ms: int = DEFAULT_SEND_TIMEOUT_MS
    batching: bool = False
    batching_max_messages: int = DEFAULT_BATCHING_MAX_MESSAGES
    batching_max_publish_delay_ms: int = DEFAULT_BATCHING_MAX_PUBLISH_DELAY_MS
    max_pending_messages: int = DEFAULT_MAX_PENDING_MESSAGES
    compression: int = NONE
    routing_mode: str = "SinglePartition"  # (the WebSocket handler's default; CustomPartition: left as it is)
    hashing_scheme: str = "JavaStringHash"


def producer_options(params: Mapping[str, str]) -> ProducerOptions:
    """ProducerHandler.getProducerBuilder's reading of the query, in its order (batching off unless asked; the
    batching settings read only with batchingEnabled=true)."""
    kw: dict[str, object] = {}
    if "producerName" in params:
        kw["producer_name"] = params["producerName"]
    if "initialSequenceId" in params:
        kw["initial_sequence_id"] = parse_int(params["initialSequenceId"], LONG_MIN, LONG_MAX)
    if "hashingScheme" in params:
        scheme = params["hashingScheme"]
        _check(scheme in HASHING_SCHEMES, f"No enum constant org.apache.pulsar.client.api.HashingScheme.{scheme}")
        kw["hashing_scheme"] = scheme
    if "sendTimeoutMillis" in params:
        timeout = parse_int(params["sendTimeoutMillis"])
        _check(timeout >= 0, "sendTimeout needs to be >= 0")
        kw["send_timeout_ms"] = timeout
    routing = _enum(params, "messageRoutingMode", ROUTING_MODES)
    if routing is not None and routing != "CustomPartition":
        kw["routing_mode"] = routing
    if params.get("batchingEnabled", "").lower() == "true":  # (Boolean.parseBoolean: anything else is false)
        kw["batching"] = True
        if "batchingMaxMessages" in params:
            kw["batching_max_messages"] = parse_int(params["batchingMaxMessages"])
        if "maxPendingMessages" in params:
            pending = parse_int(params["maxPendingMessages"])
            _check(pending >= 0, "maxPendingMessages needs to be >= 0")
            kw["max_pending_messages"] = pending
        if "batchingMaxPublishDelay" in params:
            kw["batching_max_publish_delay_ms"] = parse_int(params["batchingMaxPublishDelay"])
    compression = _enum(params, "compressionType", tuple(COMPRESSION_TYPES))
    if compression is not None:
        kw["compression"] = COMPRESSION_TYPES[compression]
    if "encryptionKeys" in params:
        raise OptionError("Can't add encryption key without configuring cryptoKeyReaderFactoryClassName")
    return ProducerOptions(**kw)  # type: ignore[arg-type]


@dataclass(frozen=True)
class ConsumerOptions:
    subscription_type: str = "Exclusive"
    durable: bool = True
    initial_position: str = "Latest"
    receiver_queue_size: int = MAX_RECEIVER_QUEUE
    consumer_name: str | None = None
    priority_level: int = 0
    ack_timeout_ms: int = 0
    negative_ack_delay_ms: int = DEFAULT_NEGATIVE_ACK_DELAY_MS
    pull_mode: bool = False
    max_redeliver_count: int = 0
    dead_letter_topic: str | None = None


def consumer_options(params: Mapping[str, str], topic: str, subscription: str) -> ConsumerOptions:
    """ConsumerHandler.getConsumerConfiguration's reading of the query, with the builder's checks."""
    kw: dict[str, object] = {"pull_mode": params.get("pullMode", "").lower() == "true"}
    if "ackTimeoutMillis" in params:
        timeout = parse_int(params["ackTimeoutMillis"])
        _check(timeout == 0 or timeout >= MIN_ACK_TIMEOUT_MS, "Ack timeout should be greater than 1000 ms")
        kw["ack_timeout_ms"] = timeout
    sub_type = _enum(params, "subscriptionType", SUBSCRIPTION_TYPES)
    if sub_type is not None:
        kw["subscription_type"] = sub_type
    mode = _enum(params, "subscriptionMode", SUBSCRIPTION_MODES)
    if mode is not None:
        kw["durable"] = mode == "Durable"
    position = _enum(params, "subscriptionInitialPosition", INITIAL_POSITIONS)
    if position is not None:
        kw["initial_position"] = position
    if "receiverQueueSize" in params:
        kw["receiver_queue_size"] = _receiver_queue_size(params["receiverQueueSize"])
    if "consumerName" in params:
        kw["consumer_name"] = params["consumerName"]
    if "priorityLevel" in params:
        level = parse_int(params["priorityLevel"])
        _check(level >= 0, "priorityLevel needs to be >= 0")
        kw["priority_level"] = level
    if "negativeAckRedeliveryDelay" in params:
        delay = parse_int(params["negativeAckRedeliveryDelay"])
        _check(delay >= 0, "redeliveryDelay needs to be >= 0")
        kw["negative_ack_delay_ms"] = delay
    if "maxRedeliverCount" in params or "deadLetterTopic" in params:
        if "maxRedeliverCount" in params:
            kw["max_redeliver_count"] = parse_int(params["maxRedeliverCount"])
            kw["dead_letter_topic"] = f"{topic}-{subscription}-DLQ"
        if "deadLetterTopic" in params:
            kw["dead_letter_topic"] = params["deadLetterTopic"]
    return ConsumerOptions(**kw)  # type: ignore[arg-type]


@dataclass(frozen=True)
class ReaderOptions:
    receiver_queue_size: int = MAX_RECEIVER_QUEUE
    reader_name: str | None = None
    start: str = "latest"  # "earliest", "latest", or the message id's base64


def reader_options(params: Mapping[str, str]) -> ReaderOptions:
    kw: dict[str, object] = {}
    if "receiverQueueSize" in params:
        kw["receiver_queue_size"] = _receiver_queue_size(params["receiverQueueSize"])
    if "readerName" in params:
        kw["reader_name"] = params["readerName"]
    start = params.get("messageId", "").strip()
    if start:
        kw["start"] = start
    return ReaderOptions(**kw)  # type: ignore[arg-type]
