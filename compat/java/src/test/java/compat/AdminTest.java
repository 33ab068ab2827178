package compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.admin.PulsarAdmin;
import org.apache.pulsar.client.admin.PulsarAdminException;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.Schema;
import org.apache.pulsar.client.api.SubscriptionType;
import org.apache.pulsar.common.policies.data.AuthAction;
import org.apache.pulsar.common.policies.data.AutoSubscriptionCreationOverride;
import org.apache.pulsar.common.policies.data.AutoTopicCreationOverride;
import org.apache.pulsar.common.policies.data.BacklogQuota;
import org.apache.pulsar.common.policies.data.DelayedDeliveryPolicies;
import org.apache.pulsar.common.policies.data.DispatchRate;
import org.apache.pulsar.common.policies.data.InactiveTopicDeleteMode;
import org.apache.pulsar.common.policies.data.InactiveTopicPolicies;
import org.apache.pulsar.common.policies.data.PersistentTopicInternalStats;
import org.apache.pulsar.common.policies.data.PublishRate;
import org.apache.pulsar.common.policies.data.RetentionPolicies;
import org.apache.pulsar.common.policies.data.SchemaCompatibilityStrategy;
import org.apache.pulsar.common.policies.data.TenantInfo;
import org.apache.pulsar.common.policies.data.TopicStats;
import org.apache.pulsar.common.schema.SchemaInfo;
import org.apache.pulsar.common.schema.SchemaType;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.function.Executable;

/** The Java admin client (pulsar-client-admin) against the broker's REST API. */
class AdminTest {
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

    @Test
    void admin_tenants() throws Exception {
        List<String> clusters = admin.clusters().getClusters();
        assertFalse(clusters.isEmpty());
        String tenant = Env.unique("tenant");
        TenantInfo info = TenantInfo.builder().adminRoles(Set.of("ops")).allowedClusters(Set.copyOf(clusters)).build();
        admin.tenants().createTenant(tenant, info);
        assertTrue(admin.tenants().getTenants().contains(tenant));
        assertEquals(Set.of("ops"), admin.tenants().getTenantInfo(tenant).getAdminRoles());
        assertThrows(PulsarAdminException.ConflictException.class, () -> admin.tenants().createTenant(tenant, info));
        admin.tenants().updateTenant(tenant, TenantInfo.builder().adminRoles(Set.of("ops", "dev"))
                .allowedClusters(Set.copyOf(clusters)).build());
        assertEquals(Set.of("ops", "dev"), admin.tenants().getTenantInfo(tenant).getAdminRoles());
        admin.tenants().deleteTenant(tenant);
        assertFalse(admin.tenants().getTenants().contains(tenant));
        assertThrows(PulsarAdminException.NotFoundException.class, () -> admin.tenants().getTenantInfo(tenant));
    }

    static void step(String what, Executable e) {
        try {
            e.execute();
        } catch (Throwable t) {
            throw new AssertionError(what + ": " + t, t);
        }
    }

