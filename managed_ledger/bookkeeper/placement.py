"""Where a ledger's bookies go: rack-aware ensembles, as Apache Pulsar's brokers place them by default.

Pulsar's brokers (``bookkeeperClientRackawarePolicyEnabled``, true by default) give their BookKeeper client
BookKeeper's ``RackawareEnsemblePlacementPolicy``, with the racks from Pulsar's ``BookieRackAffinityMapping``: the
``/bookies`` node of the broker's metadata store, a ``BookiesRackConfiguration`` JSON
``{group: {bookie address: {"rack": ..., "hostname": ...}}}`` (what ``/admin/v2/bookies/racks-info`` edits). A bookie
without a rack there is in ``/default-rack`` (BookKeeper's ``NetworkTopology.DEFAULT_RACK``); a rack that is empty
or "/" counts as none, and one without a leading "/" gets one (``BookieRackAffinityMapping.getRack``).

The rule (BookKeeper 4.17's ``RackawareEnsemblePlacementPolicyImpl``, from its bytecode):

- a new ensemble: with bookies on fewer than two racks, a random pick (or, with the minimum enforced and a minimum
  above one, no ensemble). Otherwise the bookies are picked in ensemble order, each at random from the racks none
  of the previous picks (since the last reset) is on; when no such bookie fits, from any rack, and the next pick
  again avoids that one's rack. Every pick must let each write quorum it belongs to (entry e goes to positions
  e .. e + Qw - 1, round the ensemble) still reach ``min(Qw, bookkeeperClientMinNumRacksPerWriteQuorum)`` racks
  (``RRTopologyAwareCoverageEnsemble`` / ``RackQuorumCoverageSet``); when no bookie can, any bookie left is taken,
  unless ``bookkeeperClientEnforceMinNumRacksPerWriteQuorum`` is on (then only the first pick may do so) and the
  creation fails instead;
- a replacement for a failed bookie (an ensemble change): a bookie of the failed one's rack, else one on a rack
  none of the ensemble's other bookies is on, else (minimum not enforced) any bookie left;
- with the minimum enforced, bookies in ``/default-rack`` are never picked (``addDefaultRackBookiesIfMinNumRacks-
  IsEnforced``).

The first pick is from any rack: BookKeeper starts from its client's own rack when the client's host has one
configured (a broker on a bookie's machine), which ours does not look up.

Ours differs in one more point: a bookie's rack is looked up by its bookie id (the ``address:port`` the racks are stored
under) before its host. Pulsar resolves racks by host name or IP only, so that bookies sharing a host share a rack
(the last one configured wins); looked up by id, bookies on one machine (tests, a laptop) can have racks of their own.

Pure: no I/O; the randomness is a ``random.Random`` the caller passes (tests seed it).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from managed_ledger.bookkeeper.errors import NotEnoughBookiesError

if TYPE_CHECKING:
    from managed_ledger.api import ManagedLedgerConfig

# BookKeeper's NetworkTopology.DEFAULT_RACK: where a bookie with no rack is.
DEFAULT_RACK = "/default-rack"
# Pulsar's BookieResources / BookieRackAffinityMapping.BOOKIE_INFO_ROOT_PATH: the racks, in the broker's metadata store.
RACKS_PATH = "/bookies"
# Pulsar's ServiceConfiguration default of bookkeeperClientMinNumRacksPerWriteQuorum.
DEFAULT_MIN_RACKS_PER_WRITE_QUORUM = 2

RackConfiguration = dict[str, dict[str, dict[str, Any]]]  # BookiesRackConfiguration: group -> bookie -> BookieInfo


@dataclass(frozen=True)
class PlacementPolicy:
    """Pulsar's bookkeeperClientRackawarePolicyEnabled, bookkeeperClientMinNumRacksPerWriteQuorum and
    bookkeeperClientEnforceMinNumRacksPerWriteQuorum (with their defaults)."""

    rack_aware: bool = True
    min_racks_per_write_quorum: int = DEFAULT_MIN_RACKS_PER_WRITE_QUORUM
    enforce_min_racks: bool = False


PULSAR_DEFAULT_PLACEMENT = PlacementPolicy()


def normalize_rack(rack: object) -> str | None:
    """A BookieInfo's rack as the placement sees it (BookieRackAffinityMapping.getRack): None for none, empty or
    "/", else with a leading "/"."""
    if not isinstance(rack, str) or not rack or rack.strip() == "/":
        return None
    return rack if rack.startswith("/") else "/" + rack


def parse_rack_configuration(value: bytes | None) -> RackConfiguration:
    """The ``/bookies`` node's BookiesRackConfiguration; {} for none, an empty value or one that is not one (the
    groups and bookies of other shapes are left out)."""
    if not value:
        return {}
    try:
        doc = json.loads(value)
    except ValueError:
        return {}
    if not isinstance(doc, dict):
        return {}
    return {group: {b: dict(info) for b, info in bookies.items() if isinstance(info, dict)}
            for group, bookies in doc.items() if isinstance(bookies, dict)}


def _host(address: str) -> str:
    host = address.rsplit(":", 1)[0] if ":" in address else address
    return host.strip("[]")


class RackMap:
    """Each bookie's rack, from a BookiesRackConfiguration (groups in their JSON order; a bookie named twice: the
    last one)."""

    def __init__(self, configuration: Mapping[str, Mapping[str, Mapping[str, Any]]] | None = None) -> None:
        self._by_id: dict[str, str] = {}
        self._by_host: dict[str, str] = {}
        for bookies in (configuration or {}).values():
            for address, info in bookies.items():
                rack = normalize_rack(info.get("rack"))
                if rack is None:
                    continue
                self._by_id[address] = rack
                self._by_host[_host(address)] = rack
                hostname = info.get("hostname")
                if isinstance(hostname, str) and hostname:
                    self._by_host[hostname] = rack

    def __bool__(self) -> bool:
        """Whether any bookie has a rack."""
        return bool(self._by_id)

    def rack_of(self, bookie_id: str, address: str | None = None) -> str:
        """The bookie's rack: by its id, else by the host of its id or of its registered ``address``, else
        ``/default-rack``."""
        rack = self._by_id.get(bookie_id) or self._by_host.get(_host(bookie_id))
        if rack is None and address is not None:
            rack = self._by_id.get(address) or self._by_host.get(_host(address))
        return rack or DEFAULT_RACK


class _QuorumCoverage:
    """The racks one write quorum of the ensemble being built has (BookKeeper's RackQuorumCoverageSet)."""

    def __init__(self, write_quorum: int, min_racks: int) -> None:
        self.write_quorum, self.min_racks = write_quorum, min_racks
        self.seen = 0
        self.racks: set[str] = set()

    def allows(self, rack: str) -> bool:
        """Whether a bookie of ``rack`` can join and the quorum still reach its minimum of racks: the first
        ``Qw - min`` members may be anywhere, every later one must leave room for the racks still missing."""
        if self.write_quorum < 2 or self.seen + self.min_racks - 1 < self.write_quorum:
            return True
        racks = len(self.racks) + (rack not in self.racks)
        return racks >= self.min_racks or self.write_quorum - self.seen - 1 >= self.min_racks - racks


class _Ensemble:
    """An ensemble being built position by position, with the coverage of every write quorum
    (BookKeeper's RRTopologyAwareCoverageEnsemble): a bookie joins only where each quorum containing its position
    can still reach the minimum."""

    def __init__(self, ensemble_size: int, write_quorum: int, min_racks: int) -> None:
        self.size, self.write_quorum = ensemble_size, write_quorum
        self.quorums = [_QuorumCoverage(write_quorum, min_racks) for _ in range(ensemble_size)]
        self.chosen: list[str] = []

    def _quorums_of_next(self) -> list[_QuorumCoverage]:
        position = len(self.chosen)
        return [self.quorums[(start + self.size) % self.size]
                for start in range(position - self.write_quorum + 1, position + 1)]

    def allows(self, bookie: str, rack: str) -> bool:
        return bookie not in self.chosen and all(q.allows(rack) for q in self._quorums_of_next())

    def add(self, bookie: str, rack: str) -> None:
        for quorum in self._quorums_of_next():
            quorum.seen += 1
            quorum.racks.add(rack)
        self.chosen.append(bookie)


def new_ensemble(candidates: Sequence[str], rack_of: Callable[[str], str], ensemble_size: int, write_quorum: int,
                 policy: PlacementPolicy, rng: random.Random) -> list[str]:
    """A new ledger's ensemble from the writable ``candidates`` (see the module docstring); raises
    NotEnoughBookiesError."""
    min_racks = min(write_quorum, policy.min_racks_per_write_quorum)
    pool = _usable(candidates, rack_of, policy)
    racks = {b: rack_of(b) for b in pool}
    if len(set(racks.values())) < 2:
        if policy.enforce_min_racks and min_racks > 1:
            raise NotEnoughBookiesError(f"bookies on {len(set(racks.values()))} rack(s), every write quorum must span "
                                        f"{min_racks} (bookkeeperClientEnforceMinNumRacksPerWriteQuorum)")
        if len(pool) < ensemble_size:
            raise NotEnoughBookiesError(f"{len(pool)} writable bookies, ensemble of {ensemble_size} needed")
        return rng.sample(list(pool), ensemble_size)
    ensemble = _Ensemble(ensemble_size, write_quorum, min_racks)
    avoided: set[str] | None = None  # racks the next pick avoids; None: any rack (BookKeeper's NodeBase.ROOT)
    for _ in range(ensemble_size):
        first = not ensemble.chosen
        if not first:
            avoided = {racks[ensemble.chosen[-1]]} | (avoided or set())
        bookie = _pick(pool, racks, avoided, ensemble, rng)
        if bookie is None and avoided is not None:
            avoided = None  # from any rack, still keeping every write quorum able to reach its minimum
            bookie = _pick(pool, racks, None, ensemble, rng)
            if bookie is None and (first or not policy.enforce_min_racks):
                # (selectFromNetworkLocation's fallback: any bookie left, the racks aside)
                left = [b for b in pool if b not in ensemble.chosen]
                bookie = rng.choice(left) if left else None
        if bookie is None:
            raise NotEnoughBookiesError(
                f"no ensemble of {ensemble_size} with write quorums over {min_racks} racks from "
                f"{len(pool)} writable bookies on racks {sorted(set(racks.values()))}")
        ensemble.add(bookie, racks[bookie])
    return ensemble.chosen


def replacement_bookie(candidates: Iterable[str], rack_of: Callable[[str], str], ensemble: Sequence[str],
                       replaced: str, policy: PlacementPolicy, rng: random.Random) -> str:
    """The bookie that takes ``replaced``'s place in ``ensemble``, from the writable ``candidates`` (those not to be
    used already left out); raises NotEnoughBookiesError."""
    others = [b for b in ensemble if b != replaced]
    pool = [b for b in _usable(candidates, rack_of, policy) if b not in others and b != replaced]
    rng.shuffle(pool)
    same_rack = rack_of(replaced)
    for bookie in pool:
        if rack_of(bookie) == same_rack:
            return bookie
    other_racks = {rack_of(b) for b in others}
    for bookie in pool:
        if rack_of(bookie) not in other_racks:
            return bookie
    if pool and not policy.enforce_min_racks:
        return pool[0]
    raise NotEnoughBookiesError(f"no bookie to replace {replaced}" + (
        f" on a rack other than {sorted(other_racks)}" if pool else ""))


def _usable(candidates: Iterable[str], rack_of: Callable[[str], str], policy: PlacementPolicy) -> list[str]:
    """The candidates a placement may pick: with the minimum enforced, none of ``/default-rack``."""
    if policy.enforce_min_racks:
        return [b for b in candidates if rack_of(b) != DEFAULT_RACK]
    return list(candidates)


def _pick(pool: Sequence[str], racks: Mapping[str, str], avoided: set[str] | None, ensemble: _Ensemble,
          rng: random.Random) -> str | None:
    """A random bookie of ``pool``, on no ``avoided`` rack, that the ensemble can take (selectRandomFromRack)."""
    order = list(pool)
    rng.shuffle(order)
    for bookie in order:
        rack = racks[bookie]
        if (avoided is None or rack not in avoided) and ensemble.allows(bookie, rack):
            return bookie
    return None


# ---- bookie isolation groups (Pulsar's IsolatedBookieEnsemblePlacementPolicy) --------------------------------------

# The ledger custom-metadata key under which Pulsar's ManagedLedgerImpl.asyncCreateLedger records the ledger's
# placement policy and its properties (EnsemblePlacementPolicyConfig.ENSEMBLE_PLACEMENT_POLICY_CONFIG), and the
# policy's class and property names (BookKeeperClientFactoryImpl, BrokerService.getManagedLedgerConfig).
PLACEMENT_POLICY_CONFIG_KEY = "EnsemblePlacementPolicyConfig"
ISOLATED_POLICY_CLASS = "org.apache.pulsar.bookie.rackawareness.IsolatedBookieEnsemblePlacementPolicy"
ISOLATION_GROUPS_PROPERTY = "isolationBookieGroups"
SECONDARY_ISOLATION_GROUPS_PROPERTY = "secondaryIsolationBookieGroups"
ANY_GROUP = "*"


def _group_names(value: object) -> frozenset[str]:
    """A comma-separated list of racks-info group names as IsolatedBookieEnsemblePlacementPolicy splits it (on ",",
    nothing trimmed; empty or none: no group)."""
    if not isinstance(value, str) or not value:
        return frozenset()
    return frozenset(value.split(","))


def isolation_of(config: ManagedLedgerConfig) -> IsolationGroups | None:
    """The isolation groups of a managed ledger's ``bookie_affinity`` (None: none of its own)."""
    affinity = config.bookie_affinity
    return None if affinity is None else IsolationGroups(*affinity)


@dataclass(frozen=True)
class IsolationGroups:
    """The racks-info groups a ledger's bookies come from: ``primary`` first, ``secondary`` when the primary groups
    have too few writable bookies (Pulsar's isolationBookieGroups / secondaryIsolationBookieGroups, comma-separated
    group names of the ``/bookies`` BookiesRackConfiguration; "*" among the primary: every bookie)."""

    primary: str = ""
    secondary: str = ""

    @property
    def primary_groups(self) -> frozenset[str]:
        return _group_names(self.primary)

    @property
    def secondary_groups(self) -> frozenset[str]:
        return _group_names(self.secondary)

    def properties(self) -> dict[str, str]:
        return {ISOLATION_GROUPS_PROPERTY: self.primary, SECONDARY_ISOLATION_GROUPS_PROPERTY: self.secondary}

    def encode(self) -> bytes:
        """The ledger custom-metadata value Pulsar's brokers write for it (EnsemblePlacementPolicyConfig.encode:
        {"policyClass": <the isolated policy's class>, "properties": {...}})."""
        return json.dumps({"policyClass": ISOLATED_POLICY_CLASS, "properties": self.properties()},
                          separators=(",", ":")).encode()

    @classmethod
    def decode(cls, value: bytes) -> IsolationGroups | None:
        """The groups of a ledger's EnsemblePlacementPolicyConfig custom metadata; None when it is not one of the
        isolated policy's (IsolatedBookieEnsemblePlacementPolicy.getIsolationGroup: another policy class has no
        groups) or does not parse."""
        try:
            doc = json.loads(value)
        except ValueError:
            return None
        if not isinstance(doc, dict) or doc.get("policyClass") != ISOLATED_POLICY_CLASS:
            return None
        props = doc.get("properties")
        props = props if isinstance(props, dict) else {}
        primary = props.get(ISOLATION_GROUPS_PROPERTY, "")
        secondary = props.get(SECONDARY_ISOLATION_GROUPS_PROPERTY, "")
        return cls(primary if isinstance(primary, str) else "", secondary if isinstance(secondary, str) else "")

    @classmethod
    def of_ledger(cls, custom_metadata: Iterable[tuple[str, bytes]]) -> IsolationGroups | None:
        for key, value in custom_metadata:
            if key == PLACEMENT_POLICY_CONFIG_KEY:
                return cls.decode(value)
        return None


def isolation_excluded(groups: IsolationGroups, configuration: RackConfiguration, known: Iterable[str],
                       ensemble_size: int) -> set[str]:
    """The bookies a ledger with ``groups`` must not use, of the writable bookies ``known`` and those listed in
    ``configuration`` (IsolatedBookieEnsemblePlacementPolicy.getExcludedBookiesWithIsolationGroups, Pulsar 4.0.7):

    - "*" among the primary groups, or no group configured at all: none;
    - otherwise every bookie but those of the primary groups; when fewer than ``ensemble_size`` of those are
      writable, the secondary groups' bookies too; when still fewer (primary writable + secondary bookies listed),
      the writable bookies that are in no group as well. Bookies of other groups stay excluded: a ledger whose
      groups are short of bookies is then not created (NotEnoughBookiesError).

    A bookie listed in a primary group and in another one is usable (the primary's win)."""
    primary, secondary = groups.primary_groups, groups.secondary_groups
    if ANY_GROUP in primary or not configuration:
        return set()
    known = set(known)
    excluded: set[str] = set()
    primary_bookies: set[str] = set()
    for group, bookies in configuration.items():
        if group in primary:
            primary_bookies.update(bookies)
        else:
            excluded.update(bookies)
    in_other_groups = set(excluded)
    ungrouped = known - primary_bookies
    excluded |= ungrouped
    excluded -= primary_bookies
    available = len(primary_bookies & known)
    with_secondary = available
    if available < ensemble_size:
        for group in secondary:
            for bookie in configuration.get(group) or {}:
                if bookie in excluded:
                    excluded.discard(bookie)
                    with_secondary += 1
    if with_secondary < ensemble_size:
        excluded -= ungrouped - in_other_groups
    return excluded
