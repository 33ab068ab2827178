package compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.net.HttpURLConnection;
import java.net.URI;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.admin.PulsarAdmin;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageRoutingMode;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.Schema;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.SubscriptionType;
import org.apache.pulsar.client.api.transaction.Transaction;
import org.apache.pulsar.common.policies.data.TopicStats;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;

/**
 * Scenario cluster_lookup: two brokers in cluster mode (one ZooKeeper, two bookies) started by compat/run.py. The
 * client and the admin client are given only the first broker's URLs and must follow lookups (and the admin's 307
 * redirects) to whichever broker owns each topic's bundle.
 */
class ClusterTest {
    static final int TOPICS = 8;
    static final int PER_TOPIC = 5;
    static final int PARTITIONS = 4;
    static final int PARTITIONED_MESSAGES = 20;

    @Test
    void cluster_lookup() throws Exception {
        String url = System.getenv("PULSAR_CLUSTER_URL");
        Assumptions.assumeTrue(url != null && !url.isEmpty(),
                "not covered: compat/run.py started no cluster here (no java or no BookKeeper jars)");
        String http = Env.need("PULSAR_CLUSTER_HTTP");
        String url2 = Env.need("PULSAR_CLUSTER_URL2");
        String http2 = Env.need("PULSAR_CLUSTER_HTTP2");
        try (PulsarClient client = PulsarClient.builder().serviceUrl(url).operationTimeout(30, TimeUnit.SECONDS)
                     .build();
             PulsarAdmin admin = PulsarAdmin.builder().serviceHttpUrl(http)
                     .connectionTimeout(5, TimeUnit.SECONDS).readTimeout(30, TimeUnit.SECONDS)
                     .requestTimeout(60, TimeUnit.SECONDS).build()) {
            List<String> topics = new ArrayList<>();
            for (int i = 0; i < TOPICS; i++) {
                topics.add(Env.topic("cluster"));
            }
            for (String t : topics) {
                try (Producer<String> p = client.newProducer(Schema.STRING).topic(t).enableBatching(false).create()) {
                    ClientTest.send(p, t + "/", PER_TOPIC);
                }
            }
            for (String t : topics) {
                try (Consumer<String> c = client.newConsumer(Schema.STRING).topic(t).subscriptionName("s")
                        .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe()) {
                    assertEquals(ClientTest.expected(t + "/", PER_TOPIC), ClientTest.receive(c, PER_TOPIC), t);
                }
            }

            String pt = Env.topic("cluster-part");
            admin.topics().createPartitionedTopic(pt, PARTITIONS);
            assertEquals(PARTITIONS, client.getPartitionsForTopic(pt).get(30, TimeUnit.SECONDS).size());
            try (Consumer<String> c = client.newConsumer(Schema.STRING).topic(pt).subscriptionName("s")
                         .subscriptionType(SubscriptionType.Shared)
                         .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe();
                 Producer<String> p = client.newProducer(Schema.STRING).topic(pt).enableBatching(false)
                         .messageRoutingMode(MessageRoutingMode.RoundRobinPartition).create()) {
                ClientTest.send(p, "p", PARTITIONED_MESSAGES);
                List<String> got = ClientTest.receive(c, PARTITIONED_MESSAGES);
                assertEquals(new HashSet<>(ClientTest.expected("p", PARTITIONED_MESSAGES)), new HashSet<>(got));
                assertEquals(PARTITIONED_MESSAGES, got.size());
            }

            // Who owns what, asked of the first broker only: both brokers own some of these topics.
            Map<String, String> owner = new TreeMap<>();
            for (String t : topics) {
                owner.put(t, admin.lookups().lookupTopic(t));
            }
            Map<String, String> partitionOwners = admin.lookups().lookupPartitionedTopic(pt);
            assertEquals(PARTITIONS, partitionOwners.size(), partitionOwners.toString());
            owner.putAll(partitionOwners);
            assertEquals(Set.of(url, url2), new HashSet<>(owner.values()), owner.toString());

            // Admin on a topic the second broker owns, through the first broker's web URL: it answers 307 to the
            // owner, which pulsar-client-admin follows.
            String onSecond = topics.stream().filter(t -> url2.equals(owner.get(t))).findFirst()
                    .orElse(partitionOwners.entrySet().stream().filter(e -> url2.equals(e.getValue()))
                            .map(Map.Entry::getKey).findFirst().orElseThrow());
            String path = "/admin/v2/persistent/" + onSecond.substring("persistent://".length()) + "/stats";
            HttpURLConnection raw = (HttpURLConnection) URI.create(http + path).toURL().openConnection();
            raw.setInstanceFollowRedirects(false);
            try {
                assertEquals(307, raw.getResponseCode(), path);
                String location = raw.getHeaderField("Location");
                assertNotNull(location);
                assertTrue(location.startsWith(http2), location);
            } finally {
                raw.disconnect();
            }
            TopicStats stats = admin.topics().getStats(onSecond);
            assertTrue(stats.getSubscriptions().containsKey("s"), stats.getSubscriptions().keySet().toString());
        }
    }

