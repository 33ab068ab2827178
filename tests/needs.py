"""What a test needs from the machine (java, the ZooKeeper / BookKeeper / Pulsar jars, Chromium, iproute2...).

``make test`` installs every such dependency into ignored folders, so where one is missing: the test skips with the
reason, except under CI=true (the clean-machine run), where a missing dependency is a broken install and fails loudly.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def unavailable(reason: str) -> NoReturn:
    """Skip with ``reason`` (fail under CI=true)."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true: {reason}")
    pytest.skip(reason)
