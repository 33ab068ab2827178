"""cluster.processes: stopping by pid leaves no zombie behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cluster import processes


def _state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def test_a_child_that_ends_between_the_reap_and_the_look_at_proc_is_reaped(monkeypatch: pytest.MonkeyPatch) -> None:
    """A SIGKILL takes effect asynchronously: the child can still run at ``alive``'s waitpid and be a zombie by the
    time /proc is read. ``alive`` then says False, and must reap it, or it stays a zombie until the caller exits
    (the cluster tests collected one per broker they killed)."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        os.kill(child.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while _state(child.pid) != "Z":  # (read from /proc: nothing reaps it here)
            assert time.monotonic() < deadline, "the killed child never became a zombie"
            time.sleep(0.01)
        real_waitpid = os.waitpid
        calls = []

        def first_sees_it_running(pid: int, options: int) -> tuple[int, int]:
            calls.append(pid)
            return (0, 0) if len(calls) == 1 else real_waitpid(pid, options)

        monkeypatch.setattr(os, "waitpid", first_sees_it_running)
        assert not processes.alive(child.pid)
        monkeypatch.undo()
        assert _state(child.pid) is None, "alive() left the child a zombie"
    finally:
        if _state(child.pid) is not None:
            child.kill()
            child.wait()


def test_a_child_whose_other_threads_still_exit_counts_as_running_until_it_can_be_reaped(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A JVM's main thread exits first: /proc shows Z while its other threads still run, and waitpid cannot reap it
    yet. ``alive`` said False then, the stop moved on, and nothing reaped the JVM afterwards (a bookie left a zombie
    in the tests now and then). It now says True until a later call reaps it."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        os.kill(child.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while _state(child.pid) != "Z":
            assert time.monotonic() < deadline, "the killed child never became a zombie"
            time.sleep(0.01)
        with monkeypatch.context() as patched:  # (waitpid as for a thread group still exiting)
            patched.setattr(os, "waitpid", lambda pid, options: (0, 0))
            assert processes.alive(child.pid)
        assert not processes.alive(child.pid)
        assert _state(child.pid) is None, "alive() left the child a zombie"
    finally:
        if _state(child.pid) is not None:
            child.kill()
            child.wait()
