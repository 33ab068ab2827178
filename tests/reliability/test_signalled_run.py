"""A test run stopped by a signal still stops what it started (cluster/processes.py, armed by tests/conftest.py).

A tiny pytest session in a subprocess takes the real ZooKeeper of the ``zk_server`` fixture and waits. It is sent
SIGTERM, which ends it without any fixture teardown: its ZooKeeper must be gone all the same, and SIGTERM must still
end it as SIGTERM does. SIGINT must still be pytest's KeyboardInterrupt (exit status 2). A process a session records
and never stops is stopped when the session ends normally (at interpreter exit).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from cluster import processes
from tests.waiting import wait_for
from tests.zookeeper import require_zookeeper

REPO = Path(__file__).resolve().parents[2]
ZK_WAIT_S = 120.0  # the inner session's start and its ZooKeeper's JVM, on a busy machine
GONE_WAIT_S = 30.0  # the handler's SIGTERM to ZooKeeper (SIGKILL after 5 s) and its exit
EXIT_WAIT_S = 60.0

HOLD_A_ZOOKEEPER = """
import os
import threading
from pathlib import Path


def test_hold_a_zookeeper(zk_server):
    Path(os.environ["PID_FILE"]).write_text(str(zk_server.pid))
    threading.Event().wait(600)  # until the outer test signals this session
"""

LEAVE_A_PROCESS = """
import os
import subprocess
from pathlib import Path

from cluster import processes


def test_leave_a_process_running():
    proc = subprocess.Popen(["sleep", "600"], start_new_session=True)
    processes.track(proc.pid, "sleep")
    Path(os.environ["PID_FILE"]).write_text(str(proc.pid))
"""


def inner_session(tmp_path: Path, source: str) -> tuple[subprocess.Popen[bytes], Path, Path]:
    """pytest on one test file in ``tmp_path``, with tests/conftest.py as a plugin (its fixtures and the arming);
    the process, the file the test writes a pid to, and the session's output."""
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # (its own rootdir: none of the project's settings)
    test_file = tmp_path / "test_inner.py"
    test_file.write_text(source)
    pid_file, log_path = tmp_path / "pid", tmp_path / "inner.log"
    env = {**os.environ, "PYTHONPATH": str(REPO), "PID_FILE": str(pid_file)}
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pytest", "-q", "-p", "tests.conftest", "-p", "no:cacheprovider",
             "-p", "no:randomly", f"--basetemp={tmp_path / 'basetemp'}", str(test_file)],
            cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    processes.track(proc.pid, "inner pytest session", group=True)
    return proc, pid_file, log_path


def written_pid(proc: subprocess.Popen[bytes], pid_file: Path, log_path: Path, timeout: float) -> int:
    def written() -> int | None:
        if proc.poll() is not None and not pid_file.exists():
            raise AssertionError(f"the inner session exited ({proc.returncode}):\n{log_path.read_text()[-3000:]}")
        text = pid_file.read_text() if pid_file.exists() else ""
        return int(text) if text else None

    return wait_for(written, timeout, "the inner session's pid file")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signalled_run_stops_its_zookeeper(tmp_path: Path, sig: signal.Signals) -> None:
    require_zookeeper()
    proc, pid_file, log_path = inner_session(tmp_path, HOLD_A_ZOOKEEPER)
    zk_pid = 0
    try:
        zk_pid = written_pid(proc, pid_file, log_path, ZK_WAIT_S)
        assert processes.alive(zk_pid)
        os.kill(proc.pid, sig)
        returncode = proc.wait(EXIT_WAIT_S)
        wait_for(lambda: not processes.alive(zk_pid), GONE_WAIT_S, f"ZooKeeper (pid {zk_pid}) to be stopped")
        if sig == signal.SIGTERM:
            assert returncode == -signal.SIGTERM, log_path.read_text()[-3000:]  # ended by SIGTERM itself
        else:
            assert returncode == pytest.ExitCode.INTERRUPTED, log_path.read_text()[-3000:]
            assert "KeyboardInterrupt" in log_path.read_text()
    finally:
        for pid in (proc.pid, zk_pid):
            if pid and processes.alive(pid):
                processes.stop(pid)
        processes.forget(proc.pid)


def test_a_process_left_running_is_stopped_at_exit(tmp_path: Path) -> None:
    proc, pid_file, log_path = inner_session(tmp_path, LEAVE_A_PROCESS)
    left = 0
    try:
        assert proc.wait(EXIT_WAIT_S) == pytest.ExitCode.OK, log_path.read_text()[-3000:]
        left = written_pid(proc, pid_file, log_path, 1.0)
        wait_for(lambda: not processes.alive(left), GONE_WAIT_S, f"the process left running (pid {left}) to stop")
    finally:
        if left and processes.alive(left):
            processes.stop(left)
        processes.forget(proc.pid)
