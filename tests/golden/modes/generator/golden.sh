#!/usr/bin/env bash
# Writes the broker golden sets: small stores written by a real RocketMQ broker fed by real Java clients, plus the
# answers the broker and its clients gave (src/harness/GoldenDriver.java).
#
# usage: golden.sh <work-dir> <scratch-dir> <scenario> <out-dir>
#   golden-r1  clean shutdown                            -> <out-dir>/{store,answers,sent.jsonl,broker.conf}
#   golden-r2  kill -9 mid-traffic; damaged copy; the broker's own recovery of it
#                                                        -> <out-dir>/{killed,damaged,recovered_by_broker,live,...}
# env: GOLDEN_CLASSES (folder with harness/GoldenDriver.class; default <work-dir>/classes).
# The whole run happens in a private network namespace (unshare -n, its own loopback): BrokerStartup at this
# commit sets listenPort=10911 after reading broker.conf, so a second broker on the same loopback cannot start.
# Inside: namesrv 127.0.0.1:29876, broker 127.0.0.1:10911 (+10909 fast, 10912 HA).
set -euo pipefail
if [ -z "${GOLDEN_IN_NETNS:-}" ]; then
  exec env GOLDEN_IN_NETNS=1 unshare -n bash -c 'ip link set lo up && exec "$0" "$@"' "$0" "$@"
fi
HERE=$(cd "$(dirname "$0")" && pwd); WORK=$(cd "${1:?work dir}" && pwd); mkdir -p "${2:?scratch dir}"
X=$(cd "$2" && pwd); SC=${3:?scenario}; mkdir -p "${4:?out dir}"; OUT=$(cd "$4" && pwd)
NSP=29876; BP=10911; NS=127.0.0.1:$NSP; BK=127.0.0.1:$BP
GC=${GOLDEN_CLASSES:-$WORK/classes}
CP="$GC:$WORK/classes:$(ls "$WORK"/lib/*.jar | tr '\n' ':')"
mkdir -p "$X/home"; : > "$X/started.pids"
cleanup() { while read -r p; do kill "$p" 2>/dev/null || true; done < "$X/started.pids"; }
trap cleanup EXIT
jopts() { echo "-Xms$1 -Xmx$1 -XX:MaxDirectMemorySize=1g -XX:+UseG1GC -XX:ActiveProcessorCount=2
  --add-opens java.base/java.nio=ALL-UNNAMED --add-opens java.base/sun.nio.ch=ALL-UNNAMED
  --add-exports java.base/sun.nio.ch=ALL-UNNAMED --add-opens java.base/java.lang=ALL-UNNAMED
  --add-opens java.base/java.util=ALL-UNNAMED --add-opens java.base/java.net=ALL-UNNAMED
  -Dorg.slf4j.simpleLogger.defaultLogLevel=${LOGLEVEL:-warn} -Dorg.slf4j.simpleLogger.showDateTime=true
  -Drocketmq.client.logUseSlf4j=true -Dtls.server.mode=disabled -Duser.home=$X/home"; }
gd() { java $(jopts 256m) -cp "$CP" harness.GoldenDriver "$@"; }
CONF_BODY() {  # the settings, with the store folder as $1
cat <<CONF
brokerClusterName=DefaultCluster
brokerName=broker-a
brokerId=0
brokerRole=ASYNC_MASTER
flushDiskType=ASYNC_FLUSH
namesrvAddr=$NS
brokerIP1=127.0.0.1
bindAddress=127.0.0.1
listenPort=$BP
haListenPort=$((BP + 1))
storePathRootDir=$1
storePathCommitLog=$1/commitlog
mappedFileSizeCommitLog=1048576
mappedFileSizeConsumeQueue=6000
maxHashSlotNum=1000
maxIndexNum=4000
timerWheelEnable=false
transactionCheckInterval=5000
transactionTimeOut=3000
autoCreateTopicEnable=true
autoCreateSubscriptionGroup=true
metricsExporterType=DISABLE
cleanFileForciblyEnable=false
fileReservedTime=87600
diskMaxUsedSpaceRatio=95
diskSpaceCleanForciblyRatio=98
diskSpaceWarningLevelRatio=99
CONF
case "${GOLDEN_MODE:-}" in   # the broker mode of a modes set (tests/golden/modes/<mode>)
  "") ;;
  dledger) printf '%s\n' enableDLegerCommitLog=true dLegerGroup=broker-a "dLegerPeers=n0-127.0.0.1:40911" dLegerSelfId=n0 ;;
  rocksdb) printf '%s\n' storeType=defaultRocksDB ;;
  lmq) printf '%s\n' enableLmq=true enableMultiDispatch=true ;;
  doublewrite) printf '%s\n' storeType=default rocksdbCQDoubleWriteEnable=true ;;
  *) echo "unknown GOLDEN_MODE=$GOLDEN_MODE" >&2; exit 2 ;;
