"""Which broker gets a bundle nobody owns: the rules of Pulsar's default ``ModularLoadManagerImpl``.

``selectBrokerForAssignment`` narrows the candidates in steps; we follow the two that apply to us:

1. ``LoadManagerShared.removeMostServicingBrokersForNamespace``: keep only the brokers serving the fewest bundles of
   the bundle's namespace (counting the bundles each reports in its ``LocalBrokerData`` plus those the leader
   assigned to it that its report does not show yet, Pulsar's "preallocated" bundles), so that a namespace's
   bundles spread over the brokers;
2. the placement strategy (``loadBalancerLoadPlacementStrategy``): with ``AvgShedder``, the broker its shedding
   planned for the bundle, else one at random (``broker.cluster.shedding``); with ``LeastResourceUsageWithWeight``,
   one at random of those well under the candidates' average smoothed usage (below); with the default,
   ``LeastLongTermMessageRate``: among those, a broker whose highest resource usage
   (``getMaxResourceUsageWithWeight``, the ``loadBalancer...ResourceWeight`` keys) is above
   ``loadBalancerBrokerOverloadedThresholdPercentage`` (85 %) scores infinity, the others score their long-term
   message rate in + out (that of the bundles they report plus that of the bundles just assigned to them, below);
   the best score wins, ties broken at random (all overloaded: any candidate);
3. when the broker chosen is overloaded, the choice is made again among all the brokers (``selectBroker``'s last
   step), so a namespace's spreading does not pin a bundle to an overloaded broker.

A bundle the leader's load shedding (``broker.cluster.load_manager``) moved has an *affinity*: the broker the
leader chose for it before asking its owner to unload it (Pulsar's ``setNamespaceBundleAffinity``, set by an
unload with ``destinationBroker``); the next assignment of that bundle takes it (once) when that broker is still
registered (Pulsar's ``ModularLoadManagerWrapper.getLeastLoaded``), so a shed bundle does not come back to the
broker it left.

Anti-affinity groups (``LoadManagerShared.filterAntiAffinityGroupOwnedBrokers``, before step 1): a bundle of a
namespace in a group goes to the brokers that serve the fewest namespaces of that group (none, when some broker
serves none), so the group's namespaces spread over the brokers as far as they go. With ``failureDomainsEnabled``
and failure domains defined for the cluster, the failure domains come first
(``filterDomainsNotHavingLeastNumberAntiAffinityNamespaces``): each domain counts the group's namespaces its
candidate brokers serve, and only the candidates of the domains with the least count stay; a broker no domain
lists is in the domain ``default`` (Pulsar's ``LoadManagerShared.DEFAULT_DOMAIN``). Then the brokers' own counts
decide among them. The broker -> domain map (``refreshBrokerToFailureDomainMap``) is read from the metadata cache
at each choice, which the store's notifications keep fresh (Pulsar's ``ModularLoadManagerImpl`` re-reads it on the
notifications of the failure domains' nodes). Load shedding does not look at domains (neither does Pulsar's
``shouldAntiAffinityNamespaceUnload``).

Namespace isolation policies (``LoadManagerShared.applyNamespacePolicies``, first of all): a namespace that a
policy's ``namespaces`` regexes match goes to the brokers whose host matches the policy's ``primary`` regexes, and
also to its ``secondary`` ones when fewer primaries than the ``min_available`` policy's ``min_limit`` are up; any other
namespace goes to the shared brokers (those no policy names as primary). No candidate: no broker (the lookup fails,
as in Pulsar). Regexes match the whole host (Java's ``matches``), the host being the broker id's (``host:webport``).

The default strategy's message rates are the leader's long-term averages of the bundles' loads over the reports
(``broker.cluster.load_history``), as Pulsar's ``TimeAverageBrokerData`` and ``preallocatedBundleData``.
"""

from __future__ import annotations

import logging
import math
import random
import re
import time
from collections.abc import Callable, Collection, Mapping
from typing import Any, Protocol

from broker.cluster.bundles import NamespaceBundle
from broker.cluster.data import LoadReport, ResourceWeights
from broker.cluster.load_history import LoadHistory

log = logging.getLogger(__name__)

