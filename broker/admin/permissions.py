"""Admin REST v2: permission grants (Pulsar's grantPermissionOnNamespace / ...OnTopic and revokes).

Grants are stored in the namespace's ``auth_policies`` (Pulsar's AuthPolicies): ``namespace_auth``
{role: [actions]}, ``destination_auth`` {topic: {role: [actions]}} and ``subscription_auth_roles``
{subscription: [roles]}. Who may call these (tenant admins) is decided by broker.auth.http; what a
grant allows, by broker.auth.authorization.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from aiohttp import web

from broker.admin.common import DOMAINS, HttpError, json_response, no_content, read_body
from broker.metadata import policies as P
from broker.metadata.store import NotFoundError
from broker.topic_name import TopicName

if TYPE_CHECKING:
    from broker.admin.http import WebService
    from broker.metadata.store import BrokerMetadata

NS = "/admin/v2/namespaces/{tenant}/{ns}/permissions"


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