    @Test
    void admin_namespaces() throws Exception {
        String ns = "public/" + Env.unique("ns");
        admin.namespaces().createNamespace(ns);
        assertTrue(admin.namespaces().getNamespaces("public").contains(ns));
        var n = admin.namespaces();
        step("retention", () -> {
            n.setRetention(ns, new RetentionPolicies(60, 100));
            assertEquals(new RetentionPolicies(60, 100), n.getRetention(ns));
        });
        step("messageTTL", () -> {
            n.setNamespaceMessageTTL(ns, 3600);
            assertEquals(3600, n.getNamespaceMessageTTL(ns));
        });
        step("backlogQuota", () -> {
            n.setBacklogQuota(ns, BacklogQuota.builder().limitSize(10L << 20)
                    .retentionPolicy(BacklogQuota.RetentionPolicy.producer_exception).build());
            BacklogQuota q = n.getBacklogQuotaMap(ns).get(BacklogQuota.BacklogQuotaType.destination_storage);
            assertNotNull(q);
            assertEquals(10L << 20, q.getLimitSize());
        });
        step("deduplication", () -> {
            n.setDeduplicationStatus(ns, true);
            assertEquals(Boolean.TRUE, n.getDeduplicationStatus(ns));
        });
        step("publishRate", () -> {
            n.setPublishRate(ns, new PublishRate(1000, 1 << 20));
            assertEquals(1000, n.getPublishRate(ns).publishThrottlingRateInMsg);
        });
        step("dispatchRate", () -> {
            n.setDispatchRate(ns, DispatchRate.builder().dispatchThrottlingRateInMsg(500)
                    .dispatchThrottlingRateInByte(1 << 20).ratePeriodInSecond(1).build());
            assertEquals(500, n.getDispatchRate(ns).getDispatchThrottlingRateInMsg());
        });
        step("subscriptionDispatchRate", () -> {
            n.setSubscriptionDispatchRate(ns, DispatchRate.builder().dispatchThrottlingRateInMsg(50)
                    .ratePeriodInSecond(1).build());
            assertEquals(50, n.getSubscriptionDispatchRate(ns).getDispatchThrottlingRateInMsg());
        });
        step("maxProducersPerTopic", () -> {
            n.setMaxProducersPerTopic(ns, 7);
            assertEquals(7, n.getMaxProducersPerTopic(ns));
        });
        step("maxConsumersPerTopic", () -> {
            n.setMaxConsumersPerTopic(ns, 8);
            assertEquals(8, n.getMaxConsumersPerTopic(ns));
        });
        step("maxUnackedMessagesPerConsumer", () -> {
            n.setMaxUnackedMessagesPerConsumer(ns, 900);
            assertEquals(900, n.getMaxUnackedMessagesPerConsumer(ns));
        });
        step("schemaCompatibilityStrategy", () -> {
            n.setSchemaCompatibilityStrategy(ns, SchemaCompatibilityStrategy.BACKWARD);
            assertEquals(SchemaCompatibilityStrategy.BACKWARD, n.getSchemaCompatibilityStrategy(ns));
        });
        step("autoTopicCreation", () -> {
            n.setAutoTopicCreation(ns, AutoTopicCreationOverride.builder().allowAutoTopicCreation(true)
                    .topicType("partitioned").defaultNumPartitions(2).build());
            assertEquals(2, n.getAutoTopicCreation(ns).getDefaultNumPartitions());
        });
        step("autoSubscriptionCreation", () -> {
            n.setAutoSubscriptionCreation(ns, AutoSubscriptionCreationOverride.builder()
                    .allowAutoSubscriptionCreation(false).build());
            assertFalse(n.getAutoSubscriptionCreation(ns).isAllowAutoSubscriptionCreation());
        });
        step("subscriptionExpirationTime", () -> {
            n.setSubscriptionExpirationTime(ns, 60);
            assertEquals(60, n.getSubscriptionExpirationTime(ns));
        });
        step("inactiveTopicPolicies", () -> {
            n.setInactiveTopicPolicies(ns, new InactiveTopicPolicies(
                    InactiveTopicDeleteMode.delete_when_no_subscriptions, 600, true));
            assertEquals(600, n.getInactiveTopicPolicies(ns).getMaxInactiveDurationSeconds());
        });
        step("delayedDelivery", () -> {
            n.setDelayedDeliveryMessages(ns, DelayedDeliveryPolicies.builder().active(true).tickTime(500).build());
            assertEquals(500, n.getDelayedDelivery(ns).getTickTime());
        });
        step("subscriptionTypesEnabled", () -> {
            n.setSubscriptionTypesEnabled(ns, Set.of(SubscriptionType.Shared, SubscriptionType.Exclusive));
            assertEquals(Set.of(SubscriptionType.Shared, SubscriptionType.Exclusive), n.getSubscriptionTypesEnabled(ns));
        });
        step("permissions", () -> {
            n.grantPermissionOnNamespace(ns, "reader", Set.of(AuthAction.consume));
            assertEquals(Set.of(AuthAction.consume), n.getPermissions(ns).get("reader"));
        });
        step("policies", () -> assertEquals(3600, n.getPolicies(ns).message_ttl_in_seconds));
        n.deleteNamespace(ns);
        assertFalse(admin.namespaces().getNamespaces("public").contains(ns));
    }

