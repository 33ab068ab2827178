"""Tiered storage: closed ledgers copied to another store (an offloader) in Apache Pulsar's formats."""
