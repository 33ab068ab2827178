"""A namespace this broker's cluster does not serve: lookups and admin calls go to the peer cluster that does (Pulsar's
validateGlobalNamespaceOwnership / checkLocalOrGetPeerReplicationCluster), or are refused when none can.

Two brokers of two clusters on their own loopback addresses: "a" on 127.0.0.2, whose peers are "d" and "b" (in that
order), and "b" on 127.0.0.3. Cluster "c" is known to "a" but is not its peer; "d" is a peer without a broker service
URL. The namespaces live on both brokers (as a shared configuration store would have them).
"""

from __future__ import annotations

from collections.abc import Iterator

import pulsar
import pytest
import requests

from broker.embedded import BrokerThread
from broker.protocol import pulsar_api_pb2 as pb
from broker.topic_name import TopicName
from tests.component.wire import T, WireClient, producer_cmd, subscribe_cmd
from tests.e2e.test_geo_replication import Pair, link, receive
from tests.waiting import wait_for

A_HOST, B_HOST = "127.0.0.2", "127.0.0.3"


class Clusters(Pair):
    def lookup_on_a(self, topic: str) -> pb.CommandLookupTopicResponse:
        """A raw binary LOOKUP asked of broker a."""
        async def ask() -> pb.CommandLookupTopicResponse:
            client = await WireClient.open(self.a.server.port, A_HOST)
            try:
                await client.connect()
                return await client.lookup(topic)
            finally:
                client.close()

        response: pb.CommandLookupTopicResponse = self.a.run_coroutine(ask())
        return response

    def commands_on_a(self, *cmds: pb.BaseCommand) -> list[pb.BaseCommand]:
        """Each command sent to broker a without a lookup first, and its answer."""
        async def ask() -> list[pb.BaseCommand]:
            client = await WireClient.open(self.a.server.port, A_HOST)
            try:
                await client.connect()
                answers = []
                for cmd in cmds:
                    client.send(cmd)
                    answers.append(await client.recv())
                return answers
            finally:
                client.close()

        answers: list[pb.BaseCommand] = self.a.run_coroutine(ask())
        return answers


@pytest.fixture(scope="module")
def clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Clusters]:
    with (BrokerThread(clusterName="a", bindAddress=A_HOST, data_dir=tmp_path_factory.mktemp("a")) as a,
          BrokerThread(clusterName="b", bindAddress=B_HOST, data_dir=tmp_path_factory.mktemp("b")) as b):
        c = Clusters(a, b)
        link(c.admin_a, "b", b)
        link(c.admin_b, "a", a)
        for admin in (c.admin_a, c.admin_b):
            admin.ok("PUT", "/admin/v2/clusters/c", {"serviceUrl": "http://127.0.0.9:1",
                                                     "brokerServiceUrl": "pulsar://127.0.0.9:1"})
            admin.ok("PUT", "/admin/v2/clusters/d", {"serviceUrl": "http://127.0.0.9:2"})
            admin.ok("PUT", "/admin/v2/tenants/geo", {"allowedClusters": ["a", "b", "c", "d"]})
        c.admin_a.ok("POST", "/admin/v2/clusters/a", {"serviceUrl": a.web_url, "brokerServiceUrl": a.service_url,
                                                      "peerClusterNames": ["d", "b"]})
        yield c
        c.close()


def test_the_binary_lookup_redirects_to_the_peer_cluster(clusters: Clusters) -> None:
    topic = f"persistent://{clusters.namespace(['b'])}/t"
    answer = clusters.lookup_on_a(topic)
    assert answer.response == pb.CommandLookupTopicResponse.Redirect
    assert answer.authoritative  # (the other cluster's brokers place the bundle themselves)
    assert answer.brokerServiceUrl == clusters.b.service_url
    # The first peer the namespace lists wins ("d" is a's first peer but not listed here).
    both = f"persistent://{clusters.namespace(['c', 'b'])}/t"
    assert clusters.lookup_on_a(both).brokerServiceUrl == clusters.b.service_url


