"""Dispatchers: which consumer gets which entry, and when. A leaf above the protocol and the
managed ledger: it imports nothing from the service, admin or server packages; what it needs
from above comes through one ``DispatchContext`` (context.py).

- context.py: the Consumer protocol, Delivery, DispatchContext and DispatchPolicy
- members.py: permit accounting (one small object); lane.py: the FLOW lane (and why only FLOW)
- base.py: what persistent dispatchers share (the read loop, rate limits, markers)
- single_active.py (Exclusive, Failover), shared.py (Shared), key_shared.py (Key_Shared),
  key_selector.py (Key_Shared ownership): persistent dispatchers, one module per type
- nonpersistent.py: the four dispatchers of non-persistent topics
- factory.py: which dispatcher a subscription gets
- entry_metas.py: entry metadata parsed once per topic for all its subscriptions (fan-out)
"""
