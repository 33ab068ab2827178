import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;
import java.util.function.Supplier;
import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;
import org.apache.pulsar.client.api.AuthenticationFactory;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;

/**
 * The official Java client with a token supplier whose tokens expire (AuthenticationFactory.token(Supplier)), against
 * the broker at args[0] (authenticationRefreshCheckSeconds small). The supplier makes HS256 JWTs for role args[2] with
 * the secret in the file args[1], each valid for args[3] seconds. Two scenarios, at once, on two clients:
 *
 * <ul>
 *   <li>fresh (topic args[4]): the supplier makes a new token each time. A producer and a consumer live through two
 *   expiries (each answered with a new token), producing after each: what was sent, received, reconnected;</li>
 *   <li>stale (topic args[5]): the supplier keeps giving its first token. After it expires: whether the producer stays
 *   connected, what a send and a new producer get; then the supplier makes new tokens again: whether the producer and
 *   the consumer come back, and which messages arrive.</li>
 * </ul>
 *
 * <p>Each scenario prints its lines, prefixed by its name, when it is done; "note" lines (exception messages) are for
 * a failure's explanation. Every wait is for an event, bounded by WAIT_S.
 */
public class TokenRefresh {
    static final long WAIT_S = 60; // a token's life, then a refresh check or a few, on a busy machine
    static final int SEND_TIMEOUT_S = 10;
    static final int QUIET_S = 5; // how long "no more messages" is watched for

    public static void main(String[] args) throws Exception {
        String url = args[0];
        byte[] secret = Files.readAllBytes(Path.of(args[1]));
        String role = args[2];
        long life = Long.parseLong(args[3]);
        List<String> fresh = new ArrayList<>();
        List<String> stale = new ArrayList<>();
        Thread a = new Thread(() -> run("fresh", fresh, () -> fresh(url, secret, role, life, args[4], fresh)));
        Thread b = new Thread(() -> run("stale", stale, () -> stale(url, secret, role, life, args[5], stale)));
        a.start();
        b.start();
        a.join();
        b.join();
        fresh.forEach(line -> System.out.println("fresh " + line));
        stale.forEach(line -> System.out.println("stale " + line));
    }

    interface Scenario {
        void run() throws Exception;
    }

    static void run(String name, List<String> out, Scenario scenario) {
        try {
            scenario.run();
        } catch (Exception e) {
            out.add("failed: " + describe(e));
            out.add("note " + e);
        }
    }

    /** A supplier that counts its calls: asked(n) awaits the n-th. */
    static class Tokens implements Supplier<String> {
        final Semaphore calls = new Semaphore(0);
        final byte[] secret;
        final String role;
        final long life;
        volatile boolean keepFirst;
        volatile String first;

        Tokens(byte[] secret, String role, long life, boolean keepFirst) {
            this.secret = secret;
            this.role = role;
            this.life = life;
            this.keepFirst = keepFirst;
        }

        @Override
        public synchronized String get() {
            calls.release();
            if (keepFirst && first != null) {
                return first;
            }
            String token = jwt(secret, role, (System.currentTimeMillis() + 999) / 1000 + life);
            if (first == null) {
                first = token;
            }
            return token;
        }

        /** Awaits the next call (after those counted so far: drain first). */
        boolean next() throws InterruptedException {
            return calls.tryAcquire(WAIT_S, TimeUnit.SECONDS);
        }

        void drain() {
            calls.drainPermits();
        }
    }

    static PulsarClient client(String url, Tokens tokens) throws Exception {
        return PulsarClient.builder().serviceUrl(url).authentication(AuthenticationFactory.token(tokens))
                .operationTimeout(30, TimeUnit.SECONDS).build();
    }