# Pulsar's loadBalancerBrokerOverloadedThresholdPercentage.
OVERLOADED_THRESHOLD = 0.85
# How long an assignment counts for its broker before its load report shows it (then the report counts it).
PREALLOCATION_TTL_S = 60.0
# The failure domain of a broker that no domain lists (Pulsar's LoadManagerShared.DEFAULT_DOMAIN).
DEFAULT_DOMAIN = "default"


class PlacementStrategy(Protocol):
    """Pulsar's ``ModularLoadManagerStrategy.selectBroker``, for a strategy other than the default."""

    def select_broker(self, candidates: Collection[str], bundle: str,
                      brokers: Mapping[str, LoadReport]) -> str | None: ...


class LeastResourceUsageWithWeight:
    """Pulsar's placement strategy of that name: each candidate's weighted usage (as ThresholdShedder's), smoothed
    at every choice (``old x loadBalancerHistoryResourcePercentage + now x the rest``; a broker with no bundles or no
    messages in or out starts again from its usage now); the candidates at least
    ``loadBalancerAverageResourceUsageDifferenceThresholdPercentage`` points under the candidates' average are the
    best, one of them at random; none: any candidate at random (Pulsar logs them all as overloaded)."""

    def __init__(self, weights: ResourceWeights | None = None, history: float = 0.9, difference_percent: float = 10,
                 overloaded: float = OVERLOADED_THRESHOLD, rng: random.Random | None = None) -> None:
        self.weights = weights or ResourceWeights()
        self.history = history
        self.difference = difference_percent / 100.0
        self.overloaded = overloaded
        self._rng = rng or random.Random()
        self.avg_usage: dict[str, float] = {}

    def select_broker(self, candidates: Collection[str], bundle: str,
                      brokers: Mapping[str, LoadReport]) -> str | None:
        if not candidates:
            return None
        for gone in set(self.avg_usage) - set(brokers):  # (Pulsar's onActiveBrokersChange)
            del self.avg_usage[gone]
        ordered = sorted(candidates)
        total = sum(self._update(b, brokers[b]) for b in ordered)
        average = total / len(ordered)
        best = [b for b in ordered if self.avg_usage.get(b, 1.0) + self.difference <= average]
        if not best:
            log.warning("assign randomly as all %d brokers are overloaded", len(ordered))
            best = ordered
        return self._rng.choice(best)

    def _update(self, broker_id: str, report: LoadReport) -> float:
        before = self.avg_usage.get(broker_id)
        if not report.bundles or (report.msg_rate_in == 0 and report.msg_rate_out == 0):
            before = None  # (restarted, or idle: its usage now, not its history)
        now = report.max_resource_usage_with_weight(self.weights)
        usage = now if before is None else before * self.history + (1 - self.history) * now
        self.avg_usage[broker_id] = usage
        if usage > self.overloaded:
            log.warning("broker %s is overloaded: resource usage with weight %.1f %%", broker_id, usage * 100)
        return usage


