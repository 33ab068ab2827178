"""Cluster mode: namespace bundles, their split and unload, and (later) ownership and lookups."""
