"""kill -9 of the broker process right after END_TXN (commit), at a random point: before the
coordinator logged COMMITTING, between that and the markers, or after. Each round consumes one
input and produces one output to each of two topics in a transaction. After every restart the
client asks for the commit again (what the Java client's retry does), and in the end every input
is acknowledged and every output is there exactly once, in order: all of a transaction or nothing,
never twice."""

from __future__ import annotations

import asyncio
import random
import signal
import subprocess
from pathlib import Path

import pytest

from broker.protocol import pulsar_api_pb2 as pb
from tests.reliability.broker_process import start_broker
from tests.transactions.client import Output, TxnWireClient, consume_and_produce

E = pb.ServerError
ROUNDS = 5
QUIET_S = 0.3  # how long "nothing more arrives" is watched for
IN = "persistent://public/default/k9-in"
OUTS = ("persistent://public/default/k9-out-1", "persistent://public/default/k9-out-2")


async def started(data: Path, config: Path) -> tuple[subprocess.Popen[str], TxnWireClient]:
    proc, port = await asyncio.to_thread(start_broker, data, config)
    client = await TxnWireClient.open(port)
    assert not (await client.tc_connect()).HasField("error")
    return proc, client


async def test_commit_interrupted_by_kill9_completes_exactly_once(tmp_path: Path) -> None:
    config = tmp_path / "broker.conf"
    config.write_text("managedLedgerStorage=file\ntransactionCoordinatorEnabled=true\n")
    data = tmp_path / "data"
    rng = random.Random(19)
    proc, c = await started(data, config)
    try:
        for k, out in enumerate(OUTS):  # (a subscription keeps the outputs until they are checked)
            await c.subscribe(out, "check", 20 + k, permits=0)
        await c.producer(IN, 1)
        for i in range(ROUNDS):
            assert (await c.send(1, i, f"in-{i}")).HasField("send_receipt")
        for r in range(ROUNDS):
            await c.subscribe(IN, "work", 10)
            (msg,) = await c.receive_n(10, 1)
            assert msg.body == f"in-{r}"
            outputs = [Output(c, 2 + k, out) for k, out in enumerate(OUTS)]
            for o in outputs:
                await c.producer(o.topic, o.producer_id)
            txn, _ = await consume_and_produce(c, c, IN, msg, outputs, r, timeout_ms=120_000)
            # END_TXN, then kill -9 after a random moment (maybe before the broker even reads it).
            c.end_txn_nowait(txn, commit=True)
            await asyncio.sleep(rng.uniform(0, 0.02))  # where the kill lands, not a wait for anything
            proc.send_signal(signal.SIGKILL)
            proc.wait(15)
            await c.close()
            proc, c = await started(data, config)
            again = await c.end_txn(txn, commit=True)
            # Finished by the recovered coordinator (forgotten: TransactionNotFound), or still
            # open (the kill came before COMMITTING was logged) and committed now.
            assert not again.HasField("error") or again.error == E.TransactionNotFound, again
            await c.producer(IN, 1)
        for k, out in enumerate(OUTS):
            await c.subscribe(out, "check", 20 + k)
            got = [m.body for m in await c.receive_n(20 + k, ROUNDS)]
            assert got == [f"out-{r}" for r in range(ROUNDS)]
            with pytest.raises(TimeoutError):  # and nothing twice
                await c.receive(20 + k, wait_s=QUIET_S)
        # Every input was acknowledged by its transaction.
        await c.subscribe(IN, "work", 10)
        with pytest.raises(TimeoutError):
            await c.receive(10, wait_s=QUIET_S)
    finally:
        await c.close()
        proc.terminate()
        proc.wait(15)
