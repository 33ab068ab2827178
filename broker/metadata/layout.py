"""Where the broker's metadata lives in the metadata store, and in which value format.

Apache Pulsar's paths and JSON where Pulsar has them, so that a Pulsar broker (or pulsar-admin
through one) reads what we wrote, and we read what it wrote:

==========================  =====================================================  =============================
what                        path                                                   value
==========================  =====================================================  =============================
cluster                     ``/admin/clusters/<cluster>``                          ClusterData JSON (as given)
tenant                      ``/admin/policies/<tenant>``                           TenantInfo JSON
namespace                   ``/admin/policies/<tenant>/<ns>``                      Policies JSON
namespace, local            ``/admin/local-policies/<tenant>/<ns>``                LocalPolicies JSON (bundles)
failure domain              ``/admin/clusters/<cluster>/failureDomain/<domain>``   FailureDomainImpl JSON
partitioned topic           ``/admin/partitioned-topics/<t>/<ns>/<domain>/<enc>``  PartitionedTopicMetadata JSON
topic policies              ``/admin/topic-policies/local/<t>/<ns>/<domain>/<enc>`` TopicPolicies JSON
dynamic configuration       ``/admin/configuration``                               JSON map: setting -> text
resource quota, a bundle's  ``/loadbalance/resource-quota/<t>/<ns>/<range>``       ResourceQuota JSON
resource quota, default     ``/loadbalance/resource-quota/default``                ResourceQuota JSON
==========================  =====================================================  =============================

``<enc>`` is Pulsar's ``TopicName.getEncodedLocalName()`` (``Codec.encode``: Java's URLEncoder).
Topic policies: Pulsar keeps them by default in each namespace's ``__change_events`` system topic;
its ``MetadataStoreTopicPoliciesService`` keeps them at the path above (local policies), which is
the one we use. A partitioned topic's properties are the ``properties`` of its
PartitionedTopicMetadata, as in Pulsar. A bundle's resource quota is at its ``NamespaceBundle.toString()``
(``<range>``: ``0x00000000_0x40000000``), below Pulsar's ``LoadBalanceResources.RESOURCE_QUOTA_BASE_PATH``.

Ours, where Pulsar keeps the thing elsewhere (under ``/pulsar-py``, so that no Pulsar component
misreads it):

- ``/pulsar-py/schemas/<t>/<ns>/<domain>/<enc>/<version>``: one schema version (our JSON record).
  Pulsar keeps schema data in BookKeeper ledgers and only a protobuf SchemaLocator under
  ``/schemas/<t>/<ns>/<topic>``; we keep the data in the store until schemas are stored in
  BookKeeper, and never write ``/schemas``.
- ``/pulsar-py/topic-properties/...``: a non-partitioned topic's properties (Pulsar: the managed
  ledger's properties).
- ``/pulsar-py/terminated/...``: ``{"ledgerId", "entryId"}`` of a terminated topic's last message
  (Pulsar: the managed ledger's ``terminatedPosition``).
- ``/pulsar-py/compactions/...``: ``{"ledger", "horizon", "generation"}`` of a topic's compacted
  view (Pulsar: the properties of the ``__compaction`` cursor).
- ``/pulsar-py/global-policy-copies/<t>/<ns>/<cluster>``: the namespace's global topic policy changes still to be
  copied to that cluster (``broker.metadata.policy_copies``; Pulsar: the backlog of the namespace's
  ``__change_events`` system topic that its replicator to that cluster has not sent yet).

Pure: paths and bytes only, no I/O.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from broker.topic_name import TopicName, decode_local_name, encode_local_name

log = logging.getLogger(__name__)
JsonDoc = dict[str, Any]

CLUSTERS_ROOT = "/admin/clusters"
POLICIES_ROOT = "/admin/policies"
LOCAL_POLICIES_ROOT = "/admin/local-policies"
PARTITIONED_TOPICS_ROOT = "/admin/partitioned-topics"
TOPIC_POLICIES_ROOT = "/admin/topic-policies/local"
# A topic's global policies (``isGlobal=true``): in Pulsar the TopicPolicies events of the namespace's system topic
# that are replicated to its other clusters; here a second document per topic, beside the local one.
GLOBAL_TOPIC_POLICIES_ROOT = "/admin/topic-policies/global"
OURS_ROOT = "/pulsar-py"
SCHEMAS_ROOT = f"{OURS_ROOT}/schemas"
TOPIC_PROPERTIES_ROOT = f"{OURS_ROOT}/topic-properties"
TERMINATED_ROOT = f"{OURS_ROOT}/terminated"
COMPACTIONS_ROOT = f"{OURS_ROOT}/compactions"
GLOBAL_POLICY_COPIES_ROOT = f"{OURS_ROOT}/global-policy-copies"
# In the managed ledgers' store (BookKeeper storage): the managed-ledger znodes are at Pulsar's names (a topic's
# local name URL-encoded); made once those an older version stored at the raw local name are moved.
MANAGED_LEDGER_NAMES_MARKER = f"{OURS_ROOT}/managed-ledger-names"

# A schema version's node name: zero-padded like ZooKeeper's sequential names, so that the
# children list sorts by version.
SCHEMA_VERSION_DIGITS = 10


def encode_json(doc: Any) -> bytes:
    """Compact JSON, as Pulsar's Jackson writes it (field order does not matter to a reader)."""
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()


