"""The consumers of a dispatcher and their permit total: one small object, shared by every dispatcher.

Membership is by object identity (a reconnecting consumer is a new member). The total follows the
architecture's rule: joining adds ``permits - pending_flow``, leaving subtracts exactly that, and
FLOW settled for a member adds its permits, so at all times

    total_permits == sum(c.permits - c.pending_flow for c in consumers)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from broker.dispatch.context import Consumer


class ConsumerMembers:
    def __init__(self) -> None:
        self.consumers: list[Consumer] = []
        self.total_permits = 0
        # Times a runtime check found the total drifted from the sum (exported as a metric).
        self.invariant_drift_count = 0

    def join(self, consumer: Consumer) -> None:
        self.consumers.append(consumer)
        self.total_permits += consumer.permits - consumer.pending_flow

    def leave(self, consumer: Consumer) -> bool:
        """Remove ``consumer`` (this exact object); False when it was not a member."""
        for i, c in enumerate(self.consumers):
            if c is consumer:
                del self.consumers[i]
                self.total_permits -= consumer.permits - consumer.pending_flow
                return True
        return False

    def is_member(self, consumer: Consumer) -> bool:
        for c in self.consumers:  # (a loop, not any() over a generator: once per FLOW)
            if c is consumer:
                return True
        return False

    def take_permits(self, consumer: Consumer, messages: int) -> None:
        consumer.permits -= messages
        self.total_permits -= messages

    def permit_balance(self) -> int:
        return sum(c.permits - c.pending_flow for c in self.consumers)
