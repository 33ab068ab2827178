"""A subscription the broker confirmed as created survives a kill -9 right after (issue 20, item 4).

A new subscription's cursor file is written atomically and its directory fsynced before the
broker answers the SUBSCRIBE; the directory fsyncs of the subscriptions created in one writer round
are grouped into one per directory. The scenario, with the official client and the broker as a
process on the default settings: many subscriptions created at once from several threads (on one
topic, so their files share a directory and its syncs, and on topics of their own), the broker
killed with SIGKILL as soon as the last one is confirmed, restarted on the same data: every
subscription is listed by the admin API, and each one still holds the message published before the
kill (a subscription created anew on the restarted broker would start after it).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import urllib.request
from pathlib import Path

import pulsar

from tests.reliability.broker_process import start_broker_with_web

SHARED_TOPIC = "persistent://public/default/subscribe-kill9"
THREADS = 4
PER_THREAD = 10


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def _subscriptions(web_port: int, topic: str) -> list[str]:
    path = topic.replace("persistent://", "")
    with urllib.request.urlopen(f"http://127.0.0.1:{web_port}/admin/v2/persistent/{path}/subscriptions",
                                timeout=10) as response:
        names: list[str] = json.loads(response.read())
    return names


def test_subscriptions_confirmed_before_a_kill9_exist_after_the_restart(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    config = tmp_path / "broker.conf"
    config.write_text("")
    own_topics = [f"persistent://public/default/subscribe-kill9-own-{i}" for i in range(THREADS)]
    proc, port, _ = start_broker_with_web(data_dir, config)
    try:
        client = pulsar.Client(f"pulsar://127.0.0.1:{port}", operation_timeout_seconds=30)
        try:
            producer = client.create_producer(SHARED_TOPIC, batching_enabled=False)
            errors: list[BaseException] = []
            # Held open until the kill: a consumer's close writes its position at once, which would
            # save a subscription whose creation was not durable.
            consumers: list[pulsar.Consumer] = []

            def subscribe(t: int) -> None:
                try:
                    for i in range(PER_THREAD):
                        consumers.append(client.subscribe(SHARED_TOPIC, f"sub-{t}-{i}"))
                        consumers.append(client.subscribe(own_topics[t], f"own-{i}"))
                except BaseException as exc:  # reported below
                    errors.append(exc)

            threads = [threading.Thread(target=subscribe, args=(t,)) for t in range(THREADS)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert not errors, errors
            assert len(consumers) == 2 * THREADS * PER_THREAD
            producer.send(b"before the kill")  # held by every subscription of the shared topic
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        finally:
            try:
                client.close()
            except pulsar.PulsarException:
                pass  # (the broker is gone)
    finally:
        _stop(proc)

    proc, port, web_port = start_broker_with_web(data_dir, config)
    try:
        expected = {f"sub-{t}-{i}" for t in range(THREADS) for i in range(PER_THREAD)}
        assert set(_subscriptions(web_port, SHARED_TOPIC)) == expected
        for t, topic in enumerate(own_topics):
            assert set(_subscriptions(web_port, topic)) == {f"own-{i}" for i in range(PER_THREAD)}, t
        client = pulsar.Client(f"pulsar://127.0.0.1:{port}", operation_timeout_seconds=30)
        try:
            for name in sorted(expected)[:5]:
                consumer = client.subscribe(SHARED_TOPIC, name)
                assert consumer.receive(timeout_millis=10_000).data() == b"before the kill"
                consumer.close()
        finally:
            client.close()
    finally:
        _stop(proc)