def decode_json(value: bytes) -> Any:
    """The JSON document of a node; an empty value (a node made as some path's parent) is None."""
    if not value:
        return None
    return json.loads(value)


def topic_parts(topic: str) -> list[str]:
    name = TopicName.parse(topic)
    return [name.tenant, name.namespace_part, name.domain, encode_local_name(name.local_name)]


def topic_from_parts(parts: Sequence[str]) -> str:
    tenant, ns, domain, encoded = parts
    return f"{domain}://{tenant}/{ns}/{decode_local_name(encoded)}"


@dataclass(frozen=True)
class Kind:
    """One kind of record: the nodes ``<root>/<depth elements>`` each hold one cache entry.

    ``decode`` turns a node's value into the cached value (None: no entry), ``encode`` the other
    way. ``versioned`` kinds (schemas) keep their entry in the children of the unit node instead. A kind
    of ``only`` one record (depth 1) is the node ``<root>/<only>``, the root's other children being
    another kind's.
    """

    name: str
    root: str
    depth: int
    key_to_parts: Callable[[str], list[str]]
    parts_to_key: Callable[[Sequence[str]], str]
    decode: Callable[[bytes], Any]
    encode: Callable[[Any], bytes]
    versioned: bool = False
    only: str = ""

    def path(self, key: str) -> str:
        return "/".join([self.root, *self.key_to_parts(key)])

    def key_of(self, path: str) -> str | None:
        """The key whose unit node is ``path`` (or, for a versioned kind, a child of it)."""
        if not path.startswith(self.root + "/"):
            return None
        if self.only:
            return self.only if path == f"{self.root}/{self.only}" else None
        parts = path[len(self.root) + 1:].split("/")
        if len(parts) == self.depth or (self.versioned and len(parts) == self.depth + 1):
            try:
                return self.parts_to_key(parts[: self.depth])
            except Exception:  # (a node of a shape we never write: not ours to cache)
                return None
        return None


def _doc(value: bytes) -> JsonDoc | None:
    doc = decode_json(value)
    return doc if isinstance(doc, dict) else None


def _doc_or_empty(value: bytes) -> JsonDoc:
    """Clusters and tenants: a node that exists is one, even with an empty value."""
    return _doc(value) or {}


def _partitioned_decode(value: bytes) -> JsonDoc | None:
    doc = _doc(value)
    if doc is None or not isinstance(doc.get("partitions"), int):
        return None
    return doc


def partitioned_topic_metadata(partitions: int, properties: dict[str, str] | None) -> JsonDoc:
    """Pulsar's PartitionedTopicMetadata: ``partitions``, ``properties`` (absent when None; an empty map is kept, as
    Pulsar keeps one that was given) and ``deleted`` (Pulsar 3+ marks a topic being deleted; older readers ignore
    it)."""
    doc: JsonDoc = {"partitions": partitions}
    if properties is not None:
        doc["properties"] = dict(properties)
    doc["deleted"] = False
    return doc


