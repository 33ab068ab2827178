"""Real ZooKeeper + BookKeeper processes for tests and `make cluster-up` (see docs/cluster.md)."""
