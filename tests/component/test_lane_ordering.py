"""Why FLOW alone goes through the lane (see broker/dispatch/lane.py): the permit invariant

    dispatcher.total_permits == sum(c.permits - c.pending_flow for c in dispatcher.consumers)

holds under EVERY interleaving of a queued FLOW settlement with consumer add, remove, replacement
by an equal but not identical consumer, and read completions, although add/remove and read
completions run directly on the loop and only the settlement waits in the lane.

Read completions are held back here (as a disk read would be) and released as one of the
interleaved events, so every order is tried: exhaustively for a small scenario, and at random
(hypothesis stateful) for long ones.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import rule

from broker.dispatch.key_shared import KeySharedDispatcher
from broker.dispatch.single_active import SingleActiveConsumerDispatcher
from broker.protocol import pulsar_api_pb2 as pb
from broker.service.consumer import Consumer
from tests.component.test_permits import Harness, PermitMachine, drain_lane, keyed_entry


class HeldReads:
    """Wraps a cursor's reads so that their completions wait until ``release`` runs them."""

    def __init__(self, cursor: Any) -> None:
        self.pending: list[Callable[[], None]] = []
        real_read, real_replay = cursor.read_entries_or_wait, cursor.replay_entries

        def hold(callback: Callable[[Any, Any], None]) -> Callable[[Any, Any], None]:
            return lambda entries, exc: self.pending.append(lambda: callback(entries, exc))

        def read(n: int, callback: Callable[[Any, Any], None], max_bytes: int | None = None,
                 inline: Any = None) -> None:
            real_read(n, hold(callback), max_bytes)  # (never inline: every completion is held)

        def replay(positions: Any, callback: Callable[[Any, Any], None]) -> None:
            real_replay(positions, hold(callback))

        cursor.read_entries_or_wait = read
        cursor.replay_entries = replay

    def release(self, i: int = 0) -> bool:
        if not self.pending:
            return False
        self.pending.pop(i % len(self.pending))()
        return True


def make_dispatcher(h: Harness, kind: str) -> None:
    if kind == "key_shared":
        h.dispatcher = KeySharedDispatcher(h.context, h.cursor, sticky=False, allow_out_of_order=False)
    elif kind == "failover":
        h.dispatcher = SingleActiveConsumerDispatcher(h.context, h.cursor, failover=True)


def consumer(h: Harness, kind: str, consumer_id: int, name: str) -> Consumer:
    c = h.consumer(consumer_id=consumer_id, name=name)
    c.sub_type = {"shared": pb.CommandSubscribe.Shared, "key_shared": pb.CommandSubscribe.Key_Shared,
                  "failover": pb.CommandSubscribe.Failover}[kind]
    return c


EVENTS = ("settle", "remove", "replace", "complete_read")


@pytest.mark.parametrize("kind", ["shared", "key_shared", "failover"])
@pytest.mark.parametrize("order", list(itertools.permutations(EVENTS)), ids="-".join)
async def test_every_interleaving_keeps_the_invariant(kind: str, order: tuple[str, ...]) -> None:
    """A has a read in flight and a FLOW queued; then, in every order: the lane settles the
    FLOW, A leaves, an equal-looking A' (same id and name) joins with a FLOW of its own, and the
    read completes."""
    h = await Harness.create()
    make_dispatcher(h, kind)
    reads = HeldReads(h.cursor)
    d = h.dispatcher
    for i in range(20):
        h.ledger.add_entry(keyed_entry(f"k{i % 4}"), lambda pos, exc: None)
    a = consumer(h, kind, 1, "same")
    d.add_consumer(a)
    d.flow(a, 3)
    await drain_lane()
    assert reads.pending, "a read is in flight"
    d.flow(a, 5)  # queued in the lane
    h.check()
    replacement: Consumer | None = None
    for event in order:
        if event == "settle":
            await drain_lane()
        elif event == "remove":
            d.remove_consumer(a)
        elif event == "replace":
            replacement = consumer(h, kind, 1, "same")
            d.add_consumer(replacement)
            d.flow(replacement, 4)
        else:
            reads.release()
        h.check()
    # Let everything finish: lane, reads, and the reads they start.
    while True:
        await drain_lane()
        h.check()
        if not reads.release():
            break
        h.check()
    assert not any(c is a for c in d.consumers)
    assert replacement is not None and d.consumers == [replacement]
    # A's queued FLOW never reached the total; A' counts exactly what it was given and spent.
    assert d.total_permits == replacement.permits - replacement.pending_flow == 4 - replacement.msg_out


class HeldReadsMachine(PermitMachine):
    """PermitMachine's interleavings, with read completions as events of their own."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = HeldReads(self.h.cursor)

    @rule(i=st.integers(min_value=0, max_value=3))
    def complete_read(self, i: int) -> None:
        self.reads.release(i)

    def teardown(self) -> None:
        self.reads.pending.clear()
        super().teardown()


HeldReadsMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
TestHeldReadsMachine = HeldReadsMachine.TestCase

