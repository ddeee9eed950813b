/*
 * Golden sets for broker modes (DLedger commit log, RocksDB consume queues, LMQ): the extra client steps.
 * Called through GoldenDriver:
 *   waitmaster <ns> <brokerName> <seconds>    until the NameServer lists a master (brokerId 0) for the broker:
 *                                             a DLedger broker registers as a slave until it has won its election
 *   lmqanswers <ns> <brokerAddr> <sent.jsonl> <out lmq.json>
 *            for every %LMQ% queue named by a send: min/max offset (GET_MIN_OFFSET / GET_MAX_OFFSET),
 *            examineTopicStats(brokerAddr, lmq), queryConsumeQueue units, every message pulled from offset 0
 *            (PULL_MESSAGE on queue 0), two consumer-offset commits (an LMQ-named group and a plain group) and
 *            their read-back; for every LMQ send the stored INNER_MULTI_DISPATCH / INNER_MULTI_QUEUE_OFFSET
 *            (queryMessageByUniqKey on the parent topic)
 * Not RocketMQ code.
 */
package harness;

import com.alibaba.fastjson.JSON;
import java.io.FileWriter;
import java.io.PrintWriter;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.TreeSet;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.PullStatus;
import org.apache.rocketmq.client.impl.CommunicationMode;
import org.apache.rocketmq.client.impl.MQClientAPIImpl;
import org.apache.rocketmq.client.impl.consumer.PullResultExt;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.MixAll;
import org.apache.rocketmq.common.filter.ExpressionType;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.common.sysflag.PullSysFlag;
import org.apache.rocketmq.remoting.protocol.admin.TopicOffset;
import org.apache.rocketmq.remoting.protocol.admin.TopicStatsTable;
import org.apache.rocketmq.remoting.protocol.body.ConsumeQueueData;
import org.apache.rocketmq.remoting.protocol.body.QueryConsumeQueueResponseBody;
import org.apache.rocketmq.remoting.protocol.header.PullMessageRequestHeader;
import org.apache.rocketmq.remoting.protocol.header.QueryConsumerOffsetRequestHeader;
import org.apache.rocketmq.remoting.protocol.header.UpdateConsumerOffsetRequestHeader;
import org.apache.rocketmq.remoting.protocol.route.BrokerData;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

public class ModesDriver {

    static void waitMaster(String ns, String brokerName, int seconds) throws Exception {
        DefaultMQAdminExt ad = new DefaultMQAdminExt("harness-wait");
        ad.setNamesrvAddr(ns);
        ad.start();
        try {
            for (int s = 0; s < seconds; s++) {
                try {
                    BrokerData bd = ad.examineBrokerClusterInfo().getBrokerAddrTable().get(brokerName);
                    if (bd != null && bd.getBrokerAddrs().containsKey(MixAll.MASTER_ID)) {
                        System.out.println("master " + bd.getBrokerAddrs() + " after " + s + " s");
                        return;
                    }
                    System.out.println("t=" + s + " " + (bd == null ? "not registered" : bd.getBrokerAddrs()));
                } catch (Exception e) {
                    System.out.println("t=" + s + " " + e);
                }
                Thread.sleep(1000);
            }
        } finally {
            ad.shutdown();
        }
        throw new IllegalStateException("no master for " + brokerName + " after " + seconds + " s");
    }

    static Map<String, Object> msg(MessageExt m) {
        Map<String, Object> o = GoldenDriver.msgRec(m, true);
        o.put("innerMultiDispatch", m.getProperty(MessageConst.PROPERTY_INNER_MULTI_DISPATCH));
        o.put("innerMultiQueueOffset", m.getProperty(MessageConst.PROPERTY_INNER_MULTI_QUEUE_OFFSET));
        return o;
    }