def test_the_official_client_given_a_produces_and_consumes_on_b(clusters: Clusters) -> None:
    topic = f"persistent://{clusters.namespace(['b'])}/orders"
    consumer = clusters.client_a.subscribe(topic, "s")
    producer = clusters.client_a.create_producer(topic, batching_enabled=False)
    for i in range(5):
        producer.send(b"m%d" % i)
    assert receive(consumer, 5) == [b"m%d" % i for i in range(5)]
    stats = clusters.admin_b.stats(topic)
    assert stats["msgInCounter"] == 5 and list(stats["subscriptions"]) == ["s"]
    assert topic not in clusters.a.server.service.topics  # a never loaded it


def test_http_lookup_and_admin_calls_answer_307_to_the_peer(clusters: Clusters) -> None:
    ns = clusters.namespace(["b"])
    topic_path = f"persistent/{ns}/web"
    lookup = requests.get(f"{clusters.a.web_url}/lookup/v2/topic/{topic_path}?authoritative=false",
                          allow_redirects=False, timeout=10)
    assert lookup.status_code == 307
    assert lookup.headers["Location"] == f"{clusters.b.web_url}/lookup/v2/topic/{topic_path}?authoritative=false"
    assert requests.put(f"{clusters.b.web_url}/admin/v2/{topic_path}", timeout=10).status_code == 204
    stats = requests.get(f"{clusters.a.web_url}/admin/v2/{topic_path}/stats", allow_redirects=False, timeout=10)
    assert stats.status_code == 307
    assert stats.headers["Location"] == f"{clusters.b.web_url}/admin/v2/{topic_path}/stats"
    assert requests.get(f"{clusters.a.web_url}/admin/v2/{topic_path}/stats", timeout=10).json()["msgInCounter"] == 0
    # The partitioned metadata too (Pulsar's AdminResource.getPartitionedTopicMetadataAsync checks the namespace's
    # cluster, compared with Pulsar 4.0.7's standalone), the query kept.
    path = f"/admin/v2/{topic_path}/partitions?checkAllowAutoCreation=true"
    metadata = requests.get(f"{clusters.a.web_url}{path}", allow_redirects=False, timeout=10)
    assert (metadata.status_code, metadata.headers["Location"]) == (307, f"{clusters.b.web_url}{path}")
    assert requests.get(f"{clusters.a.web_url}{path}", timeout=10).json() == {"partitions": 0, "deleted": False}