def _terminated_decode(value: bytes) -> list[int] | None:
    doc = _doc(value)
    if doc is None:
        return None
    return [int(doc["ledgerId"]), int(doc["entryId"])]


def _terminated_encode(position: Sequence[int]) -> bytes:
    return encode_json({"ledgerId": position[0], "entryId": position[1]})


def schema_version_name(version: int) -> str:
    return f"{version:0{SCHEMA_VERSION_DIGITS}d}"


CLUSTERS = Kind("clusters", CLUSTERS_ROOT, 1, lambda k: [k], lambda p: p[0], _doc_or_empty, encode_json)
TENANTS = Kind("tenants", POLICIES_ROOT, 1, lambda k: [k], lambda p: p[0], _doc_or_empty, encode_json)
# Policies fields this broker once stored under another name -> Pulsar's name (read under either; written
# under Pulsar's from the first change).
_RENAMED_POLICIES = {"publish_max_message_rate": "publishMaxMessageRate"}


def _policies_decode(value: bytes) -> JsonDoc:
    doc = _doc(value) or {}
    for old, new in _RENAMED_POLICIES.items():
        if old in doc:
            stored = doc.pop(old)
            doc.setdefault(new, stored)
    return doc


NAMESPACES = Kind("namespaces", POLICIES_ROOT, 2, lambda k: k.split("/", 1), "/".join, _policies_decode,
                  encode_json)
# Pulsar's LocalPolicies: the namespace's bundles as this cluster splits them, its bookie affinity group
# (bookieAffinityGroup: ledger placement) and anti-affinity group.
LOCAL_POLICIES = Kind("local_policies", LOCAL_POLICIES_ROOT, 2, lambda k: k.split("/", 1), "/".join, _doc,
                      encode_json)
# Pulsar's namespace isolation policies of a cluster: one node, a JSON map policy name -> NamespaceIsolationData.
ISOLATION_NODE = "namespaceIsolationPolicies"


def _isolation_key(parts: Sequence[str]) -> str:
    if parts[1] != ISOLATION_NODE:
        raise ValueError(f"not {ISOLATION_NODE}")
    return parts[0]


ISOLATION_POLICIES = Kind("isolation_policies", CLUSTERS_ROOT, 2, lambda k: [k, ISOLATION_NODE], _isolation_key,
                          _doc, encode_json)
# Pulsar's failure domains of a cluster (ClusterResources.FailureDomainResources): one node per domain,
# ``/admin/clusters/<cluster>/failureDomain/<domain>``, a FailureDomainImpl ``{"brokers": [broker id]}``; the key
# is "<cluster>/<domain>".
FAILURE_DOMAIN_NODE = "failureDomain"


def _failure_domain_parts(key: str) -> list[str]:
    cluster, domain = key.split("/", 1)
    return [cluster, FAILURE_DOMAIN_NODE, domain]


def _failure_domain_key(parts: Sequence[str]) -> str:
    if parts[1] != FAILURE_DOMAIN_NODE:
        raise ValueError(f"not {FAILURE_DOMAIN_NODE}")
    return f"{parts[0]}/{parts[2]}"


def _failure_domain_decode(value: bytes) -> JsonDoc:
    """A domain node is one even when its value is empty or its ``brokers`` null (FailureDomainImpl's default)."""
    doc = _doc(value) or {}
    brokers = doc.get("brokers")
    return {**doc, "brokers": [b for b in brokers if isinstance(b, str)] if isinstance(brokers, list) else []}


FAILURE_DOMAINS = Kind("failure_domains", CLUSTERS_ROOT, 3, _failure_domain_parts, _failure_domain_key,
                       _failure_domain_decode, encode_json)
PARTITIONED_TOPICS = Kind("partitioned", PARTITIONED_TOPICS_ROOT, 4, topic_parts, topic_from_parts,
                          _partitioned_decode, encode_json)
