"""A consume-transform-produce loop with the official Java client (tests/transactions/java/TxnLoop.java:
each input ``in-<i>`` becomes ``out-<i>`` and its acknowledgement, in one transaction) killed with
kill -9 at random points, and separately the broker process killed with kill -9 under it, each
restarted; in the end the output topic, read committed, holds every input exactly once and every
input is acknowledged. File ledger; the broker keeps its ports across restarts so the running
Java client reconnects to it by itself (and deduplication is on, as exactly-once needs: the client
sends again, after a reconnect, what it had not had a receipt for).

Needs ``java``/``javac`` and the Pulsar jars of ``make pulsar-deps`` (pulsar-client 4.0.7 and its
dependencies); skipped without them, failed under CI=true."""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import signal
import subprocess
import urllib.request
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import pytest

from cluster import processes
from cluster.apache_pulsar import missing_dependencies, pulsar_lib
from cluster.local import free_port
from tests.needs import unavailable
from tests.reliability.broker_process import start_broker_with_web
from tests.transactions.client import Message, TxnWireClient

pytestmark = pytest.mark.timeout(900)

JAVA_SOURCE = Path(__file__).parent / "java" / "TxnLoop.java"
IN = "persistent://public/default/ctp-in"
OUT = "persistent://public/default/ctp-out"
SUB = "ctp"
TXN_TIMEOUT_S = 5  # how soon a killed loop's open transaction is aborted and its input comes back
PER_ROUND = 8  # inputs published before each kill
JAVA_KILLS = 3
BROKER_KILLS = 3
PROGRESS_WAIT_S = 120.0  # a cold JVM on a busy 2-core machine, a broker restart, a transaction timeout
QUIET_S = 0.5  # how long "nothing more arrives" is watched for (never asserted on time)


def require_java() -> None:
    reason = missing_dependencies() or (None if shutil.which("javac") else "no `javac` on PATH")
    if reason is not None:
        unavailable(f"Java consume-transform-produce test: {reason}")


def compile_loop(tmp_path: Path) -> Path:
    """TxnLoop.java compiled against the Pulsar jars (skips or fails first when they are missing)."""
    require_java()
    out = tmp_path / "classes"
    subprocess.run(["javac", "-nowarn", "-cp", f"{pulsar_lib()}/*", "-d", str(out), str(JAVA_SOURCE)],
                   check=True, capture_output=True, timeout=300)
    return out


