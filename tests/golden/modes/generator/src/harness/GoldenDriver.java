/*
 * Golden-set driver: real RocketMQ Java clients against a real NameServer + Broker; writes JSON lines of what was
 * sent (with the SendResult), what consumers received (bodies as base64, decompressed by the client), and what the
 * broker answered (queryMessage raw + client-filtered, viewMessage, examineTopicStats, examineConsumeStats).
 * Not RocketMQ code.
 *
 *   produce  <ns> <brokerAddr> <out sent.jsonl> <seed> <r1|r2>      the traffic mix (see produce())
 *   flood    <ns> <out.jsonl> <topic> <count> <seed> <sleepMs> [keyPrefix]   keep sending; every ack is flushed (kill -9 run)
 *   groups   <ns> <outDir> <failGroup> <partMax> <allSeconds> <topics,...>
 *            G_FAIL-style group (fails some, maxReconsumeTimes=1), partial lite-pull group G_PART on TopicA,
 *            then a group G_ALL that consumes everything (user topics + retry + DLQ of failGroup)
 *   consume  <ns> <group> <topics,...> <seconds> <out.jsonl>        push consumer from first offset (verification)
 *   answers  <ns> <brokerAddr> <sent.jsonl> <outDir> <groups,...> <viewEvery>
 *            queries.jsonl (queryMessage per topic/key, raw broker answer and client answer; viewMessage samples),
 *            admin.json (examineTopicStats for every topic the broker lists; examineConsumeStats per group)
 *   mktopic  <ns> <brokerAddr> <topic:queues,...>
 */
package harness;

import com.alibaba.fastjson.JSON;
import java.io.BufferedReader;
import java.io.FileReader;
import java.io.FileWriter;
import java.io.PrintWriter;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.rocketmq.client.QueryResult;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.client.producer.TransactionSendResult;
import org.apache.rocketmq.common.MixAll;
import org.apache.rocketmq.common.compression.CompressionType;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageClientExt;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.remoting.protocol.RemotingCommand;
import org.apache.rocketmq.remoting.protocol.RequestCode;
import org.apache.rocketmq.remoting.protocol.admin.ConsumeStats;
import org.apache.rocketmq.remoting.protocol.admin.OffsetWrapper;
import org.apache.rocketmq.remoting.protocol.admin.TopicOffset;
import org.apache.rocketmq.remoting.protocol.admin.TopicStatsTable;
import org.apache.rocketmq.remoting.protocol.header.QueryMessageRequestHeader;
import org.apache.rocketmq.remoting.protocol.header.QueryMessageResponseHeader;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

public class GoldenDriver {
    static Random rnd = new Random(1);

    public static void main(String[] a) throws Exception {
        try {
            switch (a[0]) {
                case "produce": produce(a[1], a[2], a[3], Long.parseLong(a[4]), a[5]); break;
                case "flood": flood(a[1], a[2], a[3], Integer.parseInt(a[4]), Long.parseLong(a[5]), Integer.parseInt(a[6]),
                    a.length > 7 ? a[7] : "r2-flood"); break;
                case "groups": groups(a[1], a[2], a[3], Integer.parseInt(a[4]), Integer.parseInt(a[5]), a[6].split(",")); break;
                case "consume": consume(a[1], a[2], a[3].split(","), Integer.parseInt(a[4]), a[5]); break;
                case "answers": answers(a[1], a[2], a[3], a[4], a[5].split(","), Integer.parseInt(a[6])); break;
                case "mktopic": Driver.mktopic(a[1], a[2], a[3].split(",")); break;
                case "waitmaster": ModesDriver.waitMaster(a[1], a[2], Integer.parseInt(a[3])); break;
                case "lmqanswers": ModesDriver.lmqAnswers(a[1], a[2], a[3], a[4]); break;
                default: throw new IllegalArgumentException(a[0]);
            }
        } catch (Throwable t) {
            t.printStackTrace();
            System.exit(1);
        }
        System.exit(0);
    }

    static String sha(byte[] b) {
        try {
            StringBuilder sb = new StringBuilder();
            for (byte x : java.security.MessageDigest.getInstance("SHA-256").digest(b)) {
                sb.append(String.format("%02x", x));
            }
            return sb.toString();
        } catch (Exception e) {
            throw new IllegalStateException(e);
        }
    }

    static String b64(byte[] b) {
        return b == null ? null : Base64.getEncoder().encodeToString(b);
    }

    static byte[] text(int n, String seed) {
        StringBuilder sb = new StringBuilder();
        while (sb.length() < n) {
            sb.append(seed).append(' ').append(sb.length()).append(" lorem ipsum dolor sit amet; ");
        }
        return sb.substring(0, n).getBytes(StandardCharsets.UTF_8);
    }

    static byte[] random(int n) {
        byte[] b = new byte[n];
        rnd.nextBytes(b);
        return b;
    }

    static final AtomicInteger SEQ = new AtomicInteger();

