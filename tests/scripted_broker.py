"""What the tests' scripted brokers (asyncio servers answering a few commands by hand) share."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from broker.protocol import pulsar_api_pb2 as pb
from broker.protocol.frames import FrameDecoder
from broker.protocol.limits import max_frame_size


async def commands_from(reader: asyncio.StreamReader,
                        max_frame: int = max_frame_size(5 * 1024 * 1024)) -> AsyncIterator[pb.BaseCommand]:
    """Each command the client sends, in order, until it closes its side."""
    decoder = FrameDecoder(max_frame)
    while data := await reader.read(65536):
        decoder.feed(data)
        while (frame := decoder.next_frame()) is not None:
            yield frame.command
