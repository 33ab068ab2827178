// A consume-transform-produce loop with the official Java client, for
// tests/transactions/test_java_ctp_kill9.py: each input "in-<i>" of <in> (subscription <sub>,
// Shared) is turned into "out-<i>" on <out> and acknowledged in one transaction, committed. Any
// failure (the broker went away, a conflict, a timeout) aborts the transaction and asks for the
// input again (negative ack), so what the output holds, read committed, is each input once.
// Prints "committed in-<i>" after each commit and "failed ..." after each failure; runs until killed.
//
// Usage: java TxnLoop <serviceUrl> <in> <out> <sub> <txnTimeoutSeconds>

import java.nio.charset.StandardCharsets;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.SubscriptionType;
import org.apache.pulsar.client.api.transaction.Transaction;

public final class TxnLoop {
    private static final long STEP_TIMEOUT_S = 10;

    public static void main(String[] args) throws Exception {
        String url = args[0], in = args[1], out = args[2], sub = args[3];
        long txnTimeoutS = Long.parseLong(args[4]);
        PulsarClient client = PulsarClient.builder().serviceUrl(url).enableTransaction(true)
                .operationTimeout(5, TimeUnit.SECONDS).build();
        Consumer<byte[]> consumer = client.newConsumer().topic(in).subscriptionName(sub)
                .subscriptionType(SubscriptionType.Shared)
                .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest)
                .negativeAckRedeliveryDelay(100, TimeUnit.MILLISECONDS).subscribe();
        // Transactional sends need the send timeout off (the Java client refuses them otherwise).
        Producer<byte[]> producer = client.newProducer().topic(out).sendTimeout(0, TimeUnit.SECONDS)
                .enableBatching(false).create();
        System.out.println("ready");
        System.out.flush();
        while (true) {
            Message<byte[]> msg = consumer.receive();
            String body = new String(msg.getData(), StandardCharsets.UTF_8);
            Transaction txn = null;
            try {
                txn = client.newTransaction().withTransactionTimeout(txnTimeoutS, TimeUnit.SECONDS).build()
                        .get(STEP_TIMEOUT_S, TimeUnit.SECONDS);
                byte[] result = ("out-" + body.substring("in-".length())).getBytes(StandardCharsets.UTF_8);
                producer.newMessage(txn).value(result).sendAsync().get(STEP_TIMEOUT_S, TimeUnit.SECONDS);
                consumer.acknowledgeAsync(msg.getMessageId(), txn).get(STEP_TIMEOUT_S, TimeUnit.SECONDS);
                txn.commit().get(STEP_TIMEOUT_S, TimeUnit.SECONDS);
                System.out.println("committed " + body);
            } catch (Exception e) {
                System.out.println("failed " + body + ": " + e);
                if (txn != null) {
                    try {
                        txn.abort().get(STEP_TIMEOUT_S, TimeUnit.SECONDS);
                    } catch (Exception ignored) {
                        // The coordinator aborts it when its timeout passes.
                    }
                }
                consumer.negativeAcknowledge(msg);
            }
            System.out.flush();
        }
    }
}