    static Map<String, Object> sentRec(String type, Message m, byte[] body) {
        Map<String, Object> o = new LinkedHashMap<>();
        o.put("seq", SEQ.getAndIncrement());
        o.put("type", type);
        o.put("topic", m.getTopic());
        o.put("tags", m.getTags());
        o.put("keys", m.getKeys());
        o.put("delayLevel", m.getDelayTimeLevel());
        o.put("bodyLen", body.length);
        o.put("bodyB64", b64(body));
        o.put("props", new TreeMap<>(m.getProperties()));   // after send: includes UNIQ_KEY etc. set by the client
        return o;
    }

    static void putResult(Map<String, Object> o, SendResult r) {
        o.put("status", String.valueOf(r.getSendStatus()));
        o.put("msgId", r.getMsgId());
        o.put("offsetMsgId", r.getOffsetMsgId());
        o.put("queueId", r.getMessageQueue().getQueueId());
        o.put("queueOffset", r.getQueueOffset());
        o.put("transactionId", r.getTransactionId());
        if (r instanceof TransactionSendResult) {
            o.put("localTx", String.valueOf(((TransactionSendResult) r).getLocalTransactionState()));
        }
    }

    static List<Map<String, Object>> recs = Collections.synchronizedList(new ArrayList<>());

    interface Sender {
        SendResult send(Message m) throws Exception;
    }

    static void send(String type, Message m, Sender s) {
        byte[] body = m.getBody();
        SendResult r = null;
        Exception err = null;
        try {
            r = s.send(m);
        } catch (Exception e) {
            err = e;
        }
        Map<String, Object> o = sentRec(type, m, body);
        if (r != null) {
            putResult(o, r);
        } else {
            o.put("status", "EXCEPTION");
            o.put("error", String.valueOf(err));
        }
        recs.add(o);
    }

    static DefaultMQProducer producer(String ns, String group, CompressionType ct) throws Exception {
        DefaultMQProducer p = new DefaultMQProducer(group);
        p.setNamesrvAddr(ns);
        p.setSendMsgTimeout(10000);
        p.setRetryTimesWhenSendFailed(0);
        if (ct != null) {
            p.setCompressType(ct);
        }
        p.start();
        return p;
    }

    static final String[] NONASCII = {"ключ", "键", "clé", "κλειδί", "🔑", "مفتاح"};