esac
}
mkconf() { local s; mkdir -p "$1"; s=$(cd "$1" && pwd); { CONF_BODY "$s"; echo "rocketmqHome=$s/.."; } > "$2"; }
savedconf() { CONF_BODY "<store>" > "$1"; }   # the copy kept with a set: no machine paths
bstart() {  # <conf> <log> <pidfile>
  java $(jopts 1g) -cp "$CP" org.apache.rocketmq.broker.BrokerStartup -c "$1" > "$2" 2>&1 & echo $! > "$3"; echo $! >> "$X/started.pids"
  for i in $(seq 1 90); do grep -q 'boot success' "$2" && { echo "broker up ($i s)"; return 0; }
    kill -0 "$(cat "$3")" 2>/dev/null || { echo "broker died"; tail -20 "$2"; return 1; }; sleep 1; done
  echo "broker not up after 90 s"; return 1; }
bstop() { kill "$(cat "$1")"; for i in $(seq 1 90); do kill -0 "$(cat "$1")" 2>/dev/null || { echo "stopped ($i s)"; return 0; }; sleep 1; done; echo "still running"; return 1; }
nsstart() {
  printf 'listenPort=%s\nbindAddress=127.0.0.1\nrocketmqHome=%s\nkvConfigPath=%s/namesrv/kv.json\n' "$NSP" "$X" "$X" > "$X/namesrv.conf"
  java $(jopts 256m) -cp "$CP" org.apache.rocketmq.namesrv.NamesrvStartup -c "$X/namesrv.conf" > "$X/namesrv.log" 2>&1 &
  echo $! > "$X/namesrv.pid"; echo $! >> "$X/started.pids"; sleep 6; }
save() { rm -rf "$2"; mkdir -p "$(dirname "$2")"; cp -a --sparse=always "$1" "$2"; }
TOPICS=TopicA,TopicB,TopicBig,TopicBatch,TopicOrder,TopicDelay,TopicTx,TopicRetry,TopicFill
cd "$X"
echo "=== $SC ($(date +%T))"
case "$SC" in
golden-r1)
  R=$X/r1; rm -rf "$R"; mkdir -p "$R/answers"; nsstart
  mkconf "$R/store" "$R/broker.conf"; bstart "$R/broker.conf" "$R/broker.log" "$R/broker.pid"
  gd mktopic "$NS" "$BK" TopicFill:2 > "$R/mktopic.log" 2>&1
  gd produce "$NS" "$BK" "$R/sent.jsonl" 1001 r1 > "$R/produce.log" 2>&1; tail -2 "$R/produce.log"
  gd groups "$NS" "$R/answers" G_FAIL 37 90 "$TOPICS" > "$R/groups.log" 2>&1; tail -4 "$R/groups.log"
  gd answers "$NS" "$BK" "$R/sent.jsonl" "$R/answers" G_ALL,G_PART,G_FAIL 10 > "$R/answers.log" 2>&1; tail -2 "$R/answers.log"
  bstop "$R/broker.pid"
  rm -rf "$OUT/store" "$OUT/answers"; save "$R/store" "$OUT/store"; cp -a "$R/answers" "$OUT/answers"
  cp "$R/sent.jsonl" "$OUT/sent.jsonl"; savedconf "$OUT/broker.conf"; kill "$(cat "$X/namesrv.pid")" ;;
