"""bench/brokers.py's CPU reading of another process (the benchmark's broker CPU per message)."""

from __future__ import annotations

import os
import subprocess
import sys

from bench.brokers import CLK_TCK, process_cpu_seconds


def _stat_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def test_cpu_of_another_process_is_finer_than_a_clock_tick_and_agrees_with_proc() -> None:
    # A child that spins in a thread (counted: threads are the process's), then waits for stdin.
    child = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, threading, time\n"
         "def spin():\n"
         "    t = time.thread_time()\n"
         "    while time.thread_time() - t < 0.05: pass\n"
         "th = threading.Thread(target=spin); th.start(); th.join()\n"
         "print('spun', flush=True); sys.stdin.read()\n"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "spun\n"
        precise = process_cpu_seconds(child.pid)
        ticks = _stat_seconds(child.pid)
        assert precise >= 0.05  # the exited thread's spin is in it
        assert abs(precise - ticks) <= 2 / CLK_TCK + 0.01
        if sys.platform == "linux":
            assert precise != ticks  # nanoseconds, not a whole number of ticks (the child is idle now)
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait()


def test_a_process_that_has_gone_reads_zero() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # reaped: the pid names nothing now
    if not os.path.exists(f"/proc/{child.pid}"):  # (the pid not taken again meanwhile)
        assert process_cpu_seconds(child.pid) == 0.0