def test_calls_reading_the_partitioned_metadata_or_topic_policies_answer_307(clusters: Clusters) -> None:
    # Pulsar 4.0.7 (compared with its standalone): AdminResource.getPartitionedTopicMetadataAsync checks the
    # namespace's cluster after the caller's lookup permission: the partitioned metadata, createMissedPartitions,
    # truncate (a partition's too, not stored here); PersistentTopicsBase.preValidation checks it for every topic
    # policy, after the policies-enabled and not-a-partition checks.
    ns = clusters.namespace(["b"])
    calls = [("GET", f"persistent/{ns}/t/partitions", None), ("GET", f"non-persistent/{ns}/t/partitions", None),
             ("POST", f"persistent/{ns}/t/createMissedPartitions", None),
             ("POST", f"non-persistent/{ns}/t/createMissedPartitions", None),
             ("DELETE", f"persistent/{ns}/t/truncate", None),
             ("DELETE", f"persistent/{ns}/t-partition-0/truncate", None),
             ("GET", f"persistent/{ns}/t/maxProducers", None), ("POST", f"persistent/{ns}/t/maxProducers", "5"),
             ("DELETE", f"persistent/{ns}/t/maxProducers", None), ("GET", f"non-persistent/{ns}/t/maxProducers", None),
             ("GET", f"persistent/{ns}/t/replication", None), ("POST", f"persistent/{ns}/t/replication", '["b"]'),
             ("GET", f"persistent/{ns}/t/retention?applied=true", None),
             ("GET", f"persistent/{ns}/t/sub/dispatchRate", None),
             # A partition this broker does not have: Pulsar's getTopicReferenceAsync -> topicNotFoundReasonAsync
             # reads the partitioned metadata.
             ("GET", f"persistent/{ns}/t-partition-0/lastMessageId", None),
             ("GET", f"persistent/{ns}/t-partition-0/compaction", None),
             ("POST", f"persistent/{ns}/t-partition-0/trim", None),
             ("GET", f"non-persistent/{ns}/t-partition-0/lastMessageId", None),
             ("GET", f"non-persistent/{ns}/t-partition-0/compaction", None)]
    for method, path, body in calls:
        reply = requests.request(method, f"{clusters.a.web_url}/admin/v2/{path}", data=body, allow_redirects=False,
                                 headers={"Content-Type": "application/json"}, timeout=10)
        assert reply.status_code == 307, (method, path, reply.status_code, reply.text)
        assert reply.headers["Location"] == f"{clusters.b.web_url}/admin/v2/{path}", (method, path)
    # What Pulsar answers here: a non-persistent topic's truncate and trim, a partition's policy.
    for method, path, answer in (
            ("DELETE", f"non-persistent/{ns}/t/truncate", (412, "unsupport truncate")),
            ("POST", f"non-persistent/{ns}/t-partition-0/trim", (405, "Trim on a non-persistent topic is not allowed")),
            ("GET", f"persistent/{ns}/t-partition-0/maxProducers",
             (412, "Not allowed to set/get topic policy for a partition"))):
        reply = requests.request(method, f"{clusters.a.web_url}/admin/v2/{path}", allow_redirects=False, timeout=10)
        assert (reply.status_code, reply.json()["reason"]) == answer, (method, path)
    # The whole topic's, not found here (Pulsar: 404 "Topic ... not found").
    for path in (f"persistent/{ns}/t/lastMessageId", f"persistent/{ns}/t/compaction"):
        reply = requests.get(f"{clusters.a.web_url}/admin/v2/{path}", allow_redirects=False, timeout=10)
        assert reply.status_code == 404, (path, reply.status_code, reply.text)
    # Followed, the calls are answered by b.
    clusters.admin_b.ok("PUT", f"/admin/v2/persistent/{ns}/t")
    assert requests.post(f"{clusters.a.web_url}/admin/v2/persistent/{ns}/t/maxProducers", data="5", timeout=10,
                         headers={"Content-Type": "application/json"}).status_code == 204
    assert requests.get(f"{clusters.b.web_url}/admin/v2/persistent/{ns}/t/maxProducers", timeout=10).json() == 5
    # No cluster serves it: the refusal as it is.
    refused = clusters.namespace(["c"])
    for path in (f"persistent/{refused}/t/partitions", f"persistent/{refused}/t/maxProducers"):
        reply = requests.get(f"{clusters.a.web_url}/admin/v2/{path}", allow_redirects=False, timeout=10)
        assert reply.status_code == 412 and "local_cluster=a" in reply.json()["reason"], path


