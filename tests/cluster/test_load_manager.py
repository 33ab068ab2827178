"""The leader's load manager with real broker processes and the official client: load shedding moves a bundle off
an overloaded broker (clients follow, nothing receipted is lost), only the leader sheds, and the automatic split is
decided by the leader and done by the owner; placement follows anti-affinity groups, failure domains and isolation
policies.

Load is made deterministic with Pulsar's own key ``loadBalancerOverrideBrokerNicSpeedGbps``: a tiny NIC limit makes
a broker that receives messages overloaded (bandwidth in) while one that receives none is idle; history 0 and a
minimum throughput of 0 make the shedder act on the first report that shows it."""

from __future__ import annotations

import json
import os
import threading
from functools import partial
from typing import Any

import pulsar
import pytest
import requests

from broker.metadata.bundles import hash_topic
from cluster.local import BrokerInfo, start_broker
from tests.bookkeeper.test_broker_faults import Checker, Producing, acked_count, drain, open_producer, wait_acked
from tests.cluster.conftest import Brokers, http_json, log_of
from tests.cluster.test_failover import keep_data, service_urls
from tests.waiting import wait_for

WAIT_S = 90.0
SHED = "ThresholdShedder: unloading bundle"


def four_bundles() -> list[tuple[int, int]]:
    step = 0x40000000
    return [(i * step, min((i + 1) * step, 0xFFFFFFFF)) for i in range(4)]


def topic_in(lower: int, upper: int, kind: str, n: int = 1, namespace: str = "public/default") -> list[str]:
    """``n`` new topic names of ``namespace`` whose hash falls in [lower, upper)."""
    out: list[str] = []
    tag = os.urandom(3).hex()
    i = 0
    while len(out) < n:
        name = f"persistent://{namespace}/{kind}-{tag}-{i}"
        if lower <= hash_topic(name) < upper or (upper == 0xFFFFFFFF and hash_topic(name) == upper):
            out.append(name)
        i += 1
    return out


def range_name(lower: int, upper: int) -> str:
    return f"0x{lower:08x}_0x{upper:08x}"


def owner_web(brokers: Brokers, rng: str) -> str | None:
    with brokers.zk() as zk:
        data = brokers.owners(zk).get(rng)
    return str(data["httpUrl"]) if data else None


def leader_of(brokers: Brokers) -> BrokerInfo:
    with brokers.zk() as zk:
        leader = json.loads(zk.get("/loadbalance/leader")[0])
    return next(b for b in brokers.live if b.web_url.removeprefix("http://") == leader["brokerId"])


AVG_SHEDDER = "org.apache.pulsar.broker.loadbalance.impl.AvgShedder"
# AvgShedder as both the shedding and the placement strategy, acting on the first round that sees the two brokers'
# scores 40 points or more apart, and moving up to all of their difference in message rate, however small.
AVG_SHEDDER_SETTINGS = {
    "loadBalancerLoadSheddingStrategy": AVG_SHEDDER, "loadBalancerLoadPlacementStrategy": AVG_SHEDDER,
    "loadBalancerAvgShedderHitCountHighThreshold": "1", "maxUnloadPercentage": "1", "minUnloadMessage": "0"}


LEAST_RESOURCE_USAGE = {
    "loadBalancerLoadPlacementStrategy": "org.apache.pulsar.broker.loadbalance.impl.LeastResourceUsageWithWeight"}


@pytest.mark.parametrize("strategy", [
    pytest.param({}, id="ThresholdShedder"), pytest.param(AVG_SHEDDER_SETTINGS, id="AvgShedder"),
    pytest.param(LEAST_RESOURCE_USAGE, id="ThresholdShedder-LeastResourceUsageWithWeight")])
