package v34;
import java.io.*;
import java.nio.charset.StandardCharsets;
import java.util.*;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.*;
import org.apache.rocketmq.client.producer.*;
import org.apache.rocketmq.common.message.*;
// usage: Send5 <ns> <outdir> <n> <dueSec> <consumeSec>
public class Send5 {
  public static void main(String[] a) throws Exception {
    String ns = a[0], dir = a[1]; int n = Integer.parseInt(a[2]); int due = Integer.parseInt(a[3]); int secs = Integer.parseInt(a[4]);
    PrintWriter rw = new PrintWriter(new FileWriter(dir + "/received.jsonl", StandardCharsets.UTF_8), true);
    PrintWriter sw = new PrintWriter(new FileWriter(dir + "/sent.jsonl", StandardCharsets.UTF_8), true);
    DefaultMQPushConsumer c = new DefaultMQPushConsumer("G_V34");
    c.setNamesrvAddr(ns);
    c.subscribe("TimerA", "*");
    c.subscribe("rmq_sys_rmqtool_quarantine", "*");
    c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
      long now = System.currentTimeMillis();
      for (MessageExt m : msgs) {
        synchronized (rw) {
          rw.println("{\"recvMs\":" + now + ",\"topic\":\"" + m.getTopic() + "\",\"queueId\":" + m.getQueueId()
            + ",\"queueOffset\":" + m.getQueueOffset() + ",\"tags\":\"" + m.getTags() + "\",\"keys\":\"" + m.getKeys()
            + "\",\"uniqKey\":\"" + m.getProperty("UNIQ_KEY") + "\",\"storeTs\":" + m.getStoreTimestamp()
            + ",\"TIMER_OUT_MS\":\"" + m.getProperty("TIMER_OUT_MS") + "\",\"TIMER_DEQUEUE_MS\":\"" + m.getProperty("TIMER_DEQUEUE_MS") + "\"}");
        }
      }
      return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
    });
    c.start();
    DefaultMQProducer p = new DefaultMQProducer("PG_V34");
    p.setNamesrvAddr(ns); p.setSendMsgTimeout(10000); p.start();
    Thread.sleep(2000);
    long start = System.currentTimeMillis();
    for (int i = 0; i < n; i++) {
      Message m = new Message("TimerA", "v34", "v34-" + i, ("v34 new timer #" + i).getBytes(StandardCharsets.UTF_8));
      long deliver = System.currentTimeMillis() + due * 1000L + i * 100;
      m.setDeliverTimeMs(deliver);
      long t0 = System.currentTimeMillis();
      String st, id = "", err = "";
      try { SendResult r = p.send(m); st = r.getSendStatus().toString(); id = r.getMsgId(); }
      catch (Exception e) { st = "ERROR"; err = e.toString().replace('"', '\''); }
      sw.println("{\"i\":" + i + ",\"sendMs\":" + t0 + ",\"ackMs\":" + System.currentTimeMillis() + ",\"deliverMs\":" + deliver
        + ",\"status\":\"" + st + "\",\"msgId\":\"" + id + "\",\"error\":\"" + err + "\"}");
    }
    Thread.sleep(Math.max(0, start + secs * 1000L - System.currentTimeMillis()));
    c.shutdown(); p.shutdown(); rw.close(); sw.close();
    System.out.println("send5 done");
  }
}