def test_creating_a_topic_is_refused_with_pulsars_503(clusters: Clusters) -> None:
    # Pulsar 4.0.7's PersistentTopics / NonPersistentTopics check the namespace's cluster first when a topic is
    # created, with AdminResource.validateGlobalNamespaceOwnership(): the redirect to the peer is caught as a failure,
    # 503 (compared with its standalone). Before the partition count (but after its JSON binding, 400) and the name.
    ns = clusters.namespace(["b"])
    for path, body in ((f"persistent/{ns}/created", None), (f"non-persistent/{ns}/created", None),
                       (f"persistent/{ns}/created/partitions", "3"), (f"non-persistent/{ns}/created/partitions", "3"),
                       (f"persistent/{ns}/created/partitions", "0"), (f"persistent/{ns}/created/partitions", None),
                       (f"persistent/{ns}/created-partition-1/partitions", "3"),
                       (f"persistent/{ns}/created-partition-1", None)):
        reply = requests.put(f"{clusters.a.web_url}/admin/v2/{path}", data=body, allow_redirects=False, timeout=10,
                             headers={"Content-Type": "application/json"})
        answer = (503, {"reason": "Failed to validate global cluster configuration"})
        assert (reply.status_code, reply.json()) == answer, (path, body, reply.status_code, reply.text)
    reply = requests.put(f"{clusters.a.web_url}/admin/v2/persistent/{ns}/created/partitions", data='"x"',
                         headers={"Content-Type": "application/json"}, timeout=10)
    assert reply.status_code == 400
    assert clusters.admin_a.get(f"/admin/v2/persistent/{ns}/created/partitions").status == 404  # nothing was created
    # No cluster can serve it: the refusal as it is.
    refused = clusters.namespace(["c"])
    for path in (f"persistent/{refused}/t", f"persistent/{refused}/t/partitions"):
        reply = requests.put(f"{clusters.a.web_url}/admin/v2/{path}", data="2", timeout=10,
                             headers={"Content-Type": "application/json"})
        assert reply.status_code == 412 and "local_cluster=a" in reply.json()["reason"], path


def test_namespace_calls_pulsar_checks_answer_307_to_the_peer(clusters: Clusters) -> None:
    ns = clusters.namespace(["b"])
    bundle = "0x00000000_0x40000000"  # (the first of 4)
    for method, action in (("PUT", "unload"), ("PUT", f"{bundle}/unload"), ("PUT", f"{bundle}/split"),
                           ("POST", f"{bundle}/clearBacklog"), ("POST", f"{bundle}/clearBacklog/s"),
                           ("POST", f"{bundle}/unsubscribe/s")):
        path = f"/admin/v2/namespaces/{ns}/{action}"
        reply = requests.request(method, f"{clusters.a.web_url}{path}?authoritative=false", allow_redirects=False,
                                 timeout=10)
        assert reply.status_code == 307, (action, reply.status_code, reply.text)
        assert reply.headers["Location"] == f"{clusters.b.web_url}{path}?authoritative=false", action
    assert requests.put(f"{clusters.a.web_url}/admin/v2/namespaces/{ns}/unload", timeout=10).status_code == 204
    # The namespace-wide clearBacklog and unsubscribe are answered here, as in Pulsar; so is everything in a
    # namespace this cluster serves.
    for action in ("clearBacklog", "unsubscribe/s"):
        reply = requests.post(f"{clusters.a.web_url}/admin/v2/namespaces/{ns}/{action}", allow_redirects=False,
                              timeout=10)
        assert reply.status_code == 204, (action, reply.text)
    served = clusters.namespace(["a", "c"])
    assert requests.put(f"{clusters.a.web_url}/admin/v2/namespaces/{served}/unload", allow_redirects=False,
                        timeout=10).status_code == 204
    # No cluster serves it: Pulsar's refusal.
    refused = clusters.namespace(["c"])
    reply = requests.put(f"{clusters.a.web_url}/admin/v2/namespaces/{refused}/unload", timeout=10)
    assert reply.status_code == 412 and "local_cluster=a" in reply.json()["reason"]


