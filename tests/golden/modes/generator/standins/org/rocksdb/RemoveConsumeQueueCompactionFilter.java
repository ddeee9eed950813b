/*
 * Run-time stand-in (not RocketMQ code). RocketMQ's pom uses its own RocksDB build (org.apache.rocketmq:
 * rocketmq-rocksdb 1.0.2) whose extra native class RemoveConsumeQueueCompactionFilter drops consume-queue entries
 * whose commit-log offset is below the store's min physical offset (expired data). Stock rocksdbjni 9.8.4 has no
 * such filter, and a Java compaction filter is not possible, so this stand-in hands RocksDB the stock native
 * RemoveEmptyValueCompactionFilter instead: it removes nothing the broker writes (consume-queue values are never
 * empty). With file cleaning off (nothing expires) the stored data is the same; only compactions of expired
 * entries would differ.
 */
package org.rocksdb;

public class RemoveConsumeQueueCompactionFilter extends AbstractCompactionFilter<Slice> {
    public RemoveConsumeQueueCompactionFilter(long minPhyOffset) {
        super(handOver(new RemoveEmptyValueCompactionFilter()));
    }

    private static long handOver(RemoveEmptyValueCompactionFilter f) {
        long h = f.getNativeHandle();
        f.disOwnNativeHandle();   // this object now owns (and disposes) the native filter
        return h;
    }
}
