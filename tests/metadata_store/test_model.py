"""The local backend behaves as the memory one, restarts included: random operations (hypothesis) on
both, compared after every step; a restart is a reopen of the journal for local and a session
expiry (ephemeral nodes go, the data stays) for memory."""

from __future__ import annotations

import asyncio
import tempfile
from dataclasses import dataclass
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from metadata_store import MetadataStore
from metadata_store.local import LocalMetadataStore
from metadata_store.memory import MemoryMetadataStore

PATHS = ["/a", "/a/b", "/a/b/c", "/a/e", "/d", "/d/s-"]


@dataclass(frozen=True)
class Put:
    path: str
    value: bytes
    expected: int | None
    ephemeral: bool
    sequential: bool


@dataclass(frozen=True)
class Delete:
    path: str
    expected: int | None


@dataclass(frozen=True)
class DeleteRecursive:
    path: str


@dataclass(frozen=True)
class Restart:
    pass


Step = Put | Delete | DeleteRecursive | Restart

steps = st.one_of(
    st.builds(Put, st.sampled_from(PATHS), st.binary(max_size=8), st.sampled_from([None, -1, 0, 1]),
              st.booleans(), st.booleans()),
    st.builds(Delete, st.sampled_from(PATHS), st.sampled_from([None, 0, 1])),
    st.builds(DeleteRecursive, st.sampled_from(PATHS)),
    st.just(Restart()),
)


async def run(store: MetadataStore, step: Step) -> object:
    """What the step returned or raised, comparable across backends (no times)."""
    try:
        if isinstance(step, Put):
            stat = await store.put(step.path, step.value, step.expected, ephemeral=step.ephemeral,
                                   sequential=step.sequential)
            return (stat.path, stat.version, stat.ephemeral, stat.created_by_self)
        if isinstance(step, Delete):
            await store.delete(step.path, step.expected)
        elif isinstance(step, DeleteRecursive):
            await store.delete_recursive(step.path)
        return None
    except Exception as e:
        return type(e).__name__


async def dump(store: MetadataStore, path: str = "/") -> dict[str, tuple[bytes, int, bool]]:
    found: dict[str, tuple[bytes, int, bool]] = {}
    for child in await store.get_children(path):
        child_path = f"{path.rstrip('/')}/{child}"
        got = await store.get(child_path)
        assert got is not None
        found[child_path] = (got.value, got.stat.version, got.stat.ephemeral)
        found.update(await dump(store, child_path))
    return found


async def scenario(directory: Path, script: list[Step]) -> None:
    memory = MemoryMetadataStore()
    local = await LocalMetadataStore.open(directory)
    try:
        for step in script:
            if isinstance(step, Restart):
                memory.expire_session()
                await local.close()
                local = await LocalMetadataStore.open(directory)
                assert local.recovery.truncated_bytes == 0
            else:
                assert await run(local, step) == await run(memory, step), step
            assert await dump(local) == await dump(memory), step
    finally:
        await memory.close()
        await local.close()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(steps, max_size=30))
def test_local_is_memory_across_restarts(script: list[Step]) -> None:
    with tempfile.TemporaryDirectory() as directory:
        asyncio.run(scenario(Path(directory), script))
