import java.util.Optional;
import org.apache.pulsar.client.admin.PulsarAdmin;
import org.apache.pulsar.client.impl.MessageIdImpl;
import org.apache.pulsar.common.stats.AnalyzeSubscriptionBacklogResult;

/**
 * pulsar-admin's own calls (the official Java admin client, 4.0.7) of analyzeSubscriptionBacklog, expireMessages by
 * message id and truncate against the broker at args[0], on topic args[1] and its subscription "s"; args[2], args[3]:
 * the ledger and entry of the message to expire up to (excluded: Pulsar expires the next one too). One line per call.
 */
public class AdminOps {
    public static void main(String[] args) throws Exception {
        String topic = args[1];
        try (PulsarAdmin admin = PulsarAdmin.builder().serviceHttpUrl(args[0]).build()) {
            print("before", admin.topics().analyzeSubscriptionBacklog(topic, "s", Optional.empty()));
            MessageIdImpl at = new MessageIdImpl(Long.parseLong(args[2]), Long.parseLong(args[3]), -1);
            print("from", admin.topics().analyzeSubscriptionBacklog(topic, "s", Optional.of(at)));
            admin.topics().expireMessages(topic, "s", at, true);
            print("expired", admin.topics().analyzeSubscriptionBacklog(topic, "s", Optional.empty()));
            admin.topics().truncate(topic);
            print("truncated", admin.topics().analyzeSubscriptionBacklog(topic, "s", Optional.empty()));
        }
    }

    private static void print(String when, AnalyzeSubscriptionBacklogResult r) {
        System.out.println(when + " entries=" + r.getEntries() + " messages=" + r.getMessages()
                + " accepted=" + r.getFilterAcceptedEntries() + " aborted=" + r.isAborted()
                + " first=" + r.getFirstMessageId() + " last=" + r.getLastMessageId());
    }
}
