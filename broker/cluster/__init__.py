"""Cluster mode: namespace bundles (their split and unload), bundle ownership, the broker registry and lookups."""
