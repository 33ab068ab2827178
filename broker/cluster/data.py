"""What brokers write about themselves in the metadata store, in Apache Pulsar's JSON (sans-IO values).

- ``/loadbalance/brokers/<host:webport>``: the broker's ``LocalBrokerData`` (its URLs, advertised listeners and
  load report), an ephemeral node (``LoadManager.LOADBALANCE_BROKERS_ROOT``; the name is Pulsar's broker id).
- ``/loadbalance/leader``: ``LeaderBroker`` ``{"brokerId", "serviceUrl"}`` (the web service URL), ephemeral.
- ``/namespace/<tenant>/<ns>/<0xlower_0xupper>``: the owner of a bundle, ``NamespaceEphemeralData``
  ``{"nativeUrl", "nativeUrlTls", "httpUrl", "httpUrlTls", "disabled", "advertisedListeners"}``, ephemeral
  (``OwnershipCache``; ``disabled`` is set while the owner unloads the bundle).

An advertised listener is ``{"brokerServiceUrl": ..., "brokerServiceUrlTls": ...}`` (Pulsar's
``AdvertisedListener``, its URIs written as strings). Unknown fields are ignored when reading, absent ones default,
as Jackson does with Pulsar's classes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

LOADBALANCE_BROKERS_ROOT = "/loadbalance/brokers"
LEADER_PATH = "/loadbalance/leader"
OWNERSHIP_ROOT = "/namespace"  # ServiceUnitUtils.OWNER_INFO_ROOT


class ClusterDataError(ValueError):
    """A node's value is not the JSON Pulsar writes there."""


@dataclass(frozen=True)
class ListenerUrls:
    url: str | None  # pulsar://
    url_tls: str | None  # pulsar+ssl://

    def to_json(self) -> dict[str, str]:
        out = {}
        if self.url:
            out["brokerServiceUrl"] = self.url
        if self.url_tls:
            out["brokerServiceUrlTls"] = self.url_tls
        return out

    @classmethod
    def from_json(cls, data: Any) -> ListenerUrls:
        if not isinstance(data, dict):
            raise ClusterDataError(f"advertised listener: expected an object, got {data!r}")
        return cls(_opt_str(data.get("brokerServiceUrl")), _opt_str(data.get("brokerServiceUrlTls")))


@dataclass(frozen=True)
class BrokerUrls:
    """How a broker is reached: Pulsar's broker id (``host:webport``), its service and web URLs, its listeners."""

    broker_id: str
    pulsar_url: str | None
    pulsar_url_tls: str | None
    web_url: str | None
    web_url_tls: str | None
    listeners: Mapping[str, ListenerUrls] = field(default_factory=dict)

    def for_listener(self, name: str | None) -> ListenerUrls | None:
        """The pulsar:// and pulsar+ssl:// URLs a client naming ``name`` (or none) is given; None when this broker
        has no such listener."""
        if not name:
            return ListenerUrls(self.pulsar_url, self.pulsar_url_tls)
        return self.listeners.get(name)


@dataclass(frozen=True)
class NamespaceEphemeralData:
    native_url: str | None
    native_url_tls: str | None
    http_url: str | None
    http_url_tls: str | None
    disabled: bool = False
    listeners: Mapping[str, ListenerUrls] = field(default_factory=dict)

    @classmethod
    def of(cls, urls: BrokerUrls, disabled: bool = False) -> NamespaceEphemeralData:
        return cls(urls.pulsar_url, urls.pulsar_url_tls, urls.web_url, urls.web_url_tls, disabled,
                   dict(urls.listeners))

    def with_disabled(self, disabled: bool) -> NamespaceEphemeralData:
        return NamespaceEphemeralData(self.native_url, self.native_url_tls, self.http_url, self.http_url_tls,
                                      disabled, self.listeners)

    def same_owner(self, other: NamespaceEphemeralData) -> bool:
        """The same broker (its URLs), whatever the disabled flag."""
        return self.with_disabled(False) == other.with_disabled(False)

    def urls(self) -> BrokerUrls:
        return BrokerUrls("", self.native_url, self.native_url_tls, self.http_url, self.http_url_tls,
                          self.listeners)

    def to_bytes(self) -> bytes:
        return json.dumps({
            "nativeUrl": self.native_url, "nativeUrlTls": self.native_url_tls, "httpUrl": self.http_url,
            "httpUrlTls": self.http_url_tls, "disabled": self.disabled,
            "advertisedListeners": {name: u.to_json() for name, u in self.listeners.items()},
        }).encode()

    @classmethod
    def from_bytes(cls, raw: bytes) -> NamespaceEphemeralData:
        data = _object(raw, "NamespaceEphemeralData")
        listeners = data.get("advertisedListeners") or {}
        if not isinstance(listeners, dict):
            raise ClusterDataError("NamespaceEphemeralData: advertisedListeners is not an object")
        return cls(_opt_str(data.get("nativeUrl")), _opt_str(data.get("nativeUrlTls")),
                   _opt_str(data.get("httpUrl")), _opt_str(data.get("httpUrlTls")), bool(data.get("disabled", False)),
                   {str(k): ListenerUrls.from_json(v) for k, v in listeners.items()})


