"""Which broker gets a bundle nobody owns: the rules of Pulsar's default ``ModularLoadManagerImpl``.

``selectBrokerForAssignment`` narrows the candidates in steps; we follow the two that apply to us:

1. ``LoadManagerShared.removeMostServicingBrokersForNamespace``: keep only the brokers serving the fewest bundles of
   the bundle's namespace (counting the bundles each reports in its ``LocalBrokerData`` plus those the leader
   assigned to it that its report does not show yet, Pulsar's "preallocated" bundles), so that a namespace's
   bundles spread over the brokers;
2. the default placement strategy, ``LeastLongTermMessageRate``: among those, a broker whose highest resource usage
   (``getMaxResourceUsageWithWeight``, the ``loadBalancer...ResourceWeight`` keys) is above
   ``loadBalancerBrokerOverloadedThresholdPercentage`` (85 %) scores infinity, the others score their message rate
   in + out; the best score wins, ties broken at random (all overloaded: any candidate);
3. when the broker chosen is overloaded, the choice is made again among all the brokers (``selectBroker``'s last
   step), so a namespace's spreading does not pin a bundle to an overloaded broker.

A bundle the leader's load shedding (``broker.cluster.load_manager``) moved has an *affinity*: the broker the
leader chose for it before asking its owner to unload it (Pulsar's ``setNamespaceBundleAffinity``, set by an
unload with ``destinationBroker``); the next assignment of that bundle takes it (once) when that broker is still
registered (Pulsar's ``ModularLoadManagerWrapper.getLeastLoaded``), so a shed bundle does not come back to the
broker it left.

Not followed: namespace isolation policies and anti-affinity groups, and Pulsar's long-term averages of the rates
(we use the last reported rates).
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Mapping

from broker.cluster.bundles import NamespaceBundle
from broker.cluster.data import LoadReport, ResourceWeights

# Pulsar's loadBalancerBrokerOverloadedThresholdPercentage.
OVERLOADED_THRESHOLD = 0.85
# How long an assignment counts for its broker before its load report shows it (then the report counts it).
PREALLOCATION_TTL_S = 60.0


class Placement:
    def __init__(self, rng: random.Random | None = None, weights: ResourceWeights | None = None,
                 overloaded: float = OVERLOADED_THRESHOLD) -> None:
        self._rng = rng or random.Random()
        self.weights = weights or ResourceWeights()
        self.overloaded = overloaded
        # bundle ("tenant/ns/0x.._0x..") -> (broker id, when assigned)
        self.preallocated: dict[str, tuple[str, float]] = {}
        # bundle -> the broker the load shedding sent it to (Pulsar keys it by the range alone; we by the bundle)
        self.affinity: dict[str, str] = {}

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
        fewest = min(counts.values())
        chosen = self._least_loaded(sorted(b for b, n in counts.items() if n == fewest), brokers)
        if brokers[chosen].max_resource_usage_with_weight(self.weights) > self.overloaded:
            chosen = self._least_loaded(sorted(brokers), brokers)
        return chosen

    def _least_loaded(self, candidates: list[str], brokers: Mapping[str, LoadReport]) -> str:
        scores = {b: self._score(brokers[b]) for b in candidates}
        best = min(scores.values())
        winners = [b for b in candidates if scores[b] == best] if best < math.inf else candidates
        return self._rng.choice(winners)

    def _score(self, report: LoadReport) -> float:
        """LeastLongTermMessageRate.getScore, with the last reported rates."""
        if report.max_resource_usage_with_weight(self.weights) > self.overloaded:
            return math.inf
        return report.msg_rate_in + report.msg_rate_out
