"""The SENDs of one read are stored together, per producer (connection.py / producer.py).

These tests put many frames into one write so that they arrive in one read, and check what a
client can see: receipts in order with consecutive positions, per-message deduplication inside a
batch, and SENDs accepted before a bad frame still stored with nothing left accounted.
"""

from __future__ import annotations

from broker.embedded import Broker
from broker.protocol import commands
from broker.protocol import pulsar_api_pb2 as pb
from managed_ledger import AddCallback
from tests.component.wire import T, WireClient, port_of, producer_cmd, send_frame
from tests.waiting import eventually


def frames(*pairs: tuple[pb.BaseCommand, bytes | None]) -> bytes:
    return b"".join(commands.frame_with_payload(c, p) if p is not None else commands.frame(c) for c, p in pairs)


async def open_producers(c: WireClient, topics: list[str]) -> None:
    await c.connect()
    for i, topic in enumerate(topics, 1):
        c.send(producer_cmd(topic, producer_id=i, request_id=i))
        assert (await c.recv()).type == T.PRODUCER_SUCCESS


async def test_interleaved_producers_in_one_read_get_ordered_consecutive_receipts() -> None:
    async with Broker() as b:
        c = await WireClient.open(port_of(b))
        await open_producers(c, ["persistent://public/default/batch-a", "persistent://public/default/batch-b"])
        burst = [send_frame(pid, seq, b"m%d" % seq) for seq in range(30) for pid in (1, 2)]
        c.writer.write(frames(*burst))
        receipts: dict[int, list[tuple[int, int, int]]] = {1: [], 2: []}
        for _ in range(60):
            r = await c.recv()
            assert r.type == T.SEND_RECEIPT, r
            rc = r.send_receipt
            receipts[rc.producer_id].append((rc.sequence_id, rc.message_id.ledgerId, rc.message_id.entryId))
        for got in receipts.values():
            assert [seq for seq, _, _ in got] == list(range(30))
            assert len({ledger for _, ledger, _ in got}) == 1
            assert [entry for _, _, entry in got] == list(range(30))
        assert b.server is not None
        conn = next(iter(b.server.connections))
        assert conn.pending_sends == 0 and b.server.publish_buffer_bytes == 0
        c.close()


async def test_deduplication_decides_per_message_inside_a_batch() -> None:
    async with Broker(brokerDeduplicationEnabled=True) as b:
        c = await WireClient.open(port_of(b))
        await open_producers(c, ["persistent://public/default/batch-dedup"])
        c.writer.write(frames(*(send_frame(1, seq, b"d") for seq in (0, 1, 1, 2, 0))))
        stored: list[int] = []
        refused: list[int] = []
        for _ in range(5):
            r = await c.recv()
            if r.type == T.SEND_RECEIPT:
                stored.append(r.send_receipt.sequence_id)
            else:
                assert r.type == T.SEND_ERROR and r.send_error.error == pb.ServerError.PersistenceError, r
                refused.append(r.send_error.sequence_id)
        # the repeats were not stored: their first copies were still on their way to storage
        assert stored == [0, 1, 2] and sorted(refused) == [0, 1]
        c.writer.write(frames(send_frame(1, 1, b"d")))  # stored by now: acknowledged as (-1, -1)
        r = await c.recv()
        assert r.type == T.SEND_RECEIPT and r.send_receipt.sequence_id == 1
        assert r.send_receipt.message_id.ledgerId == (1 << 64) - 1  # -1 as uint64
        c.close()


async def test_sends_before_a_bad_frame_are_stored_and_accounted() -> None:
    async with Broker() as b:
        assert b.server is not None
        c = await WireClient.open(port_of(b))
        topic = "persistent://public/default/batch-then-garbage"
        await open_producers(c, [topic])
        garbage = b"\x00\x00\x00\x0a\x00\x00\x00\x06\xff\xff\xff\xff\xff\xff"  # undecodable command
        c.writer.write(frames(*(send_frame(1, seq, b"g") for seq in range(5))) + garbage)
        assert await c.closed_by_broker()
        await eventually(lambda: b.server is not None and b.server.publish_buffer_bytes == 0
                         and not b.server.connections, "the connection's sends to settle")
        ledger = b.server.service.topics[topic].ledger
        await eventually(lambda: ledger.number_of_entries == 5, "the five SENDs to be stored")


