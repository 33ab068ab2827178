"""The BookKeeper client's edge cases against in-process fakes (no Java): ordering, errors, timeouts, CAS races."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest

from managed_ledger.bookkeeper.bookie import BookieConnection, BookieUnavailableError
from managed_ledger.bookkeeper.client import (
    BookKeeperError,
    LedgerClosedError,
    LedgerFencedError,
    MetadataConflictError,
    NotEnoughBookiesError,
    UnauthorizedError,
    WriterState,
)
from managed_ledger.bookkeeper.digest import Digester, DigestType, master_key
from managed_ledger.bookkeeper.metadata import LedgerState, ledger_path, serialize
from managed_ledger.bookkeeper.protocol import (
    AddRequest,
    AddResponse,
    Request,
    StatusCode,
    encode_request,
    encode_response,
)
from tests.bookkeeper.fakes import FakeCluster
from tests.waiting import eventually


@pytest.fixture
async def env() -> AsyncIterator[FakeCluster]:
    async with FakeCluster.running(bookies=3) as cluster:
        yield cluster


def fail_adds(status: StatusCode) -> Callable[[Request], bytes | None]:
    def respond(request: Request) -> bytes | None:
        assert isinstance(request, AddRequest)
        return encode_response(AddResponse(status, request.ledger_id, request.entry_id))
    return respond


async def test_out_of_order_responses_complete_in_entry_order(env: FakeCluster) -> None:
    lh = await env.bk.create_ledger(3, 2, 2)
    for bookie in env.bookies.values():
        bookie.hold = lambda request: True
    order: list[int] = []
    futures = [lh.add_entry_nowait(b"e%d" % i) for i in range(20)]
    for future in futures:
        future.add_done_callback(lambda f: order.append(f.result()))
    await eventually(lambda: sum(len(b.requests) for b in env.bookies.values()) == 40, "40 adds sent")
    assert lh.last_add_confirmed == -1 and not order
    for bookie in env.bookies.values():
        bookie.release()  # newest first
    assert await asyncio.gather(*futures) == list(range(20))
    assert order == list(range(20)) and lh.last_add_confirmed == 19
    # Every entry carried the LAC at send time: -1, as none was acknowledged when they were sent.
    first = next(iter(env.bookies.values()))
    assert all(entry[16:24] == b"\xff" * 8 for entry in first.entries.values())


async def test_fenced_answer_fails_the_writer(env: FakeCluster) -> None:
    lh = await env.bk.create_ledger(3, 3, 2)
    await lh.add_entry(b"ok")
    for bookie in env.bookies.values():
        bookie.fenced.add(lh.ledger_id)
    with pytest.raises(LedgerFencedError):
        await lh.add_entry(b"fenced")
    assert lh.state is WriterState.FAILED and lh.length == 2
    with pytest.raises(LedgerFencedError):
        await lh.add_entry(b"again")
    await lh.close()
    md, _ = await env.bk.read_metadata(lh.ledger_id)
    assert md.state == LedgerState.OPEN  # a fenced writer leaves the metadata to the recoverer


@pytest.mark.parametrize("failure", ["EIO", "EREADONLY", "garbage", "silence", "crash"])
async def test_a_failing_bookie_is_replaced(env: FakeCluster, failure: str) -> None:
    lh = await env.bk.create_ledger(3, 3, 3)  # Qa = Qw: no add completes without the failing bookie
    await lh.add_entry(b"before")
    victim_id = lh.metadata.last_ensemble.ensemble[1]
    victim = env.bookies[victim_id]
    spare = await env.add_bookie()
    if failure in ("EIO", "EREADONLY"):
        victim.respond = fail_adds(StatusCode[failure])
    elif failure == "garbage":
        victim.respond = lambda request: b"\x00\x00\x00\x04\x09\x01\x00\x00"  # protocol version 9
    elif failure == "silence":
        env.bk.bookies.request_timeout = 0.3
        victim.respond = lambda request: None
    else:
        await victim.stop()
    assert [await lh.add_entry(b"after%d" % i) for i in range(3)] == [1, 2, 3]
    assert [s.first_entry_id for s in lh.metadata.segments] == [0, 1]
    assert lh.metadata.segments[1].ensemble[1] == spare.bookie_id
    assert {e for (_, e) in spare.entries} == {1, 2, 3}
    md, _ = await env.bk.read_metadata(lh.ledger_id)
    assert md.segments == lh.metadata.segments
    assert await lh.read(0, 3) == [b"before", b"after0", b"after1", b"after2"]
    await lh.close()


async def test_a_late_failure_replaces_the_bookie_for_later_entries(env: FakeCluster) -> None:
    lh = await env.bk.create_ledger(3, 3, 2)
    victim = env.bookies[lh.metadata.last_ensemble.ensemble[2]]
    spare = await env.add_bookie()
    env.bk.bookies.request_timeout = 0.3
    victim.respond = lambda request: None
    assert await lh.add_entry(b"acked by two") == 0  # Qa reached without the silent bookie
    await eventually(lambda: len(lh.metadata.segments) == 2, "the silent bookie to be replaced")
    assert lh.metadata.segments[1].first_entry_id == 1 and spare.bookie_id in lh.metadata.segments[1].ensemble
    assert await lh.add_entry(b"next") == 1
    await eventually(lambda: (lh.ledger_id, 1) in spare.entries, "entry 1 on the replacement")
    await lh.close()


async def test_no_replacement_bookie_fails_the_adds(env: FakeCluster) -> None:
    lh = await env.bk.create_ledger(3, 3, 3)
    env.bookies[lh.metadata.last_ensemble.ensemble[0]].respond = fail_adds(StatusCode.EIO)
    with pytest.raises(NotEnoughBookiesError):
        await lh.add_entry(b"x")


async def test_create_needs_enough_bookies(env: FakeCluster) -> None:
    with pytest.raises(NotEnoughBookiesError):
        await env.bk.create_ledger(4, 2, 2)  # the `readonly` child is no bookie


async def test_close_loses_to_a_recoverer_that_closed_elsewhere(env: FakeCluster) -> None:
    lh = await env.bk.create_ledger(3, 2, 2)
    for i in range(3):
        await lh.add_entry(b"%d" % i)
    md, version = await env.bk.read_metadata(lh.ledger_id)
    await env.zk.set(ledger_path(lh.ledger_id), serialize(md.closed(1, 2)), version)
    with pytest.raises(MetadataConflictError):
        await lh.close()


async def test_close_after_a_recoverer_closed_at_the_same_point(env: FakeCluster) -> None:
    lh = await env.bk.create_ledger(3, 2, 2)
    for i in range(3):
        await lh.add_entry(b"%d" % i)
    md, version = await env.bk.read_metadata(lh.ledger_id)
    await env.zk.set(ledger_path(lh.ledger_id), serialize(md.closed(2, 3)), version)
    await lh.close()  # the same end: nothing to write
    assert (await env.bk.read_metadata(lh.ledger_id))[1] == version + 1


async def test_recovery_needs_an_answer_from_every_write_quorum(env: FakeCluster) -> None:
    lh = await env.bk.create_ledger(3, 2, 2)
    await lh.add_entry(b"x")
    ensemble = lh.metadata.last_ensemble.ensemble
    await env.bookies[ensemble[0]].stop()
    await env.bookies[ensemble[1]].stop()  # write quorum {0, 1} has no bookie left to fence
    with pytest.raises(BookKeeperError, match="too few bookies"):
        await env.bk.open_ledger(lh.ledger_id)


async def test_wrong_password(env: FakeCluster) -> None:
    lh = await env.bk.create_ledger(3, 2, 2, password=b"secret")
    await lh.add_entry(b"x")
    with pytest.raises(UnauthorizedError):
        await env.bk.open_ledger(lh.ledger_id, b"guess")
    reader = await env.bk.open_ledger(lh.ledger_id, b"secret")
    assert await reader.read(0, 0) == [b"x"]


async def test_ledger_ids_short_then_long(env: FakeCluster) -> None:
    assert [await env.bk.new_ledger_id() for _ in range(3)] == [0, 1, 2]
    assert await env.zk.children("/ledgers/idgen") == []  # the id znodes are removed
    await env.zk.create("/ledgers/idgen-long")
    assert await env.bk.new_ledger_id() == (1 << 32) | 0
    assert await env.bk.new_ledger_id() == (1 << 32) | 1
    lh = await env.bk.create_ledger(1, 1, 1)
    assert lh.ledger_id == (1 << 32) | 2
    assert await env.zk.exists("/ledgers/000/0000/0042/9496/L7298") is not None


async def test_delete_removes_the_znode_and_empty_parents(env: FakeCluster) -> None:
    lh = await env.bk.create_ledger(3, 2, 2)
    await lh.close()
    await env.bk.delete_ledger(lh.ledger_id)
    assert await env.zk.exists("/ledgers/00") is None


async def test_closing_the_client_stops_its_writers(env: FakeCluster) -> None:
    lh = await env.bk.create_ledger(3, 3, 3)
    for bookie in env.bookies.values():
        bookie.respond = lambda request: None  # adds stay pending
    pending = lh.add_entry_nowait(b"never acknowledged")
    await eventually(lambda: sum(len(b.requests) for b in env.bookies.values()) == 3, "the add sent")
    await env.bk.close()
    with pytest.raises(LedgerClosedError):
        await pending
    assert lh.state is WriterState.FAILED
    assert (await env.bk.read_metadata(lh.ledger_id))[0].state == LedgerState.OPEN


class RecordingTransport:
    """Stands in for the socket: records what the connection writes."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.aborted = False

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    def abort(self) -> None:
        self.aborted = True