class Placement:
    def __init__(self, rng: random.Random | None = None, weights: ResourceWeights | None = None,
                 overloaded: float = OVERLOADED_THRESHOLD) -> None:
        self._rng = rng or random.Random()
        self.weights = weights or ResourceWeights()
        self.overloaded = overloaded
        # namespace -> its anti-affinity group (the broker's metadata)
        self.group_of: Callable[[str], str | None] = lambda namespace: None
        # the cluster's namespace isolation policies (name -> NamespaceIsolationData), or None
        self.isolation: Callable[[], Mapping[str, Any] | None] = lambda: None
        # broker id -> its failure domain's name (empty: failure domains off, or none defined)
        self.failure_domains: Callable[[], Mapping[str, str]] = lambda: {}
        # bundle ("tenant/ns/0x.._0x..") -> (broker id, when assigned)
        self.preallocated: dict[str, tuple[str, float]] = {}
        # bundle -> the broker the load shedding sent it to (Pulsar keys it by the range alone; we by the bundle)
        self.affinity: dict[str, str] = {}
        # loadBalancerLoadPlacementStrategy: None for LeastLongTermMessageRate, else the strategy that picks among
        # the candidates (AvgShedder: the load manager's shedding instance, broker.cluster.shedding)
        self.strategy: PlacementStrategy | None = None
        # the bundles' load averaged over the reports (the leader's; sampled by the lookups and the load manager)
        self.history = LoadHistory()

    def set_affinity(self, bundle: str, broker_id: str | None) -> None:
        if broker_id:
            self.affinity[bundle] = broker_id
        else:
            self.affinity.pop(bundle, None)

    def select(self, bundle: NamespaceBundle, brokers: Mapping[str, LoadReport]) -> str | None:
        """The broker id to own ``bundle``, or None when no broker is registered (an assignment: counted for the
        chosen broker until its report shows the bundle)."""
        affine = self.affinity.pop(str(bundle), None)
        chosen = affine if affine in brokers else self.choose(bundle, brokers)
        if chosen is not None:
            self.preallocated[str(bundle)] = (chosen, time.monotonic())
        return chosen

    def choose(self, bundle: NamespaceBundle, brokers: Mapping[str, LoadReport]) -> str | None:
        """Pulsar's selectBroker: where ``bundle`` would go now (nothing recorded)."""
        if not brokers:
            return None
        now = time.monotonic()
        reported = {b for report in brokers.values() for b in report.bundles}
        self.preallocated = {b: (owner, at) for b, (owner, at) in self.preallocated.items()
                             if owner in brokers and b not in reported and now - at < PREALLOCATION_TTL_S}
        prefix = bundle.namespace + "/"
        counts = {broker_id: sum(1 for b in report.bundles if b.startswith(prefix)) for broker_id, report in
                  brokers.items()}
        for b, (owner, _) in self.preallocated.items():
            if b.startswith(prefix):
                counts[owner] += 1
        allowed = isolation_candidates(bundle.namespace, sorted(brokers), self.isolation() or {})
        if not allowed:
            return None
        candidates = allowed
        group = self.group_of(bundle.namespace)
        if group:
            candidates = spread_anti_affinity(candidates, self.group_counts(group, brokers), self.failure_domains())
        fewest = min(counts[b] for b in candidates)
        chosen = self._pick([b for b in candidates if counts[b] == fewest], brokers, str(bundle))
        if brokers[chosen].max_resource_usage_with_weight(self.weights) > self.overloaded:
            chosen = self._pick(allowed, brokers, str(bundle))
        return chosen

    def _pick(self, candidates: list[str], brokers: Mapping[str, LoadReport], bundle: str) -> str:
        """The placement strategy's choice among ``candidates`` (not empty)."""
        if self.strategy is not None:
            return self.strategy.select_broker(candidates, bundle, brokers) or candidates[0]
        return self._least_loaded(candidates, brokers)

    def group_counts(self, group: str, brokers: Mapping[str, LoadReport]) -> dict[str, int]:
        """Pulsar's getAntiAffinityNamespaceOwnedBrokers: broker -> how many namespaces of ``group`` it serves a
        bundle of (reported or assigned)."""
        served: dict[str, set[str]] = {b: {name.rsplit("/", 1)[0] for name in r.bundles} for b, r in brokers.items()}
        for name, (owner, _) in self.preallocated.items():
            served.setdefault(owner, set()).add(name.rsplit("/", 1)[0])
        wanted = group.lower()
        counts = {}
        for b, namespaces in served.items():
            n = sum(1 for ns in namespaces if (self.group_of(ns) or "").lower() == wanted)
            if n:
                counts[b] = n
        return counts

    def _least_loaded(self, candidates: list[str], brokers: Mapping[str, LoadReport]) -> str:
        scores = {b: self._score(b, brokers[b]) for b in candidates}
        best = min(scores.values())
        winners = [b for b in candidates if scores[b] == best] if best < math.inf else candidates
        return self._rng.choice(winners)

    def _score(self, broker_id: str, report: LoadReport) -> float:
        """LeastLongTermMessageRate.getScore: the long-term message rate of the broker's bundles and of those just
        assigned to it (``broker.cluster.load_history``: Pulsar's defaults for a bundle not seen yet)."""
        if report.max_resource_usage_with_weight(self.weights) > self.overloaded:
            return math.inf
        history = self.history
        assigned = sum(history.long_term_rate(b) for b, (owner, _) in self.preallocated.items() if owner == broker_id)
        return assigned + history.broker_long_term_rate(report)