def test_what_pulsar_checks_before_sending_a_namespace_call_to_the_peer(clusters: Clusters) -> None:
    # Pulsar 4.0.7's NamespacesBase: a bundle unload parses its range (NamespaceBundleFactory.getBundle), a split
    # reads its positions and checks its algorithm, before validateGlobalNamespaceOwnership: refused here.
    ns = clusters.namespace(["b"])
    bundle = "0x00000000_0x40000000"
    for action, query, body, status, reason in (
            ("0xzz_0x40000000/unload", "", None, 412, "Invalid bundle range: 0xzz_0x40000000"),
            ("0x40000000_0x00000000/unload", "", None, 412, "Invalid bundle range: 0x40000000_0x00000000"),
            (f"{bundle}/split", "?splitAlgorithmName=nope", None, 412, "Unsupported namespace bundle split algorithm"),
            (f"{bundle}/split", "?splitAlgorithmName=specified_positions_divide", None, 412,
             "With specified_positions_divide split algorithm, splitBoundaries must not be empty"),
            (f"{bundle}/split", "", '"x"', 400, "Split boundaries must be a JSON array")):
        reply = requests.put(f"{clusters.a.web_url}/admin/v2/namespaces/{ns}/{action}{query}", data=body,
                             headers={"Content-Type": "application/json"}, allow_redirects=False, timeout=10)
        assert reply.status_code == status, (action, query, reply.status_code, reply.text)
        assert reply.json()["reason"].startswith(reason), (action, reply.text)
    # The others check their bundle after the redirect, on the cluster that serves the namespace.
    for method, action in (("PUT", "0xzz_0x40000000/split"), ("POST", "0xzz_0x40000000/clearBacklog"),
                           ("POST", "0xzz_0x40000000/clearBacklog/s"), ("POST", "0xzz_0x40000000/unsubscribe/s")):
        path = f"/admin/v2/namespaces/{ns}/{action}"
        reply = requests.request(method, f"{clusters.a.web_url}{path}", allow_redirects=False, timeout=10)
        assert reply.status_code == 307, (action, reply.status_code, reply.text)
        assert reply.headers["Location"] == f"{clusters.b.web_url}{path}", action
        reply = requests.request(method, f"{clusters.a.web_url}{path}", timeout=10)  # (b refuses it)
        assert reply.status_code == 412 and "Invalid bundle range" in reply.json()["reason"], (action, reply.text)


def test_a_bundle_name_without_a_range_separator(clusters: Clusters) -> None:
    # Pulsar's routes take any bundle name: one without "_" is checked where any other malformed range is
    # (PulsarWebResource.validateNamespaceBundleRange: 412 "Invalid bundle range: <name>"), so after the redirect
    # to the peer cluster, except for a bundle unload, which reads its range first (compared with its standalone;
    # Pulsar's unload answers 500 there, an uncaught IllegalArgumentException: ours is the 412 of any malformed range).
    peer, served = clusters.namespace(["b"]), clusters.namespace(["a"])
    for method, action in (("PUT", "abc/split"), ("POST", "abc/clearBacklog"), ("POST", "abc/clearBacklog/s"),
                           ("POST", "abc/unsubscribe/s")):
        path = f"/admin/v2/namespaces/{peer}/{action}"
        reply = requests.request(method, f"{clusters.a.web_url}{path}", allow_redirects=False, timeout=10)
        assert (reply.status_code, reply.headers.get("Location")) == (307, f"{clusters.b.web_url}{path}"), action
    for method, action in (("PUT", "abc/unload"), ("PUT", "abc/split"), ("POST", "abc/clearBacklog"),
                           ("POST", "abc/clearBacklog/s"), ("POST", "abc/unsubscribe/s")):
        for ns in (served, peer) if action == "abc/unload" else (served,):
            reply = requests.request(method, f"{clusters.a.web_url}/admin/v2/namespaces/{ns}/{action}",
                                     allow_redirects=False, timeout=10)
            assert (reply.status_code, reply.json()) == (412, {"reason": "Invalid bundle range: abc"}), (ns, action)


