import java.util.List;
import java.util.Map;
import org.apache.pulsar.client.admin.PulsarAdmin;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageId;

/**
 * pulsar-admin's own subscription calls (the official Java admin client, 4.0.7) on subscriptions whose names need
 * encoding, against the broker at args[0], on topic args[1] (holding 3 messages m0, m1, m2); args[2..]: the
 * subscription names. Each is created at the earliest message, peeked, skipped, reset, given properties, listed
 * and deleted. One line per name.
 */
public class SubscriptionNames {
    public static void main(String[] args) throws Exception {
        String topic = args[1];
        try (PulsarAdmin admin = PulsarAdmin.builder().serviceHttpUrl(args[0]).build()) {
            for (int i = 2; i < args.length; i++) {
                String sub = args[i];
                admin.topics().createSubscription(topic, sub, MessageId.earliest);
                List<Message<byte[]>> peeked = admin.topics().peekMessages(topic, sub, 2);
                admin.topics().skipMessages(topic, sub, 1);
                long skipped = backlog(admin, topic, sub);
                admin.topics().resetCursor(topic, sub, 0L);
                long reset = backlog(admin, topic, sub);
                admin.topics().updateSubscriptionProperties(topic, sub, Map.of("k", sub));
                String property = admin.topics().getSubscriptionProperties(topic, sub).get("k");
                boolean listed = admin.topics().getSubscriptions(topic).contains(sub);
                admin.topics().deleteSubscription(topic, sub);
                boolean gone = !admin.topics().getSubscriptions(topic).contains(sub);
                System.out.println("sub [" + sub + "] peeked=" + new String(peeked.get(0).getData()) + ","
                        + new String(peeked.get(1).getData()) + " skipped=" + skipped + " reset=" + reset
                        + " property=[" + property + "] listed=" + listed + " gone=" + gone);
            }
        }
    }

    private static long backlog(PulsarAdmin admin, String topic, String sub) throws Exception {
        return admin.topics().getStats(topic).getSubscriptions().get(sub).getMsgBacklog();
    }
}
