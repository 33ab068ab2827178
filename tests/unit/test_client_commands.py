"""The client-side encoders the broker's own clients use (health check, WebSocket service, replication): what the
broker's decoder reads back from each."""

from broker.protocol import client_commands
from broker.protocol import pulsar_api_pb2 as pb
from broker.protocol.entry import entry_body, read_entry_metadata
from broker.protocol.frames import FrameDecoder

T = pb.BaseCommand.Type


def _decode(data: bytes):  # type: ignore[no-untyped-def]
    decoder = FrameDecoder(5 * 1024 * 1024)
    decoder.feed(data)
    frame = decoder.next_frame()
    assert frame is not None and decoder.next_frame() is None
    return frame


def test_a_single_message_send_carries_its_entry_whole() -> None:
    entry = client_commands.single_message("p-1", 7, b"hello")
    frame = _decode(client_commands.send(3, 7, 1, entry))
    assert frame.command.type == T.SEND
    send = frame.command.send
    assert (send.producer_id, send.sequence_id, send.num_messages) == (3, 7, 1)
    assert not send.HasField("highest_sequence_id") and not send.is_chunk
    assert entry_body(frame.payload) == b"hello"
    md = read_entry_metadata(frame.payload)
    assert (md.producer_name, md.sequence_id) == ("p-1", 7) and md.publish_time > 0


def test_a_batch_send_names_its_highest_sequence_id_and_a_chunk_says_so() -> None:
    entry = client_commands.single_message("p", 10, b"x")
    send = _decode(client_commands.send(1, 10, 5, entry, highest_sequence_id=14)).command.send
    assert (send.sequence_id, send.highest_sequence_id, send.num_messages) == (10, 14, 5)
    send = _decode(client_commands.send(1, 10, 1, entry, highest_sequence_id=10, is_chunk=True)).command.send
    assert not send.HasField("highest_sequence_id") and send.is_chunk


def test_requests_leave_the_request_id_to_the_link() -> None:
    cmd, body = client_commands.producer("persistent://t/n/a", 1, "named", user_provided_name=True)
    assert cmd.type == T.PRODUCER and body is cmd.producer and not body.HasField("request_id")
    assert body.producer_name == "named" and body.user_provided_producer_name
    _, body = client_commands.producer("persistent://t/n/a", 1)
    assert not body.HasField("producer_name") and not body.HasField("user_provided_producer_name")
    for (cmd, closing), kind in ((client_commands.close_producer(4), T.CLOSE_PRODUCER),
                                 (client_commands.close_consumer(5), T.CLOSE_CONSUMER),
                                 (client_commands.unsubscribe(6), T.UNSUBSCRIBE)):
        assert cmd.type == kind and not closing.HasField("request_id")


def test_a_readers_subscribe_starts_where_it_is_told() -> None:
    cmd, s = client_commands.subscribe("persistent://t/n/a", "healthCheck-1", 2, pb.CommandSubscribe.Exclusive,
                                       "healthCheck-1", durable=False, start=client_commands.reader_start_latest())
    assert cmd.type == T.SUBSCRIBE and s is cmd.subscribe
    assert (s.subType, s.durable, s.initialPosition) == (pb.CommandSubscribe.Exclusive, False,
                                                         pb.CommandSubscribe.Latest)
    assert (s.start_message_id.ledgerId, s.start_message_id.entryId) == client_commands.LATEST
    _, s = client_commands.subscribe("persistent://t/n/a", "sub", 2, pb.CommandSubscribe.Shared, "c", earliest=True)
    assert s.durable and s.initialPosition == pb.CommandSubscribe.Earliest and not s.HasField("start_message_id")


def test_a_flow_is_a_frame_of_its_permits() -> None:
    flow = _decode(client_commands.flow(9, 250)).command.flow
    assert (flow.consumer_id, flow.messagePermits) == (9, 250)
