package compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.regex.Pattern;
import org.apache.pulsar.client.admin.PulsarAdmin;
import org.apache.pulsar.client.api.AuthenticationFactory;
import org.apache.pulsar.client.api.CompressionType;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.DeadLetterPolicy;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.PulsarClientException;
import org.apache.pulsar.client.api.Reader;
import org.apache.pulsar.client.api.Schema;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.SubscriptionType;
import org.apache.pulsar.client.api.TableView;
import org.apache.pulsar.client.api.transaction.Transaction;
import org.apache.pulsar.client.impl.ProducerBuilderImpl;
import org.apache.pulsar.common.policies.data.AutoSubscriptionCreationOverride;
import org.apache.pulsar.common.policies.data.SubscriptionStats;
import org.apache.pulsar.common.policies.data.TopicStats;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/** The client scenarios of compat/scenarios.py; each method is named after its scenario id. */
class ClientTest {
    static PulsarClient client;
    static PulsarAdmin admin;

    @BeforeAll
    static void setUp() throws Exception {
        client = Env.client();
        admin = Env.admin();
    }

    @AfterAll
    static void tearDown() throws Exception {
        client.close();
        admin.close();
    }

    static Consumer<String> subscribe(String topic, String sub, SubscriptionType type) throws PulsarClientException {
        return client.newConsumer(Schema.STRING).topic(topic).subscriptionName(sub).subscriptionType(type)
                .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe();
    }

    static Producer<String> producer(String topic) throws PulsarClientException {
        return client.newProducer(Schema.STRING).topic(topic).enableBatching(false).create();
    }