def test_the_leader_sheds_a_bundle_of_an_overloaded_broker(brokers: Brokers, strategy: dict[str, str]) -> None:
    brokers.settings.update({
        "loadBalancerSheddingIntervalMinutes": "0.05", "loadBalancerHistoryResourcePercentage": "0",
        "loadBalancerBundleUnloadMinThroughputThreshold": "0", "loadBalancerOverrideBrokerNicSpeedGbps": "0.00001",
        "loadBalancerAutoBundleSplitEnabled": "false", **strategy})
    shed_line = "AvgShedder: unloading bundle" if strategy is AVG_SHEDDER_SETTINGS else SHED
    b1, b2 = brokers.start(2)
    ranges = four_bundles()
    # One topic per bundle, each looked up once: placement spreads the namespace's bundles, two per broker.
    topics = {range_name(lo, up): topic_in(lo, up, "shed")[0] for lo, up in ranges}
    client = pulsar.Client(service_urls(b1, b2), operation_timeout_seconds=30)
    try:
        for topic in topics.values():
            keep_data(client, topic)
        owners = {rng: owner_web(brokers, rng) for rng in topics}
        busy_web = owners[range_name(*ranges[0])]
        hot = [rng for rng, web in owners.items() if web == busy_web]
        assert len(hot) == 2, owners  # (fewest bundles of the namespace first: 2 and 2)
        busy = next(b for b in brokers.live if b.web_url == busy_web)
        idle = b2 if busy is b1 else b1
        checkers = {rng: Checker() for rng in hot}
        producers = [open_producer(client, topics[rng]) for rng in hot]
        with Producing(producers[0], checkers[hot[0]], "a") as first, \
                Producing(producers[1], checkers[hot[1]], "b") as second:
            for rng in hot:
                wait_acked(checkers[rng], 100)

            def moved() -> str | None:
                return next((rng for rng in hot if owner_web(brokers, rng) == idle.web_url), None)

            shed = wait_for(moved, WAIT_S, "a bundle of the overloaded broker to move to the idle one")
            # The clients follow it: more receipts on both topics after the move.
            for rng in hot:
                wait_acked(checkers[rng], acked_count(checkers[rng]) + 100)
            first.finish()
            second.finish()
        leader = leader_of(brokers)
        assert shed_line in log_of(leader) and f"public/default/{shed}" in log_of(leader)
        other = b2 if leader is b1 else b1
        assert shed_line not in log_of(other)  # a non-leader never sheds
        for rng in hot:
            assert not checkers[rng].failed, dict(list(checkers[rng].failed.items())[:3])
    finally:
        client.close()
    for rng in hot:
        drain(b1.service_url, topics[rng], checkers[rng])
        assert not checkers[rng].lost()


def test_the_automatic_split_is_the_leaders(brokers: Brokers) -> None:
    """Three loaded topics in one bundle of a non-leader, past loadBalancerNamespaceBundleMaxTopics (2): the leader
    asks the owner to split it; the owner's own round never does (its log has no split of its own)."""
    brokers.settings.update({"loadBalancerSplitIntervalMinutes": "0.05", "loadBalancerNamespaceBundleMaxTopics": "2",
                             "loadBalancerSheddingEnabled": "false"})
    b1, b2 = brokers.start(2)
    leader = leader_of(brokers)
    non_leader = b2 if leader is b1 else b1
    client = pulsar.Client(service_urls(b1, b2), operation_timeout_seconds=30)
    try:
        # One topic per bundle: two bundles per broker; three topics in one of the non-leader's.
        owners = {}
        for lo, up in four_bundles():
            rng = range_name(lo, up)
            client.create_producer(topic_in(lo, up, "first")[0]).send(b"x")
            owners[rng] = (lo, up, owner_web(brokers, rng))
        lo, up = next((lo, up) for lo, up, web in owners.values() if web == non_leader.web_url)
        topics = topic_in(lo, up, "split", 3)
        for topic in topics:
            client.create_producer(topic).send(b"x")

        def split() -> bool:
            boundaries = http_json(f"{b1.web_url}/admin/v2/namespaces/public/default/bundles")["boundaries"]
            return len(boundaries) > 5

        wait_for(split, WAIT_S, "the leader to have the hot bundle split")
        assert "Load-manager splitting bundle" in log_of(leader)
        assert "Load-manager splitting bundle" not in log_of(non_leader)
        assert "Load-manager split bundle" not in log_of(non_leader)  # (the single-broker round stays off)
    finally:
        client.close()


