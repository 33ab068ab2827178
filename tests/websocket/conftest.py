"""A broker with the WebSocket API on, and helpers for aiohttp's WebSocket client."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import pytest

from broker.embedded import BrokerThread

WAIT_S = 10.0  # an answer that should come


@pytest.fixture(scope="module")
def ws_broker() -> Iterator[BrokerThread]:
    with BrokerThread(managedLedgerStorage="memory", webSocketServiceEnabled=True,
                      brokerDeleteInactiveTopicsEnabled=False) as broker:
        yield broker


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


def ws_url(broker: BrokerThread, path: str) -> str:
    return broker.web_url.replace("http://", "ws://") + path


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


async def receive_json(ws: aiohttp.ClientWebSocketResponse, wait_s: float = WAIT_S) -> Any:
    msg = await ws.receive(timeout=wait_s)
    assert msg.type == aiohttp.WSMsgType.TEXT, (msg.type, msg.data, msg.extra)
    return json.loads(msg.data)


async def send(ws: aiohttp.ClientWebSocketResponse, payload: bytes, **fields: Any) -> dict[str, Any]:
    """Send one message and return its ProducerAck."""
    await ws.send_str(json.dumps({"payload": b64(payload), **fields}))
    ack: dict[str, Any] = await receive_json(ws)
    return ack