    /** The mix. r2 adds edge cases: empty key between spaces, '#' in keys, 12 keys, a hot key on 80 messages,
     *  bodies at 4095/4096/4097 bytes, compressible binary, an 8-queue topic, non-ASCII tags. */
    static void produce(String ns, String brokerAddr, String out, long seed, String variant) throws Exception {
        rnd = new Random(seed);
        boolean r2 = variant.equals("r2");
        boolean lmq = variant.equals("lmq");
        boolean small = variant.equals("m") || lmq;   // modes sets: a smaller r1 mix (+ LMQ traffic for lmq)
        String pfx = r2 ? "r2" : small ? variant : "r1";
        DefaultMQProducer p = producer(ns, "PG_MAIN", null);
        // 1) plain: tags, 1-4 keys (some shared by TopicA and TopicB), non-ASCII keys, user properties
        int plain = r2 ? 420 : small ? 200 : 300;
        for (int i = 0; i < plain; i++) {
            String topic = i % 3 == 2 ? "TopicB" : "TopicA";
            List<String> keys = new ArrayList<>();
            keys.add(pfx + "-k" + i);
            if (i % 4 == 0) keys.add("shared-" + (i % 20));                         // same key, both topics
            if (i % 7 == 0) keys.add(NONASCII[i % NONASCII.length] + "-" + (i % 5));
            if (i % 11 == 0) keys.add("order-" + (i / 11));
            if (r2 && i % 5 == 0) keys.add("hot");                                 // 84 messages share "hot"
            String k = String.join(" ", keys);
            if (r2 && i % 50 == 1) k = k + "  " + pfx + "-after-empty-" + i;       // empty key between two spaces
            if (r2 && i % 60 == 3) k = k + " a#b-" + i;
            if (r2 && i == 77) {
                StringBuilder sb = new StringBuilder(k);
                for (int j = 0; j < 12; j++) sb.append(" many-").append(j);
                k = sb.toString();
            }
            String tag = i % 2 == 0 ? "TagA" : (r2 && i % 9 == 1 ? "标签" : "TagB");
            byte[] body = i % 13 == 5 ? random(50 + rnd.nextInt(400)) : text(40 + rnd.nextInt(500), pfx + "plain" + i);
            Message m = new Message(topic, tag, k, body);
            if (i % 3 == 0) m.putUserProperty("color", i % 2 == 0 ? "red" : "зелёный");
            if (i % 5 == 0) m.putUserProperty("名字", "值-" + i);
            if (i % 8 == 0) m.putUserProperty("spaces", "a b  c=d:e");
            send("plain", m, p::send);
        }
        // 2) bodies over 4 KiB: ZLIB (default producer), ZSTD and LZ4 producers; text and binary bodies
        int[] bigSizes = r2 ? new int[] {4095, 4096, 4097, 5000, 9000, 20000} : small ? new int[] {4097, 12000} : new int[] {4097, 6000, 12000, 30000};
        Map<String, DefaultMQProducer> byCt = new LinkedHashMap<>();
        byCt.put("ZLIB", p);
        byCt.put("ZSTD", producer(ns, "PG_ZSTD", CompressionType.ZSTD));
        byCt.put("LZ4", producer(ns, "PG_LZ4", CompressionType.LZ4));
        for (Map.Entry<String, DefaultMQProducer> e : byCt.entrySet()) {
            String ct = e.getKey();
            DefaultMQProducer pc = e.getValue();
            for (int s : bigSizes) {
                for (String kind : new String[] {"text", "random", "zeros"}) {
                    if (kind.equals("zeros") && !r2 && s > 6000) continue;
                    byte[] body = kind.equals("text") ? text(s, pfx + ct + s)
                        : kind.equals("random") ? random(s) : new byte[s];
                    if (kind.equals("zeros")) body[s / 2] = 7;
                    Message m = new Message("TopicBig", "big-" + ct, "kBig-" + ct + "-" + kind + "-" + s + " big-" + kind, body);
                    m.putUserProperty("compressType", ct);
                    send("big-" + ct + "-" + kind, m, pc::send);
                }
            }
        }
        byCt.get("ZSTD").shutdown();
        byCt.get("LZ4").shutdown();
        // 3) batch sends (MessageBatch; never compressed by the client)
        for (int b = 0; b < (r2 ? 6 : small ? 3 : 4); b++) {
            List<Message> batch = new ArrayList<>();
            for (int i = 0; i < 10; i++) {
                Message m = new Message("TopicBatch", "batch", pfx + "-batch-" + b + "-" + i + " batch-" + b
                    + (i % 3 == 0 ? " партия-" + b : ""), text(50 + i * 7, pfx + "batch" + b + "-" + i));
                if (i % 4 == 0) m.putUserProperty("批次", "b" + b);
                batch.add(m);
            }
            SendResult r = null;
            Exception err = null;
            try {
                r = p.send(batch);
            } catch (Exception e) {
                err = e;
            }
            String[] ids = r == null || r.getMsgId() == null ? new String[0] : r.getMsgId().split(",");
            String[] oids = r == null || r.getOffsetMsgId() == null ? new String[0] : r.getOffsetMsgId().split(",");
            for (int i = 0; i < batch.size(); i++) {
                Map<String, Object> o = sentRec("batch", batch.get(i), batch.get(i).getBody());
                if (r != null) {
                    o.put("status", String.valueOf(r.getSendStatus()));
                    o.put("msgId", i < ids.length ? ids[i] : null);
                    o.put("offsetMsgId", i < oids.length ? oids[i] : null);
                    o.put("queueId", r.getMessageQueue().getQueueId());
                    o.put("queueOffset", r.getQueueOffset() + i);
                    o.put("batchMsgIds", r.getMsgId());
                } else {
                    o.put("status", "EXCEPTION");
                    o.put("error", String.valueOf(err));
                }
                recs.add(o);
            }
        }
        // 4) ordered sends to fixed queues (selector: orderId % queues); r2 also to an 8-queue topic
        String[] orderTopics = r2 ? new String[] {"TopicOrder", "TopicWide"} : new String[] {"TopicOrder"};
        for (String ot : orderTopics) {
            for (int i = 0; i < (small ? 40 : 60); i++) {
                final int orderId = ot.equals("TopicWide") ? (i % 3) * 3 + 1 : i % 2;   // TopicWide: queues 1, 4, 7
                Message m = new Message(ot, "order", pfx + "-" + ot + "-" + orderId + "-" + i + " orderId-" + orderId,
                    text(60 + i, pfx + ot + i));
                send("order", m, mm -> p.send(mm, (mqs, msg, arg) -> mqs.get((Integer) arg % mqs.size()), orderId));
            }
        }
        // 5) delay levels: 1 (1 s), 2 (5 s), 3 (10 s) are delivered during the run; 18 (2 h) never is
        for (int i = 0; i < (r2 ? 24 : small ? 12 : 16); i++) {
            int lvl = i % 8 == 7 ? 18 : 1 + i % 3;
            Message m = new Message("TopicDelay", "delay", pfx + "-delay-" + i + " delay-L" + lvl, text(60 + i, pfx + "delay" + i));
            m.setDelayTimeLevel(lvl);
            send("delay-L" + lvl, m, p::send);
        }
        // 6) transactions: commit (i%3==0), rollback (i%3==1), unknown -> commit on the broker's check (i%3==2)
        TransactionMQProducer tp = new TransactionMQProducer("PG_TX");
        tp.setNamesrvAddr(ns);
        final AtomicInteger checks = new AtomicInteger();
        final List<String> checked = Collections.synchronizedList(new ArrayList<>());
        tp.setTransactionListener(new TransactionListener() {
            @Override public LocalTransactionState executeLocalTransaction(Message msg, Object arg) {
                int i = (Integer) arg;
                return i % 3 == 0 ? LocalTransactionState.COMMIT_MESSAGE
                    : i % 3 == 1 ? LocalTransactionState.ROLLBACK_MESSAGE : LocalTransactionState.UNKNOW;
            }

            @Override public LocalTransactionState checkLocalTransaction(MessageExt msg) {
                checks.incrementAndGet();
                checked.add(msg.getKeys());
                return LocalTransactionState.COMMIT_MESSAGE;
            }
        });
        tp.start();
        for (int i = 0; i < (r2 ? 18 : small ? 9 : 12); i++) {
            Message m = new Message("TopicTx", "tx", pfx + "-tx-" + i + " tx-" + (i % 3), text(90 + i, pfx + "tx" + i));
            final int fi = i;
            send("tx-" + (i % 3 == 0 ? "commit" : i % 3 == 1 ? "rollback" : "unknown-then-commit"), m,
                mm -> tp.sendMessageInTransaction(mm, fi));
        }
        // 7) messages for the failing group: kFailOnce (retried once, then consumed), kFailAlways (-> DLQ)
        for (int i = 0; i < 30; i++) {
            String kind = i % 3 == 0 ? "kFailAlways" : i % 3 == 1 ? "kFailOnce" : "kOk";
            Message m = new Message("TopicRetry", "retry", kind + "-" + pfx + "-" + i + " " + kind, text(70 + i, pfx + "retry" + i));
            m.putUserProperty("fate", kind);
            send("retry-src", m, p::send);
        }
        // 8) more plain traffic so the 1 MiB commit-log segments and the 300-unit consume-queue files roll
        int fill = r2 ? 640 : small ? 620 : 700;
        for (int i = 0; i < fill; i++) {
            Message m = new Message("TopicFill", "fill", pfx + "-fill-" + i + " fill-g" + (i % 40) + " "
                + NONASCII[i % NONASCII.length] + "-fill-" + (i % 3) + (i % 25 == 0 ? " fill-every-25" : ""),
                i % 2 == 0 ? random(900 + rnd.nextInt(800)) : text(300 + rnd.nextInt(1500), pfx + "fill" + i));
            send("fill", m, p::send);
        }
        // 9) lmq: light message queues (enableLmq + enableMultiDispatch): the INNER_MULTI_DISPATCH property lists
        //    %LMQ% queues separated by ','; the broker appends INNER_MULTI_QUEUE_OFFSET (one offset per name) to
        //    the stored record and writes a consume-queue unit into consumequeue/<lmq>/0 for each name
        if (lmq) {
            String[] dispatch = {null, "%LMQ%a", "%LMQ%a,%LMQ%b", "%LMQ%b,%LMQ%c", "%LMQ%chat-room-1,%LMQ%a"};
            for (int i = 0; i < 80; i++) {
                String d = dispatch[i % dispatch.length];
                Message m = new Message("TopicLmq", i % 2 == 0 ? "lmqA" : "lmqB", "lmq-" + i + (d == null ? " lmq-plain" : " lmq-multi"),
                    text(80 + i, "lmq" + i));
                if (d != null) m.putUserProperty(MessageConst.PROPERTY_INNER_MULTI_DISPATCH, d);
                send(d == null ? "lmq-plain" : "lmq-" + d.split(",").length, m, p::send);
            }
            // two delayed (level 1) LMQ messages: stored first in SCHEDULE_TOPIC_XXXX (no LMQ offsets there),
            // LMQ offsets are assigned when the schedule service re-puts them to TopicLmq
            for (int i = 0; i < 2; i++) {
                Message m = new Message("TopicLmq", "lmqD", "lmq-delay-" + i + " lmq-multi", text(70 + i, "lmqdelay" + i));
                m.putUserProperty(MessageConst.PROPERTY_INNER_MULTI_DISPATCH, "%LMQ%a,%LMQ%d");
                m.setDelayTimeLevel(1);
                send("lmq-delay-L1", m, p::send);
            }
            // an ordered LMQ send to a fixed queue of the parent topic
            for (int i = 0; i < 6; i++) {
                Message m = new Message("TopicLmq", "lmqO", "lmq-order-" + i + " lmq-multi", text(60 + i, "lmqorder" + i));
                m.putUserProperty(MessageConst.PROPERTY_INNER_MULTI_DISPATCH, "%LMQ%d");
                send("lmq-order-q3", m, mm -> p.send(mm, (mqs, msg, arg) -> mqs.get(3 % mqs.size()), null));
            }
        }
        try (PrintWriter w = new PrintWriter(new FileWriter(out, StandardCharsets.UTF_8))) {
            for (Map<String, Object> o : recs) {
                w.println(JSON.toJSONString(o));
            }
        }
        System.out.println("sent " + recs.size() + "; waiting for the transaction checks and delays");
        long deadline = System.currentTimeMillis() + 60000;
        while (System.currentTimeMillis() < deadline && checks.get() < (r2 ? 6 : small ? 3 : 4)) {
            Thread.sleep(1000);
        }
        Thread.sleep(12000);
        System.out.println("tx checks answered: " + checks.get() + " " + checked);
        tp.shutdown();
        p.shutdown();
    }

