"""Admin REST v2: the bookies and their racks, as Apache Pulsar 4.0.7's ``/admin/v2/bookies`` (``admin.v2.Bookies``).

- ``GET /admin/v2/bookies/all``: ``{"bookies": [{"bookieId": ...}]}`` (BookiesClusterInfo), every bookie BookKeeper
  knows: the children of ``<ledgers root>/cookies`` (BookKeeper's ZKRegistrationClient.getAllBookies, which Pulsar's
  getAllBookies asks), running or not. A broker storing topics without BookKeeper has none to list: 412 says so.
- ``GET /admin/v2/bookies/racks-info``: the BookiesRackConfiguration, ``{group: {bookie: {"rack", "hostname"}}}``,
  ``{}`` when none is stored.
- ``GET /admin/v2/bookies/racks-info/{bookie}``: that bookie's BookieInfo (from whichever group holds it), 404
  "Bookie rack placement configuration not found: <bookie>" when none does.
- ``POST /admin/v2/bookies/racks-info/{bookie}?group=<group>`` with a BookieInfo body ``{"rack", "hostname"}``: the
  bookie moves to ``group`` (out of any other: BookiesRackConfiguration.updateBookie; a group left empty goes), 204.
  No ``group``: 412 "Bookie 'group' parameters is missing". With rack-aware placement on, a rack name may have no
  "/" inside (a leading or trailing one is fine), with region-aware placement exactly one ("region/rack"): 412
  otherwise, in Pulsar's words.
- ``DELETE /admin/v2/bookies/racks-info/{bookie}``: 204, or 404 as above.

A namespace's bookie affinity group (Pulsar's v2 ``Namespaces``: NamespacesBase.internalSetBookieAffinityGroup,
internalGetBookieAffinityGroup, internalDeleteBookieAffinityGroup), the racks-info groups its topics' new ledgers
take their bookies from (``managed_ledger.bookkeeper.placement.isolation_excluded``):

- ``POST /admin/v2/namespaces/{tenant}/{ns}/persistence/bookieAffinity`` with a BookieAffinityGroupData body
  ``{"bookkeeperAffinityGroupPrimary": "g1[,g2...]", "bookkeeperAffinityGroupSecondary": "g3[,...]"}``: 204. Kept
  in the namespace's LocalPolicies (``/admin/local-policies/{tenant}/{ns}``, field ``bookieAffinityGroup``),
  created with the namespace's bundles when missing (setLocalPoliciesWithCreate). No body sets none, as Pulsar
  (a null BookieAffinityGroupData).
- ``GET`` the same path: the BookieAffinityGroupData, 204 when none.
- ``DELETE`` the same path: none any more, 204.
- An unknown namespace: 404 "Namespace does not exist". Super users only (validateSuperUserAccess first in each).

The new group reaches the namespace's loaded topics at once: their next ledgers (a rollover, a cursor's ledger)
use it; ledgers already created keep their bookies.

The configuration is the ``/bookies`` node of the broker's metadata store, where Pulsar's BookieResources keeps it,
in its JSON; every broker's BookKeeper client follows it (``managed_ledger.bookkeeper.racks``). It is stored
whatever the storage: a broker on file or memory storage keeps it for the day it moves to BookKeeper (Pulsar's
standalone, which runs its own bookies, has racks too). Changes are compare-and-set on the node, as Pulsar's
readModifyUpdateOrCreate. All are super-user operations (Pulsar: validateSuperUserAccess first of all; the access
table in ``broker.auth.http``).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from aiohttp import web

from broker.admin.common import HttpError, json_response, no_content, read_body
from broker.metadata.store import BOOKIE_AFFINITY_FIELDS, NotFoundError
from managed_ledger.bookkeeper.factory import BookKeeperManagedLedgerFactory
from managed_ledger.bookkeeper.placement import RACKS_PATH, RackConfiguration, parse_rack_configuration
from managed_ledger.bookkeeper.zk import NoNodeError
from metadata_store.api import BadVersionError, MetadataStore

if TYPE_CHECKING:
    from broker.admin.http import WebService

# Compare-and-set rounds of a change before it gives up (each lost round is another writer's change).
CAS_ATTEMPTS = 20

# Pulsar 4.0.7's words (admin.v2.Bookies).
GROUP_MISSING = "Bookie 'group' parameters is missing"
RACK_INVALID = ("Bookie 'rack' parameter is invalid, When `RackawareEnsemblePlacementPolicy` is enabled, the rack "
                "name is not allowed to contain slash (`/`) except for the beginning and end of the rack name "
                "string. When `RegionawareEnsemblePlacementPolicy` is enabled, the rack name can only contain one "
                "slash (`/`) except for the beginning and end of the rack name string.")
NOT_FOUND = "Bookie rack placement configuration not found: {}"
BOOKIE_AFFINITY = "/admin/v2/namespaces/{tenant}/{ns}/persistence/bookieAffinity"


class BookiesResource:
    def __init__(self, web_service: WebService) -> None:
        self.web = web_service

    def register(self, r: web.UrlDispatcher) -> None:
        r.add_get("/admin/v2/bookies/all", self.all_bookies)
        r.add_get("/admin/v2/bookies/racks-info", self.racks_info)
        r.add_get("/admin/v2/bookies/racks-info/{bookie}", self.get_rack)
        r.add_post("/admin/v2/bookies/racks-info/{bookie}", self.update_rack)
        r.add_delete("/admin/v2/bookies/racks-info/{bookie}", self.delete_rack)
        r.add_get(BOOKIE_AFFINITY, self.get_bookie_affinity)
        r.add_post(BOOKIE_AFFINITY, self.set_bookie_affinity)
        r.add_delete(BOOKIE_AFFINITY, self.delete_bookie_affinity)

    async def get_bookie_affinity(self, request: web.Request) -> web.Response:
        group = self.web.metadata.bookie_affinity_group(self.web.namespaces.namespace(request))
        return no_content() if group is None else json_response(group)

    async def set_bookie_affinity(self, request: web.Request) -> web.Response:
        ns = self.web.namespaces.namespace(request)
        body = await read_body(request)
        group: dict[str, str] | None = None
        if body is not None:
            if not isinstance(body, dict):
                raise HttpError(400, "Expected a BookieAffinityGroupData JSON object")
            group = {}
            for key in BOOKIE_AFFINITY_FIELDS:
                value = body.get(key)
                if value is not None and not isinstance(value, str):
                    raise HttpError(400, f"{key} must be a string")
                if value is not None:
                    group[key] = value
        await self._store_bookie_affinity(ns, group)
        return no_content()

    async def delete_bookie_affinity(self, request: web.Request) -> web.Response:
        await self._store_bookie_affinity(self.web.namespaces.namespace(request), None)
        return no_content()

    async def _store_bookie_affinity(self, ns: str, group: dict[str, str] | None) -> None:
        try:
            await self.web.metadata.set_bookie_affinity_group(ns, group)
        except NotFoundError:
            raise HttpError(404, "Namespace does not exist") from None
        # (the namespace's loaded topics: their next ledgers go to the new group's bookies)
        self.web.service.apply_ledger_policies_to(ns)

    @property
    def store(self) -> MetadataStore:
        store = self.web.service.metadata_store
        if store is None:
            raise HttpError(503, "The metadata store is not open")
        return store

    async def all_bookies(self, request: web.Request) -> web.Response:
        factory = self.web.service.ledger_factory
        if not isinstance(factory, BookKeeperManagedLedgerFactory):
            raise HttpError(412, f"This broker stores topics without BookKeeper (managedLedgerStorage="
                                 f"{self.web.ctx.config.managedLedgerStorage}): it has no bookies")
        bk = factory.bk
        try:
            ids = await bk.zk.children(f"{bk.root}/cookies")
        except NoNodeError:
            ids = []
        return json_response({"bookies": [{"bookieId": b} for b in sorted(ids)]})

    async def racks_info(self, request: web.Request) -> web.Response:
        configuration, _ = await self._read()
        return json_response(configuration)

    async def get_rack(self, request: web.Request) -> web.Response:
        bookie = request.match_info["bookie"]
        configuration, _ = await self._read()
        for bookies in configuration.values():
            if bookie in bookies:
                return json_response(bookies[bookie])
        raise HttpError(404, NOT_FOUND.format(bookie))

    async def update_rack(self, request: web.Request) -> web.Response:
        bookie = request.match_info["bookie"]
        group = request.query.get("group")
        if group is None:
            raise HttpError(412, GROUP_MISSING)
        info = _bookie_info(await read_body(request))
        if not _valid_rack(info.get("rack"), self.web.ctx.config.bookkeeperClientRackawarePolicyEnabled,
                           self.web.ctx.config.bookkeeperClientRegionawarePolicyEnabled):
            raise HttpError(412, RACK_INVALID)

        def change(configuration: RackConfiguration) -> RackConfiguration:
            _remove(configuration, bookie)
            configuration.setdefault(group, {})[bookie] = info
            return configuration

        await self._modify(change)
        return no_content()

    async def delete_rack(self, request: web.Request) -> web.Response:
        bookie = request.match_info["bookie"]

        def change(configuration: RackConfiguration) -> RackConfiguration:
            if not _remove(configuration, bookie):
                raise HttpError(404, NOT_FOUND.format(bookie))
            return configuration

        await self._modify(change)
        return no_content()

    # -- the /bookies node --

    async def _read(self) -> tuple[RackConfiguration, int]:
        """The configuration and the node's version (-1: no node)."""
        result = await self.store.get(RACKS_PATH)
        if result is None:
            return {}, -1
        return parse_rack_configuration(result.value), result.stat.version

    async def _modify(self, change: Any) -> None:
        for _ in range(CAS_ATTEMPTS):
            configuration, version = await self._read()
            updated = change(configuration)
            try:
                await self.store.put(RACKS_PATH, _encode(updated), version)
            except BadVersionError:
                continue  # changed (or created) by another writer meanwhile: read again
            return
        raise HttpError(409, f"{RACKS_PATH} was changed by others {CAS_ATTEMPTS} times in a row")


