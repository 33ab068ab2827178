"""Admin REST v2: topic schemas (Pulsar's SchemasResource), ``/admin/v2/schemas/{t}/{ns}/{topic}/schema``.

The schema of a partitioned topic belongs to its base name; the domain is always persistent in
the path (Pulsar builds the schema id the same way).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from aiohttp import web

from broker.admin.common import HttpError, int_param, json_response, parse_topic_name, read_body
from broker.errors import IncompatibleSchemaError, InvalidSchemaDefinitionError
from broker.protocol import pulsar_api_pb2 as pb
from broker.service.schemas import SCHEMA_TYPE_NAMES
from broker.topic_name import TopicName

if TYPE_CHECKING:
    from broker.admin.http import WebService

SCHEMA = "/admin/v2/schemas/{tenant}/{ns}/{topic}/schema"
SCHEMA_TYPES = {name: value for value, name in SCHEMA_TYPE_NAMES.items()}


class SchemasResource:
    def __init__(self, web_service: WebService) -> None:
        self.web = web_service

    def register(self, r: web.UrlDispatcher) -> None:
        r.add_get(SCHEMA, self.get)
        r.add_get(SCHEMA + "/{version}", self.get)
        r.add_get(SCHEMA + "s", self.get_all)
        r.add_post(SCHEMA, self.post)
        r.add_delete(SCHEMA, self.delete)
        r.add_post(SCHEMA.removesuffix("/schema") + "/compatibility", self.compatibility)
        r.add_post(SCHEMA.removesuffix("/schema") + "/version", self.version)

    def base_name(self, request: web.Request) -> TopicName:
        self.web.namespaces.namespace(request)
        m = request.match_info
        return parse_topic_name("persistent", m["tenant"], m["ns"], m["topic"]).base

    async def get(self, request: web.Request) -> web.Response:
        name = self.base_name(request)
        version = int_param(request.match_info["version"], "Schema version") if "version" in request.match_info \
            else None
        found = self.web.service.schemas.get(name.full, version)
        if found is None:
            raise HttpError(404, "Schema not found")
        return json_response(_schema_response(*found))

    async def get_all(self, request: web.Request) -> web.Response:
        """GET .../schemas: every live version (Pulsar's GetAllVersionsSchemaResponse)."""
        name = self.base_name(request)
        schemas = self.web.service.schemas
        found = [schemas.get(name.full, v) for v in range(len(schemas.versions(name.full)))]
        return json_response({"getSchemaResponses": [_schema_response(*f) for f in found if f is not None]})

    async def payload_schema(self, request: web.Request) -> tuple[TopicName, pb.Schema]:
        """The topic and the schema of a PostSchemaPayload body {type, schema, properties}."""
        name = self.base_name(request)
        body = await read_body(request)
        if not isinstance(body, dict):
            raise HttpError(400, "Schema payload must be a JSON object {\"type\", \"schema\", \"properties\"}")
        type_name = str(body.get("type", "")).upper()
        if type_name not in SCHEMA_TYPES:
            raise HttpError(422, f"Invalid schema type {body.get('type')!r}")
        definition = body.get("schema") or ""
        properties = body.get("properties") or {}
        if not isinstance(definition, str) or not isinstance(properties, dict):
            raise HttpError(422, "Invalid schema data: schema must be a string, properties an object")
        schema = pb.Schema(name=name.local_name, schema_data=definition.encode(),
                           type=SCHEMA_TYPES[type_name])  # type: ignore[arg-type]
        for k, v in sorted(properties.items()):
            schema.properties.add(key=str(k), value=str(v))
        return name, schema

    async def post(self, request: web.Request) -> web.Response:
        """Register a schema version: 200 with the version (as a Pulsar 4.0.7 standalone answers), 409 when the
        compatibility strategy refuses it, 422 when the definition does not parse."""
        name, schema = await self.payload_schema(request)
        try:
            version = await self.web.service.schemas.add_or_get(name.full, schema)
        except InvalidSchemaDefinitionError as exc:
            raise HttpError(422, exc.message) from None
        except IncompatibleSchemaError as exc:
            raise HttpError(409, exc.message) from None
        return json_response({"version": {"version": version}})

    async def compatibility(self, request: web.Request) -> web.Response:
        """POST .../compatibility: could this schema be added now? Pulsar's IsCompatibilityResponse
        {"compatibility", "schemaCompatibilityStrategy"} (202). Pulsar answers an incompatible
        schema with a 500 error instead of "compatibility": false; here it is false, with the reason."""
        name, schema = await self.payload_schema(request)
        registry = self.web.service.schemas
        reason = registry.check_compatible(name.full, schema)
        body: dict[str, object] = {"compatibility": reason is None,
                                "schemaCompatibilityStrategy": registry.strategy(name.full)}
        if reason is not None:
            body["reason"] = reason
        return json_response(body, status=202)

    async def version(self, request: web.Request) -> web.Response:
        """POST .../version: the version holding this schema ({"version": -1} when none)."""
        name, schema = await self.payload_schema(request)
        return json_response({"version": self.web.service.schemas.version_of(name.full, schema)})

    async def delete(self, request: web.Request) -> web.Response:
        """DELETE: a tombstone version ends the schema's history (its number is the answer); the next
        schema starts afresh. ``?force=true`` removes the history instead (as Pulsar). A name without a schema is
        no error, as in Pulsar 4.0.7: the tombstone is its version 0 (the next schema is version 1), and a forced
        delete answers version -1 and stores nothing."""
        name = self.base_name(request)
        registry = self.web.service.schemas
        if request.query.get("force", "false").lower() == "true":
            last = len(registry.versions(name.full)) - 1
            if last >= 0:
                await registry.delete(name.full)
            return json_response({"version": last})
        return json_response({"version": await registry.delete(name.full, keep_history=True)})


def _schema_response(record: Mapping[str, Any], version: int) -> dict[str, Any]:
    """Pulsar's GetSchemaResponse."""
    data = base64.b64decode(record["data"])
    return {"version": version, "type": SCHEMA_TYPE_NAMES.get(record["type"], "BYTES"),
            "timestamp": record["timestamp"], "data": data.decode("utf-8", "replace"),
            "properties": record.get("properties", {})}
