"""One TCP connection: decode frames, route commands, write frames, pause/resume reading.

Thin by design: the command handlers live in ``broker.service.server_cnx``. This module owns the
handshake state machine, keep-alive and socket backpressure, and the malformed-input policy:

- broken framing (oversize frame, undecodable command, missing required fields) closes this
  connection only;
- a command before CONNECT, a second CONNECT, or a command the client never sends closes it;
- an unknown command type is ignored (Pulsar's decoder has no default branch);
- per-message problems (bad checksum, bad metadata) get a per-message error (SendError).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import sys
from asyncio import selector_events
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from broker.auth import Security
from broker.config import BrokerConfig
from broker.listeners import Listener
from broker.protocol import commands
from broker.protocol import pulsar_api_pb2 as pb
from broker.protocol.errors import ProtocolError
from broker.protocol.frames import FrameDecoder, SendFrame
from broker.protocol.limits import max_frame_size
from broker.service.broker_service import BrokerService
from broker.service.server_cnx import ServerCnx

log = logging.getLogger(__name__)
T = pb.BaseCommand.Type

# Resume reading once in-flight sends fall to this fraction of the pause threshold.
RESUME_FRACTION = 0.5
# asyncio's and uvloop's default high-water mark of a transport's write buffer (64 KiB); the
# transport's own limit is read when the connection is made.
DEFAULT_HIGH_WATER = 64 * 1024
# Past this many bytes written but not yet taken by the client (a client that sends requests and never reads
# the answers), the connection stops reading requests until the client has taken most of them.
UNREAD_OUTPUT_LIMIT = 16 * 1024 * 1024


# Enum values as plain ints: attribute access on protobuf enum wrappers is slow on the hot path.
_PING, _PONG, _CONNECT = int(T.PING), int(T.PONG), int(T.CONNECT)
# asyncio's plain socket transport, whose writelines (Python 3.12 on) may not pause its protocol (connection_made).
_SELECTOR_TRANSPORT: type | tuple[type, ...] = (
    getattr(selector_events, "_SelectorSocketTransport", ()) if sys.version_info >= (3, 12) else ())


class State(enum.Enum):
    AWAITING_CONNECT = "awaiting_connect"
    CONNECTED = "connected"
    CLOSED = "closed"


# Module constants for the per-frame checks: a member looked up on an Enum class costs ~0.2 us on
# Python 3.11, twice per SEND.
_CONNECTED, _CLOSED = State.CONNECTED, State.CLOSED

_ALLOWED_MOVES = {
    State.AWAITING_CONNECT: {State.CONNECTED, State.CLOSED},
    State.CONNECTED: {State.CLOSED},
    State.CLOSED: set[State](),
}


class ThrottleCounts:
    """How often connections stopped and started being read (Pulsar's ServerCnxThrottleTracker, OpenTelemetry's
    pulsar.broker.connection.rate_limit.count): paused / resumed, for any reason; throttled / unthrottled, by
    maxPendingPublishRequestsPerConnection."""

    __slots__ = ("paused", "resumed", "throttled", "unthrottled")

    def __init__(self) -> None:
        self.paused = self.resumed = self.throttled = self.unthrottled = 0


class ConnectionOwner(Protocol):
    """The broker process that accepts connections (``broker.server.BrokerServer``): what a
    connection reads (config, service, security, ports and listeners for LOOKUP) and the
    bookkeeping it reports to (connection limits, the broker-wide publish buffer)."""

    @property
    def config(self) -> BrokerConfig: ...

    @property
    def service(self) -> BrokerService: ...

    @property
    def security(self) -> Security: ...

    @property
    def port(self) -> int: ...

    @property
    def tls_port(self) -> int: ...

    @property
    def listeners(self) -> Mapping[str, Listener]: ...

    def listener(self, name: str | None) -> Listener | None: ...

    def connection_opened(self, conn: Connection) -> None: ...

    def connection_refusal(self, ip: str) -> str | None: ...

    def connection_closed(self, conn: Connection) -> None: ...

    def publish_buffer_add(self, conn: Connection, nbytes: int) -> None: ...

    @property
    def publish_buffer_room(self) -> int: ...

    @property
    def throttle_counts(self) -> ThrottleCounts: ...


class Connection(asyncio.Protocol):
    def __init__(self, server: ConnectionOwner) -> None:
        self.server = server
        cfg = server.config
        self.decoder = FrameDecoder(max_frame_size(cfg.maxMessageSize))
        self.state = State.AWAITING_CONNECT
        self.transport: asyncio.Transport | None = None
        self._loop = asyncio.get_running_loop()
        self._out: list[bytes] = []
        # Flow control within a loop turn: frames queued for the turn's writev count toward the
        # transport's high-water mark (see write_many); the transport's own pause is kept apart.
        self._out_bytes = 0
        self._high_water = DEFAULT_HIGH_WATER
        self._pause_check: Callable[[], None] | None = None  # (see connection_made)
        self._held_by_queue = False
        self._transport_paused = False
        self.cnx: ServerCnx = ServerCnx(self, server.service)
        self.remote_address = ""
        # The client certificate the TLS handshake verified (None on the plain port or without one).
        self.peer_cert: dict[str, Any] | None = None
        self.local_host = ""
        self.local_port = 0
        self.writable = True
        self.reading_paused = False
        # Why reading is paused: too many sends in flight here, or the broker-wide publish buffer is full.
        self._paused_for_count = False
        self._paused_for_buffer = False
        self._paused_for_output = False  # (a client not reading what it asked for: UNREAD_OUTPUT_LIMIT)
        self._rate_throttles = 0  # topics whose publish rate limit holds this connection
        self.pending_sends = 0
        self.max_pending_sends = cfg.maxPendingPublishRequestsPerConnection
        self._received_since_ping = True
        self._awaiting_pong = False
        self._keepalive: asyncio.TimerHandle | None = None
        # A liveness check under way (check_liveness): done with True at the next bytes received.
        self._liveness: asyncio.Future[bool] | None = None

    # -- state machine -------------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self.state is State.CLOSED

    def _move(self, new: State) -> None:
        if new not in _ALLOWED_MOVES[self.state]:
            raise RuntimeError(f"illegal connection state move {self.state} -> {new}")
        self.state = new

    # -- asyncio callbacks ---------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's TCPTransport is duck-typed
        limits = getattr(transport, "get_write_buffer_limits", None)
        if limits is not None:
            self._high_water = limits()[1]
        if isinstance(transport, _SELECTOR_TRANSPORT):
            # CPython 3.12.0-3.12.8 and 3.13.0-3.13.1 (gh-127655, CVE-2024-12254): asyncio's socket transport's
            # writelines never pauses its protocol, so a client that reads nothing would make the broker buffer
            # without bound. After each writelines, the transport's own check (it pauses at the high-water mark and
            # resumes us at the low one; a no-op where writelines made it). uvloop's transports pause themselves.
            self._pause_check = getattr(transport, "_maybe_pause_protocol", None)
        peer = transport.get_extra_info("peername")
        sock = transport.get_extra_info("sockname")
        self.remote_address = f"{peer[0]}:{peer[1]}" if peer else "?"
        if sock:
            self.local_host, self.local_port = sock[0], sock[1]
        self.peer_cert = transport.get_extra_info("peercert") or None
        self.server.connection_opened(self)
        refusal = self.server.connection_refusal(peer[0] if peer else "")
        if refusal:
            # Pulsar's answer (before CONNECTED, so the client logs it and retries later).
            self.write(commands.error(-1, pb.ServerError.NotAllowedError, refusal))
            self.close()
            return
        self._schedule_keepalive()

    def data_received(self, data: bytes) -> None:
        self._received_since_ping = True
        if self._liveness is not None:
            self._liveness_ends(True)
        try:
            self.decoder.feed(data)
        except ProtocolError as exc:
            self._protocol_error(exc)
            return
        self._process_frames()

    def _process_frames(self) -> None:
        """Route buffered frames; stops while reading is paused (backpressure) and resumes after.

        The SENDs among them are queued per producer and stored together at the end (or before
        the next other command, or every SENDS_PER_APPEND SENDs of a big read): one append and one
        completion for many messages. The SENDs one producer sent in a row are read and checked as
        a run (``next_send_run``), no more than the pending-send limit and the publish buffer take
        before reading pauses, so that pause comes after the same SEND as if each were alone.
        """
        decoder = self.decoder
        next_run = decoder.next_send_run
        next_frame = decoder.next_frame_or_send
        cnx = self.cnx
        server = self.server
        try:
            while self.state is not _CLOSED and not self.reading_paused:
                if self.state is _CONNECTED:
                    limit = min(self.max_pending_sends - self.pending_sends, cnx.sends_before_flush)
                    run = next_run(limit, server.publish_buffer_room)
                    if run is not None:
                        more = decoder.buffered
                        cnx.handle_send_run(run[0], run[1], not more)
                        if more:
                            continue
                        break  # (the read ended with the run: no second look for a frame)
                frame = next_frame()
                if frame is None:
                    break
                if isinstance(frame, SendFrame):
                    if self.state is not _CONNECTED:
                        raise ProtocolError("command SEND before CONNECT")
                    cnx.handle_send(frame.send, frame.payload)
                else:
                    self._route(frame.command, frame.payload)
        except ProtocolError as exc:
            if cnx.open_batches:
                cnx.flush_sends()  # SENDs accepted before the bad frame are still stored
            self._protocol_error(exc)
            return
        except Exception:
            # A command no handler expected to fail like this: a bug. This connection closes (its
            # client reconnects); the broker and its other connections go on.
            log.exception("closing connection from %s: a command failed unexpectedly", self.remote_address)
            if cnx.open_batches:
                cnx.flush_sends()
            self.close()
            return
        if cnx.open_batches:
            cnx.flush_sends()

    def _protocol_error(self, exc: ProtocolError) -> None:
        log.warning("closing connection from %s: %s", self.remote_address, exc)
        self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.state is not State.CLOSED:
            self._move(State.CLOSED)
        if self._keepalive is not None:
            self._keepalive.cancel()
            self._keepalive = None
        self.cnx.connection_closed()
        self.server.connection_closed(self)
        if self._liveness is not None:  # (after connection_closed: what it held is released)
            self._liveness_ends(False)

    def pause_writing(self) -> None:
        self._transport_paused = True
        self.writable = False

    def resume_writing(self) -> None:
        self._transport_paused = False
        if self._paused_for_output:
            self._paused_for_output = False
            self._update_reading()
        if not self._held_by_queue:  # (else this turn's writev decides, in _flush)
            self.writable = True
            self.cnx.on_writable()

    # -- routing -------------------------------------------------------------------------------------
    def _route(self, cmd: pb.BaseCommand, payload: bytes | None) -> None:
        if not cmd.HasField("type"):
            log.debug("ignoring a command of unknown type from %s", self.remote_address)
            return
        t = cmd.type
        if t == _PING:
            self.write(commands.PONG)
            return
        if t == _PONG:
            self._awaiting_pong = False
            return
        if self.state is State.AWAITING_CONNECT:
            if t != _CONNECT:
                raise ProtocolError(f"command {pb.BaseCommand.Type.Name(t)} before CONNECT")
            self._move(State.CONNECTED)
            self.cnx.handle_connect(cmd.connect)
            return
        cnx = self.cnx
        handler = cnx.handlers.get(t)
        if handler is None:
            if t in _CLIENT_NEVER_SENDS:
                raise ProtocolError(f"unexpected command {pb.BaseCommand.Type.Name(t)} from client")
            return  # unknown type: ignored, as Pulsar does
        if cnx.open_batches:
            cnx.flush_sends()  # commands act on what was sent before them
        handler(cmd, payload)

    # -- writing ---------------------------------------------------------------------------------------
    def write(self, data: bytes) -> None:
        """Queue a frame; everything queued in one loop turn goes out in one writev.

        Receipts and messages are produced one at a time by callbacks; a syscall each cost more
        than the rest of the send path. The flush runs on the next loop turn, in order. Its bytes
        count toward the turn's high-water mark as ``write_many``'s do.
        """
        if self.transport is None or self.state is State.CLOSED:
            return
        if not self._out:
            self._loop.call_soon(self._flush)
        self._out.append(data)
        if self.writable:
            self._count_queued(len(data))

    def write_many(self, frames: list[bytes]) -> None:
        """Queue frames (a read's MESSAGEs, a run of receipts) for this loop turn's writev.

        The transport learns of them only at the flush, so its pause_writing cannot stop a
        dispatcher whose reads complete inline several times in one turn (cache hits): the bytes
        queued here count toward the same high-water mark, and past it the connection is not
        writable until the flush. So what a slow reader makes the broker hold stays within the mark
        plus one read, whatever happens within a turn.
        """
        if not frames or self.transport is None or self.state is State.CLOSED:
            return
        if not self._out:
            self._loop.call_soon(self._flush)
        self._out += frames
        if self.writable:
            self._count_queued(sum(map(len, frames)))

    def _count_queued(self, nbytes: int) -> None:
        """Count bytes queued in this loop turn toward the transport's high-water mark; past it the
        connection is not writable until the flush (see ``write_many``)."""
        self._out_bytes += nbytes
        if self._out_bytes > self._high_water:
            self.writable = False
            self._held_by_queue = True

    def queued_bytes(self) -> int:
        """Bytes of frames written but not yet sent: queued for this loop turn's writev, and left in
        the transport's buffer by a socket that took less (a slow reader). Read by /metrics."""
        buffered = self.transport.get_write_buffer_size() if self.transport is not None else 0
        return sum(map(len, self._out)) + buffered

    def _flush(self) -> None:
        out, self._out = self._out, []
        self._out_bytes = 0
        if out and self.transport is not None and not self.transport.is_closing():
            self.transport.writelines(out)  # (may pause writing at once: a slow reader)
            if self._pause_check is not None:
                self._pause_check()
            if (self._transport_paused and not self._paused_for_output
                    and self.transport.get_write_buffer_size() > UNREAD_OUTPUT_LIMIT):
                self._paused_for_output = True  # (until resume_writing: the client took most of it)
                self._update_reading()
        if self._held_by_queue:
            self._held_by_queue = False
            if not self._transport_paused and self.state is not State.CLOSED:
                self.writable = True
                self.cnx.on_writable()

    def close(self, *, abort: bool = False) -> None:
        """Close after what is queued has been sent, or with ``abort`` at once, dropping what the client has not
        read yet (connection_lost follows either way)."""
        if self.state is not State.CLOSED:
            self._move(State.CLOSED)
        if self.transport is None:
            return
        if abort:
            self.transport.abort()
        else:
            self._flush()  # e.g. the error that explains the close
            self.transport.close()

    # -- producer backpressure -----------------------------------------------------------------------
    # Never an error for load: past a limit we stop reading the socket, and TCP slows the producer.
    def sends_started(self, count: int, nbytes: int) -> None:
        self.pending_sends += count
        if self.pending_sends >= self.max_pending_sends and not self._paused_for_count:
            self._paused_for_count = True
            self.server.throttle_counts.throttled += 1
            self._update_reading()
        self.server.publish_buffer_add(self, nbytes)

    def sends_finished(self, count: int, nbytes: int) -> None:
        self.pending_sends -= count
        if self._paused_for_count and self.pending_sends <= self.max_pending_sends * RESUME_FRACTION:
            self._paused_for_count = False
            self.server.throttle_counts.unthrottled += 1
            self._update_reading()
        self.server.publish_buffer_add(self, -nbytes)

    @property
    def throttled_by_pending_sends(self) -> bool:
        """Not read because it has maxPendingPublishRequestsPerConnection sends in flight (metrics)."""
        return self._paused_for_count

    def set_paused_for_buffer(self, paused: bool) -> None:
        if paused != self._paused_for_buffer:
            self._paused_for_buffer = paused
            self._update_reading()

    def set_rate_throttled(self, delta: int) -> None:
        """A topic's publish rate limit starts (+1) or stops (-1) holding this connection."""
        self._rate_throttles += delta
        self._update_reading()

    def _update_reading(self) -> None:
        want_paused = (self._paused_for_count or self._paused_for_buffer or self._rate_throttles > 0
                       or self._paused_for_output)
        if want_paused == self.reading_paused or self.transport is None or self.state is State.CLOSED:
            return
        self.reading_paused = want_paused
        if want_paused:
            self.server.throttle_counts.paused += 1
            self.transport.pause_reading()
        else:
            self.server.throttle_counts.resumed += 1
            self.transport.resume_reading()
            # Frames that arrived before the pause are still buffered in the decoder.
            asyncio.get_running_loop().call_soon(self._process_frames)

    # -- keep-alive ------------------------------------------------------------------------------------
    async def check_liveness(self) -> bool | None:
        """Pulsar's connection liveness check, before a newcomer is refused what this connection's producer or
        consumer holds: a PING, and True once anything comes back; False if the connection is closed, or closes
        because nothing came within connectionLivenessCheckTimeoutMillis (its producers and consumers are gone
        by then); None when the check is off. Checks asked for meanwhile share the one PING."""
        if self.state is State.CLOSED:
            return False
        timeout_ms = self.server.config.connectionLivenessCheckTimeoutMillis
        if timeout_ms <= 0:
            return None
        check = self._liveness
        if check is None:
            loop = asyncio.get_running_loop()
            check = self._liveness = loop.create_future()
            timer = loop.call_later(timeout_ms / 1000, self._liveness_timed_out, check)
            check.add_done_callback(lambda _: timer.cancel())
            self.write(commands.PING)
        return await asyncio.shield(check)

    def _liveness_ends(self, alive: bool) -> None:
        check, self._liveness = self._liveness, None
        if check is not None and not check.done():
            check.set_result(alive)

    def _liveness_timed_out(self, check: asyncio.Future[bool]) -> None:
        if check is self._liveness and self.state is not State.CLOSED:
            log.warning("closing %s: no answer to a liveness check within %d ms", self.remote_address,
                        self.server.config.connectionLivenessCheckTimeoutMillis)
            self.close(abort=True)  # (connection_lost ends the check, once its producers and consumers are gone)

    def _schedule_keepalive(self) -> None:
        interval = self.server.config.keepAliveIntervalSeconds
        if interval > 0:
            self._keepalive = asyncio.get_running_loop().call_later(interval, self._keepalive_tick)

    def _keepalive_tick(self) -> None:
        self._keepalive = None
        if self.state is State.CLOSED:
            return
        if self.state is State.AWAITING_CONNECT:
            log.info("closing %s: no CONNECT within the keep-alive interval", self.remote_address)
            self.close()
            return
        if self._awaiting_pong and not self._received_since_ping:
            log.info("closing %s: no answer to keep-alive ping", self.remote_address)
            self.close()
            return
        self._received_since_ping = False
        self._awaiting_pong = True
        self.write(commands.PING)
        self._schedule_keepalive()


# Broker -> client commands: a client sending one of these is broken, so the connection closes.
_CLIENT_NEVER_SENDS = frozenset({
    T.CONNECTED, T.SEND_RECEIPT, T.SEND_ERROR, T.MESSAGE, T.SUCCESS, T.ERROR, T.PRODUCER_SUCCESS,
    T.PARTITIONED_METADATA_RESPONSE, T.LOOKUP_RESPONSE, T.CONSUMER_STATS_RESPONSE, T.REACHED_END_OF_TOPIC,
    T.GET_LAST_MESSAGE_ID_RESPONSE, T.ACTIVE_CONSUMER_CHANGE, T.GET_TOPICS_OF_NAMESPACE_RESPONSE,
    T.GET_SCHEMA_RESPONSE, T.ACK_RESPONSE, T.GET_OR_CREATE_SCHEMA_RESPONSE, T.AUTH_CHALLENGE,
    T.WATCH_TOPIC_LIST_SUCCESS, T.WATCH_TOPIC_UPDATE, T.TOPIC_MIGRATED, T.CONNECT,
})