    @Test
    void admin_topics() throws Exception {
        String ns = "public/default";
        String t = Env.topic("adm-topic");
        String pt = Env.topic("adm-part");
        admin.topics().createNonPartitionedTopic(t);
        admin.topics().createPartitionedTopic(pt, 2);
        assertThrows(PulsarAdminException.ConflictException.class, () -> admin.topics().createNonPartitionedTopic(t));
        assertTrue(admin.topics().getList(ns).contains(t));
        assertTrue(admin.topics().getPartitionedTopicList(ns).contains(pt));
        assertEquals(2, admin.topics().getPartitionedTopicMetadata(pt).partitions);
        admin.topics().updatePartitionedTopic(pt, 3);
        assertEquals(3, admin.topics().getPartitionedTopicMetadata(pt).partitions);
        assertEquals(0, admin.topics().getPartitionedTopicMetadata(t).partitions);
        try (Producer<String> p = client.newProducer(Schema.STRING).topic(t).enableBatching(false).create()) {
            MessageId id = p.send("x");
            assertEquals(id, admin.topics().getLastMessageId(t));
        }
        admin.topics().unload(t);
        admin.topics().delete(t);
        admin.topics().deletePartitionedTopic(pt);
        assertFalse(admin.topics().getList(ns).contains(t));
        assertFalse(admin.topics().getPartitionedTopicList(ns).contains(pt));
        assertThrows(PulsarAdminException.NotFoundException.class, () -> admin.topics().getStats(t));
    }

    @Test
    void admin_topic_policies() throws Exception {
        String t = Env.topic("adm-tpol");
        admin.topics().createNonPartitionedTopic(t);
        var tp = admin.topicPolicies();
        step("messageTTL", () -> {
            tp.setMessageTTL(t, 120);
            assertEquals(120, tp.getMessageTTL(t));
            tp.removeMessageTTL(t);
            assertEquals(null, tp.getMessageTTL(t));
        });
        step("retention", () -> {
            tp.setRetention(t, new RetentionPolicies(30, 10));
            assertEquals(new RetentionPolicies(30, 10), tp.getRetention(t));
        });
        step("backlogQuota", () -> {
            tp.setBacklogQuota(t, BacklogQuota.builder().limitSize(5L << 20)
                    .retentionPolicy(BacklogQuota.RetentionPolicy.producer_request_hold).build());
            assertEquals(5L << 20, tp.getBacklogQuotaMap(t)
                    .get(BacklogQuota.BacklogQuotaType.destination_storage).getLimitSize());
            tp.removeBacklogQuota(t);
            assertTrue(tp.getBacklogQuotaMap(t).isEmpty());
        });
        step("maxProducers", () -> {
            tp.setMaxProducers(t, 3);
            assertEquals(3, tp.getMaxProducers(t));
        });
        step("maxUnackedMessagesOnConsumer", () -> {
            tp.setMaxUnackedMessagesOnConsumer(t, 700);
            assertEquals(700, tp.getMaxUnackedMessagesOnConsumer(t));
        });
        step("dispatchRate", () -> {
            tp.setDispatchRate(t, DispatchRate.builder().dispatchThrottlingRateInMsg(400).ratePeriodInSecond(1).build());
            assertEquals(400, tp.getDispatchRate(t).getDispatchThrottlingRateInMsg());
        });
        step("subscriptionDispatchRate", () -> {
            tp.setSubscriptionDispatchRate(t, DispatchRate.builder().dispatchThrottlingRateInMsg(40)
                    .ratePeriodInSecond(1).build());
            assertEquals(40, tp.getSubscriptionDispatchRate(t).getDispatchThrottlingRateInMsg());
        });
        step("subscription-level dispatchRate", () -> {
            tp.setSubscriptionDispatchRate(t, "billing", DispatchRate.builder().dispatchThrottlingRateInMsg(4)
                    .ratePeriodInSecond(2).build());
            DispatchRate own = tp.getSubscriptionDispatchRate(t, "billing");
            assertEquals(4, own.getDispatchThrottlingRateInMsg());
            assertEquals(2, own.getRatePeriodInSecond());
            // without its own, a subscription has the topic's (applied)
            assertEquals(40, tp.getSubscriptionDispatchRate(t, "other", true).getDispatchThrottlingRateInMsg());
            tp.removeSubscriptionDispatchRate(t, "billing");
            assertEquals(null, tp.getSubscriptionDispatchRate(t, "billing"));
        });
        step("publishRate", () -> {
            tp.setPublishRate(t, new PublishRate(900, 1 << 20));
            assertEquals(900, tp.getPublishRate(t).publishThrottlingRateInMsg);
        });
        step("inactiveTopicPolicies", () -> {
            tp.setInactiveTopicPolicies(t, new InactiveTopicPolicies(
                    InactiveTopicDeleteMode.delete_when_subscriptions_caught_up, 300, true));
            assertEquals(300, tp.getInactiveTopicPolicies(t).getMaxInactiveDurationSeconds());
        });
        step("applied", () -> assertEquals(new RetentionPolicies(30, 10), tp.getRetention(t, true)));
        admin.topics().delete(t, true);
    }

