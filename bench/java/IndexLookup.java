// Reference for bench/bench_index.py: the broker's key lookup in one index file (format §5.7), written for
// rmqtool from the format description. It maps the file read-only and, per key, does what the broker's
// IndexFile.selectPhyOffset does: a reference count taken and released around the read, String.hashCode of the
// "topic#key" string, abs() with Integer.MIN_VALUE forced to 0, the slot read, then the chain walk newest to
// oldest comparing hashes and decoded times, collecting offsets into a List<Long>.
//
// Usage: java IndexLookup <index file> <hashSlotNum> <indexNum> <keys file (one "topic#key" per line)> <rounds>
//   Output (one line of JSON): medianNs over the last timed pass, results (offsets found), lookups.
// or:    java IndexLookup <index file> <hashSlotNum> <indexNum> <keys file> list <begin> <end> <maxNum>
//   Output: per key, the offsets found, as [a, b, ...].
import java.io.IOException;
import java.nio.MappedByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.atomic.AtomicLong;

public final class IndexLookup {
    private static final int HEADER_SIZE = 40;
    private static final int SLOT_SIZE = 4;
    private static final int ITEM_SIZE = 20;

    private final MappedByteBuffer buffer;
    private final int hashSlotNum;
    private final AtomicLong refCount = new AtomicLong(1);  // stands for the mapped file's hold()/release()
    private final AtomicLong beginTimestamp = new AtomicLong();
    private final java.util.concurrent.atomic.AtomicInteger indexCount = new java.util.concurrent.atomic.AtomicInteger();

    private IndexLookup(Path file, int hashSlotNum, int indexNum) throws IOException {
        this.hashSlotNum = hashSlotNum;
        int size = HEADER_SIZE + hashSlotNum * SLOT_SIZE + indexNum * ITEM_SIZE;  // int, as the broker computes it
        try (FileChannel channel = FileChannel.open(file, StandardOpenOption.READ)) {
            this.buffer = channel.map(FileChannel.MapMode.READ_ONLY, 0, size);
        }
        beginTimestamp.set(buffer.getLong(0));
        int count = buffer.getInt(36);
        indexCount.set(count <= 0 ? 1 : count);
    }

    private static int slotHash(String key) {
        int h = Math.abs(key.hashCode());
        return h < 0 ? 0 : h;
    }

    void select(List<Long> out, String key, int maxNum, long begin, long end) {
        if (refCount.getAndIncrement() <= 0) {
            refCount.getAndDecrement();
            return;
        }
        try {
            int keyHash = slotHash(key);
            int count = indexCount.get();
            int head = buffer.getInt(HEADER_SIZE + (keyHash % hashSlotNum) * SLOT_SIZE);
            if (head <= 0 || head > count || count <= 1) {
                return;
            }
            int itemsBase = HEADER_SIZE + hashSlotNum * SLOT_SIZE;
            for (int n = head; out.size() < maxNum; ) {
                int pos = itemsBase + n * ITEM_SIZE;
                int hash = buffer.getInt(pos);
                long phyOffset = buffer.getLong(pos + 4);
                long diff = buffer.getInt(pos + 12);
                int prev = buffer.getInt(pos + 16);
                if (diff < 0) {
                    break;
                }
                long time = beginTimestamp.get() + diff * 1000L;
                if (hash == keyHash && time >= begin && time <= end) {
                    out.add(phyOffset);
                }
                if (prev <= 0 || prev > indexCount.get() || prev == n || time < begin) {
                    break;
                }
                n = prev;
            }
        } finally {
            refCount.getAndDecrement();
        }
    }

    public static void main(String[] args) throws IOException {
        Path file = Paths.get(args[0]);
        int slots = Integer.parseInt(args[1]);
        int items = Integer.parseInt(args[2]);
        List<String> lines = Files.readAllLines(Paths.get(args[3]));
        IndexLookup index = new IndexLookup(file, slots, items);
        if (args[4].equals("list")) {  // one line per key: the offsets found (the bench's test checks them)
            long begin = Long.parseLong(args[5]);
            long end = Long.parseLong(args[6]);
            int maxNum = Integer.parseInt(args[7]);
            StringBuilder text = new StringBuilder();
            for (String key : lines) {
                List<Long> out = new ArrayList<>();
                index.select(out, key, maxNum, begin, end);
                text.append(out).append('\n');
            }
            System.out.print(text);
            return;
        }
        int rounds = Integer.parseInt(args[4]);
        char[][] keys = new char[lines.size()][];
        for (int i = 0; i < keys.length; i++) {
            keys[i] = lines.get(i).toCharArray();
        }
        long[] times = new long[keys.length];
        long found = 0;
        for (int r = 0; r < rounds; r++) {
            // Fresh String objects each round: String caches its hashCode, the broker builds its key per query.
            String[] fresh = new String[keys.length];
            for (int i = 0; i < keys.length; i++) {
                fresh[i] = new String(keys[i]);
            }
            found = 0;
            for (int i = 0; i < fresh.length; i++) {
                List<Long> out = new ArrayList<>();
                long t0 = System.nanoTime();
                index.select(out, fresh[i], 64, 0L, Long.MAX_VALUE);
                times[i] = System.nanoTime() - t0;
                found += out.size();
            }
        }
        Arrays.sort(times);
        System.out.println("{\"medianNs\": " + times[times.length / 2] + ", \"results\": " + found
            + ", \"lookups\": " + keys.length + "}");
    }
}