    static List<MessageId> send(Producer<String> p, String prefix, int n) throws PulsarClientException {
        List<MessageId> ids = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            ids.add(p.send(prefix + i));
        }
        return ids;
    }

    /** Receive exactly n messages (acking them), failing after a timeout. */
    static List<String> receive(Consumer<String> c, int n) throws PulsarClientException {
        List<String> got = new ArrayList<>();
        while (got.size() < n) {
            Message<String> m = c.receive(10, TimeUnit.SECONDS);
            if (m == null) {
                fail("received " + got.size() + " of " + n + " messages: " + got);
            }
            got.add(m.getValue());
            c.acknowledge(m);
        }
        return got;
    }

    static List<String> expected(String prefix, int n) {
        List<String> out = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            out.add(prefix + i);
        }
        return out;
    }

    @Test
    void connect_lookup() throws Exception {
        String t = Env.topic("lookup");
        try (Producer<String> p = producer(t); Consumer<String> c = subscribe(t, "s", SubscriptionType.Exclusive)) {
            send(p, "m", 5);
            assertEquals(expected("m", 5), receive(c, 5));
        }
        assertEquals(List.of(t), client.getPartitionsForTopic(t).get(10, TimeUnit.SECONDS));
        assertTrue(admin.lookups().lookupTopic(t).startsWith("pulsar://"));
    }

    @Test
    void http_service_url() throws Exception {
        String t = Env.topic("http");
        try (PulsarClient http = PulsarClient.builder().serviceUrl(Env.HTTP).operationTimeout(15, TimeUnit.SECONDS).build();
             Producer<String> p = http.newProducer(Schema.STRING).topic(t).create();
             Consumer<String> c = http.newConsumer(Schema.STRING).topic(t).subscriptionName("s")
                     .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe()) {
            p.send("over-http");
            assertEquals(List.of("over-http"), receive(c, 1));
        }
    }

    @Test
    void sub_exclusive() throws Exception {
        String t = Env.topic("excl");
        try (Producer<String> p = producer(t); Consumer<String> c = subscribe(t, "s", SubscriptionType.Exclusive)) {
            assertThrows(PulsarClientException.ConsumerBusyException.class,
                    () -> subscribe(t, "s", SubscriptionType.Exclusive));
            send(p, "m", 10);
            assertEquals(expected("m", 10), receive(c, 10));
        }
    }

    @Test
    void sub_shared() throws Exception {
        String t = Env.topic("shared");
        try (Producer<String> p = producer(t);
             Consumer<String> c1 = client.newConsumer(Schema.STRING).topic(t).subscriptionName("s")
                     .subscriptionType(SubscriptionType.Shared).receiverQueueSize(5).subscribe();
             Consumer<String> c2 = client.newConsumer(Schema.STRING).topic(t).subscriptionName("s")
                     .subscriptionType(SubscriptionType.Shared).receiverQueueSize(5).subscribe()) {
            send(p, "m", 40);
            Set<String> got = new HashSet<>();
            int[] per = new int[2];
            while (got.size() < 40) {
                boolean any = false;
                for (int i = 0; i < 2; i++) {
                    Message<String> m = (i == 0 ? c1 : c2).receive(200, TimeUnit.MILLISECONDS);
                    if (m != null) {
                        any = true;
                        per[i]++;
                        got.add(m.getValue());
                        (i == 0 ? c1 : c2).acknowledge(m);
                    }
                }
                if (!any && got.size() < 40 && per[0] + per[1] > 0) {
                    Message<String> m = c1.receive(5, TimeUnit.SECONDS);
                    if (m == null) {
                        fail("shared: got " + got.size() + " of 40");
                    }
                    got.add(m.getValue());
                    per[0]++;
                    c1.acknowledge(m);
                }
            }
            assertEquals(new HashSet<>(expected("m", 40)), got);
            assertTrue(per[0] > 0 && per[1] > 0, "both consumers got messages: " + per[0] + "/" + per[1]);
        }
    }

    @Test
    void sub_failover() throws Exception {
        String t = Env.topic("failover");
        try (Producer<String> p = producer(t);
             Consumer<String> c1 = client.newConsumer(Schema.STRING).topic(t).subscriptionName("s")
                     .consumerName("a").subscriptionType(SubscriptionType.Failover).subscribe();
             Consumer<String> c2 = client.newConsumer(Schema.STRING).topic(t).subscriptionName("s")
                     .consumerName("b").subscriptionType(SubscriptionType.Failover).subscribe()) {
            send(p, "m", 10);
            // which one is active, the topic name's hash decides (as in Apache Pulsar): ask both in turn
            Consumer<String> active = null;
            Consumer<String> other = null;
            long deadline = System.currentTimeMillis() + 10_000;
            while (active == null && System.currentTimeMillis() < deadline) {
                if (c1.receive(100, TimeUnit.MILLISECONDS) != null) {
                    active = c1;
                    other = c2;
                } else if (c2.receive(100, TimeUnit.MILLISECONDS) != null) {
                    active = c2;
                    other = c1;
                }
            }
            assertNotNull(active, "one failover consumer is active");
            // the active consumer gets everything, the other nothing
            receive(active, 9);
            assertNull(other.receive(500, TimeUnit.MILLISECONDS));
        }
    }

    @Test
    void sub_key_shared() throws Exception {
        String t = Env.topic("keyshared");
        try (Producer<String> p = producer(t);
             Consumer<String> c1 = subscribe(t, "s", SubscriptionType.Key_Shared);
             Consumer<String> c2 = subscribe(t, "s", SubscriptionType.Key_Shared)) {
            for (int i = 0; i < 40; i++) {
                p.newMessage().key("k" + (i % 8)).value("m" + i).send();
            }
            Map<String, Integer> owner = new HashMap<>();
            int got = 0;
            while (got < 40) {
                boolean any = false;
                for (int i = 0; i < 2; i++) {
                    Consumer<String> c = i == 0 ? c1 : c2;
                    Message<String> m = c.receive(300, TimeUnit.MILLISECONDS);
                    if (m != null) {
                        any = true;
                        got++;
                        Integer prev = owner.putIfAbsent(m.getKey(), i);
                        assertTrue(prev == null || prev == i, "key " + m.getKey() + " went to two consumers");
                        c.acknowledge(m);
                    }
                }
                if (!any) {
                    fail("key_shared: got " + got + " of 40");
                }
            }
        }
    }

    @Test
    void batching_codecs() throws Exception {
        for (CompressionType codec : CompressionType.values()) {
            String t = Env.topic("batch-" + codec.name().toLowerCase());
            try (Producer<String> p = client.newProducer(Schema.STRING).topic(t).compressionType(codec)
                    .enableBatching(true).batchingMaxMessages(10).batchingMaxPublishDelay(50, TimeUnit.MILLISECONDS)
                    .create();
                 Consumer<String> c = subscribe(t, "s", SubscriptionType.Exclusive)) {
                List<CompletableFuture<MessageId>> fs = new ArrayList<>();
                for (int i = 0; i < 25; i++) {
                    fs.add(p.sendAsync("payload-payload-payload-" + i));
                }
                p.flush();
                CompletableFuture.allOf(fs.toArray(new CompletableFuture[0])).get(15, TimeUnit.SECONDS);
                assertEquals(expected("payload-payload-payload-", 25), receive(c, 25), codec.name());
            }
        }
    }

    @Test
    void partitioned() throws Exception {
        String t = Env.topic("part");
        admin.topics().createPartitionedTopic(t, 3);
        assertEquals(3, client.getPartitionsForTopic(t).get(10, TimeUnit.SECONDS).size());
        try (Producer<String> p = client.newProducer(Schema.STRING).topic(t).create();
             Consumer<String> c = subscribe(t, "s", SubscriptionType.Shared)) {
            for (int i = 0; i < 30; i++) {
                p.newMessage().key("k" + i).value("m" + i).send();
            }
            assertEquals(new HashSet<>(expected("m", 30)), new HashSet<>(receive(c, 30)));
        }
        Set<Integer> parts = new HashSet<>();
        admin.topics().getPartitionedStats(t, true).getPartitions().forEach((name, st) -> {
            if (st.getMsgInCounter() > 0) {
                parts.add(1);
            }
        });
        assertEquals(1, parts.size());
    }

    @Test
    void partitions_no_autocreate() throws Exception {
        String missing = Env.topic("no-auto");
        ExecutionException e = assertThrows(ExecutionException.class,
                () -> client.getPartitionsForTopic(missing, false).get(15, TimeUnit.SECONDS));
        assertTrue(e.getCause() instanceof PulsarClientException.NotFoundException
                || e.getCause() instanceof PulsarClientException.TopicDoesNotExistException,
                "not found expected, got " + e.getCause());
        assertTrue(admin.topics().getList("public/default").stream().noneMatch(x -> x.startsWith(missing)),
                "the lookup must not create the topic");
        String part = Env.topic("no-auto-part");
        admin.topics().createPartitionedTopic(part, 2);
        assertEquals(2, client.getPartitionsForTopic(part, false).get(15, TimeUnit.SECONDS).size());
    }

    @Test
    void reader_earliest() throws Exception {
        String t = Env.topic("r-earliest");
        try (Producer<String> p = producer(t)) {
            send(p, "m", 5);
        }
        try (Reader<String> r = client.newReader(Schema.STRING).topic(t).startMessageId(MessageId.earliest).create()) {
            for (String want : expected("m", 5)) {
                Message<String> m = r.readNext(10, TimeUnit.SECONDS);
                assertNotNull(m);
                assertEquals(want, m.getValue());
            }
            assertTrue(!r.hasMessageAvailable());
        }
    }

    @Test
    void reader_latest() throws Exception {
        String t = Env.topic("r-latest");
        try (Producer<String> p = producer(t)) {
            send(p, "old", 3);
            try (Reader<String> r = client.newReader(Schema.STRING).topic(t).startMessageId(MessageId.latest).create()) {
                p.send("new");
                Message<String> m = r.readNext(10, TimeUnit.SECONDS);
                assertNotNull(m);
                assertEquals("new", m.getValue());
            }
        }
    }

    @Test
    void reader_message_id() throws Exception {
        String t = Env.topic("r-id");
        List<MessageId> ids;
        try (Producer<String> p = producer(t)) {
            ids = send(p, "m", 5);
        }
        try (Reader<String> r = client.newReader(Schema.STRING).topic(t).startMessageId(ids.get(2)).create()) {
            assertEquals("m3", r.readNext(10, TimeUnit.SECONDS).getValue());
        }
        try (Reader<String> r = client.newReader(Schema.STRING).topic(t).startMessageId(ids.get(2))
                .startMessageIdInclusive().create()) {
            assertEquals("m2", r.readNext(10, TimeUnit.SECONDS).getValue());
        }
    }

    @Test
    void reader_rollback() throws Exception {
        String t = Env.topic("r-rollback");
        try (Producer<String> p = producer(t)) {
            send(p, "m", 3);
        }
        // one hour back covers every message; a broker ignoring the field starts at latest and reads nothing
        try (Reader<String> r = client.newReader(Schema.STRING).topic(t)
                .startMessageFromRollbackDuration(1, TimeUnit.HOURS).create()) {
            Message<String> m = r.readNext(10, TimeUnit.SECONDS);
            assertNotNull(m, "the reader started at latest: start_message_rollback_duration_sec ignored");
            assertEquals("m0", m.getValue());
        }
    }

    @Test
    void seek() throws Exception {
        String t = Env.topic("seek");
        try (Producer<String> p = producer(t); Consumer<String> c = subscribe(t, "s", SubscriptionType.Exclusive)) {
            List<MessageId> ids = send(p, "m", 5);
            receive(c, 5);
            c.seek(0L);
            assertEquals("m0", c.receive(10, TimeUnit.SECONDS).getValue());
            c.seek(ids.get(1));
            // the broker resumes at m1; the client drops what is not after the seek id (Go does the same)
            assertEquals("m2", c.receive(10, TimeUnit.SECONDS).getValue());
            c.seek(MessageId.latest);
            p.send("after");
            assertEquals("after", c.receive(10, TimeUnit.SECONDS).getValue());
        }
    }

    @Test
    void negative_ack() throws Exception {
        String t = Env.topic("nack");
        try (Producer<String> p = producer(t);
             Consumer<String> c = client.newConsumer(Schema.STRING).topic(t).subscriptionName("s")
                     .subscriptionType(SubscriptionType.Shared)
                     .negativeAckRedeliveryDelay(100, TimeUnit.MILLISECONDS).subscribe()) {
            p.send("x");
            Message<String> m = c.receive(10, TimeUnit.SECONDS);
            assertEquals(0, m.getRedeliveryCount());
            c.negativeAcknowledge(m);
            Message<String> again = c.receive(10, TimeUnit.SECONDS);
            assertNotNull(again);
            assertEquals("x", again.getValue());
            assertEquals(1, again.getRedeliveryCount());
            c.acknowledge(again);
        }
    }

    @Test
    void dlq() throws Exception {
        String t = Env.topic("dlq");
        try (Producer<String> p = producer(t);
             Consumer<String> c = client.newConsumer(Schema.STRING).topic(t).subscriptionName("s")
                     .subscriptionType(SubscriptionType.Shared)
                     .negativeAckRedeliveryDelay(100, TimeUnit.MILLISECONDS)
                     .deadLetterPolicy(DeadLetterPolicy.builder().maxRedeliverCount(1).build()).subscribe();
             Consumer<String> dead = client.newConsumer(Schema.STRING).topic(t + "-s-DLQ").subscriptionName("d")
                     .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe()) {
            p.send("poison");
            for (int i = 0; i < 2; i++) {
                Message<String> m = c.receive(10, TimeUnit.SECONDS);
                assertNotNull(m, "delivery " + i);
                c.negativeAcknowledge(m);
            }
            Message<String> d = dead.receive(15, TimeUnit.SECONDS);
            assertNotNull(d, "nothing on the dead-letter topic");
            assertEquals("poison", d.getValue());
        }
    }

    @Test
    void retry_topic() throws Exception {
        String t = Env.topic("retry");
        try (Producer<String> p = producer(t);
             Consumer<String> c = client.newConsumer(Schema.STRING).topic(t).subscriptionName("s")
                     .subscriptionType(SubscriptionType.Shared).enableRetry(true)
                     .deadLetterPolicy(DeadLetterPolicy.builder().maxRedeliverCount(3).build()).subscribe()) {
            p.send("later");
            Message<String> m = c.receive(10, TimeUnit.SECONDS);
            long t0 = System.currentTimeMillis();
            c.reconsumeLater(m, 1, TimeUnit.SECONDS);
            Message<String> again = c.receive(15, TimeUnit.SECONDS);
            assertNotNull(again, "not redelivered through the retry topic");
            assertEquals("later", again.getValue());
            assertEquals("1", again.getProperty("RECONSUMETIMES"));
            assertTrue(System.currentTimeMillis() - t0 >= 800, "retry came before its delay");
            c.acknowledge(again);
        }
    }

    @Test
    void delayed_delivery() throws Exception {
        String t = Env.topic("delayed");
        try (Producer<String> p = producer(t); Consumer<String> c = subscribe(t, "s", SubscriptionType.Shared)) {
            long t0 = System.currentTimeMillis();
            p.newMessage().value("late").deliverAfter(2, TimeUnit.SECONDS).send();
            p.send("now");
            assertEquals("now", c.receive(10, TimeUnit.SECONDS).getValue());
            Message<String> m = c.receive(10, TimeUnit.SECONDS);
            assertNotNull(m);
            assertEquals("late", m.getValue());
            assertTrue(System.currentTimeMillis() - t0 >= 1800, "delivered too early");
        }
    }

    static String big(int n, char seed) {
        StringBuilder sb = new StringBuilder(n);
        for (int i = 0; i < n; i++) {
            sb.append((char) (seed + (i % 23)));
        }
        return sb.toString();
    }

    @Test
    void chunking() throws Exception {
        String t = Env.topic("chunk");
        try (Producer<String> p = client.newProducer(Schema.STRING).topic(t).enableBatching(false)
                .enableChunking(true).chunkMaxMessageSize(1000).create();
             Consumer<String> c = subscribe(t, "s", SubscriptionType.Exclusive)) {
            String payload = big(10_000, 'a');
            p.send(payload);
            p.send("small");
            assertEquals(List.of(payload, "small"), receive(c, 2));
        }
    }

    @Test
    void chunking_shared() throws Exception {
        String t = Env.topic("chunk-shared");
        int n = 12;
        List<String> payloads = new ArrayList<>();
        try (Consumer<String> c1 = subscribe(t, "s", SubscriptionType.Shared);
             Consumer<String> c2 = subscribe(t, "s", SubscriptionType.Shared);
             Producer<String> p = client.newProducer(Schema.STRING).topic(t).enableBatching(false)
                     .enableChunking(true).chunkMaxMessageSize(1000).create()) {
            List<CompletableFuture<MessageId>> fs = new ArrayList<>();
            for (int i = 0; i < n; i++) {
                String payload = i + ":" + big(4_500, (char) ('a' + i));
                payloads.add(payload);
                fs.add(p.sendAsync(payload));
            }
            CompletableFuture.allOf(fs.toArray(new CompletableFuture[0])).get(15, TimeUnit.SECONDS);
            Set<String> got = new HashSet<>();
            long deadline = System.currentTimeMillis() + 20_000;
            while (got.size() < n && System.currentTimeMillis() < deadline) {
                for (Consumer<String> c : List.of(c1, c2)) {
                    Message<String> m = c.receive(200, TimeUnit.MILLISECONDS);
                    if (m != null) {
                        got.add(m.getValue());
                        c.acknowledge(m);
                    }
                }
            }
            assertEquals(n, got.size(), "whole chunked messages received by two Shared consumers");
            assertEquals(new HashSet<>(payloads), got);
        }
    }

    @Test
    void deduplication() throws Exception {
        String t = Env.topic("dedup");
        admin.topics().createNonPartitionedTopic(t);
        admin.topicPolicies().setDeduplicationStatus(t, true);
        try (Consumer<String> c = subscribe(t, "s", SubscriptionType.Exclusive)) {
            for (int round = 0; round < 2; round++) {
                // the second producer (same name) resends 3..4 after "a reconnect", then goes on to 6
                try (Producer<String> p = client.newProducer(Schema.STRING).topic(t).producerName("dedup-p")
                        .enableBatching(false).sendTimeout(0, TimeUnit.SECONDS).create()) {
                    int from = round == 0 ? 0 : 3;
                    int to = round == 0 ? 5 : 7;
                    for (int i = from; i < to; i++) {
                        p.newMessage().sequenceId(i).value("m" + i).send();
                    }
                    assertEquals(round == 0 ? 4 : 6, p.getLastSequenceId());
                }
            }
            assertEquals(expected("m", 7), receive(c, 7));
            assertNull(c.receive(500, TimeUnit.MILLISECONDS), "a duplicate was delivered");
        }
    }

    @Test
    void regex_new_topic() throws Exception {
        String base = Env.unique("re");
        String first = "persistent://public/default/" + base + "-a";
        try (Producer<String> p = producer(first)) {
            p.send("first");
        }
        try (Consumer<String> c = client.newConsumer(Schema.STRING)
                .topicsPattern(Pattern.compile("persistent://public/default/" + base + "-.*"))
                // polling far apart: the new topic must come from the broker's PIP-145 watcher push
                .patternAutoDiscoveryPeriod(10, TimeUnit.MINUTES).subscriptionName("s")
                .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe()) {
            assertEquals("first", c.receive(10, TimeUnit.SECONDS).getValue());
            try (Producer<String> p = producer("persistent://public/default/" + base + "-b")) {
                p.send("later");
            }
            Message<String> m = c.receive(20, TimeUnit.SECONDS);
            assertNotNull(m, "the pattern consumer did not see the topic created later");
            assertEquals("later", m.getValue());
        }
    }

    @Test
    void table_view() throws Exception {
        String t = Env.topic("tv");
        try (Producer<String> p = producer(t)) {
            p.newMessage().key("a").value("1").send();
            p.newMessage().key("b").value("2").send();
            try (TableView<String> tv = client.newTableView(Schema.STRING).topic(t).create()) {
                assertEquals("1", tv.get("a"));
                assertEquals("2", tv.get("b"));
                p.newMessage().key("a").value("3").send();
                long deadline = System.currentTimeMillis() + 10_000;
                while (!"3".equals(tv.get("a")) && System.currentTimeMillis() < deadline) {
                    Thread.onSpinWait();
                }
                assertEquals("3", tv.get("a"));
                assertEquals(2, tv.size());
            }
        }
    }

    @Test
    void token_tls() throws Exception {
        String url = Env.need("PULSAR_TLS_URL");
        String https = Env.need("PULSAR_HTTPS");
        String token = Env.need("PULSAR_TOKEN");
        String ca = Env.need("PULSAR_CA");
        String t = Env.topic("tls");
        try (PulsarClient tls = PulsarClient.builder().serviceUrl(url).tlsTrustCertsFilePath(ca)
                .authentication(AuthenticationFactory.token(token)).operationTimeout(15, TimeUnit.SECONDS).build();
             Producer<String> p = tls.newProducer(Schema.STRING).topic(t).create();
             Consumer<String> c = tls.newConsumer(Schema.STRING).topic(t).subscriptionName("s")
                     .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe()) {
            p.send("secret");
            Message<String> m = c.receive(10, TimeUnit.SECONDS);
            assertEquals("secret", m.getValue());
        }
        try (PulsarAdmin a = PulsarAdmin.builder().serviceHttpUrl(https).tlsTrustCertsFilePath(ca)
                .authentication(AuthenticationFactory.token(token)).build()) {
            assertTrue(a.tenants().getTenants().contains("public"));
        }
        try (PulsarClient bad = PulsarClient.builder().serviceUrl(url).tlsTrustCertsFilePath(ca)
                .authentication(AuthenticationFactory.token("not-a-token")).operationTimeout(10, TimeUnit.SECONDS)
                .build()) {
            assertThrows(PulsarClientException.class, () -> bad.newProducer(Schema.STRING).topic(t).create());
        }
    }

    @Test
    void subscription_properties() throws Exception {
        String t = Env.topic("subprops");
        try (Consumer<String> c = client.newConsumer(Schema.STRING).topic(t).subscriptionName("s")
                .subscriptionProperties(Map.of("team", "blue")).subscribe()) {
            assertEquals(Map.of("team", "blue"), admin.topics().getSubscriptionProperties(t, "s"));
            SubscriptionStats st = admin.topics().getStats(t).getSubscriptions().get("s");
            assertEquals("blue", st.getSubscriptionProperties().get("team"));
        }
    }

    @Test
    void initial_subscription_refused() throws Exception {
        String ns = "public/" + Env.unique("noautosub");
        admin.namespaces().createNamespace(ns);
        admin.namespaces().setAutoSubscriptionCreation(ns,
                AutoSubscriptionCreationOverride.builder().allowAutoSubscriptionCreation(false).build());
        String t = "persistent://" + ns + "/t";
        PulsarClientException e = assertThrows(PulsarClientException.class,
                () -> ((ProducerBuilderImpl<String>) client.newProducer(Schema.STRING).topic(t))
                        .initialSubscriptionName("init").create());
        assertTrue(e instanceof PulsarClientException.NotAllowedException, "NotAllowed expected: " + e);
        assertTrue(e.getMessage().contains("auto subscription creation"), "a clear error: " + e);
        assertTrue(!admin.topics().getList(ns).contains(t) || admin.topics().getSubscriptions(t).isEmpty(),
                "no subscription must be created");
    }

    @Test
    void out_counters() throws Exception {
        String t = Env.topic("counters");
        try (Producer<String> p = producer(t)) {
            try (Consumer<String> c = subscribe(t, "s", SubscriptionType.Exclusive)) {
                send(p, "m", 3);
                receive(c, 3);
            }
            TopicStats st = admin.topics().getStats(t);
            assertEquals(3, st.getMsgInCounter());
            assertEquals(3, st.getMsgOutCounter(), "topic msgOutCounter after the consumer left");
            assertEquals(3, st.getSubscriptions().get("s").getMsgOutCounter(),
                    "subscription msgOutCounter after the consumer left");
        }
    }

    @Test
    void end_of_topic() throws Exception {
        String t = Env.topic("ended");
        try (Producer<String> p = producer(t); Consumer<String> c = subscribe(t, "s", SubscriptionType.Exclusive)) {
            send(p, "m", 2);
            receive(c, 2);
            assertFalse(c.hasReachedEndOfTopic(), "reached the end before the topic was terminated");
            admin.topics().terminateTopic(t);
            long deadline = System.currentTimeMillis() + 10_000;
            while (!c.hasReachedEndOfTopic() && System.currentTimeMillis() < deadline) {
                Thread.sleep(20);
            }
            assertTrue(c.hasReachedEndOfTopic(), "the consumer was not told the topic ended");
        }
        try (Reader<String> r = client.newReader(Schema.STRING).topic(t).startMessageId(MessageId.earliest).create()) {
            assertEquals("m0", r.readNext(10, TimeUnit.SECONDS).getValue());
            assertEquals("m1", r.readNext(10, TimeUnit.SECONDS).getValue());
            long deadline = System.currentTimeMillis() + 10_000;
            while (!r.hasReachedEndOfTopic() && System.currentTimeMillis() < deadline) {
                Thread.sleep(20);
            }
            assertTrue(r.hasReachedEndOfTopic(), "the reader was not told the topic ended");
        }
    }

    @Test
    void broker_entry_metadata() throws Exception {
        // the plain compat broker runs with both of Pulsar's interceptors and exposes their
        // metadata (compat/run.py): a publish time and a per-topic index from 0 on each message
        String t = Env.topic("entrymeta");
        long before = System.currentTimeMillis();
        try (Producer<String> p = producer(t); Consumer<String> c = subscribe(t, "s", SubscriptionType.Exclusive)) {
            send(p, "m", 2);
            long after = System.currentTimeMillis();
            for (long i = 0; i < 2; i++) {
                Message<String> m = c.receive(10, TimeUnit.SECONDS);
                assertTrue(m.hasBrokerPublishTime(), "no broker publish time");
                long at = m.getBrokerPublishTime().get();
                assertTrue(at >= before - 1000 && at <= after + 1000, "broker publish time " + at);
                assertTrue(m.hasIndex(), "no index");
                assertEquals(i, m.getIndex().get());
            }
        }
    }

    static Consumer<String> txnConsumer(PulsarClient c, String topic, String sub, SubscriptionType type)
            throws PulsarClientException {
        return c.newConsumer(Schema.STRING).topic(topic).subscriptionName(sub).subscriptionType(type)
                .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe();
    }

    static Producer<String> txnProducer(PulsarClient c, String topic) throws PulsarClientException {
        // Java sends transactional messages only from producers without a send timeout.
        return c.newProducer(Schema.STRING).topic(topic).enableBatching(false).sendTimeout(0, TimeUnit.SECONDS)
                .create();
    }

    @Test
    void transactions() throws Exception {
        // commit and abort across two topics and a subscription; a timeout; never a glimpse of
        // uncommitted or aborted messages (the plain compat broker runs with transactionCoordinatorEnabled)
        String in = Env.topic("txn-in");
        String out1 = Env.topic("txn-out1");
        String out2 = Env.topic("txn-out2");
        try (PulsarClient txc = PulsarClient.builder().serviceUrl(Env.URL).enableTransaction(true)
                .operationTimeout(15, TimeUnit.SECONDS).build();
             Producer<String> input = producer(in);
             Consumer<String> work = txnConsumer(txc, in, "work", SubscriptionType.Shared);
             Consumer<String> watch1 = txnConsumer(txc, out1, "watch", SubscriptionType.Exclusive);
             Consumer<String> watch2 = txnConsumer(txc, out2, "watch", SubscriptionType.Exclusive);
             Reader<String> reader = txc.newReader(Schema.STRING).topic(out1).startMessageId(MessageId.earliest)
                     .create();
             Producer<String> p1 = txnProducer(txc, out1);
             Producer<String> p2 = txnProducer(txc, out2)) {
            input.send("a");
            input.send("b");

            // abort: nothing of it is seen, the input it acknowledged comes back
            Message<String> a = work.receive(10, TimeUnit.SECONDS);
            assertNotNull(a);
            Transaction t1 = txc.newTransaction().withTransactionTimeout(1, TimeUnit.MINUTES).build().get();
            p1.newMessage(t1).value("aborted-1").send();
            p2.newMessage(t1).value("aborted-2").send();
            work.acknowledgeAsync(a.getMessageId(), t1).get(10, TimeUnit.SECONDS);
            assertNull(watch1.receive(500, TimeUnit.MILLISECONDS), "uncommitted message seen");
            t1.abort().get(10, TimeUnit.SECONDS);
            Set<String> inputs = new HashSet<>();
            List<MessageId> inputIds = new ArrayList<>();
            while (inputs.size() < 2) {
                Message<String> m = work.receive(10, TimeUnit.SECONDS);
                assertNotNull(m, "input redelivered after the abort: got only " + inputs);
                if (inputs.add(m.getValue())) {
                    inputIds.add(m.getMessageId());
                }
            }
            assertEquals(Set.of("a", "b"), inputs);

            // commit: both outputs appear, the inputs are acknowledged
            Transaction t2 = txc.newTransaction().withTransactionTimeout(1, TimeUnit.MINUTES).build().get();
            p1.newMessage(t2).value("out-1").send();
            p2.newMessage(t2).value("out-2").send();
            for (MessageId id : inputIds) {
                work.acknowledgeAsync(id, t2).get(10, TimeUnit.SECONDS);
            }
            assertNull(watch2.receive(500, TimeUnit.MILLISECONDS), "uncommitted message seen");
            t2.commit().get(10, TimeUnit.SECONDS);
            assertEquals("out-1", watch1.receive(10, TimeUnit.SECONDS).getValue());
            assertEquals("out-2", watch2.receive(10, TimeUnit.SECONDS).getValue());
            assertEquals("out-1", reader.readNext(10, TimeUnit.SECONDS).getValue());
            assertEquals(0, admin.topics().getStats(in).getSubscriptions().get("work").getMsgBacklog(),
                    "inputs acknowledged by the commit");

            // timeout: the coordinator aborts it; what follows it is released, it never is
            Transaction t3 = txc.newTransaction().withTransactionTimeout(3, TimeUnit.SECONDS).build().get();
            p1.newMessage(t3).value("timed-out").send();
            p1.send("after-timeout");
            Message<String> next = watch1.receive(20, TimeUnit.SECONDS);
            assertNotNull(next, "the message behind the timed-out transaction was never released");
            assertEquals("after-timeout", next.getValue());
            assertThrows(Exception.class, () -> t3.commit().get(10, TimeUnit.SECONDS));
            assertNull(watch1.receive(300, TimeUnit.MILLISECONDS), "aborted message seen");
        }
    }
}
