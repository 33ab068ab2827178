"""Dispatcher pause on ack state (PIP-299, dispatcherPauseOnAckStatePersistent) in the Shared and Key_Shared
dispatchers, over a real in-memory cursor whose managed ledger keeps MAX_RANGES acknowledgement holes.

As Pulsar's PersistentDispatcherMultipleConsumers: an ack that leaves more holes than that pauses the reads of new
entries (redeliveries still go out); the ack that brings them back within resumes it, and so does the policy turned
off; with the policy off nothing pauses. The permit invariant holds throughout (a hypothesis machine interleaves the
pause with flow, dispatch, acks, adds and removes)."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import invariant, rule

from broker.dispatch.shared import SharedDispatcher
from broker.service.consumer import Consumer
from managed_ledger import ManagedLedgerConfig, Position
from tests.component.test_permits import Harness, KeyHarness, PermitMachine, drain_lane, policy_changed

MAX_RANGES = 2  # managedLedgerMaxUnackedRangesToPersist of these ledgers
CONFIG = ManagedLedgerConfig(max_unacked_ranges_to_persist=MAX_RANGES)


async def paused_harness(flow: int, published: int) -> tuple[Harness, SharedDispatcher, Consumer]:
    """The pause on; one consumer given ``flow`` permits, ``published`` entries; it has taken what it could."""
    h = await Harness.create(CONFIG)
    h.pause_on_ack_state = True
    d = h.shared()
    c = h.consumer()
    d.add_consumer(c)
    d.flow(c, flow)
    h.publish(published)
    await drain_lane()
    return h, d, c


def delivered(c: Consumer) -> list[int]:
    return sorted(p.entry_id for p in c.pending_acks)


def at(c: Consumer, *entry_ids: int) -> list[Position]:
    return [p for p in sorted(c.pending_acks) if p.entry_id in entry_ids]


async def test_holes_past_what_is_kept_pause_new_entries_until_an_ack_fills_them() -> None:
    h, d, c = await paused_harness(flow=6, published=20)
    assert delivered(c) == [0, 1, 2, 3, 4, 5]
    h.ack(c, at(c, 1, 3))  # two holes: as many as are kept
    assert not d.paused_on_ack_state
    h.ack(c, at(c, 5))  # three: the reads of new entries pause
    assert d.paused_on_ack_state and h.unacked_blocked == {d}
    d.flow(c, 10)
    await drain_lane()
    assert delivered(c) == [0, 2, 4] and not d.read_outstanding and c.permits == 10
    # A redelivery still goes out while paused.
    first = at(c, 0)
    d.redeliver(c, first)
    await drain_lane()
    assert delivered(c) == [0, 2, 4] and c.msg_out == 7 and c.permits == 9
    # Filling holes brings them back within: the next entries go out, in order.
    h.ack(c, at(c, 0, 2))  # mark-delete at 3: holes {5} only
    await drain_lane()
    assert not d.paused_on_ack_state and not h.unacked_blocked
    assert delivered(c) == [4, *range(6, 15)]
    h.check()


async def test_pausing_drops_a_read_parked_for_new_entries() -> None:
    """Nothing published after the pause goes out (Pulsar would let the read waiting at the tail complete)."""
    h, d, c = await paused_harness(flow=100, published=6)
    assert d.read_outstanding and d.cursor.has_pending_read  # parked at the tail
    h.ack(c, at(c, 1, 3, 5))
    assert d.paused_on_ack_state and not d.read_outstanding
    h.publish(5)
    await drain_lane()
    assert delivered(c) == [0, 2, 4]
    h.ack(c, at(c, 0))  # holes {1..3}, {5}: within again
    await drain_lane()
    assert not d.paused_on_ack_state and delivered(c) == [2, 4, 6, 7, 8, 9, 10]
    h.check()


async def test_the_policy_turned_off_resumes_without_an_ack() -> None:
    h, d, c = await paused_harness(flow=6, published=20)
    h.ack(c, at(c, 1, 3, 5))
    d.flow(c, 4)
    await drain_lane()
    assert d.paused_on_ack_state and delivered(c) == [0, 2, 4]
    h.pause_on_ack_state = False
    policy_changed(h)
    await drain_lane()
    assert not d.paused_on_ack_state and not h.unacked_blocked
    assert delivered(c) == [0, 2, 4, 6, 7, 8, 9]
    # Turned on again: the next ack pauses (a policy change alone does not: Pulsar pauses at acks).
    h.pause_on_ack_state = True
    policy_changed(h)
    d.flow(c, 2)
    await drain_lane()
    assert not d.paused_on_ack_state and delivered(c) == [0, 2, 4, 6, 7, 8, 9, 10, 11]
    h.ack(c, at(c, 7))
    assert d.paused_on_ack_state
    h.check()


async def test_policy_off_never_pauses() -> None:
    h, d, c = await paused_harness(flow=6, published=20)
    h.pause_on_ack_state = False
    h.ack(c, at(c, 1, 3, 5))
    d.flow(c, 4)
    await drain_lane()
    assert not d.paused_on_ack_state and not d.cursor.is_cursor_data_fully_persistable()
    assert delivered(c) == [0, 2, 4, 6, 7, 8, 9]
    h.check()


async def test_a_cursor_reset_resumes() -> None:
    """A reset (seek, resetcursor), clear-backlog or skip is an ack to the pause (Pulsar's afterAckMessages)."""
    h, d, c = await paused_harness(flow=6, published=20)
    h.ack(c, at(c, 1, 3, 5))
    assert d.paused_on_ack_state
    d.cursor.clear_backlog()
    d.on_cursor_reset()
    assert not d.paused_on_ack_state and not h.unacked_blocked
    h.check()


async def test_key_shared_pauses_too() -> None:
    h = await KeyHarness.create_keyed(CONFIG)
    h.pause_on_ack_state = True
    d = h.dispatcher
    a = h.consumer_named("a")
    d.add_consumer(a)
    d.flow(a, 6)
    for i in range(20):
        h.publish_key(f"k{i}")
    await drain_lane()
    h.ack(a, at(a, 1, 3, 5))
    d.flow(a, 10)
    await drain_lane()
    assert d.paused_on_ack_state and delivered(a) == [0, 2, 4]
    h.ack(a, at(a, 0, 2, 4))
    await drain_lane()
    assert not d.paused_on_ack_state and delivered(a) == list(range(6, 16))
    h.check()


class PauseMachine(PermitMachine):
    """PermitMachine's interleavings with the pause on and acks that leave holes: the permits still balance, the
    dispatcher is paused exactly while the cursor keeps more holes than its ledger persists, and a paused one has
    no read of new entries waiting at the tail."""

    config = CONFIG

    def __init__(self) -> None:
        super().__init__()
        self.h.pause_on_ack_state = True

    @rule(i=st.integers(min_value=0, max_value=10), every=st.sampled_from([1, 2, 3]))
    def ack_with_holes(self, i: int, every: int) -> None:
        if self.members:
            c = self.members[i % len(self.members)]
            self.h.ack(c, sorted(c.pending_acks)[::every])

    @rule()
    def ack_some(self) -> None:  # (through the dispatcher, as the subscription acknowledges)
        for c in self.members:
            self.h.ack(c, list(c.pending_acks)[:3])

    @invariant()
    def paused_exactly_past_the_holes_kept(self) -> None:
        d = self.h.shared()
        assert d.paused_on_ack_state == (not d.cursor.is_cursor_data_fully_persistable())
        assert not (d.paused_on_ack_state and d.cursor.has_pending_read)


PauseMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
TestPauseMachine = PauseMachine.TestCase

