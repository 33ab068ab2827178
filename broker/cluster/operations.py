"""Split and unload of namespace bundles (Pulsar's NamespacesBase.internalSplitNamespaceBundle /
NamespaceService.splitAndOwnBundle, and the unload), and the automatic split (BundleSplitterTask).

``BundleOperations`` checks a request as Pulsar does, then changes the metadata
(``BrokerMetadata.split_bundle``: compare-and-set) and tells ownership:

- a bundle name that is malformed or not one of the namespace's bundles now: 412 (Pulsar's
  ``validateNamespaceBundleRange``: "Invalid bundle range", "Cannot find bundle in the bundles
  list"); ``LARGEST`` / ``HOT`` name the bundle with the most topics / the most traffic (404 when
  the namespace has none);
- a split algorithm the broker does not support (``supportedNamespaceBundleSplitAlgorithms``):
  412 "Unsupported namespace bundle split algorithm, ..."; ``specified_positions_divide`` without
  boundaries: 412; no algorithm: ``defaultNamespaceBundleSplitAlgorithm``;
- a bundle of one hash: 412 "... can't be split further" (Pulsar lets this IllegalArgumentException
  surface as a 500; the caller is at fault, so we say 412);
- an algorithm that finds no boundary (too few topics, positions outside the bundle, too little
  traffic): nothing is split and the request succeeds, as in Pulsar.

``BundleSplitter.run_once`` is one round of the automatic split; its owner runs it every
``loadBalancerSplitIntervalMinutes`` (on a single broker always; in cluster mode only on the
leader: ``should_run``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from broker.cluster import split as S
from broker.cluster.ownership import BundleOwnership
from broker.config import BrokerConfig
from broker.metadata.bundles import BundleError, NamespaceBundle, NamespaceBundles, parse_boundary
from broker.metadata.store import BrokerMetadata, NotFoundError
from broker.tasks import all_done
from broker.topic_name import TopicName

log = logging.getLogger(__name__)

# Pulsar's BundleType: split the bundle with the most topics / the most traffic.
LARGEST = "LARGEST"
HOT = "HOT"


class BundleOperationError(Exception):
    """A refused bundle operation, with the HTTP status Pulsar answers."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class SplitResult:
    parent: NamespaceBundle
    children: tuple[NamespaceBundle, ...]  # empty: the algorithm found no boundary, nothing split
    bundles: NamespaceBundles  # the namespace's bundles now


def thresholds_of(config: BrokerConfig) -> S.SplitThresholds:
    return S.SplitThresholds(
        max_topics=config.loadBalancerNamespaceBundleMaxTopics,
        max_sessions=config.loadBalancerNamespaceBundleMaxSessions,
        max_msg_rate=config.loadBalancerNamespaceBundleMaxMsgRate,
        max_bandwidth_mbytes=config.loadBalancerNamespaceBundleMaxBandwidthMbytes,
        max_bundles=config.loadBalancerNamespaceMaximumBundles,
        flow_or_qps_difference_percent=config.flowOrQpsDifferenceThresholdPercentage)