golden-r2)
  R=$X/r2; rm -rf "$R"; mkdir -p "$R/live" "$R/ans_killed" "$R/ans_recovered"; nsstart
  LONG=G_FAIL_$(printf 'L%.0s' $(seq 1 113))          # 120 chars (client maximum): %RETRY%<group> is 127 chars
  mkconf "$R/store" "$R/broker.conf"; bstart "$R/broker.conf" "$R/broker.log" "$R/broker.pid"
  gd mktopic "$NS" "$BK" TopicWide:8,TopicFill:2,TopicFlood:1 > "$R/mktopic.log" 2>&1
  gd produce "$NS" "$BK" "$R/sent_mix.jsonl" 2002 r2 > "$R/produce.log" 2>&1; tail -2 "$R/produce.log"
  gd groups "$NS" "$R/live" "$LONG" 41 90 "$TOPICS,TopicWide" > "$R/groups.log" 2>&1; tail -4 "$R/groups.log"
  # kill -9 while a producer keeps sending (every ack is flushed before the next send)
  java $(jopts 256m) -cp "$CP" harness.GoldenDriver flood "$NS" "$R/sent_flood.jsonl" TopicFlood 5000 2003 8 \
    > "$R/flood.log" 2>&1 & echo $! > "$R/flood.pid"; echo $! >> "$X/started.pids"
  until [ -f "$R/sent_flood.jsonl" ] && [ "$(wc -l < "$R/sent_flood.jsonl")" -ge "${FLOOD_KILL_AT:-360}" ]; do sleep 0.2; done
  kill -9 "$(cat "$R/broker.pid")"; sleep 4; kill "$(cat "$R/flood.pid")" 2>/dev/null || true; sleep 1
  cat "$R/sent_mix.jsonl" "$R/sent_flood.jsonl" > "$R/sent.jsonl"; echo "flood acked: $(wc -l < "$R/sent_flood.jsonl")"
  save "$R/store" "$R/killed"
  # the broker's own recovery of the killed store: a fresh group reads everything, then every query
  save "$R/killed" "$R/KR"; mkconf "$R/KR" "$R/KR.conf"; bstart "$R/KR.conf" "$R/broker_KR.log" "$R/KR.pid"
  gd consume "$NS" G_VERIFY_K "$TOPICS,TopicWide,TopicFlood,%RETRY%$LONG,%DLQ%$LONG" 120 "$R/ans_killed/consumed_G_VERIFY_K.jsonl" > "$R/verifyK.log" 2>&1; tail -1 "$R/verifyK.log"
  gd answers "$NS" "$BK" "$R/sent.jsonl" "$R/ans_killed" "G_ALL,G_PART,$LONG,G_VERIFY_K" 10 > "$R/answersK.log" 2>&1; tail -2 "$R/answersK.log"
  bstop "$R/KR.pid"
  # damage one TopicFlood record's body in the middle of the last data segment of the clean store; abort marker
  save "$R/KR" "$R/D"; python3 "$HERE/scripts/golden_damage.py" "$R/D" "$R/ans_killed/consumed_G_VERIFY_K.jsonl" "$R/killed/abort" > "$R/damage.json"
  cat "$R/damage.json"; save "$R/D" "$R/damaged"
  mkconf "$R/D" "$R/D.conf"; bstart "$R/D.conf" "$R/broker_D.log" "$R/D.pid"
  gd consume "$NS" G_VERIFY_D "$TOPICS,TopicWide,TopicFlood,%RETRY%$LONG,%DLQ%$LONG" 120 "$R/ans_recovered/consumed_G_VERIFY_D.jsonl" > "$R/verifyD.log" 2>&1; tail -1 "$R/verifyD.log"
  gd answers "$NS" "$BK" "$R/sent.jsonl" "$R/ans_recovered" "G_ALL,G_PART,$LONG,G_VERIFY_K,G_VERIFY_D" 10 > "$R/answersD.log" 2>&1; tail -2 "$R/answersD.log"
  bstop "$R/D.pid"
  rm -rf "$OUT/killed" "$OUT/damaged" "$OUT/recovered_by_broker" "$OUT/live"
  save "$R/killed" "$OUT/killed/store"; cp -a "$R/ans_killed" "$OUT/killed/answers"
  save "$R/damaged" "$OUT/damaged/store"; cp "$R/damage.json" "$OUT/damaged/damage.json"
  save "$R/D" "$OUT/recovered_by_broker/store"; cp -a "$R/ans_recovered" "$OUT/recovered_by_broker/answers"
  cp -a "$R/live" "$OUT/live"; rm -f "$OUT/live/consumed_G_ALL.jsonl"; cp "$R/sent.jsonl" "$OUT/sent.jsonl"; savedconf "$OUT/broker.conf"
  kill "$(cat "$X/namesrv.pid")" ;;