class Loop:
    """The Java loop's processes, one after another (each kill -9 starts the next); their output
    goes to numbered files so what every one of them committed can be counted."""

    def __init__(self, classes: Path, url: str, work: Path) -> None:
        self.classes, self.url, self.work = classes, url, work
        self.proc: subprocess.Popen[bytes] | None = None
        self.runs = 0

    def start(self) -> None:
        self.runs += 1
        with open(self.work / f"loop-{self.runs}.log", "wb") as log:
            self.proc = subprocess.Popen(
                ["java", "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                 "-cp", f"{self.classes}{os.pathsep}{pulsar_lib()}/*", "TxnLoop",
                 self.url, IN, OUT, SUB, str(TXN_TIMEOUT_S)],
                stdout=log, stderr=subprocess.STDOUT)
        processes.track(self.proc.pid, f"Java TxnLoop {self.runs}")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)
        self.proc = None  # killed on purpose: `until` no longer reports it as "the loop exited"

    def logs(self) -> Iterator[str]:
        for i in range(1, self.runs + 1):
            path = self.work / f"loop-{i}.log"
            if path.exists():
                yield path.read_text(errors="replace")

    def committed(self) -> int:
        return sum(text.count("\ncommitted ") + text.startswith("committed ") for text in self.logs())


def reached(loop: Loop, goal: int) -> bool:
    return loop.committed() >= goal


async def until(condition: Callable[[], bool], what: str, loop: Loop) -> None:
    """Poll ``condition`` (in a thread: it may read files or HTTP) until true, for PROGRESS_WAIT_S at most."""
    try:
        async with asyncio.timeout(PROGRESS_WAIT_S):
            while not await asyncio.to_thread(condition):
                assert loop.proc is None or loop.proc.poll() is None, "the Java loop exited:\n" + "".join(loop.logs())
                await asyncio.sleep(0.05)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}; the loop's output:\n"
                             + "\n".join(t[-3000:] for t in loop.logs())) from None


def get_json(url: str) -> object:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return json.loads(resp.read())
    except OSError:
        return None


async def publish(port: int, first: int, count: int) -> None:
    c = await TxnWireClient.open(port)
    try:
        await c.producer(IN, 1)
        for i in range(first, first + count):
            assert (await c.send(1, i, f"in-{i}")).HasField("send_receipt")
    finally:
        await c.close()


async def test_java_loop_and_broker_killed_at_random_points_output_each_input_once(tmp_path: Path) -> None:
    await run_loop_under_kills(tmp_path, compile_loop(tmp_path), {"managedLedgerStorage": "file"})


async def run_loop_under_kills(tmp_path: Path, classes: Path, storage: dict[str, str]) -> None:
    """The scenario on a broker with ``storage`` (its storage keys; tests/bookkeeper runs it on bookies)."""
    config = tmp_path / "broker.conf"
    settings = {**storage, "transactionCoordinatorEnabled": "true", "brokerDeduplicationEnabled": "true"}
    config.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    data = tmp_path / "data"
    port, web_port = free_port(), free_port()
    http = f"http://127.0.0.1:{web_port}"
    rng = random.Random(1919)
    broker, _, _ = await asyncio.to_thread(start_broker_with_web, data, config, port, web_port)
    loop = Loop(classes, f"pulsar://127.0.0.1:{port}", tmp_path)
    published = 0
    try:
        loop.start()
        for r in range(JAVA_KILLS + BROKER_KILLS):
            before = loop.committed()
            await publish(port, published, PER_ROUND)
            published += PER_ROUND
            # Kill once this round's inputs are partly done: somewhere in the middle of a transaction.
            goal = before + rng.randint(1, PER_ROUND - 1)
            await until(partial(reached, loop, goal), f"round {r}: {goal} commits", loop)
            await asyncio.sleep(rng.uniform(0, 0.05))  # where the kill lands, not a wait for anything
            if r < JAVA_KILLS:
                loop.kill()
                loop.start()
            else:
                broker.send_signal(signal.SIGKILL)
                broker.wait(30)
                broker, _, _ = await asyncio.to_thread(start_broker_with_web, data, config, port, web_port)
        await publish(port, published, PER_ROUND)
        published += PER_ROUND

        # Everything is read committed: a consumer of the output sees only committed transactions.
        expected = {f"out-{i}" for i in range(published)}
        c = await TxnWireClient.open(port)
        try:
            await c.subscribe(OUT, "check", 1)
            seen: list[str] = []
            ids: dict[str, list[tuple[int, int]]] = {}  # body -> the ids it came with (what a failure shows)

            def got(m: Message) -> None:
                seen.append(m.body)
                ids.setdefault(m.body, []).append(m.id)

            async def all_outputs() -> None:
                while set(seen) != expected:
                    got(await c.receive(1, wait_s=PROGRESS_WAIT_S))

            await asyncio.wait_for(all_outputs(), PROGRESS_WAIT_S)
            # The loop stops; its last transactions (if any) end, by commit or by their timeout.
            loop.kill()

            def settled() -> bool:
                stats = get_json(f"{http}/admin/v3/transactions/coordinatorStats?coordinatorId=0")
                return isinstance(stats, dict) and stats.get("ongoingTxnSize") == 0

            await until(settled, "no open transaction", loop)
            with pytest.raises(TimeoutError):  # nothing twice
                while True:
                    got(await c.receive(1, wait_s=QUIET_S))
            twice = sorted({b for b in seen if seen.count(b) > 1})
            assert sorted(seen) == sorted(expected), (twice, [ids[b] for b in twice], [
                f"run {i}: {line}" for i, text in enumerate(loop.logs(), 1) for line in text.splitlines()
                if any(line.startswith(("committed", "failed")) and f"in-{b[4:]}" in line for b in twice)])
        finally:
            await c.close()

        # Every input was acknowledged (by the transaction that produced its output).
        def input_done() -> bool:
            stats = get_json(f"{http}/admin/v2/persistent/public/default/ctp-in/stats")
            return isinstance(stats, dict) and stats["subscriptions"][SUB]["msgBacklog"] == 0

        await until(input_done, "the input's backlog at 0", loop)
        assert loop.runs == JAVA_KILLS + 1
    finally:
        loop.kill()
        broker.terminate()
        broker.wait(30)