def test_the_live_topics_of_a_bundle(clusters: Clusters) -> None:
    # GET /admin/v2/non-persistent/{tenant}/{ns}/{bundle} (Pulsar's NonPersistentTopics.getListFromBundle, what the
    # namespace's list asks each bundle's owner): the namespace read (404), then validateGlobalNamespaceOwnership (307
    # to the peer, 412), then the bundle (412), any name being taken (compared with Pulsar 4.0.7's standalone).
    peer, served, refused = clusters.namespace(["b"]), clusters.namespace(["a"]), clusters.namespace(["c"])
    for bundle in ("0x00000000_0x40000000", "abc"):
        path = f"/admin/v2/non-persistent/{peer}/{bundle}"
        reply = requests.get(f"{clusters.a.web_url}{path}", allow_redirects=False, timeout=10)
        assert (reply.status_code, reply.headers.get("Location")) == (307, f"{clusters.b.web_url}{path}"), bundle
    reply = requests.get(f"{clusters.a.web_url}/admin/v2/non-persistent/{refused}/abc", timeout=10)
    assert reply.status_code == 412 and "local_cluster=a" in reply.json()["reason"]
    reply = requests.get(f"{clusters.a.web_url}/admin/v2/non-persistent/{served}/abc", timeout=10)
    assert (reply.status_code, reply.json()) == (412, {"reason": "Invalid bundle range: abc"})
    reply = requests.get(f"{clusters.a.web_url}/admin/v2/non-persistent/geo/nowhere/abc", timeout=10)
    assert (reply.status_code, reply.json()) == (404, {"reason": "Namespace does not exist"})
    assert clusters.admin_a.ok("GET", f"/admin/v2/non-persistent/{served}/0x00000000_0x40000000") == []


def test_no_peer_cluster_serves_it(clusters: Clusters) -> None:
    ns = clusters.namespace(["c"])  # c is known to a, but not a's peer
    answer = clusters.lookup_on_a(f"persistent://{ns}/t")
    assert answer.response == pb.CommandLookupTopicResponse.Failed
    assert answer.error == pb.ServerError.MetadataError
    assert answer.message == (f"Namespace missing local cluster name in clusters list: local_cluster=a ns={ns} "
                              "clusters=[c]")
    lookup = requests.get(f"{clusters.a.web_url}/lookup/v2/topic/persistent/{ns}/t", allow_redirects=False,
                          timeout=10)
    assert lookup.status_code == 412 and "local_cluster=a" in lookup.json()["reason"]
    stats = requests.get(f"{clusters.a.web_url}/admin/v2/persistent/{ns}/t/stats", allow_redirects=False,
                         timeout=10)
    assert stats.status_code == 412
    client = pulsar.Client(clusters.a.service_url, operation_timeout_seconds=3)
    try:
        with pytest.raises(pulsar.PulsarException):
            client.create_producer(f"persistent://{ns}/t")
    finally:
        client.close()


def test_a_peer_without_a_broker_service_url(clusters: Clusters) -> None:
    answer = clusters.lookup_on_a(f"persistent://{clusters.namespace(['d'])}/t")
    assert answer.response == pb.CommandLookupTopicResponse.Failed
    assert answer.error == pb.ServerError.MetadataError
    assert answer.message == "Redirected cluster's brokerService url is not configured"


def test_a_namespace_this_cluster_serves_is_answered_here(clusters: Clusters) -> None:
    # (not with b: a namespace's clusters never hold one of a cluster's peers, Pulsar's 409)
    answer = clusters.lookup_on_a(f"persistent://{clusters.namespace(['a', 'c'])}/t")
    assert answer.response == pb.CommandLookupTopicResponse.Connect
    assert answer.brokerServiceUrl == clusters.a.service_url
    reply = clusters.admin_a.post(f"/admin/v2/namespaces/{clusters.namespace(['a'])}/replication", ["a", "b"])
    assert reply.status == 409 and reply.reason.startswith("a's peer-clusters [b] can't be part of")


def test_a_namespace_that_allows_this_cluster_is_answered_here(clusters: Clusters) -> None:
    ns = clusters.namespace(["c"])  # refused on a (c is not a's peer) until a is one of its allowed clusters
    topic = f"persistent://{ns}/t"
    assert clusters.lookup_on_a(topic).response == pb.CommandLookupTopicResponse.Failed
    clusters.admin_a.ok("POST", f"/admin/v2/namespaces/{ns}/allowedClusters", ["c", "a"])
    answer = clusters.lookup_on_a(topic)
    assert answer.response == pb.CommandLookupTopicResponse.Connect
    assert answer.brokerServiceUrl == clusters.a.service_url


