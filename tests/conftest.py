"""Test-wide settings."""

import os

# Check the dispatcher permit invariant on every change (raises on drift) in every test broker.
os.environ.setdefault("PULSAR_BROKER_DEBUG", "1")
