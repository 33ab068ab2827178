"""kill -9 the broker process while a producer sends (RELIABILITY.md G1), five rounds.

Each round starts ``python -m broker standalone`` on the same data directory (file storage,
the default), first drains the subscription and checks that every message receipted so far is
there, then sends with the official client - counting a message only once its receipt is in -
while a consumer receives and acknowledges, and SIGKILLs the broker from the receipt callback
after a random number of receipts. Subscription positions are saved often (50/s) so the kill
also lands in the middle of cursor-state writes. A last restart drains what remains. The check:
every receipted message was consumed, at least once, and the first deliveries come in send order.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pulsar

from tests.reliability.broker_process import start_broker

ROUNDS = 5
DRAIN_TIMEOUT_S = 20.0
TOPIC = "persistent://public/default/kill9"
IN_FLIGHT = 64  # sends outstanding at once: several per group commit


class Ledger:
    """What the test knows: receipted messages in send order, and everything consumed."""

    def __init__(self) -> None:
        self.receipted: list[str] = []
        self.consumed: list[str] = []
        self.lock = threading.Lock()


def subscribe(client: pulsar.Client) -> pulsar.Consumer:
    return client.subscribe(TOPIC, "check", initial_position=pulsar.InitialPosition.Earliest)


def drain(consumer: pulsar.Consumer, ledger: Ledger) -> None:
    """Consume until every receipted message has been seen (acking each one)."""
    wanted = set(ledger.receipted)
    seen = set(ledger.consumed)
    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    while not wanted <= seen:
        remaining_ms = int((deadline - time.monotonic()) * 1000)
        assert remaining_ms > 0, f"{len(wanted - seen)} receipted messages never delivered, e.g. " \
                                 f"{sorted(wanted - seen)[:5]}"
        try:
            msg = consumer.receive(timeout_millis=remaining_ms)
        except pulsar.Timeout:
            continue
        text = msg.data().decode()
        ledger.consumed.append(text)
        seen.add(text)
        consumer.acknowledge(msg)


def consume_while(consumer: pulsar.Consumer, ledger: Ledger, running: threading.Event) -> None:
    """Receive and acknowledge until the broker is gone."""
    while running.is_set():
        try:
            msg = consumer.receive(timeout_millis=100)
        except pulsar.PulsarException:  # a timeout, or the broker just died
            continue
        ledger.consumed.append(msg.data().decode())
        try:
            consumer.acknowledge(msg)
        except pulsar.PulsarException:
            pass


def produce_until_killed(client: pulsar.Client, proc: subprocess.Popen[str], ledger: Ledger,
                         round_no: int, kill_after: int) -> None:
    producer = client.create_producer(TOPIC, batching_enabled=False, send_timeout_millis=5000,
                                      block_if_queue_full=True)
    slots = threading.Semaphore(IN_FLIGHT)
    receipts = 0
    killed = threading.Event()

    def on_receipt(text: str) -> Callable[[pulsar.Result, pulsar.MessageId], None]:
        def callback(result: pulsar.Result, _msg_id: pulsar.MessageId) -> None:
            nonlocal receipts
            slots.release()
            if result != pulsar.Result.Ok:
                return
            with ledger.lock:
                ledger.receipted.append(text)
                receipts += 1
                if receipts == kill_after:
                    os.kill(proc.pid, signal.SIGKILL)
                    killed.set()
        return callback

    i = 0
    while not killed.is_set() and proc.poll() is None:
        if not slots.acquire(timeout=10):
            break
        text = f"{round_no}-{i}"
        producer.send_async(text.encode(), on_receipt(text))
        i += 1
    proc.wait(timeout=10)
    assert killed.is_set(), "the broker died before the test killed it"


def test_kill9_never_loses_a_receipted_message(tmp_path: Path) -> None:
    rng = random.Random(20260101)
    data_dir = tmp_path / "data"
    config = tmp_path / "broker.conf"
    config.write_text("managedLedgerDefaultMarkDeleteRateLimit=50\n")
    ledger = Ledger()
    for round_no in range(ROUNDS + 1):
        proc, port = start_broker(data_dir, config)
        try:
            client = pulsar.Client(f"pulsar://127.0.0.1:{port}", operation_timeout_seconds=10)
            try:
                consumer = subscribe(client)
                drain(consumer, ledger)
                if round_no < ROUNDS:
                    running = threading.Event()
                    running.set()
                    reader = threading.Thread(target=consume_while, args=(consumer, ledger, running))
                    reader.start()
                    try:
                        produce_until_killed(client, proc, ledger, round_no, rng.randint(50, 600))
                    finally:
                        running.clear()
                        reader.join()
            finally:
                try:
                    client.close()
                except pulsar.NotConnected:
                    pass  # (the client may still be reconnecting to the broker that was killed)
            if round_no == ROUNDS:
                proc.send_signal(signal.SIGTERM)
                assert proc.wait(timeout=15) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    # At least once: every receipted message was consumed. In order: the first deliveries follow
    # the send order (one producer, so storage order is send order).
    assert set(ledger.receipted) <= set(ledger.consumed)
    first_seen: dict[str, int] = {}
    for index, text in enumerate(ledger.consumed):
        first_seen.setdefault(text, index)
    order = [first_seen[t] for t in ledger.receipted]
    assert order == sorted(order)
    assert len(ledger.receipted) >= ROUNDS * 50
