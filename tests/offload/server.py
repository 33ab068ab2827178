"""A storage emulator run for the tests (S3Proxy, Azurite): started on a free 127.0.0.1 port, awaited until its HTTP
port answers, always stopped by pid."""

from __future__ import annotations

import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from cluster import processes
from tests.waiting import wait_for

START_TIMEOUT_S = 60.0


@contextmanager
def serving(name: str, command: list[str], probe: str, log_path: Path) -> Iterator[None]:
    """``command`` running (its output in ``log_path``) once ``probe`` answers, even with an HTTP error (the
    emulators refuse an unsigned request)."""
    with log_path.open("wb") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    processes.track(proc.pid, name)
    try:
        def answers() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"{name} exited: {log_path.read_text()[-2000:]}")
            try:
                urllib.request.urlopen(probe, timeout=2).close()
            except urllib.error.HTTPError:
                return True
            except OSError:
                return False
            return True

        wait_for(answers, START_TIMEOUT_S, f"{name} to answer")
        yield
    finally:
        processes.stop(proc.pid)
        proc.wait()