    static void flood(String ns, String out, String topic, int count, long seed, int sleepMs, String pfx) throws Exception {
        rnd = new Random(seed);
        DefaultMQProducer p = producer(ns, "PG_FLOOD", null);
        try (PrintWriter w = new PrintWriter(new FileWriter(out, StandardCharsets.UTF_8))) {
            for (int i = 0; i < count; i++) {
                byte[] body = random(600 + (i % 7) * 300);
                Message m = new Message(topic, "flood", pfx + "-" + i + " flood-" + (i % 10), body);
                SendResult r = p.send(m);
                Map<String, Object> o = sentRec("flood", m, body);
                putResult(o, r);
                w.println(JSON.toJSONString(o));
                w.flush();
                if (sleepMs > 0) Thread.sleep(sleepMs);
            }
        }
        p.shutdown();
    }

    static Map<String, Object> msgRec(MessageExt m, boolean body) {
        Map<String, Object> o = new LinkedHashMap<>();
        o.put("topic", m.getTopic());
        o.put("queueId", m.getQueueId());
        o.put("queueOffset", m.getQueueOffset());
        o.put("commitLogOffset", m.getCommitLogOffset());
        o.put("storeSize", m.getStoreSize());
        o.put("msgId", m.getMsgId());
        o.put("offsetMsgId", m instanceof MessageClientExt ? ((MessageClientExt) m).getOffsetMsgId() : null);
        o.put("uniqKey", m.getProperty(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX));
        o.put("keys", m.getKeys());
        o.put("tags", m.getTags());
        o.put("sysFlag", m.getSysFlag());
        o.put("bodyCRC", m.getBodyCRC());
        o.put("bornTimestamp", m.getBornTimestamp());
        o.put("bornHost", String.valueOf(m.getBornHost()));
        o.put("storeTimestamp", m.getStoreTimestamp());
        o.put("storeHost", String.valueOf(m.getStoreHost()));
        o.put("reconsumeTimes", m.getReconsumeTimes());
        o.put("preparedTransactionOffset", m.getPreparedTransactionOffset());
        o.put("props", new TreeMap<>(m.getProperties()));
        o.put("bodyLen", m.getBody() == null ? -1 : m.getBody().length);
        if (body) {
            o.put("bodyB64", b64(m.getBody()));
        }
        return o;
    }