    /**
     * Scenario cluster_transactions: a transaction whose coordinator (the owner of
     * transaction_coordinator_assign-partition-0) is on one broker produces to a topic of each broker and acknowledges
     * on a subscription of the other broker's topic; abort then commit, seen by consumers of both.
     */
    @Test
    void cluster_transactions() throws Exception {
        String url = System.getenv("PULSAR_CLUSTER_URL");
        Assumptions.assumeTrue(url != null && !url.isEmpty(),
                "not covered: compat/run.py started no cluster here (no java or no BookKeeper jars)");
        String http = Env.need("PULSAR_CLUSTER_HTTP");
        String url2 = Env.need("PULSAR_CLUSTER_URL2");
        try (PulsarClient client = PulsarClient.builder().serviceUrl(url).enableTransaction(true)
                     .operationTimeout(30, TimeUnit.SECONDS).build();
             PulsarAdmin admin = PulsarAdmin.builder().serviceHttpUrl(http)
                     .connectionTimeout(5, TimeUnit.SECONDS).readTimeout(30, TimeUnit.SECONDS)
                     .requestTimeout(60, TimeUnit.SECONDS).build()) {
            String coordinator = admin.lookups()
                    .lookupTopic("persistent://pulsar/system/transaction_coordinator_assign-partition-0");
            String other = coordinator.equals(url) ? url2 : url;
            String in = topicOn(admin, other, "cluster-txn-in");
            String outThere = topicOn(admin, other, "cluster-txn-out");
            String outHere = topicOn(admin, coordinator, "cluster-txn-out");
            try (Producer<String> input = client.newProducer(Schema.STRING).topic(in).enableBatching(false).create();
                 Consumer<String> work = ClientTest.txnConsumer(client, in, "work", SubscriptionType.Shared);
                 Consumer<String> watchThere = ClientTest.txnConsumer(client, outThere, "watch",
                         SubscriptionType.Exclusive);
                 Consumer<String> watchHere = ClientTest.txnConsumer(client, outHere, "watch",
                         SubscriptionType.Exclusive);
                 Producer<String> there = ClientTest.txnProducer(client, outThere);
                 Producer<String> here = ClientTest.txnProducer(client, outHere)) {
                input.send("a");

                Message<String> a = work.receive(30, TimeUnit.SECONDS);
                assertNotNull(a);
                Transaction aborted = client.newTransaction().withTransactionTimeout(1, TimeUnit.MINUTES).build()
                        .get(30, TimeUnit.SECONDS);
                there.newMessage(aborted).value("aborted").send();
                here.newMessage(aborted).value("aborted").send();
                work.acknowledgeAsync(a.getMessageId(), aborted).get(30, TimeUnit.SECONDS);
                aborted.abort().get(30, TimeUnit.SECONDS);
                Message<String> again = work.receive(30, TimeUnit.SECONDS);
                assertNotNull(again, "the input acknowledged by the aborted transaction came back");
                assertEquals("a", again.getValue());

                Transaction committed = client.newTransaction().withTransactionTimeout(1, TimeUnit.MINUTES).build()
                        .get(30, TimeUnit.SECONDS);
                there.newMessage(committed).value("committed").send();
                here.newMessage(committed).value("committed").send();
                work.acknowledgeAsync(again.getMessageId(), committed).get(30, TimeUnit.SECONDS);
                assertNull(watchThere.receive(500, TimeUnit.MILLISECONDS), "uncommitted message seen");
                committed.commit().get(30, TimeUnit.SECONDS);
                assertEquals("committed", watchThere.receive(30, TimeUnit.SECONDS).getValue());
                assertEquals("committed", watchHere.receive(30, TimeUnit.SECONDS).getValue());
                assertNull(watchThere.receive(500, TimeUnit.MILLISECONDS), "aborted message seen");
                assertNull(watchHere.receive(500, TimeUnit.MILLISECONDS), "aborted message seen");
                assertEquals(0, admin.topics().getStats(in).getSubscriptions().get("work").getMsgBacklog(),
                        "input acknowledged by the commit");
            }
        }
    }

    /** A new topic that {@code broker} owns (its bundle is placed by the lookup; names landing elsewhere skipped). */
    static String topicOn(PulsarAdmin admin, String broker, String prefix) throws Exception {
        for (int i = 0; i < 40; i++) {
            String t = Env.topic(prefix);
            if (broker.equals(admin.lookups().lookupTopic(t))) {
                return t;
            }
        }
        throw new AssertionError("no topic placed on " + broker);
    }
}