@dataclass(frozen=True)
class LeaderBroker:
    broker_id: str
    service_url: str  # the leader's web service URL (Pulsar writes getSafeWebServiceAddress())

    def to_bytes(self) -> bytes:
        return json.dumps({"brokerId": self.broker_id, "serviceUrl": self.service_url}).encode()

    @classmethod
    def from_bytes(cls, raw: bytes) -> LeaderBroker:
        data = _object(raw, "LeaderBroker")
        service_url = _opt_str(data.get("serviceUrl")) or ""
        broker_id = _opt_str(data.get("brokerId"))
        if broker_id is None:  # older Pulsar wrote only the URL: the id is its host:port
            broker_id = service_url.split("://", 1)[-1].rstrip("/")
        return cls(broker_id, service_url)


@dataclass(frozen=True)
class BundleLoad:
    """One bundle's load in a broker's report: Pulsar's ``NamespaceBundleStats`` (``LocalBrokerData.lastStats``)."""

    msg_rate_in: float = 0.0
    msg_rate_out: float = 0.0
    msg_throughput_in: float = 0.0  # bytes per second
    msg_throughput_out: float = 0.0
    consumer_count: int = 0
    producer_count: int = 0
    topics: int = 0

    @property
    def throughput(self) -> float:
        return self.msg_throughput_in + self.msg_throughput_out

    def to_json(self) -> dict[str, float | int]:
        return {"msgRateIn": self.msg_rate_in, "msgThroughputIn": self.msg_throughput_in,
                "msgRateOut": self.msg_rate_out, "msgThroughputOut": self.msg_throughput_out,
                "consumerCount": self.consumer_count, "producerCount": self.producer_count,
                "topics": self.topics, "cacheSize": 0}

    @classmethod
    def from_json(cls, data: Any) -> BundleLoad:
        if not isinstance(data, dict):
            return cls()
        return cls(_num(data.get("msgRateIn")), _num(data.get("msgRateOut")), _num(data.get("msgThroughputIn")),
                   _num(data.get("msgThroughputOut")), int(_num(data.get("consumerCount"))),
                   int(_num(data.get("producerCount"))), int(_num(data.get("topics"))))


# What placement weighs brokers' usage with: dynamic settings (``LoadManager.placement_settings_changed``).
PLACEMENT_SETTINGS = (
    "loadBalancerCPUResourceWeight", "loadBalancerMemoryResourceWeight", "loadBalancerDirectMemoryResourceWeight",
    "loadBalancerBandwidthInResourceWeight", "loadBalancerBandwidthOutResourceWeight",
    "loadBalancerBrokerOverloadedThresholdPercentage", "loadBalancerHistoryResourcePercentage",
    "loadBalancerAverageResourceUsageDifferenceThresholdPercentage",
)


@dataclass(frozen=True)
class ResourceWeights:
    """Pulsar's loadBalancer{CPU,Memory,DirectMemory,BandwidthIn,BandwidthOut}ResourceWeight (4.0 defaults)."""

    cpu: float = 1.0
    memory: float = 0.0
    direct_memory: float = 0.0
    bandwidth_in: float = 1.0
    bandwidth_out: float = 1.0