def test_anti_affinity_namespaces_land_on_different_brokers(brokers: Brokers) -> None:
    """Three pairs of one-bundle namespaces, each pair an anti-affinity group: each pair's second namespace goes to
    the broker that does not serve the first (without the groups, a coin toss each)."""
    b1, b2 = brokers.start(2)
    tag = os.urandom(3).hex()
    pairs = [(f"public/aa-{tag}-{i}-x", f"public/aa-{tag}-{i}-y") for i in range(3)]
    for i, pair in enumerate(pairs):
        for ns in pair:
            requests.put(f"{b1.web_url}/admin/v2/namespaces/{ns}", json={"bundles": {"numBundles": 1}},
                         timeout=30).raise_for_status()
            answer = requests.post(f"{b1.web_url}/admin/v2/namespaces/{ns}/antiAffinity", data=f"group-{tag}-{i}",
                                   timeout=30)
            assert answer.status_code == 204, answer.text
    def group_seen(url: str) -> bool:
        return requests.get(url, timeout=30).status_code == 200

    for pair in pairs:  # (every broker's metadata sees the groups: the leader's placement reads them)
        for broker in (b1, b2):
            wait_for(partial(group_seen, f"{broker.web_url}/admin/v2/namespaces/{pair[1]}/antiAffinity"), WAIT_S,
                     "the group")
    client = pulsar.Client(service_urls(b1, b2), operation_timeout_seconds=30)
    try:
        for first, second in pairs:
            client.create_producer(f"persistent://{first}/t").send(b"x")
            client.create_producer(f"persistent://{second}/t").send(b"x")
            with brokers.zk() as zk:
                owners_first = brokers.owners(zk, first)
                owners_second = brokers.owners(zk, second)
            assert len(owners_first) == 1 and len(owners_second) == 1
            (one,), (two,) = owners_first.values(), owners_second.values()
            assert one["httpUrl"] != two["httpUrl"], (first, second)
    finally:
        client.close()


class PacedSends:
    """A thread sending to ``producer`` about 20 messages a second until stopped: a broker with some message rate in
    its load report, far from overloaded. (The pacing is the load's, not a wait for anything.)"""

    def __init__(self, producer: pulsar.Producer) -> None:
        self.producer = producer
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(0.05):
            self.producer.send_async(b"load", lambda *_: None)

    def __enter__(self) -> PacedSends:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join(30)


def test_failure_domains_place_a_groups_namespaces_one_per_domain(brokers: Brokers) -> None:
    """failureDomainsEnabled: two namespaces of one anti-affinity group on three brokers, in two failure domains set
    over REST (the first namespace's broker and an idle one in "near", a busier one alone in "far"). The second
    namespace goes to "far": the domains come first (LoadManagerShared.filterDomainsNotHavingLeastNumberAntiAffinity
    Namespaces). Without them, the idle broker of "near" serves none of the group and has the least message rate:
    it would take it, every time. The brokers start with failureDomainsEnabled off; it is turned on while they run
    (update-dynamic-config), before the second namespace is placed."""
    brokers.settings.update({"failureDomainsEnabled": "false", "loadBalancerSheddingEnabled": "false",
                             "loadBalancerAutoBundleSplitEnabled": "false"})
    started = brokers.start(3)
    cluster = http_json(f"{started[0].web_url}/admin/v2/clusters")[0]
    client = pulsar.Client(service_urls(*started), operation_timeout_seconds=30)
    try:
        # The busy broker: the owner of a topic that gets a steady trickle of messages.
        busy_topic = f"persistent://public/default/busy-{os.urandom(3).hex()}"
        busy_producer = client.create_producer(busy_topic, batching_enabled=False)
        busy_producer.send(b"x")
        busy_web = wait_for(lambda: owner_web(brokers, range_of(busy_topic)), WAIT_S, "the busy topic's owner")
        busy = next(b for b in started if b.web_url == busy_web)
        with PacedSends(busy_producer):
            def rate_reported() -> bool:
                with brokers.zk() as zk:
                    report = json.loads(zk.get(f"/loadbalance/brokers/{broker_id(busy)}")[0])
                return float(report.get("msgRateIn") or 0) > 0

            wait_for(rate_reported, WAIT_S, "the busy broker's load report to show its message rate")
            tag = os.urandom(3).hex()
            first, second = f"public/fd-{tag}-1", f"public/fd-{tag}-2"
            for ns in (first, second):
                requests.put(f"{started[0].web_url}/admin/v2/namespaces/{ns}", json={"bundles": {"numBundles": 1}},
                             timeout=30).raise_for_status()
                answer = requests.post(f"{started[0].web_url}/admin/v2/namespaces/{ns}/antiAffinity",
                                       data=f"group-{tag}", timeout=30)
                assert answer.status_code == 204, answer.text
            for b in started:  # (every broker's metadata sees the group: the leader's placement reads it)
                wait_for(partial(http_ok, f"{b.web_url}/admin/v2/namespaces/{second}/antiAffinity"), WAIT_S,
                         "the group")
            client.create_producer(f"persistent://{first}/t").send(b"x")
            with brokers.zk() as zk:
                (one,) = brokers.owners(zk, first).values()
            near_web = str(one["httpUrl"])
            assert near_web != busy.web_url  # (no domains yet: the least message rate)
            idle = next(b for b in started if b.web_url not in (near_web, busy.web_url))
            near = next(b for b in started if b.web_url == near_web)
            domains = {"near": {"brokers": sorted([broker_id(near), broker_id(idle)])},
                       "far": {"brokers": [broker_id(busy)]}}
            for name, doc in domains.items():
                answer = requests.post(f"{started[1].web_url}/admin/v2/clusters/{cluster}/failureDomains/{name}",
                                       json=doc, timeout=30)
                assert answer.status_code == 204, answer.text
            for b in started:  # (each broker's metadata cache sees the domains another broker wrote)
                wait_for(partial(same_json, f"{b.web_url}/admin/v2/clusters/{cluster}/failureDomains", domains),
                         WAIT_S, "the failure domains")
            config = "/admin/v2/brokers/configuration"
            answer = requests.post(f"{started[2].web_url}{config}/failureDomainsEnabled/true", timeout=30)
            assert answer.status_code == 200, answer.text
            for b in started:
                wait_for(partial(runtime_is, f"{b.web_url}{config}/runtime", "failureDomainsEnabled", "true"),
                         WAIT_S, "failure domains on")
            client.create_producer(f"persistent://{second}/t").send(b"x")
            with brokers.zk() as zk:
                (two,) = brokers.owners(zk, second).values()
            assert two["httpUrl"] == busy.web_url, (two["httpUrl"], busy.web_url, idle.web_url)
    finally:
        client.close()