def _bookie_info(body: object) -> dict[str, str]:
    """A BookieInfo ``{"rack", "hostname"}`` (absent or null fields left out, as Pulsar's JSON leaves nulls out)."""
    if not isinstance(body, dict):
        raise HttpError(400, "The request body must be a BookieInfo: {\"rack\": ..., \"hostname\": ...}")
    info = {}
    for field in ("rack", "hostname"):
        value = body.get(field)
        if value is None:
            continue
        if not isinstance(value, str):
            raise HttpError(400, f"BookieInfo's {field} must be a string")
        info[field] = value
    return info


def _valid_rack(rack: str | None, rack_aware: bool, region_aware: bool) -> bool:
    """Pulsar's Bookies.updateBookieRackInfo: the slashes inside the name (leading and trailing ones stripped) must
    be none with rack-aware placement, exactly one with region-aware placement; any name otherwise."""
    if not rack_aware:
        return True
    inner = (rack or "").strip("/").count("/")
    return inner == 1 if region_aware else inner == 0


def _remove(configuration: RackConfiguration, bookie: str) -> bool:
    """BookiesRackConfiguration.removeBookie: out of the first group holding it; a group left empty goes."""
    for group, bookies in list(configuration.items()):
        if bookies.pop(bookie, None) is not None:
            if not bookies:
                del configuration[group]
            return True
    return False


def _encode(configuration: RackConfiguration) -> bytes:
    """Pulsar's JSON of a BookiesRackConfiguration (a TreeMap: groups sorted; compact, as Jackson writes)."""
    ordered = {group: dict(sorted(bookies.items())) for group, bookies in sorted(configuration.items())}
    return json.dumps(ordered, separators=(",", ":"), ensure_ascii=False).encode()
