"""Avro schema resolution: can a reader schema read data written with a writer schema?

This is the rule behind Pulsar's schema compatibility strategies for AVRO and JSON schemas (both
carry an Avro definition): BACKWARD = the new schema reads old data, FORWARD = old schemas read
new data, FULL = both. Follows the Avro specification's "Schema Resolution" section.
"""

from __future__ import annotations

import json
from typing import Any

# Writer type -> reader types it may be promoted to (Avro spec).
_PROMOTIONS = {
    "int": {"int", "long", "float", "double"},
    "long": {"long", "float", "double"},
    "float": {"float", "double"},
    "double": {"double"},
    "string": {"string", "bytes"},
    "bytes": {"bytes", "string"},
    "boolean": {"boolean"},
    "null": {"null"},
}


def parse(definition: bytes) -> Any:
    return json.loads(definition.decode("utf-8")) if definition.strip() else None


def _type_name(schema: Any) -> str:
    if isinstance(schema, str):
        return schema
    if isinstance(schema, list):
        return "union"
    if isinstance(schema, dict):
        t = schema.get("type")
        return t if isinstance(t, str) else _type_name(t)
    return "?"


def _named(schema: Any, names: dict[str, Any]) -> Any:
    """Resolve references to named types defined earlier in the same schema."""
    if isinstance(schema, str) and schema in names:
        return names[schema]
    if isinstance(schema, dict) and isinstance(schema.get("type"), (dict, list)):
        return schema["type"]
    return schema


def _collect_names(schema: Any, names: dict[str, Any]) -> None:
    if isinstance(schema, dict):
        if schema.get("type") in ("record", "enum", "fixed") and "name" in schema:
            names[schema["name"]] = schema
            ns = schema.get("namespace")
            if ns:
                names[f"{ns}.{schema['name']}"] = schema
        for f in schema.get("fields", []) or []:
            _collect_names(f.get("type"), names)
        for key in ("items", "values"):
            if key in schema:
                _collect_names(schema[key], names)
        if isinstance(schema.get("type"), (dict, list)):
            _collect_names(schema["type"], names)
    elif isinstance(schema, list):
        for s in schema:
            _collect_names(s, names)


def can_read(reader: Any, writer: Any) -> bool:
    r_names: dict[str, Any] = {}
    w_names: dict[str, Any] = {}
    _collect_names(reader, r_names)
    _collect_names(writer, w_names)
    return _can_read(reader, writer, r_names, w_names, set())


def _can_read(reader: Any, writer: Any, rn: dict[str, Any], wn: dict[str, Any], seen: set[tuple[int, int]]) -> bool:
    reader, writer = _named(reader, rn), _named(writer, wn)
    key = (id(reader), id(writer))
    if key in seen:  # recursive types: assume compatible on the second visit
        return True
    seen = seen | {key}
    rt, wt = _type_name(reader), _type_name(writer)
    if wt == "union":
        return all(_can_read(reader, w, rn, wn, seen) for w in writer)
    if rt == "union":
        return any(_can_read(r, writer, rn, wn, seen) for r in reader)
    if wt in _PROMOTIONS:
        return rt in _PROMOTIONS[wt]
    if rt != wt:
        return False
    if rt == "record":
        writer_fields = {f["name"]: f for f in writer.get("fields", [])}
        for f in reader.get("fields", []):
            names = [f["name"], *f.get("aliases", [])]
            wf = next((writer_fields[n] for n in names if n in writer_fields), None)
            if wf is None:
                if "default" not in f:
                    return False
            elif not _can_read(f["type"], wf["type"], rn, wn, seen):
                return False
        return True
    if rt == "enum":
        return "default" in reader or set(writer.get("symbols", [])) <= set(reader.get("symbols", []))
    if rt == "array":
        return _can_read(reader["items"], writer["items"], rn, wn, seen)
    if rt == "map":
        return _can_read(reader["values"], writer["values"], rn, wn, seen)
    if rt == "fixed":
        return bool(reader.get("size") == writer.get("size"))
    return True