golden-mode)   # GOLDEN_MODE=dledger|rocksdb|lmq|doublewrite: the smaller r1-style mix ("m"; "lmq" adds LMQ traffic), clean stop
  M=${GOLDEN_MODE:?set GOLDEN_MODE}; R=$X/$M; rm -rf "$R"; mkdir -p "$R/answers"; nsstart
  V=m; MT=TopicFill:2; T=$TOPICS
  if [ "$M" = lmq ]; then V=lmq; MT=TopicFill:2,TopicLmq:4; T=$TOPICS,TopicLmq; fi
  mkconf "$R/store" "$R/broker.conf"; bstart "$R/broker.conf" "$R/broker.log" "$R/broker.pid"
  gd waitmaster "$NS" broker-a 120 > "$R/waitmaster.log" 2>&1; tail -1 "$R/waitmaster.log"
  gd mktopic "$NS" "$BK" "$MT" > "$R/mktopic.log" 2>&1
  gd produce "$NS" "$BK" "$R/sent.jsonl" 3003 "$V" > "$R/produce.log" 2>&1; tail -2 "$R/produce.log"
  gd groups "$NS" "$R/answers" G_FAIL 37 90 "$T" > "$R/groups.log" 2>&1; tail -4 "$R/groups.log"
  gd answers "$NS" "$BK" "$R/sent.jsonl" "$R/answers" G_ALL,G_PART,G_FAIL 10 > "$R/answers.log" 2>&1; tail -2 "$R/answers.log"
  if [ "$M" = lmq ]; then gd lmqanswers "$NS" "$BK" "$R/sent.jsonl" "$R/answers/lmq.json" > "$R/lmq.log" 2>&1; tail -1 "$R/lmq.log"; fi
  bstop "$R/broker.pid"
  rm -rf "$OUT/store" "$OUT/answers"; save "$R/store" "$OUT/store"; cp -a "$R/answers" "$OUT/answers"
  cp "$R/sent.jsonl" "$OUT/sent.jsonl"; savedconf "$OUT/broker.conf"; kill "$(cat "$X/namesrv.pid")" ;;
golden-switch)  # a file-commit-log store taken over by a DLedger broker: phase 1 file mode, phase 2 DLedger, same store
  R=$X/switch; rm -rf "$R"; mkdir -p "$R/answers"; nsstart
  GOLDEN_MODE= mkconf "$R/store" "$R/file.conf"; bstart "$R/file.conf" "$R/broker_file.log" "$R/file.pid"
  gd mktopic "$NS" "$BK" TopicSwitch:2 > "$R/mktopic.log" 2>&1
  gd flood "$NS" "$R/sent_file.jsonl" TopicSwitch 700 4004 0 sw-file > "$R/flood_file.log" 2>&1; wc -l < "$R/sent_file.jsonl"
  bstop "$R/file.pid"; save "$R/store" "$R/before_switch"
  GOLDEN_MODE=dledger mkconf "$R/store" "$R/dledger.conf"; bstart "$R/dledger.conf" "$R/broker_dledger.log" "$R/dledger.pid"
  gd waitmaster "$NS" broker-a 120 > "$R/waitmaster.log" 2>&1; tail -1 "$R/waitmaster.log"
  gd flood "$NS" "$R/sent_dledger.jsonl" TopicSwitch 400 4005 0 sw-dledger > "$R/flood_dledger.log" 2>&1; wc -l < "$R/sent_dledger.jsonl"
  cat "$R/sent_file.jsonl" "$R/sent_dledger.jsonl" > "$R/sent.jsonl"
  gd consume "$NS" G_SW TopicSwitch 90 "$R/answers/consumed_G_SW.jsonl" > "$R/consume.log" 2>&1; tail -1 "$R/consume.log"
  gd answers "$NS" "$BK" "$R/sent.jsonl" "$R/answers" G_SW 10 > "$R/answers.log" 2>&1; tail -2 "$R/answers.log"
  bstop "$R/dledger.pid"
  rm -rf "$OUT/store" "$OUT/answers" "$OUT/before_switch"; save "$R/store" "$OUT/store"; save "$R/before_switch" "$OUT/before_switch"
  cp -a "$R/answers" "$OUT/answers"; cp "$R/sent.jsonl" "$OUT/sent.jsonl"
  GOLDEN_MODE= savedconf "$OUT/broker_file.conf"; GOLDEN_MODE=dledger savedconf "$OUT/broker_dledger.conf"
  kill "$(cat "$X/namesrv.pid")" ;;
*) echo "unknown scenario $SC"; exit 2 ;;
esac
echo "=== done $SC ($(date +%T))"
