// Apache Pulsar's own blob-store offloader (tiered-storage-jcloud's BlobStoreManagedLedgerOffloader, as its offloader
// NAR runs it in a broker), against an S3 endpoint, to check ours both ways. Compiled and run by
// tests/offload/test_s3_offloader.py against .deps/jcloud/lib (`make offload-deps`).
//
//   JCloudCheck read  <endpoint> <bucket> <ledger id> <uuid> <managed ledger>   (tenant/namespace/persistent/topic)
//       opens the copy as Pulsar's broker does (readOffloaded), reads every entry in runs of 7, then entries
//       [last/2, last] again (a seek by the index), and prints "metadata <last entry id> <length> <ctime>
//       <ensemble size> <custom metadata keys>" then one line per entry: "<entry id> <hex bytes>".
//   JCloudCheck write <endpoint> <bucket> <ledger id> <uuid> <managed ledger> <max block size> <entries file>
//       offloads a closed ledger whose entries are the file's (each a 4-byte big-endian length, then its bytes).
//
// The driver: the environment's JCLOUD_DRIVER, "S3" (an S3-compatible store at the endpoint) or "azureblob" (the
// endpoint then given to jclouds as the system property jclouds.endpoint, as a broker's JVM option would: Pulsar's
// azureblob driver does not use managedLedgerOffloadServiceEndpoint). Credentials, as Pulsar's drivers read them:
// the environment's ACCESS_KEY_ID and ACCESS_KEY_SECRET (S3), AZURE_STORAGE_ACCOUNT and AZURE_STORAGE_ACCESS_KEY.

import io.netty.buffer.Unpooled;
import java.io.DataInputStream;
import java.io.EOFException;
import java.io.FileInputStream;
import java.lang.reflect.Proxy;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import org.apache.bookkeeper.client.LedgerMetadataBuilder;
import org.apache.bookkeeper.client.api.DigestType;
import org.apache.bookkeeper.client.api.LedgerEntries;
import org.apache.bookkeeper.client.api.LedgerEntry;
import org.apache.bookkeeper.client.api.LedgerMetadata;
import org.apache.bookkeeper.client.api.ReadHandle;
import org.apache.bookkeeper.client.impl.LedgerEntriesImpl;
import org.apache.bookkeeper.client.impl.LedgerEntryImpl;
import org.apache.bookkeeper.common.util.OrderedScheduler;
import org.apache.bookkeeper.mledger.LedgerOffloaderStatsDisable;
import org.apache.bookkeeper.mledger.offload.jcloud.impl.BlobStoreManagedLedgerOffloader;
import org.apache.bookkeeper.mledger.offload.jcloud.impl.OffsetsCache;
import org.apache.bookkeeper.mledger.offload.jcloud.provider.TieredStorageConfiguration;
import org.apache.bookkeeper.net.BookieId;

public class JCloudCheck {
    public static void main(String[] args) {
        try {
            run(args);
        } catch (Throwable t) {
            t.printStackTrace();
            System.exit(1);
        }
        System.exit(0);  // (jclouds leaves threads that would keep the JVM up)
    }

    static void run(String[] args) throws Exception {
        String endpoint = args[1], bucket = args[2], managedLedger = args[5];
        long ledgerId = Long.parseLong(args[3]);
        UUID uuid = UUID.fromString(args[4]);
        String maxBlock = args[0].equals("write") ? args[6] : String.valueOf(64 * 1024 * 1024);
        Map<String, String> props = new HashMap<>();
        // "S3" rather than "aws-s3": with "aws-s3", jclouds asks s3.amazonaws.com for the bucket's region whatever
        // the endpoint. The objects are the same for both.
        String driver = System.getenv().getOrDefault("JCLOUD_DRIVER", "S3");
        if (driver.equals("azureblob")) {
            System.setProperty("jclouds.endpoint", endpoint);
        }
        if (driver.equals("google-cloud-storage")) {
            props.put("gcsManagedLedgerOffloadServiceAccountKeyFile", System.getenv("GCS_KEY_FILE"));
        }
        props.put("managedLedgerOffloadDriver", driver);
        props.put("managedLedgerOffloadBucket", bucket);
        props.put("managedLedgerOffloadServiceEndpoint", endpoint);
        props.put("managedLedgerOffloadMaxBlockSizeInBytes", maxBlock);
        props.put("managedLedgerOffloadReadBufferSizeInBytes", String.valueOf(4096));
        TieredStorageConfiguration config = TieredStorageConfiguration.create(props);
        OrderedScheduler scheduler = OrderedScheduler.newSchedulerBuilder().numThreads(1).name("check").build();
        BlobStoreManagedLedgerOffloader offloader = BlobStoreManagedLedgerOffloader.create(
                config, Map.of("pulsarclustername", "check"), scheduler, scheduler,
                LedgerOffloaderStatsDisable.INSTANCE, new OffsetsCache());
        try {
            if (args[0].equals("read")) {
                read(offloader, bucket, ledgerId, uuid, managedLedger);
            } else {
                write(offloader, ledgerId, uuid, managedLedger, args[7]);
            }
        } finally {
            offloader.close();
            scheduler.shutdownNow();
        }
    }

