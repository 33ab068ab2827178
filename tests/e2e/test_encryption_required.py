"""A namespace's encryption_required (Pulsar's encryptionRequired): producers that do not encrypt
are refused, encrypted messages go through end to end with the official client's encryption."""

from __future__ import annotations

from pathlib import Path

import pulsar
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from broker.embedded import BrokerThread
from broker.protocol import pulsar_api_pb2 as pb
from tests.admin.conftest import Admin
from tests.component.wire import T, WireClient, producer_cmd, send_frame


def key_reader(tmp_path: Path) -> pulsar.CryptoKeyReader:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = tmp_path / "private.pem"
    public = tmp_path / "public.pem"
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                          serialization.NoEncryption()))
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                     serialization.PublicFormat.SubjectPublicKeyInfo))
    return pulsar.CryptoKeyReader(str(public), str(private))


def test_encryption_required(tmp_path: Path) -> None:
    with BrokerThread(data_dir=tmp_path / "data") as broker:
        admin = Admin(broker.web_url)
        ns = admin.new_namespace()
        path = f"/admin/v2/namespaces/{ns}/encryptionRequired"
        assert admin.ok("GET", path) is False  # a boolean in Pulsar's Policies: false until set
        assert admin.post(path, "yes").status == 400
        assert admin.post(path, True).status == 204
        assert admin.ok("GET", path) is True
        topic = f"persistent://{ns}/secret"
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
        # (A producer that does not encrypt is refused with MetadataError, which the client retries
        # until its operation timeout, as against Pulsar: see the wire test below.)
        reader = key_reader(tmp_path)
        consumer = client.subscribe(topic, "s", crypto_key_reader=reader)
        producer = client.create_producer(topic, encryption_key="k", crypto_key_reader=reader)
        producer.send(b"sealed")
        assert consumer.receive(10_000).data() == b"sealed"
        # Off again: plain producers are welcome.
        assert admin.post(path, False).status == 204
        client.create_producer(topic).send(b"plain")
        assert consumer.receive(10_000).data() == b"plain"
        client.close()


def test_an_unencrypted_message_from_a_producer_that_said_it_encrypts_is_refused(tmp_path: Path) -> None:
    with BrokerThread(data_dir=tmp_path) as broker:
        admin = Admin(broker.web_url)
        ns = admin.new_namespace()
        admin.ok("POST", f"/admin/v2/namespaces/{ns}/encryptionRequired", True)

        async def scenario() -> None:
            c = await WireClient.open(broker.server.port)
            await c.connect()
            c.send(producer_cmd(f"persistent://{ns}/t"))  # not encrypted: refused
            reply = await c.recv()
            assert reply.type == T.ERROR and reply.error.error == pb.ServerError.MetadataError
            assert reply.error.message == f"Encryption is required in persistent://{ns}/t"
            cmd = producer_cmd(f"persistent://{ns}/t", request_id=2)
            cmd.producer.encrypted = True  # it says so, then sends a plain message
            c.send(cmd)
            assert (await c.recv()).type == T.PRODUCER_SUCCESS
            c.send(*send_frame(1, 0, b"not sealed"))
            reply = await c.recv()
            assert reply.type == T.SEND_ERROR
            assert reply.send_error.error == pb.ServerError.MetadataError
            assert reply.send_error.message == "Messages must be encrypted"
            c.close()

        broker.run_coroutine(scenario())