class BundleOperations:
    """``topics_of(ns)``: the namespace's topics (partitions by name), what Pulsar's
    getOwnedTopicListForNamespaceBundle lists; ``loads()``: the loaded topics' load."""

    def __init__(self, metadata: BrokerMetadata, ownership: Callable[[], BundleOwnership], config: BrokerConfig,
                 topics_of: Callable[[str], Sequence[str]], loads: Callable[[], Sequence[S.TopicLoad]]) -> None:
        self.metadata = metadata
        self._ownership = ownership
        self.config = config
        self.topics_of = topics_of
        self.loads = loads

    @property
    def ownership(self) -> BundleOwnership:
        return self._ownership()

    # -- naming a bundle -----------------------------------------------------------------------------
    def bundle(self, namespace: str, range_name: str) -> NamespaceBundle:
        """One of the namespace's bundles now, by its range name; 412 otherwise (Pulsar's wording)."""
        bundles = self._bundles(namespace)
        wanted = parse_bundle_range(namespace, range_name)
        if wanted.lower not in bundles.boundaries[:-1]:
            raise BundleOperationError(412, f"Cannot find bundle {wanted} in the bundles list")
        if wanted not in bundles.bundles:
            expected = bundles.bundle_of_hash(wanted.lower)
            raise BundleOperationError(412, f"Invalid upper boundary for bundle {wanted}. Expected upper boundary of "
                                            f"{expected}")
        return wanted

    def _bundles(self, namespace: str) -> NamespaceBundles:
        try:
            return self.metadata.namespace_bundles(namespace)
        except NotFoundError:
            raise BundleOperationError(404, "Namespace does not exist") from None

    def _named(self, namespace: str, name: str) -> NamespaceBundle:
        if name not in (LARGEST, HOT):
            return self.bundle(namespace, name)
        bundles = self._bundles(namespace).bundles
        if name == LARGEST:
            topics = self.topics_of(namespace)
            scores = [(float(sum(1 for t in topics if b.includes(t))), b) for b in bundles]
        else:
            loads = [t for t in self.loads() if TopicName.parse(t.name).namespace == namespace]
            scores = [(sum(t.throughput for t in loads if b.includes(t.name)), b) for b in bundles]
        best = max(scores, key=lambda c: c[0])
        if best[0] <= 0:
            raise BundleOperationError(404, f"Bundle range {name} not found")
        return best[1]

    # -- split -----------------------------------------------------------------------------------------
    async def split(self, namespace: str, bundle_name: str, *, algorithm: str | None = None,
                    positions: Sequence[int] = (), unload: bool = False) -> SplitResult:
        algo = split_algorithm(self.config, algorithm, positions)
        parent = self._named(namespace, bundle_name)
        if not parent.can_split:
            raise BundleOperationError(412, f"{parent} bundle can't be split further since range not larger than 1")
        points = S.split_points(algo, parent, topics=self.topics_of(namespace), loads=self.loads(),
                                positions=positions, thresholds=thresholds_of(self.config))
        if not points:
            log.info("[%s] No valid boundary found in %s to split bundle %s (%s)", namespace, list(positions),
                     parent.range_name, algo)
            return SplitResult(parent, (), self.metadata.namespace_bundles(namespace))
        try:
            _, children = self.metadata.namespace_bundles(namespace).split(parent, points)
        except BundleError as exc:
            raise BundleOperationError(412, str(exc)) from None
        written: list[NamespaceBundles] = []

        async def write_bundles() -> None:
            written.append(await self.metadata.split_bundle(namespace, parent, points))

        try:  # (the children are owned before the new boundaries are written, as Pulsar's splitAndOwnBundle)
            await self.ownership.bundle_split(parent, children, write_bundles)
        except NotFoundError as exc:  # split by someone else meanwhile
            raise BundleOperationError(412, exc.message) from None
        except BundleError as exc:
            raise BundleOperationError(412, str(exc)) from None
        bundles = written[0]
        log.info("[%s] split bundle %s into %s (%s)", namespace, parent.range_name,
                 [c.range_name for c in children], algo)
        if unload:
            for child in children:
                await self.ownership.unload_bundle(child)
        return SplitResult(parent, children, bundles)

    # -- unload ----------------------------------------------------------------------------------------
    async def unload(self, namespace: str, bundle_name: str | None = None) -> int:
        """Unload one bundle (by range name) or, with None, every bundle of the namespace, all at once as Pulsar's
        namespace unload does (their topic closes share the broker's bound), so that a slow bundle does not hold the
        others; returns how many topics were closed. A bundle that fails does not stop the others; the first
        failure is raised once all are done."""
        targets = [self.bundle(namespace, bundle_name)] if bundle_name is not None else \
            list(self._bundles(namespace).bundles)
        return sum(await all_done(self.ownership.unload_bundle(b) for b in targets))