    static void read(BlobStoreManagedLedgerOffloader offloader, String bucket, long ledgerId, UUID uuid,
                     String managedLedger) throws Exception {
        Map<String, String> driverMetadata = new HashMap<>(offloader.getOffloadDriverMetadata());
        driverMetadata.put("bucket", bucket);
        driverMetadata.put("ManagedLedgerName", managedLedger);
        ReadHandle handle = offloader.readOffloaded(ledgerId, uuid, driverMetadata).get();
        LedgerMetadata m = handle.getLedgerMetadata();
        StringBuilder out = new StringBuilder();
        out.append("metadata ").append(m.getLastEntryId()).append(' ').append(m.getLength()).append(' ')
                .append(m.getCtime()).append(' ').append(m.getEnsembleSize()).append(' ')
                .append(String.join(",", new java.util.TreeSet<>(m.getCustomMetadata().keySet()))).append('\n');
        long last = handle.getLastAddConfirmed();
        for (long first = 0; first <= last; first += 7) {
            print(handle.readAsync(first, Math.min(first + 6, last)).get(), out);
        }
        print(handle.readAsync(last / 2, last).get(), out);
        handle.closeAsync().get();
        System.out.print(out);
    }

    static void print(LedgerEntries entries, StringBuilder out) {
        try (entries) {
            for (LedgerEntry e : entries) {
                out.append(e.getEntryId()).append(' ');
                for (byte b : e.getEntryBytes()) {
                    out.append(String.format("%02x", b));
                }
                out.append('\n');
            }
        }
    }

    static void write(BlobStoreManagedLedgerOffloader offloader, long ledgerId, UUID uuid, String managedLedger,
                      String entriesFile) throws Exception {
        List<byte[]> entries = new ArrayList<>();
        long length = 0;
        try (DataInputStream in = new DataInputStream(new FileInputStream(entriesFile))) {
            while (true) {
                int size;
                try {
                    size = in.readInt();
                } catch (EOFException end) {
                    break;
                }
                byte[] data = new byte[size];
                in.readFully(data);
                entries.add(data);
                length += size;
            }
        }
        LedgerMetadata metadata = LedgerMetadataBuilder.create()
                .withId(ledgerId).withMetadataFormatVersion(3).withPassword(new byte[0])
                .withEnsembleSize(1).withWriteQuorumSize(1).withAckQuorumSize(1)
                .withDigestType(DigestType.CRC32C).newEnsembleEntry(0, List.of(BookieId.parse("127.0.0.1:3181")))
                .withCreationTime(1_700_000_000_000L).storingCreationTime(true)
                .withCustomMetadata(Map.of("component", "managed-ledger".getBytes(StandardCharsets.UTF_8)))
                .withClosedState().withLastEntryId(entries.size() - 1).withLength(length).build();
        ReadHandle handle = (ReadHandle) Proxy.newProxyInstance(JCloudCheck.class.getClassLoader(),
                new Class<?>[] {ReadHandle.class}, (proxy, method, margs) -> {
                    switch (method.getName()) {
                        case "getId": return ledgerId;
                        case "getLedgerMetadata": return metadata;
                        case "getLastAddConfirmed": return (long) entries.size() - 1;
                        case "getLength": return metadata.getLength();
                        case "isClosed": return true;
                        case "closeAsync": return CompletableFuture.completedFuture(null);
                        case "readAsync": case "readUnconfirmedAsync": {
                            long first = (Long) margs[0], last = (Long) margs[1];
                            List<LedgerEntry> read = new ArrayList<>();
                            for (long id = first; id <= last; id++) {
                                byte[] data = entries.get((int) id);
                                read.add(LedgerEntryImpl.create(ledgerId, id, data.length,
                                        Unpooled.wrappedBuffer(data)));
                            }
                            return CompletableFuture.completedFuture(LedgerEntriesImpl.create(read));
                        }
                        case "hashCode": return System.identityHashCode(proxy);
                        case "equals": return proxy == margs[0];
                        case "toString": return "ReadHandle(" + ledgerId + ")";
                        default: throw new UnsupportedOperationException(method.getName());
                    }
                });
        offloader.offload(handle, uuid, Map.of("ManagedLedgerName", managedLedger)).get();
        System.out.println("offloaded " + entries.size());
    }
}
