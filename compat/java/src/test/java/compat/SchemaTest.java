package compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.concurrent.TimeUnit;
import java.util.function.Function;
import org.apache.avro.reflect.AvroDefault;
import org.apache.avro.reflect.Nullable;
import org.apache.pulsar.client.admin.PulsarAdmin;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.PulsarClientException;
import org.apache.pulsar.client.api.Schema;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/** Avro and JSON POJO schemas: round trip, a compatible evolution, an incompatible producer refused. */
class SchemaTest {
    static PulsarClient client;
    static PulsarAdmin admin;

    /** Version 1 of the record. */
    public static class V1 {
        public static class User {
            public String name;
            public int age;

            public User() {}

            User(String name, int age) {
                this.name = name;
                this.age = age;
            }
        }
    }

    /** Version 2: one more optional field with a default (compatible both ways). */
    public static class V2 {
        public static class User {
            public String name;
            public int age;
            @Nullable
            @AvroDefault("null")
            public String email;

            public User() {}
        }
    }

    /** Incompatible: age changes type. */
    public static class Bad {
        public static class User {
            public String name;
            public String age;

            public User() {}
        }
    }

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

    void scenario(String kind, Function<Class<?>, Schema<?>> schemaOf) throws Exception {
        String t = Env.topic("schema-" + kind);
        @SuppressWarnings("unchecked")
        Schema<V1.User> s1 = (Schema<V1.User>) schemaOf.apply(V1.User.class);
        try (Producer<V1.User> p = client.newProducer(s1).topic(t).create();
             Consumer<V1.User> c = client.newConsumer(s1).topic(t).subscriptionName("s")
                     .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe()) {
            p.send(new V1.User("ada", 36));
            Message<V1.User> m = c.receive(10, TimeUnit.SECONDS);
            assertNotNull(m);
            assertEquals("ada", m.getValue().name);
            assertEquals(36, m.getValue().age);
        }
        @SuppressWarnings("unchecked")
        Schema<V2.User> s2 = (Schema<V2.User>) schemaOf.apply(V2.User.class);
        try (Producer<V2.User> p2 = client.newProducer(s2).topic(t).create()) {
            V2.User u = new V2.User();
            u.name = "bob";
            u.age = 7;
            u.email = "bob@example.org";
            p2.send(u);
        }
        assertEquals(2, admin.schemas().getAllSchemas(t).size(), "two schema versions");
        @SuppressWarnings("unchecked")
        Schema<Bad.User> bad = (Schema<Bad.User>) schemaOf.apply(Bad.User.class);
        PulsarClientException e = assertThrows(PulsarClientException.class,
                () -> client.newProducer(bad).topic(t).create());
        assertTrue(e instanceof PulsarClientException.IncompatibleSchemaException, "incompatible refused: " + e);
        assertThrows(PulsarClientException.IncompatibleSchemaException.class,
                () -> client.newProducer(Schema.STRING).topic(t).create());
    }

    @Test
    void schema_avro() throws Exception {
        scenario("avro", Schema::AVRO);
    }

    @Test
    void schema_json() throws Exception {
        scenario("json", Schema::JSON);
    }
}