@dataclass(frozen=True)
class LoadReport:
    """A broker's ``LocalBrokerData``: its URLs and its load (what placement reads back)."""

    urls: BrokerUrls
    cpu_usage: float = 0.0  # percent of one core... as Pulsar: usage and limit, both in percent of the limit's unit
    cpu_limit: float = 100.0
    memory_usage_mb: float = 0.0
    memory_limit_mb: float = 0.0
    msg_rate_in: float = 0.0
    msg_rate_out: float = 0.0
    msg_throughput_in: float = 0.0
    msg_throughput_out: float = 0.0
    num_topics: int = 0
    num_bundles: int = 0
    num_consumers: int = 0
    num_producers: int = 0
    bundles: tuple[str, ...] = ()  # "tenant/ns/0x..._0x..."
    last_update_ms: int = 0
    version: str = ""
    start_timestamp_ms: int = 0
    # Kbit/s as Pulsar's bandwidthIn/Out (usage and limit); a limit of 0: unknown, the resource is not counted.
    bandwidth_in_usage: float = 0.0
    bandwidth_in_limit: float = 0.0
    bandwidth_out_usage: float = 0.0
    bandwidth_out_limit: float = 0.0
    bundle_stats: Mapping[str, BundleLoad] = field(default_factory=dict)  # lastStats, by bundle name

    def _shares(self) -> tuple[float, float, float]:
        """CPU, bandwidth in and out, each as a fraction of its limit. Pulsar 4.0.7's LocalBrokerData counts these
        and direct memory (0 in our reports: there is none), never the ``memory`` it reports (the JVM heap there,
        our process's resident memory here)."""
        return (_share(self.cpu_usage, self.cpu_limit), _share(self.bandwidth_in_usage, self.bandwidth_in_limit),
                _share(self.bandwidth_out_usage, self.bandwidth_out_limit))

    @property
    def max_resource_usage(self) -> float:
        """Pulsar's getMaxResourceUsage: the highest usage / limit among CPU, direct memory and bandwidth in and out,
        as a fraction."""
        return max(self._shares())

    def max_resource_usage_with_weight(self, w: ResourceWeights) -> float:
        """Pulsar's LocalBrokerData.getMaxResourceUsageWithWeight(cpu, directMemory, bandwidthIn, bandwidthOut
        weights): the highest weighted share (a fraction). Placement and every shedding strategy use it; the memory
        weight (``loadBalancerMemoryResourceWeight``) is not among its weights in 4.0.7's modular load manager."""
        cpu, bw_in, bw_out = self._shares()
        return max(cpu * w.cpu, bw_in * w.bandwidth_in, bw_out * w.bandwidth_out)

    def to_bytes(self) -> bytes:
        u = self.urls
        return json.dumps({
            "webServiceUrl": u.web_url, "webServiceUrlTls": u.web_url_tls,
            "pulsarServiceUrl": u.pulsar_url, "pulsarServiceUrlTls": u.pulsar_url_tls,
            "persistentTopicsEnabled": True, "nonPersistentTopicsEnabled": True,
            "cpu": {"usage": self.cpu_usage, "limit": self.cpu_limit},
            "memory": {"usage": self.memory_usage_mb, "limit": self.memory_limit_mb},
            "directMemory": {"usage": 0.0, "limit": 0.0},
            "bandwidthIn": {"usage": self.bandwidth_in_usage, "limit": self.bandwidth_in_limit},
            "bandwidthOut": {"usage": self.bandwidth_out_usage, "limit": self.bandwidth_out_limit},
            "msgThroughputIn": self.msg_throughput_in, "msgThroughputOut": self.msg_throughput_out,
            "msgRateIn": self.msg_rate_in, "msgRateOut": self.msg_rate_out,
            "lastUpdate": self.last_update_ms,
            "lastStats": {name: load.to_json() for name, load in self.bundle_stats.items()},
            "numTopics": self.num_topics, "numBundles": self.num_bundles,
            "numConsumers": self.num_consumers, "numProducers": self.num_producers,
            "bundles": list(self.bundles), "lastBundleGains": [], "lastBundleLosses": [],
            "brokerVersionString": self.version, "protocols": {},
            "advertisedListeners": {name: listener.to_json() for name, listener in u.listeners.items()},
            "loadReportType": "LocalBrokerData",
            "maxResourceUsage": self.max_resource_usage,
            "startTimestamp": self.start_timestamp_ms,
        }).encode()

    @classmethod
    def from_bytes(cls, broker_id: str, raw: bytes) -> LoadReport:
        data = _object(raw, "LocalBrokerData")
        listeners = data.get("advertisedListeners") or {}
        if not isinstance(listeners, dict):
            raise ClusterDataError("LocalBrokerData: advertisedListeners is not an object")
        urls = BrokerUrls(broker_id, _opt_str(data.get("pulsarServiceUrl")),
                          _opt_str(data.get("pulsarServiceUrlTls")), _opt_str(data.get("webServiceUrl")),
                          _opt_str(data.get("webServiceUrlTls")),
                          {str(k): ListenerUrls.from_json(v) for k, v in listeners.items()})
        cpu = _usage(data.get("cpu"))
        memory = _usage(data.get("memory"))
        bundles = data.get("bundles") or []
        bw_in, bw_out = _usage(data.get("bandwidthIn")), _usage(data.get("bandwidthOut"))
        last_stats = data.get("lastStats") or {}
        return cls(urls, cpu[0], cpu[1], memory[0], memory[1],
                   _num(data.get("msgRateIn")), _num(data.get("msgRateOut")),
                   _num(data.get("msgThroughputIn")), _num(data.get("msgThroughputOut")),
                   int(_num(data.get("numTopics"))), int(_num(data.get("numBundles"))),
                   int(_num(data.get("numConsumers"))), int(_num(data.get("numProducers"))),
                   tuple(str(b) for b in bundles) if isinstance(bundles, list) else (),
                   int(_num(data.get("lastUpdate"))), _opt_str(data.get("brokerVersionString")) or "",
                   int(_num(data.get("startTimestamp"))), bw_in[0], bw_in[1], bw_out[0], bw_out[1],
                   {str(k): BundleLoad.from_json(v) for k, v in last_stats.items()}
                   if isinstance(last_stats, dict) else {})


def _share(usage: float, limit: float) -> float:
    return usage / limit if limit > 0 else 0.0


def _object(raw: bytes, what: str) -> dict[str, Any]:
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ClusterDataError(f"{what}: not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ClusterDataError(f"{what}: expected a JSON object")
    return data


def _opt_str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _num(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def _usage(value: Any) -> tuple[float, float]:
    if not isinstance(value, dict):
        return 0.0, 0.0
    return _num(value.get("usage")), _num(value.get("limit"))
