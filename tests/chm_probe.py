"""Scripts for tests/java/ChmOrderProbe.java and their replay on engine.java.concurrent (shared by the tests and
by the command that regenerates tests/java/chm_cases.txt / chm_expected.txt)."""
from __future__ import annotations

import random
from itertools import product

from engine.java.concurrent import ConcurrentHashMap, int_hash, long_hash, string_hash

HASHES = {"L": long_hash, "I": int_hash, "S": string_hash}
CQ_SEGMENT = 100 * 1024 * 1024  # tieredStoreConsumeQueueMaxSize: CQ base offsets collide in small tables


def _key(t: str, text: str):
    return int(text) if t in "LI" else text


def replay(script: str) -> str:
    """Run a probe script on the Python model; the output has the probe's format."""
    out, m, name, t = [], None, "", "S"
    for line in script.splitlines():
        if not line or line.startswith("#"):
            continue
        p = line.split(" ", 3)
        op = p[0]
        if op == "case":
            name, t, ctor = p[1], p[2], p[3]
            if ctor == "new":
                m = ConcurrentHashMap(HASHES[t])
            elif ctor.startswith("cap:"):
                m = ConcurrentHashMap(HASHES[t], int(ctor[4:]))
            else:
                keys = ctor[5:].split(",") if ctor[5:] else []
                m = ConcurrentHashMap.copy_of([(_key(t, k), "v") for k in dict.fromkeys(keys)], HASHES[t])
        elif op == "put":
            m.put(_key(t, p[1]), "v")
        elif op == "pia":
            m.put_if_absent(_key(t, p[1]), "v")
        elif op == "cia":
            m.compute_if_absent(_key(t, p[1]), lambda: "v")
        elif op == "rem":
            m.remove(_key(t, p[1]))
        elif op == "putall":
            m.put_all([(_key(t, k), "v") for k in dict.fromkeys(p[1].split(","))])
        elif op == "dump":
            out.append(f"{name}: {','.join(str(k) for k in m.keys())}")
        else:
            raise ValueError(line)
    return "".join(s + "\n" for s in out)


def _case(lines: list[str], name: str, t: str, ctor: str, ops: list[tuple[str, object]], dump_every=True):
    lines.append(f"case {name} {t} {ctor}")
    for op, k in ops:
        lines.append(f"{op} {k}")
        if dump_every:
            lines.append("dump")
    lines.append("dump")


def fixed_cases() -> str:
    """The committed cases: metadata-shaped maps and the corners of the model (resize, treeify, untreeify)."""
    rnd = random.Random(12)
    lines: list[str] = []
    f1 = [0, 3810, 7701, 11506, 15423, 19217, 23123]
    _case(lines, "f1_commitlog", "L", "new", [("put", k) for k in f1])
    for b0 in (0, 20000, 123456780):
        keys = [b0 + k * CQ_SEGMENT for k in range(48)]
        _case(lines, f"cq_default_{b0}", "L", "new", [("put", k) for k in keys])
        ops = [("put", k) for k in keys[:40]] + [("rem", k) for k in keys[:30]] + [("put", k) for k in keys[40:]]
        _case(lines, f"cq_retention_{b0}", "L", "new", ops)
    for m in (0, 1, 5, 6, 10, 11, 21, 22, 43, 44, 100):
        keys = [rnd.randrange(0, 1 << 40) for _ in range(m)]
        lines.append(f"case copy_{m} L copy:{','.join(map(str, keys))}")
        lines.append("dump")
        for k in [rnd.randrange(0, 1 << 40) for _ in range(30)]:
            lines += [f"put {k}", "dump"]
    for cap in (0, 1, 2, 5, 10, 11, 12, 16, 17, 100, 1024):
        _case(lines, f"cap_{cap}", "I", f"cap:{cap}", [("put", q) for q in range(40)], dump_every=False)
    paths = [f"broker-a/{t}/{q}" for t in ("TopicTest", "tiered_orders", "%RETRY%group_a", "x" * 127)
             for q in range(8)]
    lines.append(f"case paths_copy S copy:{','.join(paths)}")
    lines.append("dump")
    _case(lines, "paths_cap1024", "S", "cap:1024", [("cia", p) for p in paths], dump_every=False)
    lines.append("case paths_putall S cap:1024")
    lines += [f"putall {','.join(paths)}", "dump"]
    same_hash = ["".join(w) for w in product(("Aa", "BB"), repeat=5)]  # 32 strings, one String.hashCode
    rnd.shuffle(same_hash)
    ops = [("pia", s) for s in same_hash] + [("rem", s) for s in same_hash[::3]] + [("put", s) for s in same_hash[::2]]
    _case(lines, "string_collisions", "S", "new", ops)
    _case(lines, "string_collisions_big", "S", "cap:200", ops)
    return "\n".join(lines) + "\n"


def random_cases(seed: int, n_cases: int = 30) -> str:
    """Random histories over keys that collide in small tables (for a live JVM comparison)."""
    rnd = random.Random(seed)
    lines: list[str] = []
    for c in range(n_cases):
        shift = rnd.choice((0, 4, 8, 16, 20, 26))
        pool = [rnd.randrange(0, 1 << 12) << shift for _ in range(rnd.randrange(5, 120))]
        ctor = rnd.choice(["new", "new", f"cap:{rnd.randrange(0, 300)}",
                           "copy:" + ",".join(str(k) for k in rnd.sample(pool, min(len(pool), rnd.randrange(0, 40))))])
        ops = []
        for _ in range(rnd.randrange(10, 300)):
            ops.append((rnd.choice(("put", "put", "pia", "cia", "rem")), rnd.choice(pool)))
        _case(lines, f"random_{seed}_{c}", "L", ctor, ops, dump_every=rnd.random() < 0.3)
    return "\n".join(lines) + "\n"