async def test_a_big_read_is_stored_in_appends_of_bounded_size() -> None:
    """More than SENDS_PER_APPEND SENDs in one read go to storage in several appends (the writer
    starts on the first while the rest are checked), receipts still in order and consecutive."""
    from broker.service.server_cnx import SENDS_PER_APPEND

    async with Broker() as b:
        assert b.server is not None
        c = await WireClient.open(port_of(b))
        topic = "persistent://public/default/batch-bounded"
        await open_producers(c, [topic])
        buffer = b.server.service.topics[topic].txn_buffer
        appends: list[int] = []
        real = buffer.add_entries

        def counted(entries: list[bytes], callback: AddCallback) -> None:
            appends.append(len(entries))
            real(entries, callback)

        buffer.add_entries = counted
        n = 2 * SENDS_PER_APPEND + 10
        c.writer.write(frames(*(send_frame(1, seq, b"b") for seq in range(n))))
        got = []
        for _ in range(n):
            r = await c.recv()
            assert r.type == T.SEND_RECEIPT, r
            got.append((r.send_receipt.sequence_id, r.send_receipt.message_id.entryId))
        assert got == [(seq, seq) for seq in range(n)]
        assert sum(appends) == n and max(appends) <= SENDS_PER_APPEND
        c.close()


async def test_each_send_of_a_run_gets_its_own_answer() -> None:
    """One producer's SENDs in one read are checked as a run: a bad one gets its own SendError
    (the code a SEND alone gets), its neighbours are stored, and nothing stays accounted."""
    async with Broker(maxMessageSize=1024) as b:
        assert b.server is not None
        c = await WireClient.open(port_of(b))
        topic = "persistent://public/default/batch-run-errors"
        await open_producers(c, [topic])
        bad_highest = send_frame(5, 5, b"h")
        bad_highest[0].send.producer_id, bad_highest[0].send.highest_sequence_id = 1, 3
        c.writer.write(frames(
            send_frame(1, 0, b"a"),
            send_frame(1, 1, b"b", corrupt=True),
            send_frame(1, 2, b"c"),
            (send_frame(1, 3, b"")[0], b"\x00\x00\xff\xff"),  # a metadata size past the payload's end
            send_frame(1, 4, b"z" * 2000),  # over maxMessageSize
            bad_highest,  # highest sequence id below the sequence id
            send_frame(1, 6, b"d"),
        ))
        answers: dict[int, tuple[int, int]] = {}
        for _ in range(7):
            r = await c.recv()
            if r.type == T.SEND_RECEIPT:
                answers[r.send_receipt.sequence_id] = (-1, r.send_receipt.message_id.entryId)
            else:
                assert r.type == T.SEND_ERROR, r
                answers[r.send_error.sequence_id] = (r.send_error.error, -1)
        E = pb.ServerError
        assert answers == {0: (-1, 0), 1: (E.ChecksumError, -1), 2: (-1, 1), 3: (E.MetadataError, -1),
                           4: (E.NotAllowedError, -1), 5: (E.MetadataError, -1), 6: (-1, 2)}
        conn = next(iter(b.server.connections))
        await eventually(lambda: conn.pending_sends == 0 and b.server is not None
                         and b.server.publish_buffer_bytes == 0, "the run's sends to settle")
        c.close()


async def test_a_run_of_a_producer_still_waiting_for_exclusive_access_is_refused_per_send() -> None:
    async with Broker() as b:
        c = await WireClient.open(port_of(b))
        await c.connect()
        topic = "persistent://public/default/batch-run-waiting"
        holder = producer_cmd(topic, producer_id=1, request_id=1)
        holder.producer.producer_access_mode = pb.ProducerAccessMode.Exclusive
        waiting = producer_cmd(topic, producer_id=2, request_id=2)
        waiting.producer.producer_access_mode = pb.ProducerAccessMode.WaitForExclusive
        c.send(holder)
        assert (await c.recv()).type == T.PRODUCER_SUCCESS
        c.send(waiting)
        reply = await c.recv()
        assert reply.type == T.PRODUCER_SUCCESS and not reply.producer_success.producer_ready
        c.writer.write(frames(*(send_frame(2, seq, b"w") for seq in range(3))))
        for seq in range(3):
            r = await c.recv()
            assert r.type == T.SEND_ERROR and r.send_error.sequence_id == seq, r
            assert (r.send_error.error, r.send_error.message) == (pb.ServerError.PersistenceError,
                                                                  "Producer is not ready")
        c.close()