async def test_requests_of_one_loop_iteration_go_out_in_one_write_and_silence_times_out() -> None:
    connection = BookieConnection("127.0.0.1:1", lambda: 0.2)
    transport = RecordingTransport()
    connection.connection_made(transport)  # type: ignore[arg-type]
    key = master_key(b"")
    digester = Digester(DigestType.CRC32C, b"")
    requests = [AddRequest(key, digester.package(7, e, -1, 0, b"x")) for e in range(100)]
    futures = [connection.send(r) for r in requests]
    assert transport.writes == []  # not yet: at the end of this loop iteration
    await asyncio.sleep(0)
    assert transport.writes == [b"".join(encode_request(r) for r in requests)]

    # Answers for all but the last: those complete; the last fails once its deadline passes.
    connection.data_received(b"".join(encode_response(AddResponse(StatusCode.EOK, 7, e)) for e in range(99)))
    assert all(f.done() and f.result().status == StatusCode.EOK for f in futures[:99])
    with pytest.raises(BookieUnavailableError, match="did not answer"):
        await asyncio.wait_for(futures[99], 5)
    assert not transport.aborted  # a silent request fails alone; the connection stays


async def test_same_key_requests_are_answered_in_order_and_time_out_alone() -> None:
    """v2 answers carry no request id: two requests with one key on one connection get its answers oldest first;
    an add's waiter (`send_add`, the publish path) is called directly with the answer, and once with the error when
    its deadline passes, while the connection stays."""
    connection = BookieConnection("127.0.0.1:1", lambda: 0.2)
    transport = RecordingTransport()
    connection.connection_made(transport)  # type: ignore[arg-type]
    key = master_key(b"")
    entry = Digester(DigestType.CRC32C, b"").package(7, 0, -1, 1, b"x")
    first, second = connection.send(AddRequest(key, entry)), connection.send(AddRequest(key, entry))
    answers: list[tuple[int, object, object]] = []
    for entry_id in (1, 2):
        connection.send_add(7, entry_id, b"frame", lambda e, r, exc: answers.append((e, r, exc)))
    await asyncio.sleep(0)
    connection.data_received(encode_response(AddResponse(StatusCode.EOK, 7, 0))
                             + encode_response(AddResponse(StatusCode.EFENCED, 7, 0))
                             + encode_response(AddResponse(StatusCode.EOK, 7, 1)))
    assert first.result().status == StatusCode.EOK and second.result().status == StatusCode.EFENCED
    assert answers == [(1, AddResponse(StatusCode.EOK, 7, 1), None)]
    await eventually(lambda: len(answers) == 2, "the unanswered add timed out")
    entry_id, response, error = answers[1]
    assert (entry_id, response) == (2, None) and isinstance(error, BookieUnavailableError)
    assert not transport.aborted and not connection.closed


