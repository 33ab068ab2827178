"""Admin REST v2: permission grants (Pulsar's grantPermissionOnNamespace / ...OnTopic and revokes).

Grants are stored in the namespace's ``auth_policies`` (Pulsar's AuthPolicies): ``namespace_auth``
{role: [actions]}, ``destination_auth`` {topic: {role: [actions]}} and ``subscription_auth_roles``
{subscription: [roles]}. Who may call these (tenant admins) is decided by broker.auth.http; what a
grant allows, by broker.auth.authorization.

``POST /admin/v2/namespaces/grantPermissionsOnTopics`` and ``.../revokePermissionsOnTopics`` (``pulsar-admin``'s
Java client: NamespacesImpl.grantPermissionOnTopicsAsync / revokePermissionOnTopicsAsync) take a list of options,
``{"topic", "role", "actions"}`` (``{"topic", "role"}`` to revoke), and answer as Pulsar 4.0.7's
NamespacesBase.internalGrantPermissionOnTopicsAsync / internalRevokePermissionOnTopicsAsync, in its order: the body
read (400: Jersey's binding); every topic of one namespace (400 "The namespace should be the same", an empty list
too); the tenant of the first topic (404 "Tenant does not exist", for any role) and its admin
(validateAdminAccessForTenant, 401); every topic there (404 "Topic <name> not found", the first missing one, whatever
``allowAclChangesOnNonExistentTopics``: this check does not read it); then one write of the namespace's policies
(PulsarAuthorizationProvider.grantPermissionAsync / revokePermissionAsync(List): one setPoliciesAsync, so nothing
is written when any check fails), 204. Each grant is stored under the name given, as a single topic's: a
partitioned topic's partitions are not written, nor revoked (unlike a single topic's revoke). Where Pulsar's binding
is looser, ours refuses with 400 and a reason: an action Pulsar does not know (Pulsar's JSON reading stores it as
null), an option without topic, role or actions (Pulsar: a 500, or for missing actions a grant of nothing that
replaces the role's), a role that is not a non-empty string, a topic name it cannot parse (Pulsar: a 500).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, NamedTuple

from aiohttp import web

from broker.admin.common import DOMAINS, HttpError, json_response, no_content, read_body
from broker.auth.http import check_deferred
from broker.auth.refusals import TENANT_NOT_FOUND
from broker.errors import InvalidTopicNameError
from broker.metadata import policies as P
from broker.metadata.policy_values import PolicyError
from broker.metadata.store import NotFoundError, TopicGrant, TopicRole
from broker.topic_name import TopicName

if TYPE_CHECKING:
    from broker.admin.http import WebService
    from broker.metadata.store import BrokerMetadata

NS = "/admin/v2/namespaces/{tenant}/{ns}/permissions"
# (literal paths: aiohttp's router tries a path's literal resource before the parameterised ones of its prefixes, such
# as GET /admin/v2/namespaces/{tenant}, whatever the order they were added in)
GRANT_ON_TOPICS = "/admin/v2/namespaces/grantPermissionsOnTopics"
REVOKE_ON_TOPICS = "/admin/v2/namespaces/revokePermissionsOnTopics"
# What Pulsar's NamespacesBase.checkNamespace answers (400) when the options' topics are not of exactly one namespace.
NOT_ONE_NAMESPACE = "The namespace should be the same"
# What Pulsar answers (404) when the namespace is gone by the time the grants are written.
NAMESPACE_GONE = "Topic's namespace does not exist"


class TopicPermissionOption(NamedTuple):
    """One option of a grant or revoke on several topics (Pulsar's GrantTopicPermissionOptions and
    RevokeTopicPermissionOptions): the topic, the role, and for a grant the actions (sorted, each once)."""

    topic: TopicName
    role: str
    actions: tuple[str, ...] = ()


def parse_topic_permission_options(body: object, grant: bool) -> list[TopicPermissionOption]:
    """The options of a grant (``grant``) or revoke on several topics, in order; 400 with a reason for anything else.
    Fields Pulsar's options have not are ignored, as its JSON reading ignores them."""
    fields = '"topic", "role" and "actions"' if grant else '"topic" and "role"'
    if not isinstance(body, list):
        raise HttpError(400, f"The body must be a JSON array of options, each an object with {fields}")
    options = []
    for i, option in enumerate(body):
        if not isinstance(option, dict):
            raise HttpError(400, f"Option {i} must be a JSON object with {fields}")
        topic, role = option.get("topic"), option.get("role")
        if not isinstance(topic, str):
            raise HttpError(400, f"Option {i} must name its topic (\"topic\": a topic name)")
        try:
            name = TopicName.parse(topic)
        except InvalidTopicNameError as exc:
            raise HttpError(400, f"Option {i}: {exc.message}") from None
        if not isinstance(role, str) or not role:
            raise HttpError(400, f"Option {i} must name its role (\"role\": a non-empty string)")
        actions: tuple[str, ...] = ()
        if grant:
            try:
                actions = tuple(P.parse_actions(option.get("actions")))
            except PolicyError as exc:
                raise HttpError(400, f"Option {i}: {exc.reason}") from None
        options.append(TopicPermissionOption(name, role, actions))
    return options