def runtime_is(url: str, key: str, value: str) -> bool:
    return bool(http_json(url)[key] == value)


def same_json(url: str, expected: object) -> bool:
    return bool(http_json(url) == expected)


def broker_id(broker: BrokerInfo) -> str:
    return broker.web_url.removeprefix("http://")


def range_of(topic: str) -> str:
    """The range of the public/default bundle (four, the default) that ``topic`` falls in."""
    h = hash_topic(topic)
    return next(range_name(lo, up) for lo, up in four_bundles() if lo <= h < up or (up == 0xFFFFFFFF and h == up))


def test_isolation_policy_keeps_a_namespace_on_its_primary_broker(brokers: Brokers) -> None:
    """Two "hosts" (127.0.0.1 and 127.0.0.2): a policy makes 127.0.0.2 the primary of public/iso-* (127.0.0.1 its
    secondary, min_limit 1). Every bundle of the isolated namespace goes to 127.0.0.2, every bundle of another
    namespace to 127.0.0.1 (the only shared broker); when 127.0.0.2 dies, the secondary takes the isolated one."""
    b1 = brokers.start(1)[0]
    b2 = start_broker(brokers.cluster, {**brokers.settings, "advertisedAddress": "127.0.0.2"},
                      f"{brokers.chroot[1:]}-host2", bind_address="127.0.0.2")
    brokers.started.append(b2)
    assert "127.0.0.2" in b2.web_url
    cluster = http_json(f"{b1.web_url}/admin/v2/clusters")[0]
    tag = os.urandom(3).hex()
    policy: dict[str, Any] = {
        "namespaces": [f"public/iso-{tag}.*"], "primary": ["127\\.0\\.0\\.2"], "secondary": ["127\\.0\\.0\\.1"],
        "auto_failover_policy": {"policy_type": "min_available",
                                 "parameters": {"min_limit": "1", "usage_threshold": "80"}}}
    answer = requests.post(f"{b1.web_url}/admin/v2/clusters/{cluster}/namespaceIsolationPolicies/iso", json=policy,
                           timeout=30)
    assert answer.status_code == 204, answer.text
    for b in (b1, b2):  # (each broker's metadata has it: the leader's placement reads it)
        wait_for(partial(http_ok, f"{b.web_url}/admin/v2/clusters/{cluster}/namespaceIsolationPolicies/iso"),
                 WAIT_S, "the policy")
    isolated, free = f"public/iso-{tag}", f"public/free-{tag}"
    for ns in (isolated, free):
        requests.put(f"{b1.web_url}/admin/v2/namespaces/{ns}", timeout=30).raise_for_status()
    client = pulsar.Client(service_urls(b1, b2), operation_timeout_seconds=30)
    try:
        producers = {}
        for ns in (isolated, free):
            for lo, up in four_bundles():
                topic = topic_in(lo, up, "iso", namespace=ns)[0]
                producers[topic] = client.create_producer(topic)
                producers[topic].send(b"x")
        with brokers.zk() as zk:
            on_isolated = {str(o["httpUrl"]) for o in brokers.owners(zk, isolated).values()}
            on_free = {str(o["httpUrl"]) for o in brokers.owners(zk, free).values()}
        assert on_isolated == {b2.web_url} and on_free == {b1.web_url}
        # The primary dies: fewer primaries than min_limit, so the secondary is a candidate now.
        brokers.kill(b2)
        for topic, producer in producers.items():
            if topic.startswith(f"persistent://{isolated}/"):
                # (a send may time out while the dead broker's session lasts and the client backs off: again)
                wait_for(partial(sent, producer), 3 * WAIT_S, f"a send to {topic} after the primary died")

        def on_b1() -> bool:
            with brokers.zk() as zk:
                owners = brokers.owners(zk, isolated).values()
            return len(owners) == 4 and {str(o["httpUrl"]) for o in owners} == {b1.web_url}

        wait_for(on_b1, WAIT_S, "the secondary to take the isolated namespace")
    finally:
        client.close()


