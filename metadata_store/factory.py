"""One entry point: a ``metadataStoreUrl`` in, an open MetadataStore out.

Pulsar's ``MetadataStoreFactoryImpl`` picks a backend by the URL's prefix (``zk:``, ``memory:``,
``rocksdb:``, ``etcd:``, ``oxia:``) and takes a URL with none of them for a ZooKeeper connect string.
We do the same for the backends we have, with ``local:`` in place of Pulsar's embedded RocksDB
(``rocksdb:``): a different format, so a different name.

    zk:host:port[,host:port][/chroot]   ZooKeeper (also without ``zk:``)
    local:<dir>                         the durable single-broker store; a relative <dir> is under
                                        ``data_dir``, and ``local:`` alone is ``<data_dir>/metadata``
    memory:<name>                       in-process; stores of one name share their data, and
                                        ``memory:local`` (or ``memory:``) is a private one, as in Pulsar
"""

from __future__ import annotations

from pathlib import Path

from metadata_store.api import MetadataStore, MetadataStoreError
from metadata_store.local import LocalMetadataStore
from metadata_store.memory import MemoryMetadataStore

ZK_SCHEME = "zk:"
MEMORY_SCHEME = "memory:"
LOCAL_SCHEME = "local:"
LOCAL_DEFAULT_DIR = "metadata"  # under the broker's data directory
# Pulsar's other schemes: named, so that a URL meant for a real Pulsar gets a clear refusal.
UNSUPPORTED_SCHEMES = ("rocksdb:", "etcd:", "oxia:", "metadata-store:")


async def open_metadata_store(url: str, *, data_dir: str | Path | None = None,
                              session_timeout_s: float | None = None,
                              operation_timeout_s: float | None = None) -> MetadataStore:
    """Open the store ``url`` names. ``data_dir`` resolves ``local:`` paths; the timeouts are
    ZooKeeper's (Pulsar's ``metadataStoreSessionTimeoutMillis`` and
    ``metadataStoreOperationTimeoutSeconds``; None: 30 s and the session timeout). Bad URLs raise
    MetadataStoreError."""
    url = url.strip()
    if not url:
        raise MetadataStoreError("empty metadata store URL")
    if url.startswith(MEMORY_SCHEME):
        name = url.removeprefix(MEMORY_SCHEME).removeprefix("//")
        return MemoryMetadataStore(None if name in ("", "local") else name)
    if url.startswith(LOCAL_SCHEME):
        return await LocalMetadataStore.open(local_directory(url, data_dir))
    for scheme in UNSUPPORTED_SCHEMES:
        if url.startswith(scheme):
            raise MetadataStoreError(
                f"metadata store {url!r}: Pulsar's {scheme} backend is not supported here "
                f"(use {ZK_SCHEME}host:port[/chroot], {LOCAL_SCHEME}<dir> or {MEMORY_SCHEME}<name>)")
    # kazoo is imported only by whoever uses ZooKeeper (it costs tens of ms at start-up).
    from metadata_store.zookeeper import SESSION_TIMEOUT_S, ZooKeeperMetadataStore

    return await ZooKeeperMetadataStore.open(url, session_timeout_s=session_timeout_s or SESSION_TIMEOUT_S,
                                             operation_timeout_s=operation_timeout_s)


def local_directory(url: str, data_dir: str | Path | None) -> Path:
    """The directory a ``local:`` URL names."""
    rest = url.removeprefix(LOCAL_SCHEME)
    if rest.startswith("//"):  # local:///abs/dir, URI style
        rest = rest[2:]
    if not rest:
        if data_dir is None:
            raise MetadataStoreError(f"{url!r} names no directory and no data directory was given")
        return Path(data_dir) / LOCAL_DEFAULT_DIR
    path = Path(rest)
    if not path.is_absolute() and data_dir is not None:
        path = Path(data_dir) / path
    return path
