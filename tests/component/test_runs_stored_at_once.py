"""A read that ends with one producer's run of plain SENDs, with nothing queued before it, is stored at once
(``Producer.store_run``), not queued for the end of the read: the same appends, receipts, errors and counts as
queued, and queued wherever it must be.

Each scenario feeds its reads to a connection (a fake transport, no socket, so the reads are exactly as
written) twice, each time on a new broker: once as the broker runs, once with ``can_store_at_once`` answering
no (every run queued, as before the path existed). What the client gets, what is appended (per topic, entries
per append) and what is counted must be the same, and the first run must have stored at once exactly the runs
expected: a run that ends the read when nothing was queued; not one followed by a command or by the first
bytes of the next frame, not one of interleaved producers (that would split one producer's append in two),
not a run with a SEND to refuse, nor one of a topic that deduplicates.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import pytest

from broker.connection import Connection
from broker.embedded import Broker
from broker.protocol import commands
from broker.protocol import pulsar_api_pb2 as pb
from broker.protocol.checksum import crc32c
from broker.protocol.frames import FrameDecoder
from broker.service.producer import Producer
from managed_ledger import AddCallback
from tests.component.wire import T, producer_cmd
from tests.waiting import eventually

TOPICS = {1: "persistent://public/default/at-once-a", 2: "persistent://public/default/at-once-b",
          3: "non-persistent://public/default/at-once-n", 4: "persistent://public/default/at-once-a"}


def send(producer_id: int, seq: int, batch: int = 0, corrupt: bool = False) -> bytes:
    """A SEND frame as the official clients write it: one message, or a batch of ``batch`` (sequence ids from
    ``seq``, the command's num_messages and highest sequence id set)."""
    cmd = pb.BaseCommand(type=T.SEND)
    cmd.send.producer_id, cmd.send.sequence_id = producer_id, seq
    meta = pb.MessageMetadata(producer_name=f"p{producer_id}", sequence_id=seq, publish_time=1_700_000_000_000)
    body = b"m%d" % seq
    if batch:
        single = pb.SingleMessageMetadata(payload_size=len(body)).SerializeToString()
        body = (struct.pack(">I", len(single)) + single + body) * batch
        cmd.send.num_messages, cmd.send.highest_sequence_id = batch, seq + batch - 1
        meta.num_messages_in_batch = batch
    encoded = meta.SerializeToString()
    tail = struct.pack(">I", len(encoded)) + encoded + body
    crc = crc32c(tail) ^ (1 if corrupt else 0)
    return commands.frame_with_payload(cmd, b"\x0e\x01" + struct.pack(">I", crc) + tail)


PING = commands.PING
SPLIT = send(1, 1, batch=2)

# name: (the reads, each the bytes of one data_received; SENDs in them; runs stored at once; broker settings)
SCENARIOS: dict[str, tuple[list[bytes], int, int, dict[str, Any]]] = {
    "a run ends the read": ([send(1, 0, 3) + send(1, 3, 2), send(1, 5) + send(1, 6), send(1, 7, 4)], 5, 3, {}),
    "interleaved producers": ([send(1, 0, 2) + send(2, 0) + send(1, 2) + send(1, 3, 3) + send(2, 1, 2)], 5, 0, {}),
    # (stored at once, the second would be appended before the first, which comes first on the wire)
    "two producers of one topic": ([send(1, 0, 2) + send(4, 0) + send(4, 1, 3)], 3, 0, {}),
    "a command, then a run": ([PING + send(1, 0, 2) + send(1, 2)], 2, 1, {}),
    "a run, then a command": ([send(1, 0, 2) + send(1, 2) + PING], 2, 0, {}),
    # (the second read completes the frame: a run of one that ends its read)
    "a run, then part of a frame": ([send(1, 0, 2) + SPLIT[:20], SPLIT[20:], send(1, 3)], 3, 2, {}),
    "a refused SEND in the run": ([send(1, 0) + send(1, 1, 2, corrupt=True) + send(1, 3, 2)], 3, 0, {}),
    "non-persistent": ([send(3, 0, 2) + send(3, 2), send(3, 3)], 3, 2, {}),
    "deduplication": ([send(1, 0, 2) + send(1, 2) + send(1, 1), send(1, 0, 2) + send(1, 3)], 5, 0,
                      {"brokerDeduplicationEnabled": True}),
}


class Transport:
    """What the connection writes, decoded."""

    def __init__(self) -> None:
        self.decoder = FrameDecoder(64 * 1024 * 1024)
        self.commands: list[pb.BaseCommand] = []

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 1), "sockname": ("127.0.0.1", 6650)}.get(name, default)

    def writelines(self, data: list[bytes]) -> None:
        for chunk in data:
            self.decoder.feed(chunk)
        while (frame := self.decoder.next_frame()) is not None:
            self.commands.append(frame.command)

    def write(self, data: bytes) -> None:
        self.writelines([data])

    def is_closing(self) -> bool:
        return False

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass


def answer(cmd: pb.BaseCommand) -> tuple[Any, ...]:
    if cmd.type == T.SEND_RECEIPT:
        r = cmd.send_receipt
        return ("receipt", r.producer_id, r.sequence_id, r.highest_sequence_id, r.message_id.ledgerId,
                r.message_id.entryId)
    if cmd.type == T.SEND_ERROR:
        e = cmd.send_error
        return ("error", e.producer_id, e.sequence_id, e.error, e.message)
    return (pb.BaseCommand.Type.Name(cmd.type),)


async def feed(reads: list[bytes], sends: int, settings: dict[str, Any], at_once: bool,
               monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, Any], int]:
    """Feed ``reads`` to a new broker's connection, each once the one before is settled: what the client got,
    what was appended and counted; and how many runs were stored at once."""
    stored_at_once = 0
    real_store_run = Producer.store_run

    def counted(self: Producer, *args: Any) -> None:
        nonlocal stored_at_once
        stored_at_once += 1
        real_store_run(self, *args)

    with monkeypatch.context() as m:
        m.setattr(Producer, "store_run", counted)
        if not at_once:
            m.setattr(Producer, "can_store_at_once", lambda self: False)
        async with Broker(**settings) as b:
            assert b.server is not None
            server = b.server
            transport = Transport()
            conn = Connection(server)
            conn.connection_made(transport)  # type: ignore[arg-type]
            connect = pb.BaseCommand(type=T.CONNECT)
            connect.connect.client_version, connect.connect.protocol_version = "at-once", 20
            conn.data_received(commands.frame(connect))
            for pid, topic in TOPICS.items():
                conn.data_received(commands.frame(producer_cmd(topic, producer_id=pid, request_id=pid)))
                await eventually(lambda pid=pid: pid in conn.cnx.producers, f"producer {pid}")  # type: ignore[misc]
            appends: list[tuple[str, int]] = []

            def counting(topic: str, real: Callable[[list[bytes], AddCallback], None]) -> Callable[..., None]:
                def add(entries: list[bytes], callback: AddCallback) -> None:
                    appends.append((topic, len(entries)))
                    real(entries, callback)
                return add

            service = server.service
            for topic in set(TOPICS.values()):
                if topic in service.topics:  # (a non-persistent topic stores nothing)
                    buffer = service.topics[topic].txn_buffer
                    buffer.add_entries = counting(topic, buffer.add_entries)
            transport.commands.clear()
            for data in reads:
                conn.data_received(data)
                await eventually(lambda: conn.pending_sends == 0 and server.publish_buffer_bytes == 0,
                                 "the read's SENDs to be answered")
            await eventually(lambda: sum(c.type in (T.SEND_RECEIPT, T.SEND_ERROR) for c in transport.commands) >= sends,
                             "every SEND answered")
            producers = conn.cnx.producers
            topics = {name: service.topics.get(name) or service.non_persistent_topics[name] for name in TOPICS.values()}
            outcome = {
                "answers": [answer(c) for c in transport.commands],
                "appends": appends,
                "topics": {name: (t.msg_in, t.bytes_in, t.entries_added) for name, t in topics.items()},
                "producers": {pid: (p.msg_in, p.bytes_in, p.pending) for pid, p in producers.items()},
            }
            conn.connection_lost(None)
    return outcome, stored_at_once


@pytest.mark.parametrize("scenario", list(SCENARIOS))
async def test_runs_stored_at_once_are_stored_as_queued(scenario: str, monkeypatch: pytest.MonkeyPatch) -> None:
    reads, sends, expected_at_once, settings = SCENARIOS[scenario]
    fused, at_once = await feed(reads, sends, settings, True, monkeypatch)
    queued, none = await feed(reads, sends, settings, False, monkeypatch)
    assert none == 0
    assert at_once == expected_at_once
    assert fused == queued
    assert sum(a[0] in ("receipt", "error") for a in fused["answers"]) == sends, fused["answers"]
