import org.apache.pulsar.client.admin.PulsarAdmin;
import org.apache.pulsar.client.impl.BatchMessageIdImpl;

/**
 * pulsar-admin's own reset-cursor to a message inside a batch (the official Java admin client, 4.0.7: it sends the
 * message id's batchIndex in the ResetCursorData body) against the broker at args[0], on topic args[1]; args[2],
 * args[3], args[4]: the ledger, entry and batch index. Subscription "at" is reset to that message, "after" to the
 * one after it (isExcluded).
 */
public class ResetCursorOps {
    public static void main(String[] args) throws Exception {
        String topic = args[1];
        BatchMessageIdImpl at = new BatchMessageIdImpl(Long.parseLong(args[2]), Long.parseLong(args[3]), -1,
                Integer.parseInt(args[4]));
        try (PulsarAdmin admin = PulsarAdmin.builder().serviceHttpUrl(args[0]).build()) {
            admin.topics().resetCursor(topic, "at", at, false);
            admin.topics().resetCursor(topic, "after", at, true);
            System.out.println("reset");
        }
    }
}