    @Test
    void admin_stats() throws Exception {
        String t = Env.topic("adm-stats");
        String pt = Env.topic("adm-pstats");
        admin.topics().createPartitionedTopic(pt, 2);
        try (Producer<String> p = client.newProducer(Schema.STRING).topic(t).enableBatching(false).create();
             Consumer<String> c = client.newConsumer(Schema.STRING).topic(t).subscriptionName("s").subscribe();
             Producer<String> pp = client.newProducer(Schema.STRING).topic(pt).create()) {
            for (int i = 0; i < 3; i++) {
                p.send("m" + i);
                pp.send("m" + i);
            }
            TopicStats st = admin.topics().getStats(t);
            assertEquals(3, st.getMsgInCounter());
            assertEquals(1, st.getPublishers().size());
            assertTrue(st.getSubscriptions().containsKey("s"));
            assertEquals(1, st.getSubscriptions().get("s").getConsumers().size());
            PersistentTopicInternalStats internal = admin.topics().getInternalStats(t);
            assertEquals(3, internal.entriesAddedCounter);
            assertTrue(internal.cursors.containsKey("s"));
            var ps = admin.topics().getPartitionedStats(pt, true);
            assertEquals(2, ps.getPartitions().size());
            assertEquals(3, ps.getMsgInCounter());
        }
    }

    @Test
    void admin_subscriptions() throws Exception {
        String t = Env.topic("adm-subs");
        try (Producer<String> p = client.newProducer(Schema.STRING).topic(t).enableBatching(false).create()) {
            long before = System.currentTimeMillis();
            admin.topics().createSubscription(t, "s", MessageId.earliest);
            for (int i = 0; i < 4; i++) {
                p.send("m" + i);
            }
            assertEquals(List.of("s"), admin.topics().getSubscriptions(t));
            List<Message<byte[]>> peeked = admin.topics().peekMessages(t, "s", 2);
            assertEquals(2, peeked.size());
            assertEquals("m0", new String(peeked.get(0).getValue(), StandardCharsets.UTF_8));
            assertEquals("m1", new String(peeked.get(1).getValue(), StandardCharsets.UTF_8));
            admin.topics().skipMessages(t, "s", 1);
            assertEquals(3, admin.topics().getStats(t).getSubscriptions().get("s").getMsgBacklog());
            admin.topics().skipAllMessages(t, "s");
            assertEquals(0, admin.topics().getStats(t).getSubscriptions().get("s").getMsgBacklog());
            admin.topics().resetCursor(t, "s", before);
            assertEquals(4, admin.topics().getStats(t).getSubscriptions().get("s").getMsgBacklog());
            try (Consumer<String> c = client.newConsumer(Schema.STRING).topic(t).subscriptionName("s").subscribe()) {
                assertEquals("m0", c.receive(10, TimeUnit.SECONDS).getValue());
            }
            admin.topics().deleteSubscription(t, "s");
            assertTrue(admin.topics().getSubscriptions(t).isEmpty());
        }
    }

    @Test
    void admin_schemas() throws Exception {
        String t = Env.topic("adm-schema");
        admin.topics().createNonPartitionedTopic(t);
        SchemaInfo info = SchemaInfo.builder().name("s").type(SchemaType.JSON)
                .schema(("{\"type\":\"record\",\"name\":\"R\",\"fields\":[{\"name\":\"a\",\"type\":\"int\"}]}")
                        .getBytes(StandardCharsets.UTF_8))
                .properties(Map.of()).build();
        admin.schemas().createSchema(t, info);
        SchemaInfo got = admin.schemas().getSchemaInfo(t);
        assertEquals(SchemaType.JSON, got.getType());
        assertEquals(1, admin.schemas().getAllSchemas(t).size());
        admin.schemas().deleteSchema(t);
        assertThrows(PulsarAdminException.NotFoundException.class, () -> admin.schemas().getSchemaInfo(t));
    }

    static void notServed(String what, Executable call) {
        PulsarAdminException e = assertThrows(PulsarAdminException.class, call, what);
        assertEquals(404, e.getStatusCode(), what + ": " + e);
        assertTrue(e.getMessage() != null && !e.getMessage().isEmpty(), what + " has a reason");
    }

    @Test
    void admin_v3() {
        notServed("functions", () -> admin.functions().getFunctions("public", "default"));
        notServed("sources", () -> admin.sources().listSources("public", "default"));
        notServed("sinks", () -> admin.sinks().listSinks("public", "default"));
        notServed("packages", () -> admin.packages().listPackages("function", "public/default"));
    }
}