    static DefaultMQPushConsumer push(String ns, String group, String[] topics, int maxReconsume,
                                      MessageListenerConcurrently l) throws Exception {
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group);
        c.setNamesrvAddr(ns);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.setConsumeThreadMin(1);
        c.setConsumeThreadMax(1);   // one thread: deliveries are recorded in the order the consumer ran them
        if (maxReconsume >= 0) {
            c.setMaxReconsumeTimes(maxReconsume);
        }
        for (String t : topics) {
            c.subscribe(t, "*");
        }
        c.registerMessageListener(l);
        c.start();
        return c;
    }

    static void writeLines(String out, List<String> lines) throws Exception {
        try (PrintWriter w = new PrintWriter(new FileWriter(out, StandardCharsets.UTF_8))) {
            synchronized (lines) {
                for (String l : lines) {
                    w.println(l);
                }
            }
        }
    }

    static DefaultMQPushConsumer recorder(String ns, String group, String[] topics, List<String> lines) throws Exception {
        return push(ns, group, topics, -1, (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                Map<String, Object> o = msgRec(m, true);
                o.put("group", group);
                lines.add(JSON.toJSONString(o));
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
    }

    static void consume(String ns, String group, String[] topics, int seconds, String out) throws Exception {
        List<String> lines = Collections.synchronizedList(new ArrayList<>());
        DefaultMQPushConsumer c = recorder(ns, group, topics, lines);
        waitQuiet(lines, seconds);
        c.shutdown();   // persists offsets to the broker
        writeLines(out, lines);
        System.out.println(group + " consumed " + lines.size());
    }

    /** waits until nothing new arrived for 8 s (at least 12 s, at most max seconds) */
    static void waitQuiet(List<String> lines, int max) throws Exception {
        int last = -1;
        int quiet = 0;
        for (int s = 0; s < max; s++) {
            Thread.sleep(1000);
            int n = lines.size();
            quiet = n == last ? quiet + 1 : 0;
            last = n;
            if (s >= 12 && quiet >= 8) {
                break;
            }
        }
    }

    static void groups(String ns, String outDir, String failGroup, int partMax, int allSeconds, String[] topics)
        throws Exception {
        // failing group on TopicRetry, maxReconsumeTimes=1: 1st failure -> %RETRY%group (delay level 3, 10 s),
        // 2nd failure -> %DLQ%group
        List<String> failLines = Collections.synchronizedList(new ArrayList<>());
        DefaultMQPushConsumer fc = push(ns, failGroup, new String[] {"TopicRetry"}, 1, (msgs, ctx) -> {
            ConsumeConcurrentlyStatus st = ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            for (MessageExt m : msgs) {
                String fate = m.getUserProperty("fate");
                boolean fail = "kFailAlways".equals(fate) || ("kFailOnce".equals(fate) && m.getReconsumeTimes() == 0);
                if (fail) {
                    st = ConsumeConcurrentlyStatus.RECONSUME_LATER;
                }
            }
            for (MessageExt m : msgs) {
                Map<String, Object> o = msgRec(m, true);
                o.put("group", failGroup);
                o.put("returned", String.valueOf(st));
                failLines.add(JSON.toJSONString(o));
            }
            return st;
        });
        // partial group: lite pull on TopicA, commit after partMax messages
        DefaultLitePullConsumer pc = new DefaultLitePullConsumer("G_PART");
        pc.setNamesrvAddr(ns);
        pc.setAutoCommit(false);
        pc.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        pc.subscribe("TopicA", "*");
        pc.setPullBatchSize(8);
        pc.start();
        List<String> partLines = new ArrayList<>();
        long deadline = System.currentTimeMillis() + 30000;
        while (partLines.size() < partMax && System.currentTimeMillis() < deadline) {
            for (MessageExt m : pc.poll(1000)) {
                Map<String, Object> o = msgRec(m, true);
                o.put("group", "G_PART");
                partLines.add(JSON.toJSONString(o));
            }
        }
        pc.commitSync();
        Thread.sleep(6000);
        pc.shutdown();
        writeLines(outDir + "/consumed_G_PART.jsonl", partLines);
        System.out.println("G_PART pulled " + partLines.size());
        // let the failing group see its retries (10 s delay) and send the second failures to the DLQ
        long until = System.currentTimeMillis() + 40000;
        while (System.currentTimeMillis() < until) {
            Thread.sleep(1000);
        }
        fc.shutdown();
        writeLines(outDir + "/consumed_" + (failGroup.length() > 20 ? "G_FAIL_LONG" : failGroup) + ".jsonl", failLines);
        System.out.println(failGroup + " deliveries " + failLines.size());
        // G_ALL: everything, including the failing group's retry and DLQ topics
        List<String> all = new ArrayList<>(List.of(topics));
        all.add(MixAll.getRetryTopic(failGroup));
        all.add(MixAll.getDLQTopic(failGroup));
        consume(ns, "G_ALL", all.toArray(new String[0]), allSeconds, outDir + "/consumed_G_ALL.jsonl");
    }

    static List<Map<String, Object>> read(String f) throws Exception {
        List<Map<String, Object>> l = new ArrayList<>();
        try (BufferedReader r = new BufferedReader(new FileReader(f, StandardCharsets.UTF_8))) {
            String s;
            while ((s = r.readLine()) != null) {
                if (!s.isBlank()) {
                    l.add(JSON.parseObject(s));
                }
            }
        }
        return l;
    }

    /** the broker's own answer to QUERY_MESSAGE (before the client filters by topic and key) */
    static Map<String, Object> rawQuery(DefaultMQProducer p, String addr, String topic, String key, int maxNum,
                                        long begin, long end) throws Exception {
        QueryMessageRequestHeader h = new QueryMessageRequestHeader();
        h.setTopic(topic);
        h.setKey(key);
        h.setMaxNum(maxNum);
        h.setBeginTimestamp(begin);
        h.setEndTimestamp(end);
        RemotingCommand req = RemotingCommand.createRequestCommand(RequestCode.QUERY_MESSAGE, h);
        req.addExtField(MixAll.UNIQUE_MSG_QUERY_FLAG, "false");
        RemotingCommand resp = p.getDefaultMQProducerImpl().getMqClientFactory().getMQClientAPIImpl()
            .getRemotingClient().invokeSync(addr, req, 10000);
        Map<String, Object> o = new LinkedHashMap<>();
        o.put("code", resp.getCode());
        if (resp.getCode() == 0) {
            QueryMessageResponseHeader rh = (QueryMessageResponseHeader) resp.decodeCommandCustomHeader(QueryMessageResponseHeader.class);
            o.put("indexLastUpdatePhyoffset", rh.getIndexLastUpdatePhyoffset());
            o.put("indexLastUpdateTimestamp", rh.getIndexLastUpdateTimestamp());
            List<Map<String, Object>> hits = new ArrayList<>();
            for (MessageExt m : MessageDecoder.decodes(ByteBuffer.wrap(resp.getBody()), false)) {
                Map<String, Object> x = new LinkedHashMap<>();
                x.put("commitLogOffset", m.getCommitLogOffset());
                x.put("topic", m.getTopic());
                x.put("queueId", m.getQueueId());
                x.put("queueOffset", m.getQueueOffset());
                x.put("keys", m.getKeys());
                x.put("uniqKey", m.getProperty(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX));
                x.put("storeTimestamp", m.getStoreTimestamp());
                hits.add(x);
            }
            o.put("hits", hits);
        } else {
            o.put("remark", resp.getRemark());
        }
        return o;
    }

    static Map<String, Object> keyQuery(DefaultMQProducer p, String addr, String topic, String key, int maxNum,
                                        long begin, long end) {
        Map<String, Object> o = new LinkedHashMap<>();
        o.put("q", "queryMessage");
        o.put("topic", topic);
        o.put("key", key);
        o.put("maxNum", maxNum);
        o.put("begin", begin);
        o.put("end", end);
        try {
            o.put("broker", rawQuery(p, addr, topic, key, maxNum, begin, end));
        } catch (Exception e) {
            o.put("broker", Map.of("error", e.toString()));
        }
        try {
            QueryResult qr = Driver.retry(() -> p.queryMessage(topic, key, maxNum, begin, end));
            List<Map<String, Object>> hits = new ArrayList<>();
            for (MessageExt m : qr.getMessageList()) {
                Map<String, Object> x = new LinkedHashMap<>();
                x.put("commitLogOffset", m.getCommitLogOffset());
                x.put("topic", m.getTopic());
                x.put("queueId", m.getQueueId());
                x.put("queueOffset", m.getQueueOffset());
                x.put("keys", m.getKeys());
                x.put("msgId", m.getMsgId());
                x.put("offsetMsgId", m instanceof MessageClientExt ? ((MessageClientExt) m).getOffsetMsgId() : null);
                x.put("storeTimestamp", m.getStoreTimestamp());
                x.put("bodyLen", m.getBody() == null ? -1 : m.getBody().length);
                hits.add(x);
            }
            o.put("client", hits);
        } catch (Exception e) {
            o.put("clientError", e.toString());
        }
        return o;
    }

    static void answers(String ns, String addr, String sent, String outDir, String[] groups, int viewEvery)
        throws Exception {
        DefaultMQProducer p = producer(ns, "PG_QUERY", null);
        Thread.sleep(3000);
        List<Map<String, Object>> recs = read(sent);
        // every (topic, key) of every acknowledged or attempted send, plus the system topics the message passed
        Map<String, Set<String>> keysByTopic = new TreeMap<>();
        long minTs = Long.MAX_VALUE;
        long maxTs = 0;
        for (Map<String, Object> r : recs) {
            String topic = (String) r.get("topic");
            String keys = (String) r.get("keys");
            String type = (String) r.get("type");
            if (keys == null) continue;
            List<String> topics = new ArrayList<>();
            topics.add(topic);
            if (type.startsWith("delay")) topics.add("SCHEDULE_TOPIC_XXXX");
            if (type.startsWith("tx")) topics.add("RMQ_SYS_TRANS_HALF_TOPIC");
            if (type.equals("retry-src")) {
                for (String g : groups) {
                    if (g.startsWith("G_FAIL")) {
                        topics.add(MixAll.getRetryTopic(g));
                        topics.add(MixAll.getDLQTopic(g));
                    }
                }
            }
            for (String t : topics) {
                for (String k : keys.split(" ")) {
                    keysByTopic.computeIfAbsent(t, x -> new LinkedHashSet<>()).add(k);
                }
            }
        }
        int nq = 0;
        int nv = 0;
        try (PrintWriter w = new PrintWriter(new FileWriter(outDir + "/queries.jsonl", StandardCharsets.UTF_8))) {
            for (Map.Entry<String, Set<String>> e : keysByTopic.entrySet()) {
                for (String k : e.getValue()) {
                    w.println(JSON.toJSONString(keyQuery(p, addr, e.getKey(), k, 64, 0, Long.MAX_VALUE)));
                    nq++;
                }
            }
            // maxNum and time-window variants for keys shared by many messages
            for (String k : new String[] {"hot", "shared-0", "fill-every-25", "flood-3", "big-random", "kFailAlways"}) {
                for (String t : new String[] {"TopicA", "TopicB", "TopicFill", "TopicFlood", "TopicBig", "TopicRetry"}) {
                    if (!keysByTopic.getOrDefault(t, Set.of()).contains(k)) continue;
                    for (int mx : new int[] {1, 5, 40}) {
                        w.println(JSON.toJSONString(keyQuery(p, addr, t, k, mx, 0, Long.MAX_VALUE)));
                        nq++;
                    }
                }
            }
            // time windows: [first store time, +2 s], (now - 1 h, now], and an empty window in 1970
            Map<String, Object> first = null;
            for (Map<String, Object> r : recs) {
                if ("SEND_OK".equals(r.get("status")) && r.get("offsetMsgId") != null) {
                    first = r;
                    break;
                }
            }
            if (first != null) {
                try {
                    MessageExt fm = p.getDefaultMQProducerImpl().viewMessage((String) first.get("topic"), (String) first.get("offsetMsgId"));
                    long t0 = fm.getStoreTimestamp();
                    for (String k : new String[] {"shared-0", "shared-4", "hot"}) {
                        for (String t : new String[] {"TopicA", "TopicB"}) {
                            if (!keysByTopic.getOrDefault(t, Set.of()).contains(k)) continue;
                            w.println(JSON.toJSONString(keyQuery(p, addr, t, k, 64, t0, t0 + 2000)));
                            w.println(JSON.toJSONString(keyQuery(p, addr, t, k, 64, System.currentTimeMillis() - 3600000L, System.currentTimeMillis())));
                            w.println(JSON.toJSONString(keyQuery(p, addr, t, k, 64, 0, 1000)));
                            nq += 3;
                        }
                    }
                } catch (Exception ex) {
                    System.out.println("time windows skipped: " + ex);
                }
            }
            // viewMessage(offsetMsgId) and viewMessage(topic, uniqKey) for a sample (every n-th + every non-fill)
            int i = 0;
            for (Map<String, Object> r : recs) {
                i++;
                String type = (String) r.get("type");
                boolean special = !type.equals("fill") && !type.equals("flood") && !type.equals("plain");
                if (!(special || i % viewEvery == 0)) continue;
                String topic = (String) r.get("topic");
                for (String f : new String[] {"offsetMsgId", "msgId"}) {
                    String id = (String) r.get(f);
                    if (id == null) continue;
                    Map<String, Object> o = new LinkedHashMap<>();
                    o.put("q", f.equals("offsetMsgId") ? "viewMessage(offsetMsgId)" : "viewMessage(topic,uniqKey)");
                    o.put("seq", r.get("seq"));
                    o.put("topic", topic);
                    o.put("id", id);
                    try {
                        MessageExt m = f.equals("offsetMsgId") ? p.getDefaultMQProducerImpl().viewMessage(topic, id)
                            : Driver.retry(() -> p.getDefaultMQProducerImpl().queryMessageByUniqKey(topic, id));
                        Map<String, Object> h = m == null ? null : msgRec(m, false);
                        if (h != null) {
                            h.put("bodySha256", sha(m.getBody()));
                        }
                        o.put("hit", h);
                    } catch (Exception ex) {
                        o.put("error", ex.toString());
                    }
                    w.println(JSON.toJSONString(o));
                    nv++;
                }
            }
        }
        p.shutdown();
        System.out.println("queries " + nq + " views " + nv);
        admin(ns, addr, groups, outDir + "/admin.json");
    }

    static void admin(String ns, String addr, String[] groups, String out) throws Exception {
        DefaultMQAdminExt ad = new DefaultMQAdminExt("harness-admin");
        ad.setNamesrvAddr(ns);
        ad.start();
        Map<String, Object> o = new LinkedHashMap<>();
        Set<String> topics = new TreeSet<>(ad.fetchAllTopicList().getTopicList());
        Map<String, Object> ts = new LinkedHashMap<>();
        for (String t : topics) {
            try {
                TopicStatsTable st = Driver.retry(() -> ad.examineTopicStats(t));
                Map<String, Object> q = new TreeMap<>();
                for (Map.Entry<MessageQueue, TopicOffset> e : st.getOffsetTable().entrySet()) {
                    Map<String, Object> v = new LinkedHashMap<>();
                    v.put("min", e.getValue().getMinOffset());
                    v.put("max", e.getValue().getMaxOffset());
                    v.put("lastUpdateTimestamp", e.getValue().getLastUpdateTimestamp());
                    q.put(String.format("%03d", e.getKey().getQueueId()), v);
                }
                ts.put(t, q);
            } catch (Exception e) {
                ts.put(t, Map.of("error", e.toString()));
            }
        }
        o.put("topicStats", ts);
        Set<String> known = new TreeSet<>(List.of(groups));
        Set<String> gl = new TreeSet<>(known);
        try {
            gl.addAll(ad.getAllSubscriptionGroup(addr, 10000).getSubscriptionGroupTable().keySet());
        } catch (Exception e) {
            o.put("subscriptionGroupsError", e.toString());
        }
        Map<String, Object> gs = new LinkedHashMap<>();
        for (String g : gl) {
            try {
                ConsumeStats cs = known.contains(g) ? Driver.retry(() -> ad.examineConsumeStats(g)) : ad.examineConsumeStats(g);
                Map<String, Object> q = new TreeMap<>();
                for (Map.Entry<MessageQueue, OffsetWrapper> e : cs.getOffsetTable().entrySet()) {
                    Map<String, Object> v = new LinkedHashMap<>();
                    v.put("brokerOffset", e.getValue().getBrokerOffset());
                    v.put("consumerOffset", e.getValue().getConsumerOffset());
                    v.put("lag", e.getValue().getBrokerOffset() - e.getValue().getConsumerOffset());
                    v.put("pullOffset", e.getValue().getPullOffset());
                    v.put("lastTimestamp", e.getValue().getLastTimestamp());
                    q.put(e.getKey().getTopic() + "/" + String.format("%03d", e.getKey().getQueueId()), v);
                }
                Map<String, Object> gv = new LinkedHashMap<>();
                gv.put("diffTotal", cs.computeTotalDiff());
                gv.put("queues", q);
                gs.put(g, gv);
            } catch (Exception e) {
                gs.put(g, Map.of("error", e.toString()));
            }
        }
        o.put("consumeStats", gs);
        try {   // the broker's own view of its commit log and dispatch (subset of fetchBrokerRuntimeStats)
            Map<String, String> rt = new TreeMap<>();
            for (Map.Entry<String, String> e : ad.fetchBrokerRuntimeStats(addr).getTable().entrySet()) {
                String k = e.getKey();
                if (k.equals("commitLogMinOffset") || k.equals("commitLogMaxOffset") || k.startsWith("dispatch")
                    || k.equals("brokerVersionDesc")
                    || k.equals("msgPutTotalTodayNow") || k.equals("earliestMessageTimeStamp")) {
                    rt.put(k, e.getValue());
                }
            }
            o.put("brokerRuntime", rt);
        } catch (Exception e) {
            o.put("brokerRuntime", Map.of("error", e.toString()));
        }
        try (PrintWriter w = new PrintWriter(new FileWriter(out, StandardCharsets.UTF_8))) {
            w.println(JSON.toJSONString(o, true));
        }
        ad.shutdown();
        System.out.println("admin: " + ts.size() + " topics, " + gs.size() + " groups");
    }
}
