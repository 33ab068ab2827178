"""Schema registry: per base topic, an ordered list of schema versions (version = list index).

Deleting a topic's schema (the admin API) appends a tombstone version, as Pulsar does: the versions
before it are gone (never served again, their numbers never reused) and the next schema starts
afresh, checked against nothing. Deleting the topic removes the whole history.

On the wire a schema version is exactly 8 bytes, big-endian int64 (the C++ client reads 8 bytes
blindly). A new definition is checked against the namespace's schemaCompatibilityStrategy
(broker default FULL, as Pulsar): AVRO and JSON by Avro schema resolution, other types by type.
"""

from __future__ import annotations

import asyncio
import base64
import struct
import time
from collections.abc import Mapping, Sequence
from typing import Any

from broker.errors import IncompatibleSchemaError, InvalidSchemaDefinitionError
from broker.metadata.policy_table import SCHEMA_COMPATIBILITY_STRATEGY, PolicyResolver
from broker.metadata.store import BrokerMetadata
from broker.protocol import pulsar_api_pb2 as pb
from broker.service import avro_compat
from broker.service.operation_stats import SchemaStats
from broker.topic_name import TopicName

_VERSION = struct.Struct(">q")
_AVRO_TYPES = frozenset({pb.Schema.Type.Value("Avro"), pb.Schema.Type.Value("Json")})
# A consumer's AUTO_CONSUME schema (the Java client sends it in SUBSCRIBE): it reads whatever is stored.
_AUTO_CONSUME = pb.Schema.Type.Value("AutoConsume")

SCHEMA_TYPE_NAMES = {v: k.upper() for k, v in pb.Schema.Type.items()}
SCHEMA_TYPE_NAMES.update({pb.Schema.Type.Value("KeyValue"): "KEY_VALUE",
                          pb.Schema.Type.Value("ProtobufNative"): "PROTOBUF_NATIVE",
                          pb.Schema.Type.Value("LocalDate"): "LOCAL_DATE",
                          pb.Schema.Type.Value("LocalTime"): "LOCAL_TIME",
                          pb.Schema.Type.Value("LocalDateTime"): "LOCAL_DATE_TIME"})
del SCHEMA_TYPE_NAMES[_AUTO_CONSUME]  # (only ever in a SUBSCRIBE, never stored: not a type the admin API takes)


def encode_version(version: int) -> bytes:
    return _VERSION.pack(version)


def decode_version(data: bytes) -> int | None:
    if len(data) != 8:
        return None
    return int(_VERSION.unpack(data)[0])


def _properties(schema: pb.Schema) -> dict[str, str]:
    # The generated stub confuses Schema.KeyValue (an enum value) with the KeyValue message.
    return {kv.key: kv.value for kv in schema.properties}  # type: ignore[attr-defined]


def _record(schema: pb.Schema) -> dict[str, Any]:
    return {
        "type": int(schema.type),
        "name": schema.name,
        "data": base64.b64encode(schema.schema_data).decode(),
        "properties": _properties(schema),
        "timestamp": int(time.time() * 1000),
    }


def to_proto(record: Mapping[str, Any]) -> pb.Schema:
    s = pb.Schema(name=record.get("name", ""), schema_data=base64.b64decode(record["data"]),
                  type=record["type"])
    for k, v in sorted(record.get("properties", {}).items()):
        s.properties.add(key=k, value=v)
    return s


def _tombstone() -> dict[str, Any]:
    return {"type": int(pb.Schema.Type.Value("None")), "name": "", "data": "", "properties": {},
            "timestamp": int(time.time() * 1000), "deleted": True}


def _live(versions: Sequence[Mapping[str, Any]]) -> list[tuple[int, Mapping[str, Any]]]:
    """The versions after the last delete (Pulsar's trimDeletedSchemaAndGetList), with their numbers."""
    start = next((i + 1 for i in range(len(versions) - 1, -1, -1) if versions[i].get("deleted")), 0)
    return [(i, versions[i]) for i in range(start, len(versions))]


def _same(record: Mapping[str, Any], schema: pb.Schema) -> bool:
    """Does the version hold this schema? The same type and definition - for AVRO and JSON the same
    parsed definition, whatever the text's layout - properties aside (Pulsar's
    getSchemaVersionBySchemaData)."""
    if record["type"] != int(schema.type):
        return False
    data = base64.b64decode(record["data"])
    if data == schema.schema_data:
        return True
    if int(schema.type) in _AVRO_TYPES:
        try:
            return bool(avro_compat.parse(data) == avro_compat.parse(schema.schema_data))
        except ValueError:
            return False
    return False


def _check_definition(schema: pb.Schema) -> None:
    """An AVRO or JSON schema's definition must parse before it is stored (Pulsar validates it too)."""
    if int(schema.type) in _AVRO_TYPES:
        try:
            avro_compat.parse(schema.schema_data)
        except ValueError as exc:
            kind = SCHEMA_TYPE_NAMES.get(int(schema.type), "AVRO")
            raise InvalidSchemaDefinitionError(f"Invalid schema definition data for {kind} schema: {exc}") from None


