package compat;

import java.util.UUID;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.admin.PulsarAdmin;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.PulsarClientException;

/** Where the brokers started by compat/run.py are, and unique names per test. */
final class Env {
    static final String URL = need("PULSAR_URL");
    static final String HTTP = need("PULSAR_HTTP");

    private Env() {}

    static String need(String name) {
        String v = System.getenv(name);
        if (v == null || v.isEmpty()) {
            throw new IllegalStateException(name + " is not set: run the suite with `make compat`");
        }
        return v;
    }

    static String unique(String prefix) {
        return prefix + "-" + UUID.randomUUID().toString().substring(0, 8);
    }

    static String topic(String prefix) {
        return "persistent://public/default/" + unique(prefix);
    }

    static PulsarClient client() throws PulsarClientException {
        return PulsarClient.builder().serviceUrl(URL).operationTimeout(15, TimeUnit.SECONDS).build();
    }

    static PulsarAdmin admin() throws PulsarClientException {
        return PulsarAdmin.builder().serviceHttpUrl(HTTP)
                .connectionTimeout(5, TimeUnit.SECONDS).readTimeout(20, TimeUnit.SECONDS)
                .requestTimeout(30, TimeUnit.SECONDS).build();
    }
}
