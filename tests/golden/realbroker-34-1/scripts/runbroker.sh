#!/usr/bin/env bash
# usage: runbroker.sh <dir with broker.conf and store>  -- run inside unshare -n
set -uo pipefail
D=$(cd "$1" && pwd); G=$GEN; W=$WORK
[ "${IN_NETNS:-}" = 1 ] || exec env IN_NETNS=1 unshare -n bash -c 'ip link set lo up && exec "$0" "$@"' "$0" "$@"
export LOGLEVEL=warn HEAP=256m
NS=127.0.0.1:19976; BK=127.0.0.1:10911; O=$D/run; mkdir -p "$O"
printf 'listenPort=19976\nbindAddress=127.0.0.1\nrocketmqHome=%s\nkvConfigPath=%s/namesrv/kv.json\n' "$O" "$O" > "$O/namesrv.conf"
(nohup "$G/run.sh" "$W" namesrv "$O/namesrv.conf" > "$O/namesrv.log" 2>&1 & echo $! > "$O/namesrv.pid"); sleep 5
echo "broker start $(date -u +%T.%3N)"; date +%s%3N > "$O/broker_start_ms"
HEAP=1g LOGLEVEL=info "$G/scripts/broker.sh" "$W" start "$D/broker.conf" "$O/broker.log" "$O/broker.pid" || { kill "$(cat "$O/namesrv.pid")"; exit 1; }
"$G/run.sh" "$W" driver tinfo "$BK" "$O/tinfo_after_start.json" > "$O/tinfo1.log" 2>&1
CP="$SCRATCH/java/classes:$W/classes:$(ls "$W"/lib/*.jar | tr '\n' ':')"
java -Xms256m -Xmx256m -XX:+UseG1GC -XX:ActiveProcessorCount=2 --add-opens java.base/java.nio=ALL-UNNAMED \
  --add-opens java.base/sun.nio.ch=ALL-UNNAMED --add-opens java.base/java.lang=ALL-UNNAMED --add-opens java.base/java.util=ALL-UNNAMED \
  -Dorg.slf4j.simpleLogger.defaultLogLevel=warn -Drocketmq.client.logUseSlf4j=true -Dtls.server.mode=disabled "-Duser.home=$W/home" \
  -cp "$CP" v34.Send5 "$NS" "$O" 5 20 70 > "$O/send5.log" 2>&1
"$G/run.sh" "$W" driver tinfo "$BK" "$O/tinfo_after_traffic.json" > "$O/tinfo2.log" 2>&1
"$G/scripts/broker.sh" "$W" stop "$O/broker.pid"
kill "$(cat "$O/namesrv.pid")"; sleep 2
echo "done $(date -u +%T)"
