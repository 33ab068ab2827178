"""Topic names: ``{persistent|non-persistent}://tenant/namespace/local[-partition-k]``."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from urllib.parse import quote_plus, unquote_plus

from broker.errors import InvalidTopicNameError

PARTITION_SUFFIX = "-partition-"
# Names of topics the broker uses itself: never listed to clients, never deleted as inactive.
SYSTEM_TOPIC_MARKERS = ("__compaction", "__change_events", "__transaction_buffer_snapshot", "__transaction_pending_ack")
_NAME_PART = re.compile(r"^[-=:.\w]+$")
# Ours: a topic's name goes into metadata paths and cursor and segment directories; 4 KiB characters
# keeps every such path (percent-encoded, up to 3 bytes a byte) far below the stores' limits (a path
# length is 2 bytes in the local metadata store's records). Pulsar sets none; ZooKeeper's is ~1 MB.
MAX_NAME_LENGTH = 4096
_PARTITION_RE = re.compile(r"^(.*)-partition-(\d+)$")
# The end of the managed-ledger name of a compacted view nested under its topic's (versions before views were
# stored beside the topics): <topic's name>/__compaction/<generation>.
_NESTED_VIEW = re.compile(r"/__compaction/\d+$")
# What Pulsar's Codec.encode (java.net.URLEncoder) leaves as it is: ASCII letters, digits and ".-*_". (A name of
# only these is stripped to nothing by str.strip: the quickest test of it.)
_UNENCODED = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789.*_-"
# Java's Character.isWhitespace, which Pulsar's StringUtils.isBlank tests: Unicode space separators but the
# no-break ones, and the ASCII controls below.
_JAVA_WHITESPACE = re.compile(r"[\t\n\x0b\x0c\r\x1c-\x1f\u0020\u1680\u2000-\u2006"
                              r"\u2008-\u200a\u2028\u2029\u205f\u3000]*")


def blank(text: str) -> bool:
    """Apache Commons' StringUtils.isBlank: empty or only (Java) whitespace."""
    return _JAVA_WHITESPACE.fullmatch(text) is not None