TOPIC_POLICIES = Kind("topic_policies", TOPIC_POLICIES_ROOT, 4, topic_parts, topic_from_parts, _doc, encode_json)
GLOBAL_TOPIC_POLICIES = Kind("global_topic_policies", GLOBAL_TOPIC_POLICIES_ROOT, 4, topic_parts, topic_from_parts,
                             _doc, encode_json)
TOPIC_PROPERTIES = Kind("topic_properties", TOPIC_PROPERTIES_ROOT, 4, topic_parts, topic_from_parts,
                        _doc, encode_json)
TERMINATED = Kind("terminated", TERMINATED_ROOT, 4, topic_parts, topic_from_parts,
                  _terminated_decode, _terminated_encode)
COMPACTIONS = Kind("compactions", COMPACTIONS_ROOT, 4, topic_parts, topic_from_parts, _doc, encode_json)
# One document per namespace and other cluster; the key is "<tenant>/<ns>/<cluster>".
GLOBAL_POLICY_COPIES = Kind("global_policy_copies", GLOBAL_POLICY_COPIES_ROOT, 3, lambda k: k.split("/", 2), "/".join,
                            _doc, encode_json)
# The unit node is the topic's; its children are the versions, each one schema record (JSON).
SCHEMAS = Kind("schemas", SCHEMAS_ROOT, 4, topic_parts, topic_from_parts, _doc, encode_json, versioned=True)

# Pulsar's dynamic configuration (DynamicConfigurationResources): one node, a JSON map setting -> its value as text,
# which every broker of the cluster applies over its configuration file.
DYNAMIC_CONFIGURATION_NODE = "configuration"


def _only_key(parts: Sequence[str]) -> str:
    raise ValueError("a kind of one record has no other keys")


DYNAMIC_CONFIGURATION = Kind("dynamic_configuration", "/admin", 1, lambda k: [k], _only_key, _doc, encode_json,
                             only=DYNAMIC_CONFIGURATION_NODE)


# Pulsar's resource quotas (LoadBalanceResources.QuotaResources): one ResourceQuota per bundle, its key the bundle's
# NamespaceBundle.toString() ("<tenant>/<ns>/0x00000000_0x40000000"), and the default one at ``<root>/default``
# (a tenant named "default" has its bundles' quotas below that node, as in Pulsar).
RESOURCE_QUOTA_ROOT = "/loadbalance/resource-quota"
DEFAULT_RESOURCE_QUOTA_NODE = "default"
# ResourceQuota's fields, in the order Pulsar's Jackson writes them (its declaration order): the rates a bundle is
# expected to bring (messages/s in and out, bytes/s in and out, MB of memory), then ``dynamic``.
RESOURCE_QUOTA_RATES = ("msgRateIn", "msgRateOut", "bandwidthIn", "bandwidthOut", "memory")
# A rate given as text: a decimal number, as Java's Double.parseDouble reads one (its hex and NaN / Infinity aside).
_DECIMAL = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
_JAVA_BOOLEAN_TEXT = {"true": True, "True": True, "TRUE": True, "false": False, "False": False, "FALSE": False}


@dataclass(frozen=True)
class ResourceQuota:
    """Pulsar's ResourceQuota (pulsar-client-admin-api): what a bundle is expected to bring. A new one (Java's
    constructor) is all zeros and ``dynamic`` (the load manager may replace it with what it measures)."""

    msg_rate_in: float = 0.0
    msg_rate_out: float = 0.0
    bandwidth_in: float = 0.0
    bandwidth_out: float = 0.0
    memory: float = 0.0
    dynamic: bool = True

    def to_json(self) -> JsonDoc:
        rates = (self.msg_rate_in, self.msg_rate_out, self.bandwidth_in, self.bandwidth_out, self.memory)
        return {**dict(zip(RESOURCE_QUOTA_RATES, rates, strict=True)), "dynamic": self.dynamic}

    @classmethod
    def from_json(cls, doc: Any) -> ResourceQuota:
        """A ResourceQuota read as Pulsar's Jackson reads one (a request's body, a stored node): a JSON object whose
        fields not given keep the constructor's values and whose unknown fields are ignored; a rate is a number or
        the text of one, null 0.0; ``dynamic`` a boolean, an integer (0 false, else true), "true" / "false" (any of
        Java's three spellings), null false. ValueError naming the field otherwise. Not as Jackson: a rate that is
        not finite ("NaN", "Infinity", 1e400), which Jackson takes and writes back as the text "NaN" or "Infinity"
        (read here from a node, such a quota is none)."""
        if not isinstance(doc, dict):
            raise ValueError(f"a ResourceQuota is a JSON object {{{', '.join(RESOURCE_QUOTA_RATES)}, dynamic}}, "
                             f"not {json.dumps(doc)[:100]}")
        rate_in, rate_out, bandwidth_in, bandwidth_out, memory = (_quota_rate(name, doc.get(name, 0.0))
                                                                  for name in RESOURCE_QUOTA_RATES)
        return cls(rate_in, rate_out, bandwidth_in, bandwidth_out, memory, _quota_flag(doc.get("dynamic", True)))