def sent(producer: pulsar.Producer) -> bool:
    try:
        producer.send(b"after")
    except pulsar.Timeout:
        return False
    return True


def http_ok(url: str) -> bool:
    return requests.get(url, timeout=30).status_code == 200


def test_placement_weights_changed_while_the_brokers_run(brokers: Brokers) -> None:
    """The placement's resource weights are dynamic settings (update-dynamic-config), as Pulsar's: LeastResourceUsage
    WithWeight placement, started with every weight 0 (no broker looks busier than another: each choice a coin
    toss); a broker's bandwidth in is then overloaded by a producer (a tiny NIC), and the bandwidth-in weight set to
    1 through the other broker. Six new namespaces, one bundle each, all go to the idle broker (with the weight still
    0 in the leader's placement, 1 chance in 64)."""
    brokers.settings.update({
        **LEAST_RESOURCE_USAGE, "loadBalancerSheddingEnabled": "false", "loadBalancerAutoBundleSplitEnabled": "false",
        "loadBalancerOverrideBrokerNicSpeedGbps": "0.00001", "loadBalancerHistoryResourcePercentage": "0",
        "loadBalancerCPUResourceWeight": "0", "loadBalancerBandwidthInResourceWeight": "0",
        "loadBalancerBandwidthOutResourceWeight": "0"})
    b1, b2 = brokers.start(2)
    client = pulsar.Client(service_urls(b1, b2), operation_timeout_seconds=30)
    try:
        busy_topic = f"persistent://public/default/busy-{os.urandom(3).hex()}"
        keep_data(client, busy_topic)
        busy_web = wait_for(lambda: owner_web(brokers, range_of(busy_topic)), WAIT_S, "the busy topic's owner")
        busy = next(b for b in (b1, b2) if b.web_url == busy_web)
        idle = b2 if busy is b1 else b1
        checker = Checker()
        with Producing(open_producer(client, busy_topic), checker, "busy") as producing:
            def overloaded_reported() -> bool:
                with brokers.zk() as zk:
                    report = json.loads(zk.get(f"/loadbalance/brokers/{broker_id(busy)}")[0])
                usage = report["bandwidthIn"]
                return float(usage["limit"]) > 0 and float(usage["usage"]) > float(usage["limit"])

            wait_for(overloaded_reported, WAIT_S, "the busy broker's report to show its bandwidth in overloaded")
            setting = "/admin/v2/brokers/configuration/loadBalancerBandwidthInResourceWeight"
            answer = requests.post(f"{idle.web_url}{setting}/1", timeout=30)
            assert answer.status_code == 200, answer.text
            leader = leader_of(brokers)
            wait_for(partial(runtime_is, f"{leader.web_url}/admin/v2/brokers/configuration/runtime",
                             "loadBalancerBandwidthInResourceWeight", "1.0"), WAIT_S, "the leader to apply the weight")
            tag = os.urandom(3).hex()
            for i in range(6):
                ns = f"public/weights-{tag}-{i}"
                requests.put(f"{b1.web_url}/admin/v2/namespaces/{ns}", json={"bundles": {"numBundles": 1}},
                             timeout=30).raise_for_status()
                client.create_producer(f"persistent://{ns}/t").send(b"x")
                with brokers.zk() as zk:
                    (owner,) = brokers.owners(zk, ns).values()
                assert owner["httpUrl"] == idle.web_url, (i, ns)
            producing.finish()
        assert not checker.failed, dict(list(checker.failed.items())[:3])
    finally:
        client.close()
