"""A cluster-mode LOOKUP always gets an answer: a failure the lookup did not foresee (here an unreadable broker
registration, ``ClusterDataError``) is answered ServiceNotReady, which clients retry, as Pulsar's
TopicLookupBase.handleLookupError answers any other error; unanswered, the client waited for its operation
timeout (30 s) before trying again.

The real broker in process; its ownership replaced by one that is distributed and whose lookup fails so."""

from __future__ import annotations

import asyncio

from broker.cluster.data import ClusterDataError
from broker.embedded import Broker
from broker.protocol import pulsar_api_pb2 as pb
from broker.topic_name import TopicName
from tests.component.wire import T, WireClient, port_of


class FailingOwnership:
    distributed = True

    async def lookup(self, name: TopicName, authoritative: bool, listener: str | None) -> object:
        raise ClusterDataError("broker 127.0.0.9:8080: unreadable load report")


async def test_an_unforeseen_lookup_failure_is_answered() -> None:
    async with Broker() as b:
        assert b.server is not None
        service = b.server.service
        standalone, service.ownership = service.ownership, FailingOwnership()  # type: ignore[assignment]
        client = await WireClient.open(port_of(b))
        try:
            await client.connect()
            cmd = pb.BaseCommand(type=T.LOOKUP)
            cmd.lookupTopic.topic = "persistent://public/default/unanswered"
            cmd.lookupTopic.request_id = 7
            client.send(cmd)
            answer = await asyncio.wait_for(client.recv(), 10)
            assert answer.type == T.LOOKUP_RESPONSE and answer.lookupTopicResponse.request_id == 7
            r = answer.lookupTopicResponse
            assert r.response == pb.CommandLookupTopicResponse.Failed and r.error == pb.ServiceNotReady
        finally:
            client.close()
            service.ownership = standalone
