"""Admin REST v2: offloading (tiered storage), as Pulsar 4.0.7 answers it.

A namespace's offload policies (``offloadPolicies``, and the older single values ``offloadThreshold``,
``offloadThresholdInSeconds``, ``offloadDeletionLagMs``, each kept inside the policies:
broker.metadata.offload_policies), a topic's own (``.../{topic}/offloadPolicies``, with ``?applied=true`` the value
in force: topic over namespace, field by field), and a topic's offload runs (``PUT .../offload`` with a message id:
the closed ledgers before its ledger; ``GET .../offload``: the last run's status).

A run copies to the topic's offloader (broker/service/offload.py: the one its merged offload policies name, else the
broker's managedLedgerOffloadDriver); without one, as Pulsar without one (its NullLedgerOffloader), it fails at once
and its status says so. Every policy applies (docs/features.md#offloading).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from broker.admin.common import (
    DOMAINS,
    HttpError,
    is_global,
    json_response,
    no_content,
    query_flag,
    read_body,
    resumed_empty,
    unset_value,
)
from broker.metadata import offload_policies as O
from broker.metadata.policy_values import PolicyError, check_java_long
from broker.service.offload import (
    SCAN_OK,
    SCAN_UNKNOWN,
    TOPIC_POLICIES_FIELD,
    broker_offload_fields,
    namespace_offloader,
    scan_offloaded,
)
from managed_ledger.position import Position

if TYPE_CHECKING:
    from broker.admin.http import WebService

log = logging.getLogger(__name__)

NS = "/admin/v2/namespaces/{tenant}/{ns}"
TOPIC = "/admin/v2/{domain}/{{tenant}}/{{ns}}/{{topic}}"
TOPIC_FIELD = TOPIC_POLICIES_FIELD
# The namespace's single values: path -> (the field in offload_policies, the older Policies field and its unset).
SINGLE_VALUES = {
    "offloadThreshold": (O.THRESHOLD_BYTES, O.OLD_THRESHOLD_BYTES, -1),
    "offloadThresholdInSeconds": (O.THRESHOLD_SECONDS, O.OLD_THRESHOLD_SECONDS, -1),
}


class OffloadResource:
    def __init__(self, web_service: WebService) -> None:
        self.web = web_service

    def register(self, r: web.UrlDispatcher) -> None:
        for path, (field, old, unset) in SINGLE_VALUES.items():
            r.add_get(f"{NS}/{path}", self._bound_get_single(field, old, unset))
            # (Pulsar's setter of the threshold in seconds is asynchronous and resumes with null: 200, no body)
            r.add_put(f"{NS}/{path}", self._bound_set_single(field, resumed_empty if "Seconds" in path else no_content))
        r.add_get(NS + "/offloadDeletionLagMs", self.get_deletion_lag)
        r.add_put(NS + "/offloadDeletionLagMs", self.set_deletion_lag)
        r.add_delete(NS + "/offloadDeletionLagMs", self.set_deletion_lag)
        r.add_get(NS + "/offloadPolicies", self.get_namespace_policies)
        r.add_post(NS + "/offloadPolicies", self.set_namespace_policies)
        r.add_delete(NS + "/removeOffloadPolicies", self.remove_namespace_policies)
        r.add_get(NS + "/scanOffloadedLedgers", self.scan)

    def register_topics(self, r: web.UrlDispatcher) -> None:
        for domain in DOMAINS:
            topic = TOPIC.format(domain=domain)
            r.add_get(topic + "/offloadPolicies", self.get_topic_policies)
            r.add_post(topic + "/offloadPolicies", self.set_topic_policies)
            r.add_delete(topic + "/offloadPolicies", self.remove_topic_policies)
        topic = TOPIC.format(domain="persistent")
        r.add_put(topic + "/offload", self.trigger)
        r.add_get(topic + "/offload", self.status)

    # -- a namespace's ------------------------------------------------------------------------------------------
    def _bound_get_single(self, field: str, old: str, unset: int) -> Any:
        async def get(request: web.Request) -> web.Response:
            """The value inside the offload policies, else the older field (Pulsar's getOffloadThreshold[InSeconds])."""
            policies = self.web.metadata.namespace_policies(self.web.namespaces.namespace(request))
            value = (policies.get(O.NAMESPACE_FIELD) or {}).get(field)
            return json_response(value if value is not None else policies.get(old, unset))
        return get

    def _bound_set_single(self, field: str, answer: Callable[[], web.Response]) -> Any:
        async def put(request: web.Request) -> web.Response:
            ns = self.web.namespaces.namespace(request)
            await self._set_field(ns, field, _java_long(await read_body(request), field))
            return answer()
        return put

    async def get_deletion_lag(self, request: web.Request) -> web.Response:
        """Pulsar's getOffloadDeletionLag: the older field while there are no offload policies (200 with no body when
        neither is set)."""
        policies = self.web.metadata.namespace_policies(self.web.namespaces.namespace(request))
        offload = policies.get(O.NAMESPACE_FIELD)
        value = policies.get(O.OLD_DELETION_LAG) if offload is None else offload.get(O.DELETION_LAG)
        return unset_value() if value is None else json_response(value)

    async def set_deletion_lag(self, request: web.Request) -> web.Response:
        ns = self.web.namespaces.namespace(request)
        value = None if request.method == "DELETE" else _java_long(await read_body(request), O.DELETION_LAG)
        await self._set_field(ns, O.DELETION_LAG, value)
        return no_content()

    async def _set_field(self, ns: str, field: str, value: int | None) -> None:
        """One field of the namespace's offload policies (made from the defaults when there are none), then the older
        fields merged in (Pulsar's internalSetOffloadThreshold and its siblings)."""
        def change(policies: dict[str, Any]) -> None:
            offload = dict(policies.get(O.NAMESPACE_FIELD) or O.parse({}))
            offload[field] = value
            policies[O.NAMESPACE_FIELD] = O.view(offload)
            O.merge_old_fields(policies)

        await self.web.metadata.modify_policies(ns, change)
        self.web.service.apply_ledger_policies_to(ns)  # (the namespace's loaded topics, at once)

    async def get_namespace_policies(self, request: web.Request) -> web.Response:
        value = self.web.metadata.policy(self.web.namespaces.namespace(request), O.NAMESPACE_FIELD)
        return unset_value() if value is None else json_response(value)

    async def set_namespace_policies(self, request: web.Request) -> web.Response:
        ns = self.web.namespaces.namespace(request)
        offload = _posted_policies(await read_body(request))

        def change(policies: dict[str, Any]) -> None:
            policies[O.NAMESPACE_FIELD] = offload
            O.merge_old_fields(policies)

        await self.web.metadata.modify_policies(ns, change)
        self.web.service.apply_ledger_policies_to(ns)  # (the namespace's loaded topics, at once)
        return no_content()

    async def remove_namespace_policies(self, request: web.Request) -> web.Response:
        """The offload policies and the older fields, all removed (Pulsar's internalRemoveOffloadPolicies)."""
        ns = self.web.namespaces.namespace(request)

        def change(policies: dict[str, Any]) -> None:
            policies.pop(O.NAMESPACE_FIELD, None)
            policies.pop(O.OLD_DELETION_LAG, None)
            policies[O.OLD_THRESHOLD_BYTES] = policies[O.OLD_THRESHOLD_SECONDS] = -1

        await self.web.metadata.modify_policies(ns, change)
        self.web.service.apply_ledger_policies_to(ns)  # (the namespace's loaded topics, at once)
        return no_content()

    async def scan(self, request: web.Request) -> web.StreamResponse:
        """GET .../scanOffloadedLedgers: every object of the namespace's tier, streamed as the store is listed:
        ``{"objects": [...], "total": n, "errors": n, "unknown": n}`` (Pulsar's fields; its answer is not valid JSON:
        an unquoted key, no comma between objects nor before "total"). Without an offloader, 412 (Pulsar's stream
        fails part-way)."""
        ns = self.web.namespaces.namespace(request)
        offloader = namespace_offloader(self.web.service, ns)
        if offloader is None:
            raise HttpError(412, f"no offloader is configured for {ns} (managedLedgerOffloadDriver, or the "
                                 "namespace's offload policies)")
        objects = scan_offloaded(self.web.service, offloader)
        try:  # (the first object before the answer starts: a store that cannot be listed is a clear 500)
            first = await anext(objects, None)
        except OSError as exc:
            raise HttpError(500, f"Error while scanning ledgers for {ns}: {exc}") from None
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        counts = {"total": 0, "errors": 0, "unknown": 0}
        await response.write(b'{"objects": [')
        found = first
        while found is not None:
            counts["total"] += 1
            if found["status"] == SCAN_UNKNOWN:
                counts["unknown"] += 1
            elif found["status"] != SCAN_OK:
                counts["errors"] += 1
            await response.write((", " if counts["total"] > 1 else "").encode() + json.dumps(found).encode())
            try:
                found = await anext(objects, None)
            except OSError as exc:  # (part-way: the answer is cut, as the client sees from the JSON)
                log.warning("scan of the offloaded objects of %s stopped: %s", ns, exc)
                return response
        await response.write(f'], "total": {counts["total"]}, "errors": {counts["errors"]}, '
                             f'"unknown": {counts["unknown"]}}}'.encode())
        await response.write_eof()
        return response

    # -- a topic's ----------------------------------------------------------------------------------------------
    async def get_topic_policies(self, request: web.Request) -> web.Response:
        name = self.web.topic_policies.topic(request)
        metadata = self.web.service.metadata
        value = metadata.topic_policy(name.full, TOPIC_FIELD, is_global(request))
        if query_flag(request, "applied"):  # (in force, field by field: local, global, namespace, broker)
            local, global_ = (metadata.topic_policy(name.full, TOPIC_FIELD, g) for g in (False, True))
            topic = None if local is None and global_ is None else {
                **(global_ or {}), **{k: v for k, v in (local or {}).items() if v is not None}}
            value = O.applied(topic, self.web.metadata.policy(name.namespace, O.NAMESPACE_FIELD),
                              broker_offload_fields(self.web.service.config))
        return unset_value() if value is None else json_response(value)

    async def set_topic_policies(self, request: web.Request) -> web.Response:
        body = await read_body(request)  # (read before the topic is looked up, as Jersey does)
        name = self.web.topic_policies.topic(request)
        await self.web.service.metadata.set_topic_policy(name.full, TOPIC_FIELD, _posted_policies(body),
                                                         is_global(request))
        self.web.service.apply_ledger_policies_to(name.full)
        await self.web.topic_policies.copied(request, name, "offloadPolicies", body)
        return no_content()

    async def remove_topic_policies(self, request: web.Request) -> web.Response:
        name = self.web.topic_policies.topic(request)
        await self.web.service.metadata.set_topic_policy(name.full, TOPIC_FIELD, None, is_global(request))
        self.web.service.apply_ledger_policies_to(name.full)
        await self.web.topic_policies.copied(request, name, "offloadPolicies")
        return no_content()

    # -- a topic's offload runs ---------------------------------------------------------------------------------
    async def trigger(self, request: web.Request) -> web.Response:
        """PUT .../offload {message id}: 400 without one (before anything else, as Pulsar's triggerOffload), 409
        while a run is under way, else 204 at once (the run's outcome: GET)."""
        body = await read_body(request)
        if body is None:
            raise HttpError(400, "messageId is null")
        if not isinstance(body, dict):
            raise HttpError(400, "the message id must be a JSON object")
        position = Position(_java_long(body.get("ledgerId", 0), "ledgerId"),
                            _java_long(body.get("entryId", 0), "entryId"))
        topics = self.web.topics
        name = topics.name(request)
        if topics.partitions(name) > 0:
            raise HttpError(404, f"Topic {name} not found")
        topic = await topics.stored_topic(name)
        if not topic.offload.trigger(topic.ledger, position):
            raise HttpError(409, "Offload already in progress")
        return no_content()

    async def status(self, request: web.Request) -> web.Response:
        topics = self.web.topics
        name = topics.name(request)
        if topics.partitions(name) > 0:
            raise HttpError(404, f"Topic {name} not found")
        topic = await topics.stored_topic(name)
        return json_response(topic.offload.to_json())


def _java_long(value: Any, what: str) -> int:
    try:
        return check_java_long(value, what)
    except PolicyError as exc:
        raise HttpError(400, exc.reason) from None


def _posted_policies(body: Any) -> dict[str, Any]:
    """A posted OffloadPoliciesImpl, read and checked as Pulsar's (412 without one: validateOffloadPolicies)."""
    if body is None:
        raise HttpError(412, "The offloadPolicies must be specified for namespace offload.")
    policies = O.parse(body)
    O.validate(policies)
    return policies
