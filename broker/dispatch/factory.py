"""Which dispatcher a subscription gets: one per subscription type and topic kind, as in Pulsar.

The subscription asks when its first consumer joins (and again when the type changes, or a
Key_Shared subscription everyone left is joined anew); the consumer's SUBSCRIBE decides.
"""

from __future__ import annotations

from broker.dispatch.base import Dispatcher
from broker.dispatch.context import DispatchContext
from broker.dispatch.key_shared import KeySharedDispatcher
from broker.dispatch.nonpersistent import (
    NonPersistentDispatcher,
    NonPersistentKeySharedDispatcher,
    NonPersistentSharedDispatcher,
    NonPersistentSingleActiveDispatcher,
)
from broker.dispatch.shared import SharedDispatcher
from broker.dispatch.single_active import SingleActiveConsumerDispatcher
from broker.protocol import pulsar_api_pb2 as pb
from managed_ledger import ManagedCursor

Sub = pb.CommandSubscribe


def _key_shared_mode(meta: pb.KeySharedMeta | None) -> tuple[bool, bool]:
    """(sticky, allow_out_of_order) a Key_Shared consumer asked for (AUTO_SPLIT, ordered by default)."""
    sticky = meta is not None and meta.keySharedMode == pb.KeySharedMode.STICKY
    return sticky, meta is not None and meta.allowOutOfOrderDelivery


def persistent_dispatcher(sub_type: int, key_shared_meta: pb.KeySharedMeta | None, context: DispatchContext,
                          cursor: ManagedCursor) -> Dispatcher:
    if sub_type == Sub.Shared:
        return SharedDispatcher(context, cursor)
    if sub_type == Sub.Key_Shared:
        sticky, ooo = _key_shared_mode(key_shared_meta)
        return KeySharedDispatcher(context, cursor, sticky=sticky, allow_out_of_order=ooo)
    return SingleActiveConsumerDispatcher(context, cursor, failover=(sub_type == Sub.Failover))


def non_persistent_dispatcher(sub_type: int, key_shared_meta: pb.KeySharedMeta | None,
                              context: DispatchContext) -> NonPersistentDispatcher:
    if sub_type == Sub.Shared:
        return NonPersistentSharedDispatcher(context)
    if sub_type == Sub.Key_Shared:
        sticky, ooo = _key_shared_mode(key_shared_meta)
        return NonPersistentKeySharedDispatcher(context, sticky, ooo)
    return NonPersistentSingleActiveDispatcher(context, failover=(sub_type == Sub.Failover))
