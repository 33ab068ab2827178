// Hadoop's own MapFile writer and reader, to check ours (the files of Pulsar's `filesystem` offloader) both ways.
// Run with Java 17's source launcher on the jars `make offload-deps` puts in .deps/hadoop/lib:
//
//   java -cp '.deps/hadoop/lib/*' tests/offload/java/MapFileCheck.java write <dir> <NONE|RECORD|BLOCK> <spec-file>
//   java -cp '.deps/hadoop/lib/*' tests/offload/java/MapFileCheck.java read <dir>
//
// write: makes the MapFile <dir> (a directory holding the SequenceFiles `data` and `index`, and their .crc side files)
//   as Pulsar 4.0's FileSystemManagedLedgerOffloader does: a MapFile.Writer given only the key class (LongWritable)
//   and the value class (BytesWritable), so the compression type and codec come from the Configuration: here
//   Pulsar's conf/filesystem_offload_core_site.xml with io.seqfile.compression.type the one asked for (that file has
//   BLOCK; Hadoop's default, without it, is RECORD) and the default codec, DefaultCodec (zlib), on file:/// (Hadoop's
//   LocalFileSystem). <spec-file> holds the records to append, in order: int64 key, int32 length (both big-endian),
//   then that many bytes. <dir> must not exist or be empty.
// read: opens <dir> with MapFile.Reader (it reads without .crc files; when they are there, it checks them) and prints
//   one line per record, in order: `<key> <value length> <sha256 hex of the value>`; then random access as Pulsar's
//   read handle does it: for every key present, get(key) must give the value the sequential read gave for that
//   key's first record and seek(key) + next() the record after that one; get of a key below or above all of them
//   must find nothing: `RANDOM-OK <number of distinct keys>`.
//
// Only those lines go to stdout (Hadoop's logging and anything else it prints go to stderr). Any error: a message on
// stderr and exit status 1 (2 for bad arguments).

import java.io.DataInputStream;
import java.io.EOFException;
import java.io.File;
import java.io.FileInputStream;
import java.io.BufferedInputStream;
import java.io.IOException;
import java.io.PrintStream;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.io.BytesWritable;
import org.apache.hadoop.io.LongWritable;
import org.apache.hadoop.io.MapFile;
import org.apache.hadoop.io.SequenceFile;

public class MapFileCheck {

    /** The one stream our lines go to: System.out is pointed at stderr before Hadoop is touched. */
    private static PrintStream out;

    public static void main(String[] args) {
        out = System.out;
        System.setOut(System.err);
        // Hadoop logs through slf4j-simple (on stderr): its warnings, not its info (-D... on the command line wins).
        if (System.getProperty("org.slf4j.simpleLogger.defaultLogLevel") == null) {
            System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn");
        }
        try {
            if (args.length == 4 && args[0].equals("write")) {
                write(new File(args[1]), compressionType(args[2]), new File(args[3]));
            } else if (args.length == 2 && args[0].equals("read")) {
                read(new File(args[1]));
            } else {
                System.err.println("usage: MapFileCheck write <dir> <NONE|RECORD|BLOCK> <spec-file>\n"
                        + "       MapFileCheck read <dir>");
                System.exit(2);
            }
        } catch (Exception | Error e) {
            out.flush();
            System.err.println("MapFileCheck " + args[0] + ": FAILED: " + e);
            e.printStackTrace(System.err);
            System.exit(1);
        }
        out.flush();
        if (out.checkError()) {
            System.err.println("MapFileCheck: could not write to stdout");
            System.exit(1);
        }
    }

    /** Pulsar's conf/filesystem_offload_core_site.xml on file:///, with the compression type asked for; what
     *  FileSystemManagedLedgerOffloader sets on top (fs.file.impl) too. Reading uses the same. */
    private static Configuration configuration(SequenceFile.CompressionType compression) {
        Configuration conf = new Configuration();
        conf.set("fs.defaultFS", "file:///");
        conf.set("fs.file.impl", "org.apache.hadoop.fs.LocalFileSystem");
        conf.set("io.file.buffer.size", "4096");
        conf.set("io.seqfile.compress.blocksize", "1000000");
        conf.set("io.map.index.interval", "128");
        if (compression != null) {
            conf.set("io.seqfile.compression.type", compression.name());
        }
        return conf;
    }

    private static SequenceFile.CompressionType compressionType(String name) {
        try {
            return SequenceFile.CompressionType.valueOf(name);
        } catch (IllegalArgumentException e) {
            throw new IllegalArgumentException("compression must be NONE, RECORD or BLOCK, not " + name);
        }
    }

    private static Path path(File dir) {
        return new Path(dir.getAbsoluteFile().toURI());
    }

