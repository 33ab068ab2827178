"""Start ``python -m broker standalone`` as a child process and wait for its ready line."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from pathlib import Path

from cluster import processes

STARTUP_TIMEOUT_S = 60.0  # a loaded 2-core machine (JVMs beside it) can take long
READY_RE = re.compile(r"broker ready in [\d.]+ s: pulsar://[^:]+:(\d+)\s+http://[^:]+:(\d+)")


def start_broker(data_dir: Path, config: Path, port: int = 0) -> tuple[subprocess.Popen[str], int]:
    proc, port, _ = start_broker_with_web(data_dir, config, port)
    return proc, port


def start_broker_with_web(data_dir: Path, config: Path, port: int = 0,
                          web_port: int = 0) -> tuple[subprocess.Popen[str], int, int]:
    """The process, its binary port and its HTTP port (``port``/``web_port`` 0: free ones; a
    fixed one lets clients reconnect to a restarted broker)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "broker", "standalone", "--config", str(config), "--port", str(port),
         "--web-port", str(web_port),
         "--data-dir", str(data_dir), "--bind-address", "127.0.0.1"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    processes.track(proc.pid, f"broker ({data_dir})")
    port, web_port = await_ready(proc)
    # Keep reading its output so a chatty broker never blocks on a full pipe.
    threading.Thread(target=_discard, args=(proc,), daemon=True).start()
    return proc, port, web_port


def await_ready(proc: subprocess.Popen[str], lines: list[str] | None = None) -> tuple[int, int]:
    """Read a starting broker's output (kept in ``lines``) up to its ready line: its binary and HTTP ports. A broker
    that exits, or is not ready within STARTUP_TIMEOUT_S, is killed: AssertionError with what it wrote."""
    assert proc.stdout is not None
    lines = [] if lines is None else lines
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        m = READY_RE.search(line)
        if m:
            return int(m.group(1)), int(m.group(2))
    proc.kill()
    proc.wait()
    raise AssertionError("broker did not report ready:\n" + "".join(lines))


def _discard(proc: subprocess.Popen[str]) -> None:
    assert proc.stdout is not None
    for _ in proc.stdout:
        pass
