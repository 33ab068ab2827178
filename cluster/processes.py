"""The processes this Python process started (ZooKeeper, bookies, brokers, Apache Pulsar, Chromium...), by pid, and
their stop: SIGTERM, then SIGKILL after a grace period.

Whatever starts a long-running process records it here (``track``), and ``stop`` (or ``forget``) takes it out.
Nothing is stopped behind anyone's back unless ``stop_all_at_exit()`` was called: then every process still
recorded is stopped when the interpreter exits, and on SIGTERM or SIGINT, which is what a test session needs
(tests/conftest.py calls it). A SIGTERM'd pytest runs no fixture teardown and our processes run in sessions of their
own (they do not share its fate), so without this they would outlive it. The signal handler stops them by pid, then
does what the signal did before: SIGTERM still ends the process (the default action, raised again), SIGINT is still
a KeyboardInterrupt. ``make cluster-up`` never calls it: its cluster is meant to outlive the command.

A pid is recorded with its start time (``/proc/<pid>/stat``), so that a pid the kernel has since given to another
process is never signalled. Recording is lock-free (a signal handler runs on the main thread between two bytecodes
of whatever it interrupted, possibly in the middle of ``track``): plain dict operations only.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from types import FrameType

STOP_TIMEOUT_S = 15.0  # SIGTERM -> SIGKILL, for a single stop (a JVM's shutdown hooks take a few seconds)
EXIT_TIMEOUT_S = 5.0  # the same at exit or on a signal, for all at once: the run is ending
POLL_INTERVAL_S = 0.05

# pid -> (start time in clock ticks since boot, what it is, whether to signal its whole process group)
_tracked: dict[int, tuple[int | None, str, bool]] = {}
_armed = False
_stopping = False


def _start_time(pid: int) -> int | None:
    """The process's start time (field 22 of /proc/<pid>/stat), or None when there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


def track(pid: int, what: str, group: bool = False) -> None:
    """Record a process we started. ``group``: it leads a process group of its own (``start_new_session``), and
    stopping it signals the whole group (a browser's helpers, a wrapper's child)."""
    _tracked[pid] = (_start_time(pid), what, group)


def forget(pid: int) -> None:
    """The process was stopped (or handed over) by its owner."""
    _tracked.pop(pid, None)


def alive(pid: int) -> bool:
    """Whether the process runs (a zombie does not; our own child is reaped here)."""
    with contextlib.suppress(ChildProcessError):
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); /proc tells. It may be our child that ended after the waitpid above (a SIGKILL
    # takes effect asynchronously): reap it now, or it would stay a zombie until this process exits. A multi-threaded
    # child (a JVM) shows Z as soon as its main thread has exited, while its other threads still run: waitpid cannot
    # reap it yet, so it counts as running until a later call can.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    if stat.rsplit(")", 1)[1].split()[0] == "Z":
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return False  # (not ours: its parent reaps it)
        return done != pid
    return True


def _signal(pid: int, sig: int) -> None:
    entry = _tracked.get(pid)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if entry is not None and entry[2]:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)


def stop(pid: int, timeout: float = STOP_TIMEOUT_S) -> None:
    """Stop one process by pid: SIGTERM, then SIGKILL if it is still there after ``timeout``; reaped when it is our
    child; forgotten afterwards."""
    stop_many([pid], timeout)


def stop_many(pids: Iterable[int], timeout: float = STOP_TIMEOUT_S) -> None:
    """``stop`` for several processes at once: all get SIGTERM, then each still there after ``timeout`` SIGKILL."""
    given = list(pids)
    for pid in given:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    killed = False
    pending = given
    while pending := [pid for pid in pending if alive(pid)]:
        if time.monotonic() > deadline:
            if killed:  # (SIGKILL cannot be refused: only a process stuck in the kernel is left)
                break
            for pid in pending:
                _signal(pid, signal.SIGKILL)
            killed = True
            deadline = time.monotonic() + timeout
        time.sleep(POLL_INTERVAL_S)
    for pid in given:
        forget(pid)


def stop_all(timeout: float = EXIT_TIMEOUT_S) -> list[int]:
    """Stop every recorded process that still runs (the same process: same start time); the pids stopped."""
    running = {pid: what for pid, (started, what, _) in _tracked.copy().items()
               if started is not None and _start_time(pid) == started and alive(pid)}
    for pid, what in running.items():
        with contextlib.suppress(OSError, ValueError):  # (stderr may be closed at exit)
            sys.stderr.write(f"stopping {what} (pid {pid}), left running\n")
    stop_many(running, timeout)
    _tracked.clear()
    return list(running)


def stop_all_at_exit() -> None:
    """From now on, stop every recorded process at interpreter exit and on SIGTERM / SIGINT (then the signal does
    what it did before). Call from the main thread; calling again changes nothing."""
    global _armed
    if _armed:
        return
    _armed = True
    atexit.register(stop_all)
    for sig in (signal.SIGTERM, signal.SIGINT):
        previous = signal.getsignal(sig)
        signal.signal(sig, _handler(sig, previous))


def _handler(sig: int, previous: signal._HANDLER) -> signal._HANDLER:
    def on_signal(signum: int, frame: FrameType | None) -> None:
        global _stopping
        if _stopping:  # (a second signal while stopping: the first one's stop goes on)
            return
        _stopping = True
        try:
            stop_all()
        finally:
            _stopping = False
        if callable(previous):
            previous(signum, frame)  # e.g. SIGINT's KeyboardInterrupt (this handler stays for the next one)
        elif previous == signal.SIG_DFL:
            signal.signal(sig, signal.SIG_DFL)
            os.kill(os.getpid(), signum)  # the default action, now that this handler is gone: SIGTERM ends us

    return on_signal