@dataclass(frozen=True, slots=True)
class TopicName:
    domain: str  # "persistent" or "non-persistent"
    tenant: str
    namespace_part: str  # the namespace's own name (without the tenant)
    local_name: str  # may contain "/" and the partition suffix
    # Derived once (a topic's handling reads them many times per request): the full name, the namespace and the
    # partition index (-1: not a partition).
    full: str = field(init=False, repr=False, compare=False)
    namespace: str = field(init=False, repr=False, compare=False)
    partition_index: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        namespace = f"{self.tenant}/{self.namespace_part}"
        object.__setattr__(self, "namespace", namespace)
        object.__setattr__(self, "full", f"{self.domain}://{namespace}/{self.local_name}")
        m = _PARTITION_RE.match(self.local_name) if PARTITION_SUFFIX in self.local_name else None
        object.__setattr__(self, "partition_index", int(m.group(2)) if m else -1)

    @staticmethod
    def parse(name: str) -> TopicName:
        """Accepts full names and the short forms ``x`` and ``tenant/ns/x`` (as the client does). The same string
        gives the same (immutable) value: recent names are remembered, as every request of a client names its
        topic again."""
        return _parse(name)

    @staticmethod
    def _parse(name: str) -> TopicName:
        if not name:
            raise InvalidTopicNameError("Invalid topic name: empty")
        if len(name) > MAX_NAME_LENGTH:  # (characters: at most 4 bytes each in UTF-8)
            raise InvalidTopicNameError(f"Invalid topic name: longer than {MAX_NAME_LENGTH} characters")
        if "://" not in name:
            parts = name.split("/")
            if len(parts) == 1:
                name = f"persistent://public/default/{name}"
            elif len(parts) == 3:
                name = f"persistent://{name}"
            else:
                raise InvalidTopicNameError(f"Invalid short topic name '{name}'")
        domain, _, rest = name.partition("://")
        if domain not in ("persistent", "non-persistent"):
            raise InvalidTopicNameError(f"Invalid topic domain '{domain}' in '{name}'")
        parts = rest.split("/", 2)
        if len(parts) != 3 or not all(parts):
            raise InvalidTopicNameError(f"Invalid topic name '{name}'")
        tenant, ns, local = parts
        # A V1 name carries a cluster segment: persistent://tenant/cluster/ns/local. We serve V2 only.
        for part in (tenant, ns):
            if not _NAME_PART.match(part):
                raise InvalidTopicNameError(f"Invalid tenant or namespace in topic name '{name}'")
        if "\n" in local or "\r" in local or local in (".", ".."):  # (no path step: ZooKeeper refuses them too)
            raise InvalidTopicNameError(f"Invalid local name in topic name '{name}'")
        if blank(local):  # (Pulsar's TopicName: "Topic local name must not be blank")
            raise InvalidTopicNameError(f"Invalid topic name: {name}. Topic local name must not be blank.")
        return TopicName(domain, tenant, ns, local)

    @property
    def persistent(self) -> bool:
        return self.domain == "persistent"

    def __str__(self) -> str:
        return self.full

    @property
    def base(self) -> TopicName:
        """The partitioned topic this partition belongs to (itself when not a partition)."""
        if self.partition_index < 0:
            return self
        m = _PARTITION_RE.match(self.local_name)
        assert m is not None
        return TopicName(self.domain, self.tenant, self.namespace_part, m.group(1))

    @property
    def schema_name(self) -> str:
        """The name the schema registry knows the topic's schemas by, and GET_SCHEMA answers with: the partitioned
        topic's ``tenant/ns/<encoded local name>``, with no domain (Pulsar's TopicName.getSchemaName)."""
        return f"{self.tenant}/{self.namespace_part}/{encode_local_name(self.base.local_name)}"

    def partition(self, index: int) -> TopicName:
        return TopicName(self.domain, self.tenant, self.namespace_part, f"{self.local_name}{PARTITION_SUFFIX}{index}")

    @property
    def persistence_path(self) -> str:
        """The managed ledger's name: ``tenant/ns/domain/<encoded local name>``, Pulsar's TopicName.
        getPersistenceNamingEncoding (the local name through Codec.encode, so a "/" in it is no path step)."""
        return f"{self.tenant}/{self.namespace_part}/{self.domain}/{encode_local_name(self.local_name)}"

    @staticmethod
    def from_persistence_path(path: str) -> TopicName | None:
        """The topic whose managed ledger ``path`` names (Pulsar's TopicName.fromPersistenceNamingEncoding), or None:
        no topic's (another depth or domain, a name that does not parse) or not spelled as ``persistence_path``
        spells it (a name stored raw by an older version: its topic's ledger is elsewhere)."""
        parts = path.split("/")
        if len(parts) != 4 or parts[2] not in ("persistent", "non-persistent"):
            return None
        tenant, ns, domain, encoded = parts
        local = local_name_of_encoded(encoded)
        if local is None:
            return None
        try:
            return TopicName.parse(f"{domain}://{tenant}/{ns}/{local}")
        except InvalidTopicNameError:
            return None


# (Errors are not remembered: a bad name raises each time.) Names of deleted topics stay until newer
# names evict them (at most 4,096 entries, each a name and its parts): a memory cost only, as a name
# parses the same whatever became of its topic.
_parse = lru_cache(maxsize=4096)(TopicName._parse)


def encode_local_name(local_name: str) -> str:
    """Pulsar's Codec.encode (java.net.URLEncoder, UTF-8): ASCII letters, digits and ``.-*_`` stay, a space becomes
    ``+``, every other byte ``%XX`` (upper-case). (Python's quote_plus also keeps ``~``: Java's does not.)"""
    if not local_name.strip(_UNENCODED):  # (the usual name: nothing to do)
        return local_name
    return quote_plus(local_name, safe="*").replace("~", "%7E")


def decode_local_name(encoded: str) -> str:
    """Pulsar's Codec.decode (java.net.URLDecoder): ``+`` is a space, ``%XX`` a byte of UTF-8."""
    if "%" not in encoded and "+" not in encoded:
        return encoded
    return unquote_plus(encoded)