    static void fresh(String url, byte[] secret, String role, long life, String topic, List<String> out)
            throws Exception {
        Tokens tokens = new Tokens(secret, role, life, false);
        try (PulsarClient client = client(url, tokens);
             Consumer<byte[]> consumer = client.newConsumer().topic(topic).subscriptionName("sub").subscribe();
             Producer<byte[]> producer = client.newProducer().topic(topic).enableBatching(false)
                     .sendTimeout(SEND_TIMEOUT_S, TimeUnit.SECONDS).create()) {
            int sent = 0;
            producer.send(Integer.toString(sent++).getBytes(StandardCharsets.UTF_8));
            for (int expiry = 1; expiry <= 2; expiry++) {
                tokens.drain();
                out.add("expiry " + expiry + ": supplier asked again " + tokens.next());
                producer.send(Integer.toString(sent++).getBytes(StandardCharsets.UTF_8));
            }
            out.add("sent " + sent);
            List<String> received = new ArrayList<>();
            for (int i = 0; i < sent; i++) {
                Message<byte[]> m = consumer.receive((int) WAIT_S, TimeUnit.SECONDS);
                if (m == null) {
                    break;
                }
                received.add(new String(m.getData(), StandardCharsets.UTF_8));
                consumer.acknowledge(m);
            }
            out.add("received " + received);
            out.add("producer reconnected " + (producer.getLastDisconnectedTimestamp() != 0));
            out.add("consumer reconnected " + (consumer.getLastDisconnectedTimestamp() != 0));
        }
    }

    static void stale(String url, byte[] secret, String role, long life, String topic, List<String> out)
            throws Exception {
        Tokens tokens = new Tokens(secret, role, life, true);
        try (PulsarClient client = client(url, tokens)) {
            Producer<byte[]> producer = client.newProducer().topic(topic).enableBatching(false)
                    .sendTimeout(SEND_TIMEOUT_S, TimeUnit.SECONDS).create();
            Consumer<byte[]> consumer = client.newConsumer().topic(topic).subscriptionName("sub").subscribe();
            producer.send("0".getBytes(StandardCharsets.UTF_8));
            out.add("sent before the expiry");
            tokens.drain();
            out.add("supplier asked again after the expiry " + tokens.next());
            out.add("producer disconnected " + await(() -> !producer.isConnected()));
            out.add("consumer disconnected " + await(() -> !consumer.isConnected()));
            try {
                producer.send("1".getBytes(StandardCharsets.UTF_8));
                out.add("send after the expiry: ok");
            } catch (Exception e) {
                out.add("send after the expiry: " + describe(e));
                out.add("note " + e);
            }
            try {
                client.newProducer().topic(topic).create().close();
                out.add("new producer: ok");
            } catch (Exception e) {
                out.add("new producer: " + describe(e));
                out.add("note " + e);
            }
            tokens.keepFirst = false; // the token source recovers
            out.add("producer back with a fresh token " + await(producer::isConnected));
            out.add("consumer back with a fresh token " + await(consumer::isConnected));
            producer.send("2".getBytes(StandardCharsets.UTF_8));
            List<String> received = new ArrayList<>();
            Message<byte[]> m;
            while ((m = consumer.receive(QUIET_S, TimeUnit.SECONDS)) != null) {
                received.add(new String(m.getData(), StandardCharsets.UTF_8));
                consumer.acknowledge(m);
            }
            out.add("received " + received);
        }
    }

    static boolean await(BooleanSupplier condition) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(WAIT_S);
        while (!condition.getAsBoolean()) {
            if (System.nanoTime() > deadline) {
                return false;
            }
            Thread.sleep(20); // (the client has no event for it: polled, with a deadline)
        }
        return true;
    }

    static String describe(Throwable e) {
        while ((e instanceof ExecutionException || e instanceof java.util.concurrent.CompletionException)
                && e.getCause() != null) {
            e = e.getCause();
        }
        return e.getClass().getSimpleName();
    }

    /** An HS256 JWT {"sub": role, "exp": exp}, as `pulsar tokens create --secret-key` makes. */
    static String jwt(byte[] secret, String role, long exp) {
        Base64.Encoder b64 = Base64.getUrlEncoder().withoutPadding();
        String header = b64.encodeToString("{\"alg\":\"HS256\"}".getBytes(StandardCharsets.UTF_8));
        String payload = b64.encodeToString(("{\"sub\":\"" + role + "\",\"exp\":" + exp + "}")
                .getBytes(StandardCharsets.UTF_8));
        try {
            Mac mac = Mac.getInstance("HmacSHA256");
            mac.init(new SecretKeySpec(secret, "HmacSHA256"));
            byte[] signature = mac.doFinal((header + "." + payload).getBytes(StandardCharsets.UTF_8));
            return header + "." + payload + "." + b64.encodeToString(signature);
        } catch (Exception e) {
            throw new IllegalStateException(e);
        }
    }
}
