"""Which broker gets a bundle nobody owns: the rules of Pulsar's default ``ModularLoadManagerImpl``.

``selectBrokerForAssignment`` narrows the candidates in steps; we follow the two that apply to us:

1. ``LoadManagerShared.removeMostServicingBrokersForNamespace``: keep only the brokers serving the fewest bundles of
   the bundle's namespace (counting the bundles each reports in its ``LocalBrokerData`` plus those the leader
   assigned to it that its report does not show yet, Pulsar's "preallocated" bundles), so that a namespace's
   bundles spread over the brokers;
2. the default placement strategy, ``LeastLongTermMessageRate``: among those, a broker whose highest resource usage
   is above ``loadBalancerBrokerOverloadedThresholdPercentage`` (85 %) scores infinity, the others score their
   message rate in + out; the best score wins, ties broken at random (all overloaded: any candidate).

Not followed: namespace isolation policies and anti-affinity groups (we have neither), and Pulsar's long-term
averages of the rates (we use the last reported rates).
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Mapping

from broker.cluster.bundles import NamespaceBundle
from broker.cluster.data import LoadReport

# Pulsar's loadBalancerBrokerOverloadedThresholdPercentage.
OVERLOADED_THRESHOLD = 0.85
# How long an assignment counts for its broker before its load report shows it (then the report counts it).
PREALLOCATION_TTL_S = 60.0


class Placement:
    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()
        # bundle ("tenant/ns/0x.._0x..") -> (broker id, when assigned)
        self.preallocated: dict[str, tuple[str, float]] = {}

    def select(self, bundle: NamespaceBundle, brokers: Mapping[str, LoadReport]) -> str | None:
        """The broker id to own ``bundle``, or None when no broker is registered."""
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
        candidates = sorted(b for b, n in counts.items() if n == fewest)
        scores = {b: _score(brokers[b]) for b in candidates}
        best = min(scores.values())
        winners = [b for b in candidates if scores[b] == best] if best < math.inf else candidates
        chosen = self._rng.choice(winners)
        self.preallocated[str(bundle)] = (chosen, now)
        return chosen


def _score(report: LoadReport) -> float:
    """LeastLongTermMessageRate.getScore, with the last reported rates."""
    if report.max_resource_usage > OVERLOADED_THRESHOLD:
        return math.inf
    return report.msg_rate_in + report.msg_rate_out
