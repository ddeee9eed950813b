#!/usr/bin/env python3
"""Lists the column families of every RocksDB database under a store and decodes its keys/values.

usage: rocksdb_dump.py <store> [--all]
Opens COPIES of the databases read-only with rocksdict (the broker's LOCK file stays untouched).
Decoding follows apache/rocketmq 8fc57f1468d1: RocksDBConsumeQueueTable (default cf: CQ units),
RocksDBConsumeQueueOffsetTable ("offset" cf: max/min per queue), ConfigRocksDBStorage (config dbs: default,
kvDataVersion, forbidden cfs; fastjson values).
"""
import json
import os
import shutil
import struct
import sys
import tempfile

import rocksdict


def is_db(d):
    return os.path.isfile(os.path.join(d, "CURRENT"))


def cq_key(k):
    # int topicLen, 0x01, topic, 0x01, int queueId, 0x01, long cqOffset
    n = struct.unpack(">i", k[:4])[0]
    topic = k[5:5 + n].decode()
    rest = k[5 + n:]
    assert rest[0] == 1 and rest[5] == 1, k
    return {"topic": topic, "queueId": struct.unpack(">i", rest[1:5])[0], "cqOffset": struct.unpack(">q", rest[6:14])[0]}


def cq_value(v):
    phy, size, tag, ts = struct.unpack(">qiqq", v)
    return {"phyOffset": phy, "size": size, "tagsCode": tag, "storeTimestamp": ts}


def offset_key(k):
    # int topicLen, 0x01, topic, 0x01, "max"|"min", 0x01, int queueId
    n = struct.unpack(">i", k[:4])[0]
    topic = k[5:5 + n].decode()
    rest = k[5 + n:]
    return {"topic": topic, "kind": rest[1:4].decode(), "queueId": struct.unpack(">i", rest[5:9])[0]}


def offset_value(v):
    if len(v) == 8:   # CHECKPOINT_TOPIC max entry: the max physical offset the CQ dispatch has built
        return {"maxPhyOffset": struct.unpack(">q", v)[0]}
    phy, cq = struct.unpack(">qq", v)
    return {"phyOffset": phy, "cqOffset": cq}


def text(b):
    try:
        s = b.decode()
        try:
            return json.loads(s)
        except ValueError:
            return s
    except UnicodeDecodeError:
        return b.hex()


def dump(db, rel, show_all):
    cfs = rocksdict.Rdict.list_cf(db)
    out = {"path": rel, "files": sorted(os.listdir(db)), "column_families": {}}
    opts = rocksdict.Options(raw_mode=True)
    rd = rocksdict.Rdict(db, options=opts, access_type=rocksdict.AccessType.read_only(), column_families={c: opts for c in cfs})
    is_cq = rel.endswith("consumequeue")
    for cf in cfs:
        h = rd.get_column_family(cf)
        items = list(h.items())
        rows = []
        for k, v in items:
            if is_cq and cf == "default":
                rows.append({"key": k.hex(), "k": cq_key(k), "v": cq_value(v)})
            elif is_cq and cf == "offset":
                rows.append({"key": k.hex(), "k": offset_key(k), "v": offset_value(v)})
            else:
                rows.append({"key": text(k), "value": text(v)})
        out["column_families"][cf] = {"count": len(items), "rows": rows if show_all else rows[:4] + rows[-2:] if len(rows) > 6 else rows}
    rd.close()
    return out


def main():
    store = sys.argv[1]
    show_all = "--all" in sys.argv
    tmp = tempfile.mkdtemp(prefix="rocksdump")
    res = []
    try:
        for root, dirs, files in os.walk(store):
            if is_db(root):
                rel = os.path.relpath(root, store)
                cp = os.path.join(tmp, rel.replace("/", "_"))
                shutil.copytree(root, cp)
                lock = os.path.join(cp, "LOCK")
                if os.path.exists(lock):
                    os.remove(lock)
                res.append(dump(cp, rel, show_all))
                dirs[:] = []
    finally:
        shutil.rmtree(tmp)
    print(json.dumps(res, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
