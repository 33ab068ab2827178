"""Golden checks on the generated Pulsar protocol module.

These pin wire facts (enum values, field numbers, defaults, exact bytes) so an
accidental edit of proto/pulsar_api.proto that would break compatibility with
real Pulsar clients fails loudly.
"""

from __future__ import annotations

import pytest
from google.protobuf.message import EncodeError

from broker.protocol import pulsar_api_pb2 as pb


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("CONNECT", 2),
        ("CONNECTED", 3),
        ("SEND", 6),
        ("SEND_RECEIPT", 7),
        ("MESSAGE", 9),
        ("PING", 18),
        ("PONG", 19),
        ("LOOKUP", 23),
        ("ACK_RESPONSE", 38),
        ("NEW_TXN", 50),
        ("TC_CLIENT_CONNECT_REQUEST", 62),
        ("WATCH_TOPIC_LIST", 64),
        ("TOPIC_MIGRATED", 68),
    ],
)
def test_base_command_type_values(name: str, value: int) -> None:
    assert pb.BaseCommand.Type.Value(name) == value


@pytest.mark.parametrize(
    ("field", "type_name"),
    [
        ("connect", "CONNECT"),
        ("send", "SEND"),
        ("message", "MESSAGE"),
        ("ackResponse", "ACK_RESPONSE"),
        ("ping", "PING"),
        ("pong", "PONG"),
        ("topicMigrated", "TOPIC_MIGRATED"),
    ],
)
def test_base_command_field_number_matches_type(field: str, type_name: str) -> None:
    number = pb.BaseCommand.DESCRIPTOR.fields_by_name[field].number
    assert number == pb.BaseCommand.Type.Value(type_name)


def test_every_base_command_type_has_its_field() -> None:
    fields_by_number = pb.BaseCommand.DESCRIPTOR.fields_by_number
    for value in pb.BaseCommand.Type.values():
        assert value in fields_by_number, value


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("UnknownError", 0),
        ("ServiceNotReady", 6),
        ("ChecksumError", 9),
        ("TopicNotFound", 11),
        ("ProducerBusy", 16),
        ("NotAllowedError", 22),
        ("ProducerFenced", 25),
    ],
)
def test_server_error_values(name: str, value: int) -> None:
    assert pb.ServerError.Value(name) == value


def test_protocol_version_and_other_enums() -> None:
    assert pb.ProtocolVersion.Value("v20") == 20
    assert max(pb.ProtocolVersion.values()) == 20
    assert pb.CommandSubscribe.SubType.Value("Key_Shared") == 3
    assert pb.CommandSubscribe.InitialPosition.Value("Earliest") == 1
    assert pb.ProducerAccessMode.Value("ExclusiveWithFencing") == 3
    assert pb.CompressionType.Value("SNAPPY") == 4
    assert pb.Schema.Type.Value("ProtobufNative") == 20
    # "None" is a Python keyword: only reachable by name lookup, not attribute access.
    assert pb.Schema.Type.Value("None") == 0
    assert pb.Schema.Type.Value("KeyValue") == 15


def test_defaults_worth_knowing() -> None:
    mid = pb.MessageIdData(ledgerId=1, entryId=2)
    assert mid.partition == -1
    assert mid.batch_index == -1
    assert pb.CommandProducerSuccess().last_sequence_id == -1
    assert pb.CommandProducerSuccess().producer_ready is True
    assert pb.CommandSubscribe().durable is True
    assert pb.CommandSubscribe().force_topic_creation is True
    assert pb.MessageMetadata().num_messages_in_batch == 1
    assert pb.CommandSend().num_messages == 1
    assert pb.CommandGetTopicsOfNamespaceResponse().changed is True


def test_required_fields_enforced() -> None:
    connected = pb.CommandConnected(protocol_version=20)
    assert not connected.IsInitialized()
    connected.server_version = "test"
    assert connected.IsInitialized()
    with pytest.raises(EncodeError, match="message"):
        pb.CommandError(request_id=1, error=pb.TopicNotFound).SerializeToString()


def test_ping_golden_bytes() -> None:
    cmd = pb.BaseCommand(type=pb.BaseCommand.PING, ping=pb.CommandPing())
    # field 1 varint 18, then field 18 (tag 0x92 0x01) length 0
    assert cmd.SerializeToString() == b"\x08\x12\x92\x01\x00"


def test_uint64_minus_one_roundtrip() -> None:
    # -1 as used by clients/brokers for "no id" travels as 2**64 - 1 (10-byte varint).
    mid = pb.MessageIdData(ledgerId=2**64 - 1, entryId=2**64 - 1)
    data = mid.SerializeToString()
    assert data == b"\x08" + b"\xff" * 9 + b"\x01" + b"\x10" + b"\xff" * 9 + b"\x01"
    back = pb.MessageIdData.FromString(data)
    assert back.ledgerId == 2**64 - 1
    assert not back.HasField("partition")