def test_producer_and_subscribe_sent_here_anyway_are_refused(clusters: Clusters) -> None:
    # What a Pulsar broker of cluster a answers (none of a's brokers owns the namespace's bundles): ServiceNotReady,
    # so the client looks up again, and is sent to b.
    topic = f"persistent://{clusters.namespace(['b'])}/direct"
    answers = clusters.commands_on_a(producer_cmd(topic), subscribe_cmd(topic, request_id=2))
    assert [a.type for a in answers] == [T.ERROR, T.ERROR]
    assert {a.error.error for a in answers} == {pb.ServerError.ServiceNotReady}
    assert "not served by this instance" in answers[0].error.message
    assert topic not in clusters.a.server.service.topics


def test_a_loaded_topic_whose_namespace_moves_to_the_peer_is_deleted_and_its_clients_follow(
        clusters: Clusters) -> None:
    # Pulsar's PersistentTopic.checkReplication: a's copy is deleted (removeTopicIfLocalClusterNotAllowed), its
    # clients are disconnected, and the official client's next lookup on a is redirected to b, where it goes on.
    ns = clusters.namespace(["a", "c"])
    topic = f"persistent://{ns}/moving"
    name = TopicName.parse(topic)
    consumer = clusters.client_a.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    producer = clusters.client_a.create_producer(topic, batching_enabled=False)
    producer.send(b"on a")
    assert receive(consumer, 1) == [b"on a"]
    for admin in (clusters.admin_a, clusters.admin_b):
        admin.ok("POST", f"/admin/v2/namespaces/{ns}/replication", ["b"])
    service_a = clusters.a.server.service
    wait_for(lambda: name.full not in service_a.topics and not service_a.topic_exists(name),
             what="a's copy of the topic to be deleted")
    producer.send(b"on b")  # (the client looked up again, on a, and was sent to b)
    assert receive(consumer, 1) == [b"on b"]
    stats = clusters.admin_b.stats(topic)
    assert stats["msgInCounter"] == 1 and list(stats["subscriptions"]) == ["s"]
    assert not service_a.topic_exists(name)
    producer.close()
    consumer.close()


def test_lookups_sent_to_the_peer_cluster_are_not_counted(clusters: Clusters) -> None:
    # Pulsar 4.0.7 counts lookups (pulsar_broker_lookup_answers / _redirects / _failures, the pulsar_broker_lookup
    # latency) in NamespaceService.getBrokerServiceUrlAsync only; TopicLookupBase answers a namespace of a peer
    # cluster before that (binary: checkLocalOrGetPeerReplicationCluster's Redirect; HTTP:
    # validateGlobalNamespaceOwnershipAsync's 307), and its refusals too. Ours counted them as redirects (and
    # failures), unless the security middleware's cluster-first check answered the HTTP one.
    stats = clusters.a.server.service.lookup_stats

    def counts() -> tuple[int, int, int, int, int]:
        return stats.answers, stats.redirects, stats.failures, stats.latency.count, stats.pending

    before = counts()
    peer, refused = clusters.namespace(["b"]), clusters.namespace(["c"])
    assert clusters.lookup_on_a(f"persistent://{peer}/t").response == pb.CommandLookupTopicResponse.Redirect
    assert clusters.lookup_on_a(f"persistent://{refused}/t").response == pb.CommandLookupTopicResponse.Failed
    for ns, status in ((peer, 307), (refused, 412)):
        reply = requests.get(f"{clusters.a.web_url}/lookup/v2/topic/persistent/{ns}/t", allow_redirects=False,
                             timeout=10)
        assert reply.status_code == status, reply.text
    assert counts() == before
    # A lookup this cluster answers is counted, as Pulsar's NamespaceService does (standalone: an answer).
    served = clusters.namespace(["a"])
    assert clusters.lookup_on_a(f"persistent://{served}/t").response == pb.CommandLookupTopicResponse.Connect
    assert requests.get(f"{clusters.a.web_url}/lookup/v2/topic/persistent/{served}/t", timeout=10).status_code == 200
    answers, redirects, failures, latencies, pending = before
    assert counts() == (answers + 2, redirects, failures, latencies + 2, pending)
