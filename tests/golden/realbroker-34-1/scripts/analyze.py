import json, sys, re
D = sys.argv[1]
s = [json.loads(l) for l in open(D + '/run/sent.jsonl')]
r = [json.loads(l) for l in open(D + '/run/received.jsonl')]
res = {"sent": len(s), "sendOk": sum(x['status'] == 'SEND_OK' for x in s), "receivedTotal": len(r)}
by = {}
for x in r: by.setdefault(x['tags'], []).append(x)
res["receivedByTag"] = {k: len(v) for k, v in sorted(by.items())}
d = {x['msgId']: x for x in s}
res["new"] = [{"keys": x['keys'], "deliverMs": d[x['uniqKey']]['deliverMs'], "recvMs": x['recvMs'],
               "lateMs": x['recvMs'] - d[x['uniqKey']]['deliverMs']} for x in sorted(by.get('v34', []), key=lambda x: x['keys'])]
res["newDelivered"] = len({x['keys'] for x in by.get('v34', [])})
res["quarantineDeliveries"] = [x for x in r if x['topic'] != 'TimerA']
log = open(D + '/run/broker.log', errors='replace').read().splitlines()
res["logNumberFormatException"] = sum('NumberFormatException' in l for l in log)
res["logUnknownExceptionInEnqueuing"] = sum('Unknown exception in enqueuing' in l for l in log)
res["logFailToReadOffsetPyMinus1"] = sum('offsetPy:-1' in l for l in log)
res["logIllegalMagic"] = [l[:200] for l in log if 'illegal magic' in l]
res["logAbnormalRecover"] = [l[:200] for l in log if re.search(r'recoverAbnormally|abnormally|last shutdown is abnormal|truncate', l, re.I)][:10]
for f in ('tinfo_after_start', 'tinfo_after_traffic'):
    try: t = json.load(open(f'{D}/run/{f}.json')); res[f] = {"atMs": t['atMs'], **t.get('checkpoint', {})}
    except Exception as e: res[f] = str(e)
json.dump(res, open(D + '/run/summary.json', 'w'), indent=1)
print(json.dumps({k: v for k, v in res.items()}, indent=None)[:3000])