    private static void write(File dir, SequenceFile.CompressionType compression, File spec) throws IOException {
        String[] there = dir.list();
        if (dir.exists() && (there == null || there.length > 0)) {
            throw new IOException(dir + " exists and is not an empty directory");
        }
        Configuration conf = configuration(compression);
        long records = 0;
        try (DataInputStream in = new DataInputStream(new BufferedInputStream(new FileInputStream(spec), 1 << 16))) {
            MapFile.Writer writer = new MapFile.Writer(conf, path(dir),
                    MapFile.Writer.keyClass(LongWritable.class),
                    MapFile.Writer.valueClass(BytesWritable.class));
            try {
                LongWritable key = new LongWritable();
                BytesWritable value = new BytesWritable();
                while (true) {
                    long k;
                    try {
                        k = in.readLong();
                    } catch (EOFException end) {
                        break;
                    }
                    int length;
                    byte[] bytes;
                    try {
                        length = in.readInt();
                        if (length < 0) {
                            throw new IOException("spec record " + records + " (key " + k + "): length " + length);
                        }
                        bytes = new byte[length];
                        in.readFully(bytes);
                    } catch (EOFException truncated) {
                        throw new IOException("spec file " + spec + " ends inside record " + records + " (key " + k
                                + ")");
                    }
                    key.set(k);
                    value.set(bytes, 0, length);
                    writer.append(key, value);
                    records++;
                }
            } finally {
                writer.close();
            }
        }
        System.err.println("MapFileCheck write: " + records + " records, " + compression + ", into " + dir);
    }

    private static void read(File dir) throws IOException, NoSuchAlgorithmException {
        if (!new File(dir, MapFile.DATA_FILE_NAME).isFile() || !new File(dir, MapFile.INDEX_FILE_NAME).isFile()) {
            throw new IOException(dir + " is not a MapFile directory (no data and index files)");
        }
        Configuration conf = configuration(null);
        MessageDigest sha256 = MessageDigest.getInstance("SHA-256");
        HexFormat hex = HexFormat.of();
        Map<Long, byte[]> firstValue = new LinkedHashMap<>();
        List<Long> keys = new ArrayList<>();  // every record's, in order
        List<byte[]> values = new ArrayList<>();
        try (MapFile.Reader reader = new MapFile.Reader(path(dir), conf)) {
            if (reader.getKeyClass() != LongWritable.class || reader.getValueClass() != BytesWritable.class) {
                throw new IOException("key/value classes are " + reader.getKeyClass().getName() + "/"
                        + reader.getValueClass().getName() + ", not LongWritable/BytesWritable");
            }
            LongWritable key = new LongWritable();
            BytesWritable value = new BytesWritable();
            while (reader.next(key, value)) {
                byte[] bytes = value.copyBytes();
                out.println(key.get() + " " + bytes.length + " " + hex.formatHex(sha256.digest(bytes)));
                firstValue.putIfAbsent(key.get(), bytes);
                keys.add(key.get());
                values.add(bytes);
            }

            // get(k): the value of k's first record.
            for (Map.Entry<Long, byte[]> e : firstValue.entrySet()) {
                long k = e.getKey();
                BytesWritable got = new BytesWritable();
                if (reader.get(new LongWritable(k), got) == null) {
                    throw new IOException("get(" + k + ") found nothing");
                }
                if (!Arrays.equals(got.copyBytes(), e.getValue())) {
                    throw new IOException("get(" + k + ") gave " + got.getLength() + " bytes that differ from the "
                            + e.getValue().length + " the sequential read gave");
                }
            }
            // seek(k) stops on k's first record, so next() gives the record after it: Pulsar's read handle reads
            // entries first..last with seek(first - 1) and next().
            for (int i = 0; i + 1 < keys.size(); i++) {
                long k = keys.get(i);
                if (i > 0 && keys.get(i - 1) == k) {
                    continue;
                }
                if (!reader.seek(new LongWritable(k))) {
                    throw new IOException("seek(" + k + ") did not find it");
                }
                LongWritable nextKey = new LongWritable();
                BytesWritable got = new BytesWritable();
                if (!reader.next(nextKey, got) || nextKey.get() != keys.get(i + 1)
                        || !Arrays.equals(got.copyBytes(), values.get(i + 1))) {
                    throw new IOException("seek(" + k + ") + next() did not give the record after it (key "
                            + keys.get(i + 1) + ") but key " + nextKey.get());
                }
            }
            // get of a key below or above all: nothing.
            if (!keys.isEmpty()) {
                List<Long> absent = new ArrayList<>();
                long lowest = keys.get(0);
                long highest = keys.get(keys.size() - 1);
                if (lowest != Long.MIN_VALUE) {
                    absent.add(lowest - 1);
                }
                if (highest != Long.MAX_VALUE) {
                    absent.add(highest + 1);
                }
                for (long k : absent) {
                    if (reader.get(new LongWritable(k), new BytesWritable()) != null) {
                        throw new IOException("get(" + k + ") found a value, but there is no such key");
                    }
                }
            }
        }
        out.println("RANDOM-OK " + firstValue.size());
    }
}