def local_name_of_encoded(encoded: str) -> str | None:
    """The local name ``encode_local_name`` spells as ``encoded``, or None: not so spelled (a "/" in it, an escape
    Java's encoder would not write, a name an older version stored raw)."""
    if not encoded.strip(_UNENCODED):  # (the usual name)
        return encoded
    local = decode_local_name(encoded)
    return local if encode_local_name(local) == encoded else None


def persistence_path_of_raw(name: str) -> str:
    """The managed-ledger name today of one that versions before Pulsar's encoding (``persistence_path``) stored as
    ``name``: a topic's (``tenant/ns/persistent/<raw local name>``, the local name possibly with "/") gets its
    local name encoded; any other stays: a compacted view's (its record names it: ``.../__compaction/<local>-<n>``,
    or nested under its topic's, ``.../persistent/<local>/__compaction/<n>``, as still older versions named it),
    the transaction log's and the health check's (nothing to encode)."""
    parts = name.split("/", 3)
    if len(parts) != 4 or parts[2] != "persistent" or _NESTED_VIEW.search(parts[3]):
        return name
    return f"{parts[0]}/{parts[1]}/persistent/{encode_local_name(parts[3])}"


def persistence_path_of_shared(name: str) -> str:
    """``persistence_path_of_raw`` for a store Apache Pulsar's brokers may have written too (BookKeeper's ZooKeeper):
    a topic's name already spelled as Codec.encode spells some local name (``a+b%3A%C3%BC``: Pulsar's name of topic
    ``a b:ü``) stays, as Pulsar's brokers wrote it so and read it as that decoded name. (An older version of ours
    that stored such a spelling as a raw local name, ``c++``, cannot be told from it: that topic is read as the
    decoded name, ``c  ``, as Pulsar reads it.)"""
    parts = name.split("/", 3)
    if len(parts) == 4 and parts[2] == "persistent" and local_name_of_encoded(parts[3]) is not None:
        return name
    return persistence_path_of_raw(name)


def is_system_topic(full_name: str) -> bool:
    return any(m in full_name for m in SYSTEM_TOPIC_MARKERS)


# Pulsar's per-broker namespaces (NamespaceService's HEARTBEAT_NAMESPACE_PATTERN(_V2), SLA_NAMESPACE_PATTERN): the
# heartbeat namespaces pulsar/<cluster>/<brokerId> and pulsar/<brokerId>, and the SLA monitor's
# sla-monitor/<cluster>/<brokerId>, each owned by the broker it names (brokerId: advertised host, ":", web port).
# This broker serves V2 names only, so of the heartbeat namespaces only pulsar/<brokerId>; the others are known
# to leave them out where Pulsar does (load shedding).
HEARTBEAT_NAMESPACE_V2 = re.compile(r"pulsar/([^:]+:\d+)")
PER_BROKER_NAMESPACES = (re.compile(r"pulsar/[^/]+/([^:]+:\d+)"), HEARTBEAT_NAMESPACE_V2,
                         re.compile(r"sla-monitor/[^/]+/([^:]+:\d+)"))
HEALTH_CHECK_TOPIC = "healthcheck"  # (Pulsar's HealthChecker.HEALTH_CHECK_TOPIC_SUFFIX)


def heartbeat_namespace(broker_id: str) -> str:
    """Pulsar's V2 heartbeat namespace of a broker (NamespaceService.getHeartbeatNamespaceV2)."""
    return f"pulsar/{broker_id}"


def heartbeat_broker(namespace: str) -> str | None:
    """The broker a V2 heartbeat namespace belongs to (its brokerId), None for any other namespace."""
    m = HEARTBEAT_NAMESPACE_V2.fullmatch(namespace)
    return m.group(1) if m else None


def is_per_broker_namespace(namespace: str) -> bool:
    """Pulsar's NamespaceService.isSLAOrHeartbeatNamespace."""
    return any(p.fullmatch(namespace) for p in PER_BROKER_NAMESPACES)


def is_namespace_name(name: str) -> bool:
    """``tenant/namespace``, each part a name a topic may carry (a V1 name with a cluster segment is not served)."""
    parts = name.split("/")
    return len(parts) == 2 and all(_NAME_PART.match(part) for part in parts)
