// The ledger metadata under key -1 of an offloaded ledger, read and written by Apache Pulsar's own code
// (org.apache.bookkeeper.mledger.offload.OffloadUtils in managed-ledger 4.0.7, on the jars of `make pulsar-deps`):
//
//   java -cp '.deps/pulsar/lib/*' LedgerMetadataCheck parse <ledger id> <file>
//       prints what parseLedgerMetadata makes of the bytes in <file>, one "key value" line each
//   java -cp '.deps/pulsar/lib/*' LedgerMetadataCheck build <file>
//       writes to <file> what buildLedgerMetadataFormat makes of a closed ledger's metadata: 3 bookies, quorums
//       3/2/2, entries 0..41 (last entry id 41), length 4242, ctime 1700000000123, CRC32C, two ensembles (the
//       second from entry 20), Pulsar's three custom metadata keys for the managed ledger "public/default/persistent/x"
//   java -cp '.deps/pulsar/lib/*' LedgerMetadataCheck frombk <ledger id> <znode ctime> <znode file> <file>
//       writes to <file> what buildLedgerMetadataFormat makes of the ledger metadata BookKeeper's LedgerMetadataSerDe
//       reads from a ledger's znode (the bytes in <znode file>, the znode created at <znode ctime>): what Pulsar's
//       offloader stores under key -1 for a ledger it copies from BookKeeper
//
// Errors: a message on stderr, exit status 1.

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.TreeMap;
import org.apache.bookkeeper.client.api.DigestType;
import org.apache.bookkeeper.client.api.LedgerMetadata;
import org.apache.bookkeeper.client.LedgerMetadataBuilder;
import org.apache.bookkeeper.meta.LedgerMetadataSerDe;
import org.apache.bookkeeper.mledger.offload.OffloadUtils;
import org.apache.bookkeeper.net.BookieId;

public class LedgerMetadataCheck {
    public static void main(String[] args) throws Exception {
        try {
            if (args.length == 3 && args[0].equals("parse")) {
                parse(Long.parseLong(args[1]), Files.readAllBytes(Path.of(args[2])));
            } else if (args.length == 2 && args[0].equals("build")) {
                Files.write(Path.of(args[1]), OffloadUtils.buildLedgerMetadataFormat(sample()));
            } else if (args.length == 5 && args[0].equals("frombk")) {
                LedgerMetadata m = new LedgerMetadataSerDe().parseConfig(Files.readAllBytes(Path.of(args[3])),
                        Long.parseLong(args[1]), Optional.of(Long.parseLong(args[2])));
                Files.write(Path.of(args[4]), OffloadUtils.buildLedgerMetadataFormat(m));
            } else {
                System.err.println("usage: parse <ledger id> <file> | build <file> | frombk <ledger id> <znode ctime> "
                        + "<znode file> <file>");
                System.exit(2);
            }
        } catch (Exception e) {
            e.printStackTrace();
            System.exit(1);
        }
    }

    static void parse(long id, byte[] bytes) throws Exception {
        LedgerMetadata m = OffloadUtils.parseLedgerMetadata(id, bytes);
        System.out.println("id " + m.getLedgerId());
        System.out.println("closed " + m.isClosed());
        System.out.println("lastEntryId " + m.getLastEntryId());
        System.out.println("length " + m.getLength());
        System.out.println("ensembleSize " + m.getEnsembleSize());
        System.out.println("writeQuorumSize " + m.getWriteQuorumSize());
        System.out.println("ackQuorumSize " + m.getAckQuorumSize());
        System.out.println("ctime " + m.getCtime());
        System.out.println("digestType " + m.getDigestType());
        for (Map.Entry<Long, ? extends List<BookieId>> e : m.getAllEnsembles().entrySet()) {
            System.out.println("ensemble " + e.getKey() + " " + e.getValue());
        }
        Map<String, String> custom = new TreeMap<>();
        m.getCustomMetadata().forEach((k, v) -> custom.put(k, new String(v, StandardCharsets.UTF_8)));
        custom.forEach((k, v) -> System.out.println("custom " + k + " " + v));
    }

    static LedgerMetadata sample() {
        List<BookieId> first = new ArrayList<>(List.of(BookieId.parse("10.0.0.1:3181"), BookieId.parse("10.0.0.2:3181"),
                BookieId.parse("10.0.0.3:3181")));
        List<BookieId> second = new ArrayList<>(List.of(BookieId.parse("10.0.0.1:3181"), BookieId.parse("10.0.0.4:3181"),
                BookieId.parse("10.0.0.3:3181")));
        return LedgerMetadataBuilder.create().withId(9).withEnsembleSize(3).withWriteQuorumSize(2)
                .withAckQuorumSize(2).withDigestType(DigestType.CRC32C).withPassword(new byte[0])
                .newEnsembleEntry(0, first).newEnsembleEntry(20, second).withClosedState().withLastEntryId(41)
                .withLength(4242).withCreationTime(1700000000123L)
                .withCustomMetadata(Map.of("application", "pulsar".getBytes(StandardCharsets.UTF_8),
                        "component", "managed-ledger".getBytes(StandardCharsets.UTF_8),
                        "pulsar/managed-ledger", "public/default/persistent/x".getBytes(StandardCharsets.UTF_8)))
                .build();
    }
}