async def test_a_resent_entry_with_the_same_waiter_keeps_its_own_deadline() -> None:
    """An add's waiter is one per bookie, so an entry sent again to the same bookie has the same key and waiter as
    the first send. Once the first was answered, its deadline passing must not fail the second: each request is
    told apart by its own ticket, not by (key, waiter)."""
    first = [0.0]  # the first batch's deadline passes at once, the later ones' never in this test
    connection = BookieConnection("127.0.0.1:1", lambda: first.pop() if first else 1000.0)
    transport = RecordingTransport()
    connection.connection_made(transport)  # type: ignore[arg-type]
    answers: list[tuple[int, object, object]] = []

    def waiter(entry_id: int, response: object, error: object) -> None:
        answers.append((entry_id, response, error))

    connection.send_add(7, 0, b"frame", waiter)
    await asyncio.sleep(0)  # written: the first batch, deadline now
    connection.data_received(encode_response(AddResponse(StatusCode.EOK, 7, 0)))
    connection.send_add(7, 0, b"frame", waiter)
    await asyncio.sleep(0)  # written: the second batch
    connection._sweep()  # the first batch's deadline has passed
    assert answers == [(0, AddResponse(StatusCode.EOK, 7, 0), None)]  # the second is still waiting
    connection.data_received(encode_response(AddResponse(StatusCode.EOK, 7, 0)))
    assert answers[1] == (0, AddResponse(StatusCode.EOK, 7, 0), None)
    connection.close()