def one_namespace(topics: Iterable[TopicName]) -> str:
    """The namespace of all ``topics``, or 400 as Pulsar's checkNamespace (none at all, too)."""
    namespaces = list(dict.fromkeys(topic.namespace for topic in topics))
    if len(namespaces) != 1:
        detail = "the list names no topic" if not namespaces else f"the topics are in {', '.join(namespaces)}"
        raise HttpError(400, f"{NOT_ONE_NAMESPACE}: {detail}")
    return namespaces[0]


class PermissionsResource:
    def __init__(self, web_service: WebService) -> None:
        self.web = web_service

    def register(self, r: web.UrlDispatcher) -> None:
        r.add_get(NS, self.namespace_permissions)
        r.add_get(NS + "/subscription", self.subscription_permissions)
        r.add_post(NS + "/subscription/{subscription}", self.grant_subscription)
        r.add_delete(NS + "/{subscription}/{role}", self.revoke_subscription)
        r.add_post(NS + "/{role}", self.grant_namespace)
        r.add_delete(NS + "/{role}", self.revoke_namespace)
        for d in DOMAINS:
            topic = f"/admin/v2/{d}/{{tenant}}/{{ns}}/{{topic}}/permissions"
            r.add_get(topic, self.topic_permissions)
            r.add_post(topic + "/{role}", self.grant_topic)
            r.add_delete(topic + "/{role}", self.revoke_topic)
        r.add_post(GRANT_ON_TOPICS, self.grant_on_topics)
        r.add_post(REVOKE_ON_TOPICS, self.revoke_on_topics)

    @property
    def metadata(self) -> BrokerMetadata:
        return self.web.metadata

    def _auth(self, namespace: str) -> dict[str, Any]:
        """The namespace's auth_policies with every part present (a copy)."""
        stored = copy.deepcopy(self.metadata.policy(namespace, P.AUTH_POLICIES) or {})
        for key in (P.NAMESPACE_AUTH, P.DESTINATION_AUTH, P.SUBSCRIPTION_AUTH_ROLES):
            stored.setdefault(key, {})
        return stored

    # -- namespace ---------------------------------------------------------------------------------
    async def namespace_permissions(self, request: web.Request) -> web.Response:
        ns = self.web.namespaces.namespace(request)
        return json_response(self._auth(ns)[P.NAMESPACE_AUTH])

    async def grant_namespace(self, request: web.Request) -> web.Response:
        ns = self.web.namespaces.namespace(request, "Topic's namespace does not exist")  # (sic: Pulsar's words)
        actions = P.parse_actions(await read_body(request))
        await self.metadata.grant_namespace_permission(ns, request.match_info["role"], actions)
        return no_content()

    async def revoke_namespace(self, request: web.Request) -> web.Response:
        ns = self.web.namespaces.namespace(request)
        await self.metadata.revoke_namespace_permission(ns, request.match_info["role"])
        return no_content()

    # -- subscriptions -----------------------------------------------------------------------------
    async def subscription_permissions(self, request: web.Request) -> web.Response:
        ns = self.web.namespaces.namespace(request)
        return json_response(self._auth(ns)[P.SUBSCRIPTION_AUTH_ROLES])

    async def grant_subscription(self, request: web.Request) -> web.Response:
        ns = self.web.namespaces.namespace(request)
        roles = P.parse_roles(await read_body(request))
        await self.metadata.grant_subscription_permission(ns, request.match_info["subscription"], roles)
        return no_content()

    async def revoke_subscription(self, request: web.Request) -> web.Response:
        ns = self.web.namespaces.namespace(request)
        m = request.match_info
        try:
            await self.metadata.revoke_subscription_permission(ns, m["subscription"], m["role"])
        except NotFoundError as exc:  # (Pulsar answers 412 here)
            raise HttpError(412, exc.message) from None
        return no_content()

    # -- topics ------------------------------------------------------------------------------------
    def _topic(self, request: web.Request) -> TopicName:
        """The topic of a topic's permission call. Pulsar's internalGetPermissionsOnTopic / internalGrantPermissions-
        OnTopic / internalRevokePermissionsOnTopic check the tenant's admin (broker.auth.http), then that the topic
        exists (internalCheckTopicExists: 404 "Topic <name> not found", for a topic of a namespace that does not
        exist, or that a peer cluster serves and this one does not store, too), unless
        ``allowAclChangesOnNonExistentTopics``."""
        topics = self.web.topics
        if self.web.ctx.config.allowAclChangesOnNonExistentTopics:
            return topics.name(request)
        name = topics.path_name(request)
        topics.check_exists(name)
        return name

    async def topic_permissions(self, request: web.Request) -> web.Response:
        """Namespace grants and the topic's own, merged (Pulsar's PulsarAuthorizationProvider.getPermissionsAsync(
        TopicName)): the grants stored under this very name, so a partition's do not show its partitioned topic's
        (though they cover it: broker.auth.authorization)."""
        name = self._topic(request)
        auth = self._auth(name.namespace)
        merged = {role: set(actions) for role, actions in auth[P.NAMESPACE_AUTH].items()}
        for role, actions in auth[P.DESTINATION_AUTH].get(name.full, {}).items():
            merged.setdefault(role, set()).update(actions)
        return json_response({role: sorted(actions) for role, actions in merged.items()})

    async def grant_topic(self, request: web.Request) -> web.Response:
        """The grant is stored under the name given only (Pulsar's internalGrantPermissionsOnTopic: one
        grantPermissionAsync on the topic name), a partitioned topic's partitions not written."""
        actions = P.parse_actions(await read_body(request))  # (Pulsar's JSON binding: before the handler)
        name = self._topic(request)
        await self.metadata.grant_topic_permission(name.namespace, name.full, request.match_info["role"], actions)
        return no_content()

    async def revoke_topic(self, request: web.Request) -> web.Response:
        """Pulsar's internalRevokePermissionsOnTopic reads the topic's partitioned metadata (authoritative) and
        revokes the role on each partition, then on the name itself (AuthorizationService.revokePermissionAsync,
        one topic each): a grant made on one partition goes too. A partition's name has no partitioned metadata (0
        partitions): only its own grant goes. Nothing granted is no error (204)."""
        name = self._topic(request)
        partitions = 0 if name.partition_index >= 0 else await self.metadata.partitions_of_fresh(name.full)
        topics = [name.partition(i).full for i in range(partitions)] + [name.full]
        await self.metadata.revoke_topic_permission(name.namespace, topics, request.match_info["role"])
        return no_content()

    # -- several topics of one namespace -----------------------------------------------------------------------------
    async def _checked_options(self, request: web.Request, grant: bool) -> tuple[str, list[TopicPermissionOption]]:
        """The options and their namespace, checked in Pulsar's order (the module's docstring): the body, one
        namespace, the tenant and its admin, every topic there."""
        options = parse_topic_permission_options(await read_body(request), grant)
        namespace = one_namespace(option.topic for option in options)
        tenant = options[0].topic.tenant
        if not await self.metadata.tenant_exists_fresh(tenant):
            raise HttpError(404, TENANT_NOT_FOUND)
        # The route's access rule (broker.auth.http) leaves the tenant admins' check to here, of the tenant the first
        # topic names: it reads the tenant from the match info, where a path would have put it.
        request.match_info["tenant"] = tenant
        await check_deferred(request)
        for option in options:
            self.web.topics.check_exists(option.topic)
        return namespace, options

    async def grant_on_topics(self, request: web.Request) -> web.Response:
        namespace, options = await self._checked_options(request, grant=True)
        try:
            await self.metadata.grant_topic_permissions(
                namespace, [TopicGrant(o.topic.full, o.role, o.actions) for o in options])
        except NotFoundError:  # (the namespace deleted meanwhile)
            raise HttpError(404, NAMESPACE_GONE) from None
        return no_content()

    async def revoke_on_topics(self, request: web.Request) -> web.Response:
        namespace, options = await self._checked_options(request, grant=False)
        try:
            await self.metadata.revoke_topic_permissions(namespace, [TopicRole(o.topic.full, o.role) for o in options])
        except NotFoundError:  # (the namespace deleted meanwhile)
            raise HttpError(404, NAMESPACE_GONE) from None
        return no_content()
