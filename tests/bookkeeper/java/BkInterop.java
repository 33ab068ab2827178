// BookKeeper's own Java client against our ledgers, for the interoperability tests (tests/bookkeeper/test_client.py).
// Run with the source launcher: java -cp '.deps/bookkeeper/lib/*' BkInterop.java <metadataServiceUri> <command> ...
//   write <entries> <close|open>   create a 3/2/2 CRC32C ledger (password ""), add "java-<i>" entries, print its id;
//                                  with "open" it exits without closing, as a crashed writer would
//   read <ledgerId>...             recovery-open each ledger and print its LAC, length and entries (hex payloads)
//   metadata <ledgerId>...         print each ledger's metadata as BookKeeper prints it (toSafeString), untouched
import java.nio.charset.StandardCharsets;
import java.util.Enumeration;
import java.util.HexFormat;
import java.util.Map;
import org.apache.bookkeeper.client.BookKeeper;
import org.apache.bookkeeper.client.LedgerEntry;
import org.apache.bookkeeper.client.LedgerHandle;
import org.apache.bookkeeper.conf.ClientConfiguration;

public class BkInterop {
    public static void main(String[] args) throws Exception {
        ClientConfiguration conf = new ClientConfiguration();
        conf.setMetadataServiceUri(args[0]);
        conf.setUseV2WireProtocol(true); // as Pulsar's brokers do
        BookKeeper bk = new BookKeeper(conf);
        byte[] password = new byte[0];
        if (args[1].equals("write")) {
            int entries = Integer.parseInt(args[2]);
            Map<String, byte[]> custom = Map.of("application", "pulsar".getBytes(StandardCharsets.UTF_8));
            LedgerHandle lh = bk.createLedger(3, 2, 2, BookKeeper.DigestType.CRC32C, password, custom);
            for (int i = 0; i < entries; i++) {
                lh.addEntry(("java-" + i).getBytes(StandardCharsets.UTF_8));
            }
            if (args[3].equals("close")) {
                lh.close();
            }
            System.out.println("LEDGER " + lh.getId());
        } else if (args[1].equals("metadata")) {
            for (int i = 2; i < args.length; i++) {
                long ledgerId = Long.parseLong(args[i]);
                System.out.println("METADATA " + ledgerId + " " + bk.getLedgerMetadata(ledgerId).get().toSafeString());
            }
        } else {
            for (int i = 2; i < args.length; i++) {
                long ledgerId = Long.parseLong(args[i]);
                LedgerHandle lh = bk.openLedger(ledgerId, BookKeeper.DigestType.CRC32C, password);
                long last = lh.getLastAddConfirmed();
                System.out.println("LEDGER " + ledgerId + " LAC " + last + " LENGTH " + lh.getLength());
                if (last >= 0) {
                    Enumeration<LedgerEntry> read = lh.readEntries(0, last);
                    while (read.hasMoreElements()) {
                        LedgerEntry entry = read.nextElement();
                        System.out.println("ENTRY " + ledgerId + " " + entry.getEntryId() + " "
                                + HexFormat.of().formatHex(entry.getEntry()));
                    }
                }
                lh.close();
            }
        }
        System.out.flush();
        Runtime.getRuntime().halt(0); // no close: an "open" ledger stays OPEN, as after a crash
    }
}
