"""Random commands on many connections (command_fuzz.py): whatever a client sends, the broker answers it, refuses it
or closes that connection, and never fails unexpectedly (no error logged, no task dying), hangs a connection, or
hurts the others; the dispatchers' permit invariant holds throughout. Seeded, so a failure repeats:
PULSAR_FUZZ_SEED=<n> runs another seed, PULSAR_FUZZ_SESSIONS=<n> more connections."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import Any

import pytest

from broker.dispatch import base as dispatch_base
from broker.embedded import Broker
from broker.protocol import pulsar_api_pb2 as pb
from tests.component.command_fuzz import CommandFuzz, frame
from tests.component.wire import WAIT_S, T, WireClient, port_of, producer_cmd, send_frame, subscribe_cmd

SEED = int(os.environ.get("PULSAR_FUZZ_SEED", "6650"))
SESSIONS = int(os.environ.get("PULSAR_FUZZ_SESSIONS", "2000"))


def ping() -> pb.BaseCommand:
    cmd = pb.BaseCommand(type=T.PING)
    cmd.ping.SetInParent()
    return cmd


async def opened(c: WireClient, requests: int) -> bool | None:
    """True once the opening's ``requests`` were each answered (a success or an error); None when the broker closed
    the connection instead; False when it did neither in time."""
    try:
        for _ in range(requests):
            while (await c.recv()).type not in (T.PRODUCER_SUCCESS, T.SUCCESS, T.ERROR):
                pass
    except ConnectionError:
        return None
    except TimeoutError:
        return False
    return True


async def answered_or_closed(c: WireClient) -> bool:
    """True when the broker answers the last PING or closes the connection; False when it does neither in time."""
    try:
        while (await c.recv()).type != T.PONG:
            pass
    except ConnectionError:
        pass  # (closed by the broker, e.g. after a command only a broker sends: a protocol error)
    except TimeoutError:
        return False
    return True


async def test_random_commands_are_answered_refused_or_closed_and_never_fail_the_broker(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    caplog.set_level(logging.WARNING)
    # The dispatchers' permit invariant checked after every change (PULSAR_BROKER_DEBUG=1): a drift raises.
    monkeypatch.setattr(dispatch_base, "DEBUG_INVARIANTS", True)
    loop = asyncio.get_running_loop()
    loop_errors: list[dict[str, Any]] = []
    previous_handler = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: loop_errors.append(context))
    fuzz = CommandFuzz(SEED)
    hung: list[list[str]] = []
    try:
        async with Broker(data_dir=tmp_path, transactionCoordinatorEnabled=True, topicLevelPoliciesEnabled=True) as b:
            for _ in range(SESSIONS):
                opening = fuzz.opening()
                session = fuzz.session()
                c = await WireClient.open(port_of(b))
                await c.connect()
                if opening:
                    c.writer.write(b"".join(frame(cmd, b"") for cmd in opening))
                    state = await opened(c, len(opening))
                    if not state:
                        if state is False:
                            hung.append([pb.BaseCommand.Type.Name(cmd.type) for cmd in opening])
                        c.close()
                        continue
                c.writer.write(b"".join(frame(cmd, payload) for cmd, payload in session) + frame(ping(), b""))
                if not await answered_or_closed(c):
                    hung.append([pb.BaseCommand.Type.Name(cmd.type) for cmd, _ in session])
                c.close()
            # Another connection still produces and consumes.
            c = await WireClient.open(port_of(b))
            await c.connect()
            topic = "persistent://public/default/after-fuzz"
            c.send(subscribe_cmd(topic, request_id=1))
            assert (await c.recv()).type == T.SUCCESS
            c.send(producer_cmd(topic, producer_id=7, request_id=2))
            assert (await c.recv()).type == T.PRODUCER_SUCCESS
            c.send(*send_frame(7, 0, b"still fine"))
            assert (await c.recv()).type == T.SEND_RECEIPT
            flow = pb.BaseCommand(type=T.FLOW)
            flow.flow.consumer_id, flow.flow.messagePermits = 1, 10
            c.send(flow)
            assert (await c.recv()).type == T.MESSAGE
            c.close()
    finally:
        loop.set_exception_handler(previous_handler)
    failures = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert not hung, f"seed {SEED}: no PONG and no close within {WAIT_S} s after {hung}"
    assert not failures, f"seed {SEED}: " + "\n".join(caplog.text.splitlines()[-40:])
    assert not loop_errors, f"seed {SEED}: {loop_errors}"
