"""open_metadata_store: which backend each URL opens, and clear errors for the others."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from cluster.local import ProcessInfo
from metadata_store import MetadataStoreError, open_metadata_store
from metadata_store.local import LocalMetadataStore
from metadata_store.memory import MemoryMetadataStore
from metadata_store.zookeeper import ZooKeeperMetadataStore


async def test_memory_urls() -> None:
    name = f"memory:f-{uuid.uuid4().hex}"
    one, two = await open_metadata_store(name), await open_metadata_store(name)
    private_a, private_b = await open_metadata_store("memory:local"), await open_metadata_store("memory://local")
    assert isinstance(one, MemoryMetadataStore)
    await one.put("/x", b"1", None)
    assert await two.exists("/x")
    await private_a.put("/x", b"1", None)
    assert not await private_b.exists("/x")
    for store in (one, two, private_a, private_b):
        await store.close()


async def test_local_urls(tmp_path: Path) -> None:
    default = await open_metadata_store("local:", data_dir=tmp_path)
    assert isinstance(default, LocalMetadataStore) and default.directory == tmp_path / "metadata"
    await default.close()
    relative = await open_metadata_store("local:md", data_dir=tmp_path)
    assert isinstance(relative, LocalMetadataStore) and relative.directory == tmp_path / "md"
    await relative.close()
    absolute = await open_metadata_store(f"local:{tmp_path / 'abs'}", data_dir="/nowhere")
    assert isinstance(absolute, LocalMetadataStore) and absolute.directory == tmp_path / "abs"
    await absolute.close()
    with pytest.raises(MetadataStoreError, match="no directory"):
        await open_metadata_store("local:")


async def test_zookeeper_urls(zk_server: ProcessInfo) -> None:
    for url in (f"zk:{zk_server.address}/factory", f"{zk_server.address}/factory"):
        store = await open_metadata_store(url, session_timeout_s=5.0)
        assert isinstance(store, ZooKeeperMetadataStore) and store.session_timeout_s == 5.0
        await store.close()


@pytest.mark.parametrize("url", ["", "rocksdb://data/metadata", "etcd:http://e:2379", "oxia://o:6648/ns",
                                 "lcoal:/typo", "zk:"])
async def test_bad_urls_get_a_clear_error(url: str) -> None:
    with pytest.raises(MetadataStoreError):
        await open_metadata_store(url)