def spread_anti_affinity(candidates: list[str], counts: Mapping[str, int],
                         domains: Mapping[str, str] | None = None) -> list[str]:
    """filterAntiAffinityGroupOwnedBrokers: keep the candidates serving the fewest namespaces of the group
    (``counts``: the brokers serving at least one), after keeping those of the failure domains whose candidates serve
    the fewest (``domains``: broker -> domain name; empty or None: no domain step)."""
    if not candidates:
        return candidates
    if domains:
        candidates = spread_over_domains(candidates, counts, domains)
    least = min(counts.get(b, 0) for b in candidates)
    return [b for b in candidates if counts.get(b, 0) == least]


def spread_over_domains(candidates: list[str], counts: Mapping[str, int], domains: Mapping[str, str]) -> list[str]:
    """filterDomainsNotHavingLeastNumberAntiAffinityNamespaces: the candidates of the failure domains whose candidates
    serve the fewest namespaces of the group (a broker in no domain: in ``DEFAULT_DOMAIN``)."""
    per_domain: dict[str, int] = {}
    for b in candidates:
        domain = domains.get(b, DEFAULT_DOMAIN)
        per_domain[domain] = per_domain.get(domain, 0) + counts.get(b, 0)
    least = min(per_domain.values())
    return [b for b in candidates if per_domain[domains.get(b, DEFAULT_DOMAIN)] == least]


def anti_affinity_allows_unload(current: str, candidates: list[str], counts: Mapping[str, int]) -> bool:
    """LoadManagerShared.shouldAntiAffinityNamespaceUnload: unloading a bundle of a group's namespace helps only if
    another candidate serves fewer of the group's namespaces, or not every candidate serves the same number."""
    if not counts:
        return True
    least = min(counts.get(b, 0) for b in candidates) if candidates else 0
    mine = counts.get(current, 0)
    if least == 0 or mine > least:
        return True
    return sum(1 for b in candidates if counts.get(b, 0) == least) != len(candidates)


def matches_any(patterns: Any, text: str) -> bool:
    """Whether one of ``patterns`` (a NamespaceIsolationData list of regular expressions) matches all of ``text``."""
    for pattern in patterns if isinstance(patterns, list) else []:
        try:
            if isinstance(pattern, str) and re.fullmatch(pattern, text):
                return True
        except re.error:
            continue
    return False


def broker_host(broker_id: str) -> str:
    return broker_id.rsplit(":", 1)[0] if ":" in broker_id else broker_id


def isolation_policy_of(namespace: str, policies: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The isolation policy (of the cluster's NamespaceIsolationData documents, by name) whose namespaces match
    ``namespace`` first, or None (NamespaceIsolationPolicies.getPolicyByNamespace)."""
    return next((p for _, p in sorted(policies.items())
                 if isinstance(p, dict) and matches_any(p.get("namespaces"), namespace)), None)


def isolation_candidates(namespace: str, brokers: list[str], policies: Mapping[str, Any]) -> list[str]:
    """LoadManagerShared.applyNamespacePolicies over NamespaceIsolationData documents: the brokers ``namespace`` may
    go to (in ``brokers``' order)."""
    policy = isolation_policy_of(namespace, policies)
    if policy is None:
        return [b for b in brokers if not any(isinstance(p, dict) and matches_any(p.get("primary"), broker_host(b))
                                              for p in policies.values())]
    primaries = [b for b in brokers if matches_any(policy.get("primary"), broker_host(b))]
    secondaries = [b for b in brokers if b not in primaries and matches_any(policy.get("secondary"), broker_host(b))]
    return primaries + secondaries if len(primaries) < min_limit(policy) else primaries


def min_limit(policy: Mapping[str, Any]) -> int:
    """The min_available auto-failover policy's ``min_limit`` (checked when the policy was written)."""
    params = (policy.get("auto_failover_policy") or {}).get("parameters") or {}
    try:
        return int(params.get("min_limit", 1))
    except (TypeError, ValueError):
        return 1
