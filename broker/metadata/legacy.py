"""Import of the metadata a broker kept before the metadata store: one ``metadata.json`` in the
data dir (``{"clusters", "tenants", "namespaces", "partitioned_topics", "schemas", "compactions",
"terminated", "topic_policies", "topic_properties"}``, Pulsar's JSON field names inside).

At the first start with a metadata store, every record of the file is created in the store when
the store has none under its key (so an import never overwrites what brokers sharing the store
wrote), then the file is renamed ``metadata.json.imported``: kept for reference, never read again.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from broker.metadata import layout as L
from broker.metadata.cache import KEEP

if TYPE_CHECKING:
    from broker.metadata.store import BrokerMetadata

log = logging.getLogger(__name__)

LEGACY_FILE_NAME = "metadata.json"
IMPORTED_SUFFIX = ".imported"


def _read(path: Path) -> dict[str, Any] | None:
    if not path.exists():
        return None
    doc = json.loads(path.read_text())
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: not a JSON object")
    return doc


def _records(doc: dict[str, Any]) -> Iterator[tuple[L.Kind, str, Any]]:
    """The file's records, as (kind, key, value in the cache's form)."""
    def table(name: str) -> dict[str, Any]:
        value = doc.get(name) or {}
        return value if isinstance(value, dict) else {}

    properties = table("topic_properties")
    partitioned = table("partitioned_topics")
    for name, value in table("clusters").items():
        yield L.CLUSTERS, name, value
    for name, value in table("tenants").items():
        yield L.TENANTS, name, value
    for name, value in table("namespaces").items():
        yield L.NAMESPACES, name, value
    for base, partitions in partitioned.items():
        yield L.PARTITIONED_TOPICS, base, L.partitioned_topic_metadata(int(partitions), properties.get(base) or None)
    for topic, value in properties.items():
        if topic not in partitioned and value:
            yield L.TOPIC_PROPERTIES, topic, value
    for topic, value in table("topic_policies").items():
        if value:
            yield L.TOPIC_POLICIES, topic, value
    for topic, value in table("terminated").items():
        yield L.TERMINATED, topic, list(value)
    for topic, value in table("compactions").items():
        yield L.COMPACTIONS, topic, value


async def import_legacy_file(metadata: BrokerMetadata, path: Path) -> int:
    """Import ``path`` when it exists (see the module docstring); returns the records created."""
    doc = await asyncio.to_thread(_read, path)
    if doc is None:
        return 0
    cache = metadata.cache
    created = 0
    for kind, key, value in _records(doc):
        def create(current: Any, value: Any = value) -> Any:
            return value if current is None else KEEP
        if await cache.modify(kind, key, create) is value:
            created += 1
    schemas = doc.get("schemas") or {}
    for base, versions in (schemas.items() if isinstance(schemas, dict) else ()):
        if cache.table(L.SCHEMAS).get(base):
            continue  # (the store has this topic's schemas already)
        for record in versions:
            await cache.add_version(L.SCHEMAS, base, record)
            created += 1
    target = path.with_name(path.name + IMPORTED_SUFFIX)
    await asyncio.to_thread(os.replace, path, target)
    log.warning("imported %d metadata records from %s into the metadata store; the file is kept as %s "
                "and no longer read", created, path, target)
    return created
