"""Pulsar's metadata store: paths to versioned byte values, with ephemeral nodes, watches and
session events; backends for one process (local) and for many (ZooKeeper).

Apache Pulsar keeps all its metadata behind one such interface (``org.apache.pulsar.metadata.api
.MetadataStore``): the broker's resources (clusters, tenants, namespaces, policies, partitioned
metadata, schemas' index), the managed ledgers' and cursors' znodes, BookKeeper's ledger metadata,
the broker registry and bundle ownership. We do the same, at Pulsar's paths and in its formats,
so that brokers share metadata through ZooKeeper and stay stateless.

This package imports nothing of ``broker`` or ``managed_ledger``: both stand on it.
"""

from metadata_store.api import (
    AlreadyExistsError,
    BadVersionError,
    GetResult,
    MetadataStore,
    MetadataStoreError,
    NotFoundError,
    Notification,
    NotificationType,
    SessionEvent,
    Stat,
)
from metadata_store.factory import open_metadata_store
from metadata_store.paths import InvalidPathError

__all__ = [
    "AlreadyExistsError",
    "BadVersionError",
    "GetResult",
    "InvalidPathError",
    "MetadataStore",
    "MetadataStoreError",
    "NotFoundError",
    "Notification",
    "NotificationType",
    "SessionEvent",
    "Stat",
    "open_metadata_store",
]
