import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.pulsar.client.admin.PulsarAdmin;
import org.apache.pulsar.client.admin.PulsarAdminException;

/**
 * pulsar-admin brokers list-dynamic-config / update-dynamic-config / get-all-dynamic-config / delete-dynamic-config
 * (the official Java admin client, 4.0.7) against the broker at args[0]. One line per step.
 */
public class DynamicConfigOps {
    public static void main(String[] args) throws Exception {
        try (PulsarAdmin admin = PulsarAdmin.builder().serviceHttpUrl(args[0]).build()) {
            List<String> names = admin.brokers().getDynamicConfigurationNames();
            System.out.println("names maxTopicsPerNamespace=" + names.contains("maxTopicsPerNamespace")
                    + " clusterName=" + names.contains("clusterName"));
            admin.brokers().updateDynamicConfiguration("maxTopicsPerNamespace", "5000");
            admin.brokers().updateDynamicConfiguration("supportedNamespaceBundleSplitAlgorithms",
                    "range_equally_divide,topic_count_equally_divide");
            System.out.println("stored " + new TreeMap<>(admin.brokers().getAllDynamicConfigurations()));
            Map<String, String> runtime = admin.brokers().getRuntimeConfigurations();
            System.out.println("in force " + runtime.get("maxTopicsPerNamespace"));
            refused(admin, "clusterName", "elsewhere");
            refused(admin, "maxTopicsPerNamespace", "many");
            admin.brokers().deleteDynamicConfiguration("maxTopicsPerNamespace");
            admin.brokers().deleteDynamicConfiguration("supportedNamespaceBundleSplitAlgorithms");
            System.out.println("deleted " + admin.brokers().getAllDynamicConfigurations()
                    + " in force " + admin.brokers().getRuntimeConfigurations().get("maxTopicsPerNamespace"));
        }
    }

    private static void refused(PulsarAdmin admin, String name, String value) throws Exception {
        try {
            admin.brokers().updateDynamicConfiguration(name, value);
            System.out.println("refused " + name + " no");
        } catch (PulsarAdminException.PreconditionFailedException e) {
            System.out.println("refused " + name + " " + e.getStatusCode() + " " + e.getMessage());
        }
    }
}