    static void lmqAnswers(String ns, String addr, String sent, String out) throws Exception {
        List<Map<String, Object>> recs = GoldenDriver.read(sent);
        TreeSet<String> lmqs = new TreeSet<>();
        for (Map<String, Object> r : recs) {
            Object props = r.get("props");
            if (props instanceof Map) {
                Object d = ((Map<?, ?>) props).get(MessageConst.PROPERTY_INNER_MULTI_DISPATCH);
                if (d != null) {
                    for (String q : d.toString().split(MixAll.LMQ_DISPATCH_SEPARATOR)) lmqs.add(q);
                }
            }
        }
        DefaultMQAdminExt ad = new DefaultMQAdminExt("harness-lmq");
        ad.setNamesrvAddr(ns);
        ad.start();
        DefaultMQProducer p = GoldenDriver.producer(ns, "PG_LMQ_QUERY", null);
        MQClientAPIImpl api = p.getDefaultMQProducerImpl().getMqClientFactory().getMQClientAPIImpl();
        Map<String, Object> o = new LinkedHashMap<>();
        o.put("brokerAddr", addr);
        Map<String, Object> queues = new LinkedHashMap<>();
        for (String lmq : lmqs) {
            Map<String, Object> q = new LinkedHashMap<>();
            MessageQueue mq = new MessageQueue(lmq, "broker-a", MixAll.LMQ_QUEUE_ID);
            try {
                q.put("minOffset", api.getMinOffset(addr, mq, 5000));
                q.put("maxOffset", api.getMaxOffset(addr, mq, 5000));
            } catch (Exception e) {
                q.put("offsetError", e.toString());
            }
            try {
                TopicStatsTable st = ad.examineTopicStats(addr, lmq);
                Map<String, Object> ts = new TreeMap<>();
                for (Map.Entry<MessageQueue, TopicOffset> e : st.getOffsetTable().entrySet()) {
                    Map<String, Object> v = new LinkedHashMap<>();
                    v.put("min", e.getValue().getMinOffset());
                    v.put("max", e.getValue().getMaxOffset());
                    v.put("lastUpdateTimestamp", e.getValue().getLastUpdateTimestamp());
                    ts.put(String.format("%03d", e.getKey().getQueueId()), v);
                }
                q.put("examineTopicStats", ts);
            } catch (Exception e) {
                q.put("examineTopicStatsError", e.toString());
            }
            try {   // the consume-queue units (20-byte CQ entries as the broker reads them back)
                QueryConsumeQueueResponseBody b = ad.queryConsumeQueue(addr, lmq, 0, 0, 64, "G_LMQ_QCQ");
                List<Map<String, Object>> units = new ArrayList<>();
                if (b.getQueueData() != null) {
                    for (ConsumeQueueData d : b.getQueueData()) {
                        Map<String, Object> u = new LinkedHashMap<>();
                        u.put("physicOffset", d.getPhysicOffset());
                        u.put("physicSize", d.getPhysicSize());
                        u.put("tagsCode", d.getTagsCode());
                        units.add(u);
                    }
                }
                q.put("cqMinIndex", b.getMinQueueIndex());
                q.put("cqMaxIndex", b.getMaxQueueIndex());
                q.put("cqUnits", units);
            } catch (Exception e) {
                q.put("queryConsumeQueueError", e.toString());
            }
            List<Map<String, Object>> pulled = new ArrayList<>();
            List<Map<String, Object>> pulls = new ArrayList<>();
            long off = 0;
            for (int guard = 0; guard < 50; guard++) {
                PullMessageRequestHeader h = new PullMessageRequestHeader();
                h.setConsumerGroup("G_LMQ_PULL");
                h.setTopic(lmq);
                h.setQueueId(MixAll.LMQ_QUEUE_ID);
                h.setQueueOffset(off);
                h.setMaxMsgNums(16);
                h.setSysFlag(PullSysFlag.buildSysFlag(false, false, true, false));
                h.setCommitOffset(0L);
                h.setSuspendTimeoutMillis(0L);
                h.setSubscription("*");
                h.setSubVersion(0L);
                h.setExpressionType(ExpressionType.TAG);
                h.setBrokerName("broker-a");
                Map<String, Object> pr = new LinkedHashMap<>();
                pr.put("offset", off);
                try {
                    PullResult r = api.pullMessage(addr, h, 10000, CommunicationMode.SYNC, null);
                    pr.put("status", String.valueOf(r.getPullStatus()));
                    pr.put("nextBeginOffset", r.getNextBeginOffset());
                    pr.put("minOffset", r.getMinOffset());
                    pr.put("maxOffset", r.getMaxOffset());
                    pulls.add(pr);
                    if (r.getPullStatus() != PullStatus.FOUND) break;
                    byte[] bin = ((PullResultExt) r).getMessageBinary();
                    List<MessageExt> ms = MessageDecoder.decodesBatch(ByteBuffer.wrap(bin), true, true, true);
                    int i = 0;
                    for (MessageExt m : ms) {
                        Map<String, Object> x = msg(m);
                        x.put("pulledAtLmqOffset", off + i);
                        pulled.add(x);
                        i++;
                    }
                    pr.put("count", ms.size());
                    if (r.getNextBeginOffset() <= off) break;
                    off = r.getNextBeginOffset();
                } catch (Exception e) {
                    pr.put("error", e.toString());
                    pulls.add(pr);
                    break;
                }
            }
            q.put("pulls", pulls);
            q.put("messages", pulled);
            queues.put(lmq, q);
        }
        o.put("queues", queues);
        // consumer offsets: a group named like the LMQ (kept in the LMQ offset table) and a plain group
        List<Map<String, Object>> commits = new ArrayList<>();
        String[][] cs = {{"%LMQ%a", "%LMQ%a", "5"}, {"G_LMQ", "%LMQ%b", "2"}, {"%LMQ%c", "%LMQ%c", "1"}};
        for (String[] c : cs) {
            Map<String, Object> x = new LinkedHashMap<>();
            x.put("group", c[0]);
            x.put("topic", c[1]);
            x.put("queueId", 0);
            x.put("commitOffset", Long.parseLong(c[2]));
            try {
                UpdateConsumerOffsetRequestHeader u = new UpdateConsumerOffsetRequestHeader();
                u.setConsumerGroup(c[0]);
                u.setTopic(c[1]);
                u.setQueueId(0);
                u.setCommitOffset(Long.parseLong(c[2]));
                u.setBrokerName("broker-a");
                api.updateConsumerOffset(addr, u, 5000);
                x.put("commit", "OK");
            } catch (Exception e) {
                x.put("commit", e.toString());
            }
            try {
                QueryConsumerOffsetRequestHeader qh = new QueryConsumerOffsetRequestHeader();
                qh.setConsumerGroup(c[0]);
                qh.setTopic(c[1]);
                qh.setQueueId(0);
                qh.setBrokerName("broker-a");
                x.put("queryConsumerOffset", api.queryConsumerOffset(addr, qh, 5000));
            } catch (Exception e) {
                x.put("queryConsumerOffset", e.toString());
            }
            commits.add(x);
        }
        o.put("consumerOffsets", commits);
        // per LMQ send: what the stored record says (parent-topic record, found by its UNIQ_KEY)
        List<Map<String, Object>> perSend = new ArrayList<>();
        for (Map<String, Object> r : recs) {
            Object props = r.get("props");
            if (!(props instanceof Map) || ((Map<?, ?>) props).get(MessageConst.PROPERTY_INNER_MULTI_DISPATCH) == null) {
                continue;
            }
            Map<String, Object> x = new LinkedHashMap<>();
            x.put("seq", r.get("seq"));
            x.put("type", r.get("type"));
            x.put("msgId", r.get("msgId"));
            x.put("sentDispatch", ((Map<?, ?>) props).get(MessageConst.PROPERTY_INNER_MULTI_DISPATCH));
            try {
                String topic = (String) r.get("topic");
                String id = (String) r.get("msgId");
                MessageExt m = Driver.retry(() -> p.getDefaultMQProducerImpl().queryMessageByUniqKey(topic, id));
                x.put("topic", m.getTopic());
                x.put("queueId", m.getQueueId());
                x.put("queueOffset", m.getQueueOffset());
                x.put("commitLogOffset", m.getCommitLogOffset());
                x.put("storedDispatch", m.getProperty(MessageConst.PROPERTY_INNER_MULTI_DISPATCH));
                x.put("storedQueueOffsets", m.getProperty(MessageConst.PROPERTY_INNER_MULTI_QUEUE_OFFSET));
            } catch (Exception e) {
                x.put("error", e.toString());
            }
            perSend.add(x);
        }
        o.put("lmqSends", perSend);
        try (PrintWriter w = new PrintWriter(new FileWriter(out, StandardCharsets.UTF_8))) {
            w.println(JSON.toJSONString(o, true));
        }
        p.shutdown();
        ad.shutdown();
        StringBuilder sb = new StringBuilder();
        for (Map.Entry<String, Object> e : queues.entrySet()) {
            sb.append(e.getKey()).append(" max=").append(((Map<?, ?>) e.getValue()).get("maxOffset"))
                .append(" pulled=").append(((List<?>) ((Map<?, ?>) e.getValue()).get("messages")).size()).append("; ");
        }
        System.out.println("lmq: " + sb + perSend.size() + " LMQ sends");
    }
}
