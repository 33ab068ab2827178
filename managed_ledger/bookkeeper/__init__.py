"""Apache BookKeeper storage: the bookie protocol, entry digests, ledger metadata in ZooKeeper, and a client.

``protocol`` (v2 bookie wire protocol) and ``digest`` (entry format) do no I/O; ``metadata`` is the ledger metadata
format and znode layout BookKeeper's own tools read; ``client`` is the asyncio BookKeeper client.
"""
