"""What only the memory backend has: named trees shared by sessions, and a session expiry for unit tests."""

from __future__ import annotations

import uuid

from metadata_store import SessionEvent
from metadata_store.memory import MemoryMetadataStore
from tests.waiting import eventually


async def test_same_name_shares_a_tree_other_names_do_not() -> None:
    name = f"t-{uuid.uuid4().hex}"
    one, two, other, private = (MemoryMetadataStore(name), MemoryMetadataStore(name),
                                MemoryMetadataStore(name + "-other"), MemoryMetadataStore())
    await one.put("/shared", b"x", None)
    assert await two.exists("/shared")
    assert not await other.exists("/shared")
    assert not await private.exists("/shared")
    for store in (one, two, other, private):
        await store.close()


async def test_expire_session_drops_ephemerals_and_tells_the_session_listeners() -> None:
    name = f"t-{uuid.uuid4().hex}"
    store, peer = MemoryMetadataStore(name), MemoryMetadataStore(name)
    events: list[SessionEvent] = []
    store.register_session_listener(events.append)
    await store.put("/owner", b"me", None, ephemeral=True)
    store.expire_session()
    await eventually(lambda: events == [SessionEvent.SESSION_LOST, SessionEvent.SESSION_REESTABLISHED],
                     f"session events, got {events}")
    assert not await peer.exists("/owner")
    again = await store.put("/owner", b"me again", -1, ephemeral=True)
    assert again.created_by_self
    await store.close()
    assert not await peer.exists("/owner")
    await peer.close()