class SchemaRegistry:
    def __init__(self, store: BrokerMetadata, policies: PolicyResolver) -> None:
        self.store = store
        self.policies = policies
        self.stats = SchemaStats()  # Pulsar's pulsar_schema_* metrics
        # Topics with a registration under way: [its lock, how many hold or wait for it]. A new version is
        # checked against the latest and then written; a second registration checked in between would be
        # checked against the same old latest, and stored unchecked against the first (Pulsar serialises a
        # schema id's writes too).
        self._registering: dict[str, list[Any]] = {}

    @staticmethod
    def _ms_since(started: float) -> float:
        return (time.perf_counter() - started) * 1000.0

    def versions(self, base_topic: str) -> Sequence[Mapping[str, Any]]:
        return self.store.schema_versions(base_topic)

    def get(self, base_topic: str, version: int | None = None) -> tuple[Mapping[str, Any], int] | None:
        started = time.perf_counter()
        found = self._get(base_topic, version)
        self.stats.done(base_topic, "get", self._ms_since(started))
        return found

    def _get(self, base_topic: str, version: int | None) -> tuple[Mapping[str, Any], int] | None:
        live = _live(self.versions(base_topic))
        if not live:
            return None
        if version is None:
            return live[-1][1], live[-1][0]
        return next(((rec, v) for v, rec in live if v == version), None)

    def strategy(self, base_topic: str) -> str:
        """The topic's schemaCompatibilityStrategy, else its namespace's, else the default (FULL);
        UNDEFINED at a level passes to the next."""
        return self.policies.get(TopicName.parse(base_topic), SCHEMA_COMPATIBILITY_STRATEGY)

    def _find_or_check(self, base_topic: str, schema: pb.Schema) -> int | None:
        """The version already holding ``schema``, or None when it may be added; IncompatibleSchemaError
        when it may not. A check against existing versions is counted (compatible or not)."""
        live = [rec for _, rec in _live(self.versions(base_topic))]
        found = self._find(base_topic, schema)
        if found is not None:
            return found
        _check_definition(schema)  # (first, as Pulsar's SchemaRegistryServiceWithSchemaDataValidator: 422, not 409)
        if not live:
            return None
        strategy = self.strategy(base_topic)
        self._counted(base_topic, schema, live if strategy.endswith("_TRANSITIVE") else live[-1:], strategy)
        return None

    def _find(self, base_topic: str, schema: pb.Schema) -> int | None:
        return next((v for v, rec in _live(self.versions(base_topic)) if _same(rec, schema)), None)

    def _counted(self, base_topic: str, schema: pb.Schema, against: Sequence[Mapping[str, Any]],
                 strategy: str) -> None:
        try:
            self._check(schema, against, strategy)
        except IncompatibleSchemaError:
            self.stats.of(base_topic).incompatible += 1
            raise
        self.stats.of(base_topic).compatible += 1

    @staticmethod
    def _check(schema: pb.Schema, against: Sequence[Mapping[str, Any]], strategy: str) -> None:
        """IncompatibleSchemaError unless ``strategy`` lets ``schema`` follow the versions ``against``."""
        if strategy == "ALWAYS_COMPATIBLE":
            return
        if strategy == "ALWAYS_INCOMPATIBLE":
            raise IncompatibleSchemaError("Incompatible schema: the compatibility strategy is ALWAYS_INCOMPATIBLE")
        for rec in against:
            if rec["type"] != int(schema.type):
                have = SCHEMA_TYPE_NAMES.get(rec["type"], str(rec["type"]))
                want = SCHEMA_TYPE_NAMES.get(int(schema.type), str(schema.type))
                raise IncompatibleSchemaError(f"Incompatible schema: topic has {have}, got {want}")
        if int(schema.type) in _AVRO_TYPES:
            try:
                new = avro_compat.parse(schema.schema_data)
                for rec in against:
                    old = avro_compat.parse(base64.b64decode(rec["data"]))
                    if strategy.startswith(("BACKWARD", "FULL")) and not avro_compat.can_read(new, old):
                        raise IncompatibleSchemaError(
                            f"Incompatible schema ({strategy}): the new schema cannot read data of an existing one")
                    if strategy.startswith(("FORWARD", "FULL")) and not avro_compat.can_read(old, new):
                        raise IncompatibleSchemaError(
                            f"Incompatible schema ({strategy}): existing schemas cannot read data of the new one")
            except ValueError as exc:
                raise IncompatibleSchemaError(f"Invalid schema definition: {exc}") from None

    def check_compatible(self, base_topic: str, schema: pb.Schema) -> str | None:
        """Why ``schema`` could not be added to the topic now (under its compatibility strategy),
        or None when it could (a version it already has, or a compatible new one)."""
        try:
            self._find_or_check(base_topic, schema)
        except IncompatibleSchemaError as exc:
            return exc.message
        return None

    def version_of(self, base_topic: str, schema: pb.Schema) -> int:
        """The version holding this schema (as ``_same`` finds it: Pulsar's getSchemaVersionBySchemaData),
        -1 when none does."""
        found = self._find(base_topic, schema)
        return -1 if found is None else found

    def has_schema(self, base_topic: str) -> bool:
        return bool(_live(self.versions(base_topic)))

    async def add_or_get(self, base_topic: str, schema: pb.Schema, may_add: bool = True) -> int:
        """The version of ``schema`` on the topic, registering it if it is new and compatible
        (and ``may_add``: a namespace's isAllowAutoUpdateSchema=false leaves that to the admin API)."""
        started = time.perf_counter()
        try:
            found = self._find(base_topic, schema)  # (the common case: no lock)
            if found is None:
                found = await self._register(base_topic, schema, may_add)
        except BaseException:
            self.stats.done(base_topic, "put", self._ms_since(started), ok=False)
            raise
        self.stats.done(base_topic, "put", self._ms_since(started))
        return found

    async def _register(self, base_topic: str, schema: pb.Schema, may_add: bool) -> int:
        """Check and write a new version, one registration of the topic at a time."""
        entry = self._registering.get(base_topic)
        if entry is None:
            entry = self._registering[base_topic] = [asyncio.Lock(), 0]
        entry[1] += 1
        try:
            async with entry[0]:
                found = self._find_or_check(base_topic, schema)  # (again: the one before may have added it)
                if found is not None:
                    return found
                if not may_add:
                    raise IncompatibleSchemaError("Schema not found and schema auto updating is disabled.")
                version: int = await self.store.add_schema_version(base_topic, _record(schema))
                return version
        finally:
            entry[1] -= 1
            if entry[1] == 0:
                del self._registering[base_topic]

    async def check_consumer(self, base_topic: str, schema: pb.Schema, in_use: bool, may_add: bool = True) -> None:
        """Admit a consumer's schema as Pulsar's addSchemaIfIdleOrCheckCompatible and checkConsumerCompatibility
        do. An AUTO_CONSUME schema is not checked. A topic with no schema history that is not ``in_use`` (no
        producer, no consumer but AUTO_CONSUME ones, nothing stored) adopts the schema as a producer's would be
        added. Otherwise: under ALWAYS_COMPATIBLE anything goes; a topic in use without a schema refuses it (its
        data carries none); under BACKWARD, FORWARD, FORWARD_TRANSITIVE and FULL the schema must be the latest
        version or read it (BACKWARD); under the other strategies it is held to them against every version,
        with no exception for a version it matches, so ALWAYS_INCOMPATIBLE refuses even the stored schema (a
        producer with a stored schema gets its version: add_or_get finds it before any check, as Pulsar's
        putSchemaIfAbsent)."""
        if int(schema.type) == _AUTO_CONSUME:
            return
        versions = self.versions(base_topic)
        if not versions and not in_use:
            await self.add_or_get(base_topic, schema, may_add)
            return
        # (A deleted schema's tombstone counts as history, as Pulsar's hasSchema sees it: the topic is then
        # checked, and with no live version refuses the schema.)
        strategy = self.strategy(base_topic)
        if strategy == "ALWAYS_COMPATIBLE":
            return
        live = [rec for _, rec in _live(versions)]
        if not live:
            want = SCHEMA_TYPE_NAMES.get(int(schema.type), str(schema.type))
            raise IncompatibleSchemaError("Failed to add schema to an active topic with empty(BYTES) schema: "
                                          f"new schema type {want}")
        if strategy in ("BACKWARD", "FORWARD", "FORWARD_TRANSITIVE", "FULL"):
            if not _same(live[-1], schema):  # (checkCompatibilityWithLatest: the latest itself passes)
                self._counted(base_topic, schema, live[-1:], "BACKWARD")
        else:  # (checkCompatibilityWithAll: a version it matches is checked like any other)
            self._counted(base_topic, schema, live, strategy)

    async def delete(self, base_topic: str, keep_history: bool = False) -> int | None:
        """Delete the topic's schema. ``keep_history`` (the admin API's delete, as Pulsar's
        deleteSchema) appends a tombstone and returns its version; otherwise (the topic is deleted,
        or a forced delete) the whole history goes."""
        started = time.perf_counter()
        try:
            if keep_history:
                version: int | None = await self.store.add_schema_version(base_topic, _tombstone())
            else:
                version = None
                await self.store.delete_schemas(base_topic)
        except BaseException:
            self.stats.done(base_topic, "delete", self._ms_since(started), ok=False)
            raise
        self.stats.done(base_topic, "delete", self._ms_since(started))
        return version