def _quota_rate(name: str, value: Any) -> float:
    if value is None:
        return 0.0
    if isinstance(value, str) and _DECIMAL.fullmatch(value.strip()):
        value = float(value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be a number, got {json.dumps(value)[:100]}")
    rate = float(value)
    if not math.isfinite(rate):
        raise ValueError(f"{name} must be a finite number, got {value}")
    return rate


def _quota_flag(value: Any) -> bool:
    if value is None:
        return False
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value != 0
    if isinstance(value, str) and value in _JAVA_BOOLEAN_TEXT:
        return _JAVA_BOOLEAN_TEXT[value]
    raise ValueError(f"dynamic must be true or false, got {json.dumps(value)[:100]}")


def _quota_decode(value: bytes) -> ResourceQuota | None:
    """A stored quota; None for an empty node (a path's parent), ``null`` (Pulsar 4.0.7 writes that for a POST with
    no body; its readers take it as no quota) or one that is no ResourceQuota (logged: the default answers)."""
    try:
        doc = decode_json(value)
        return None if doc is None else ResourceQuota.from_json(doc)
    except ValueError as exc:
        log.warning("metadata: ignoring a resource quota that is not one (%s): %r", exc, value[:200])
        return None


def _quota_encode(quota: ResourceQuota) -> bytes:
    return encode_json(quota.to_json())


RESOURCE_QUOTAS = Kind("resource_quotas", RESOURCE_QUOTA_ROOT, 3, lambda k: k.split("/", 2), "/".join, _quota_decode,
                       _quota_encode)
DEFAULT_RESOURCE_QUOTA = Kind("default_resource_quota", RESOURCE_QUOTA_ROOT, 1, lambda k: [k], _only_key,
                              _quota_decode, _quota_encode, only=DEFAULT_RESOURCE_QUOTA_NODE)

KINDS = (CLUSTERS, TENANTS, NAMESPACES, LOCAL_POLICIES, ISOLATION_POLICIES, FAILURE_DOMAINS, PARTITIONED_TOPICS,
         TOPIC_POLICIES, GLOBAL_TOPIC_POLICIES, TOPIC_PROPERTIES, TERMINATED, COMPACTIONS, GLOBAL_POLICY_COPIES,
         SCHEMAS, DYNAMIC_CONFIGURATION, RESOURCE_QUOTAS, DEFAULT_RESOURCE_QUOTA)


def classify(path: str) -> tuple[Kind, str] | None:
    """The kind and key of the record ``path`` holds (or is a schema version of), or None."""
    for kind in KINDS:
        key = kind.key_of(path)
        if key is not None:
            return kind, key
    return None


def directory_of(kind: Kind, path: str) -> bool:
    """Whether ``path`` is a directory above records of ``kind``: its root, an ancestor of the root,
    or a key's leading part below it (``/admin/policies/<tenant>`` for namespaces)."""
    if path == "/" or kind.root == path or kind.root.startswith(path + "/"):
        return True
    if not path.startswith(kind.root + "/"):
        return False
    return len(path[len(kind.root) + 1:].split("/")) < kind.depth
