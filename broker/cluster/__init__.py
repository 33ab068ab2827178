"""Cluster mode: namespace bundles, bundle ownership, the broker registry and lookups (Pulsar's)."""