def parse_bundle_range(namespace: str, range_name: str) -> NamespaceBundle:
    """A bundle named by its range (``0x00000000_0x40000000``), whether or not it is one of the namespace's now;
    412 when the name is malformed (Pulsar's NamespaceBundleFactory.getBundle throws there; we say 412, the caller
    being at fault, as for a range that is not one of the namespace's bundles). A name without "_" gets
    Pulsar's words (PulsarWebResource.validateNamespaceBundleRange)."""
    if "_" not in range_name:
        raise BundleOperationError(412, f"Invalid bundle range: {range_name}")
    try:
        return NamespaceBundle.parse(namespace, range_name)
    except BundleError as exc:
        raise BundleOperationError(412, f"Invalid bundle range: {range_name} ({exc})") from None


def split_algorithm(config: BrokerConfig, name: str | None, positions: Sequence[int]) -> str:
    """The algorithm a split request asks for, checked as Pulsar's admin checks it (before anything about the
    namespace or the bundle)."""
    supported = config.supportedNamespaceBundleSplitAlgorithms
    if name:
        if name not in supported:
            raise BundleOperationError(412, "Unsupported namespace bundle split algorithm, supported "
                                            f"algorithms are {supported}")
        if name == S.SPECIFIED_POSITIONS_DIVIDE and not positions:
            raise BundleOperationError(412, "With specified_positions_divide split algorithm, "
                                            "splitBoundaries must not be empty")
        return name
    return config.defaultNamespaceBundleSplitAlgorithm


def parse_split_positions(body: Any) -> list[int]:
    """A split request's body: Pulsar's ``List<Long> splitBoundaries`` (we also take hex strings such as
    ``"0x50000000"``); no body is no positions. 400 for another shape, as Pulsar's JSON binding."""
    if body is None:
        return []
    if not isinstance(body, list):
        raise BundleOperationError(400, "Split boundaries must be a JSON array of positions, e.g. [1073741824]")
    positions = []
    for p in body:
        if isinstance(p, bool) or not isinstance(p, int | str):
            raise BundleOperationError(400, f"Invalid split boundary {p!r}: expected a number or a hex string")
        try:
            positions.append(parse_boundary(p) if isinstance(p, str) else parse_boundary(str(p)))
        except BundleError as exc:
            raise BundleOperationError(400, str(exc)) from None
    return positions


class BundleSplitter:
    """Pulsar's BundleSplitterTask and the load manager's split round: find the loaded bundles past
    a threshold and split each with the default algorithm (unloading the children when
    ``loadBalancerAutoUnloadSplitBundlesEnabled``). ``should_run()``: whether this broker runs it
    now (the leader, in cluster mode)."""

    def __init__(self, ops: BundleOperations, should_run: Callable[[], bool] = lambda: True) -> None:
        self.ops = ops
        self.should_run = should_run
        self.splits = 0  # bundles split so far (tests, logs)

    def choose(self) -> list[NamespaceBundle]:
        """The bundles this round would split (from the loaded topics' load)."""
        loads = self.ops.loads()
        namespaces = sorted({TopicName.parse(t.name).namespace for t in loads})
        stats: list[S.BundleStats] = []
        counts: dict[str, int] = {}
        for ns in namespaces:
            try:
                bundles = self.ops.metadata.namespace_bundles(ns)
            except NotFoundError:
                continue
            counts[ns] = len(bundles)
            stats.extend(s for s in (S.bundle_stats(b, loads) for b in bundles.bundles) if s.topics)
        return S.bundles_to_split(stats, counts, thresholds_of(self.ops.config))

    async def run_once(self) -> list[NamespaceBundle]:
        config = self.ops.config
        if not config.loadBalancerAutoBundleSplitEnabled or not self.should_run():
            return []
        done: list[NamespaceBundle] = []
        for bundle in self.choose():
            try:
                result = await self.ops.split(bundle.namespace, bundle.range_name,
                                              unload=config.loadBalancerAutoUnloadSplitBundlesEnabled)
            except BundleOperationError as exc:  # (split or removed meanwhile: next round sees it)
                log.info("automatic split of %s skipped: %s", bundle, exc.message)
                continue
            if result.children:
                log.info("Load-manager split bundle %s into %s", bundle, [c.range_name for c in result.children])
                self.splits += 1
                done.append(bundle)
        return done
