"""Cluster mode: an owner cut off from ZooKeeper long enough to take its session as lost (5/6 of the timeout) but
reconnected before ZooKeeper expires it. The broker stopped serving; ZooKeeper kept the session and, with it, the
ownership node: the topic must still be reachable through the other broker (no lookup loop to the broker that
refuses it)."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator

import pulsar
import pytest

from cluster.local import start_broker
from tests.cluster.conftest import Brokers, log_of
from tests.metadata_store.tcp_proxy import TcpProxy
from tests.waiting import wait_for

# Long enough that the window between 5/6 of it (the broker gives the session up) and all of it (ZooKeeper expires
# the session) leaves room to reconnect: 3 s.
CUT_SESSION_TIMEOUT_MS = 18_000


class ThreadedProxy:
    """tests/metadata_store/tcp_proxy.py's TcpProxy on a loop of its own (the test itself is synchronous)."""

    def __init__(self, target_port: int) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="zk proxy", daemon=True)
        self.thread.start()
        self.proxy = TcpProxy(target_port)
        self._call(self.proxy.start())

    def _call(self, coro: object) -> None:
        asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)  # type: ignore[arg-type]

    @property
    def port(self) -> int:
        return self.proxy.port

    def cut(self) -> None:
        self.loop.call_soon_threadsafe(self.proxy.cut)

    def restore(self) -> None:
        self.loop.call_soon_threadsafe(self.proxy.restore)

    def close(self) -> None:
        self._call(self.proxy.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)
        self.loop.close()


@pytest.fixture
def zk_proxy(brokers: Brokers) -> Iterator[ThreadedProxy]:
    proxy = ThreadedProxy(int(brokers.cluster.zk_address.rsplit(":", 1)[1]))
    try:
        yield proxy
    finally:
        proxy.close()


def test_a_session_given_up_then_kept_leaves_the_topic_reachable(brokers: Brokers, zk_proxy: ThreadedProxy) -> None:
    settings = {**brokers.settings, "metadataStoreSessionTimeoutMillis": str(CUT_SESSION_TIMEOUT_MS),
                "metadataStoreUrl": f"zk:127.0.0.1:{zk_proxy.port}{brokers.chroot}"}
    cut_off = start_broker(brokers.cluster, settings, f"{brokers.chroot[1:]}-cut")
    brokers.started.append(cut_off)
    topic = f"persistent://public/default/kept-{uuid.uuid4().hex[:8]}"
    client = pulsar.Client(cut_off.service_url, operation_timeout_seconds=30)
    try:
        client.create_producer(topic).send(b"before")  # alone: the cut-off broker owns the bundle
    finally:
        client.close()
    (other,) = brokers.start()
    registration = f"/loadbalance/brokers/{cut_off.web_url.removeprefix('http://')}"
    with brokers.zk() as zk:
        session = zk.exists(registration).ephemeralOwner
    zk_proxy.cut()
    try:
        wait_for(lambda: "metadata session lost" in log_of(cut_off), CUT_SESSION_TIMEOUT_MS / 1000 * 2,
                 "the cut-off broker to give its session up")
    finally:
        zk_proxy.restore()
    wait_for(lambda: "SESSION_REESTABLISHED" in log_of(cut_off), CUT_SESSION_TIMEOUT_MS / 1000,
             "the cut-off broker to reconnect")
    with brokers.zk() as zk:
        if wait_for(lambda: zk.exists(registration), 30, "the registration").ephemeralOwner != session:
            pytest.skip("the machine was too slow: ZooKeeper expired the session before the broker reconnected")
    client = pulsar.Client(other.service_url, operation_timeout_seconds=20)
    try:
        client.create_producer(topic, send_timeout_millis=20_000).send(b"after")
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        assert [reader.read_next(20_000).data() for _ in range(2)] == [b"before", b"after"]
    finally:
        client.close()
