"""The single-file Java programs of tests/offload/java, compiled once against a folder of jars and run."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from tests.needs import unavailable

JAVA_DIR = Path(__file__).parent / "java"
TIMEOUT_S = 120


def compiled(program: str, lib: Path, jar_glob: str, classes: Path, install: str) -> list[str]:
    """The command that runs ``program`` (JAVA_DIR/<program>.java), compiled into ``classes`` against ``lib``'s jars;
    unavailable when java, javac or a jar matching ``jar_glob`` is missing (``install`` says how to get them)."""
    missing = [tool for tool in ("java", "javac") if shutil.which(tool) is None]
    if missing:
        unavailable(f"{program}: no {', '.join(missing)} on PATH")
    if not any(lib.glob(jar_glob)):
        unavailable(f"{program}: no {jar_glob} in {lib} (`{install}`)")
    classpath = f"{lib}/*"
    subprocess.run(["javac", "-nowarn", "-cp", classpath, "-d", str(classes), str(JAVA_DIR / f"{program}.java")],
                   check=True, capture_output=True, timeout=TIMEOUT_S)
    return ["java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp", f"{classes}:{classpath}",
            program]


def run(command: list[str], env: dict[str, str] | None = None) -> str:
    """The program's stdout (it must succeed); ``env``: more environment variables."""
    done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S,
                          env={**os.environ, **env} if env else None)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout
