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

if TYPE_CHECKING:
    from broker.admin.http import WebService

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
    def metadata(self) -> Any:
        return self.web.metadata

    def _auth(self, namespace: str) -> dict[str, Any]:
        """A copy of the namespace's auth_policies with every part present, to edit and store."""
        stored = copy.deepcopy(self.metadata.policy(namespace, P.AUTH_POLICIES) or {})
        for key in (P.NAMESPACE_AUTH, P.DESTINATION_AUTH, P.SUBSCRIPTION_AUTH_ROLES):
            stored.setdefault(key, {})
        return stored

    def _save(self, namespace: str, auth: dict[str, Any]) -> web.Response:
        auth[P.DESTINATION_AUTH] = {t: grants for t, grants in auth[P.DESTINATION_AUTH].items() if grants}
        self.metadata.set_policy(namespace, P.AUTH_POLICIES, auth)
        return no_content()

    # -- namespace ---------------------------------------------------------------------------------
    async def namespace_permissions(self, request: web.Request) -> web.Response:
        ns = self.web.namespaces.namespace(request)
        return json_response(self._auth(ns)[P.NAMESPACE_AUTH])

    async def grant_namespace(self, request: web.Request) -> web.Response:
        ns = self.web.namespaces.namespace(request)
        actions = P.parse_actions(await read_body(request))
        auth = self._auth(ns)
        auth[P.NAMESPACE_AUTH][request.match_info["role"]] = actions
        return self._save(ns, auth)

    async def revoke_namespace(self, request: web.Request) -> web.Response:
        ns = self.web.namespaces.namespace(request)
        auth = self._auth(ns)
        auth[P.NAMESPACE_AUTH].pop(request.match_info["role"], None)
        return self._save(ns, auth)

    # -- subscriptions -----------------------------------------------------------------------------
    async def subscription_permissions(self, request: web.Request) -> web.Response:
        ns = self.web.namespaces.namespace(request)
        return json_response(self._auth(ns)[P.SUBSCRIPTION_AUTH_ROLES])

    async def grant_subscription(self, request: web.Request) -> web.Response:
        ns = self.web.namespaces.namespace(request)
        roles = P.parse_roles(await read_body(request))
        auth = self._auth(ns)
        auth[P.SUBSCRIPTION_AUTH_ROLES][request.match_info["subscription"]] = roles
        return self._save(ns, auth)

    async def revoke_subscription(self, request: web.Request) -> web.Response:
        ns = self.web.namespaces.namespace(request)
        auth = self._auth(ns)
        roles = auth[P.SUBSCRIPTION_AUTH_ROLES].get(request.match_info["subscription"])
        if roles is None:
            raise HttpError(412, "couldn't find subscription")
        auth[P.SUBSCRIPTION_AUTH_ROLES][request.match_info["subscription"]] = [
            r for r in roles if r != request.match_info["role"]]
        return self._save(ns, auth)

    # -- topics ------------------------------------------------------------------------------------
    async def topic_permissions(self, request: web.Request) -> web.Response:
        """Namespace grants and the topic's own, merged (Pulsar's getPermissionsOnTopic)."""
        name = self.web.topics.name(request)
        auth = self._auth(name.namespace)
        merged = {role: set(actions) for role, actions in auth[P.NAMESPACE_AUTH].items()}
        for role, actions in auth[P.DESTINATION_AUTH].get(name.full, {}).items():
            merged.setdefault(role, set()).update(actions)
        return json_response({role: sorted(actions) for role, actions in merged.items()})

    async def grant_topic(self, request: web.Request) -> web.Response:
        name = self.web.topics.name(request)
        actions = P.parse_actions(await read_body(request))
        auth = self._auth(name.namespace)
        auth[P.DESTINATION_AUTH].setdefault(name.full, {})[request.match_info["role"]] = actions
        return self._save(name.namespace, auth)

    async def revoke_topic(self, request: web.Request) -> web.Response:
        name = self.web.topics.name(request)
        auth = self._auth(name.namespace)
        grants = auth[P.DESTINATION_AUTH].get(name.full, {})
        if request.match_info["role"] not in grants:
            raise HttpError(412, "Permissions are not set at the topic level")
        del grants[request.match_info["role"]]
        return self._save(name.namespace, auth)
