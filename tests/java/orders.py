"""Cases for the Java HashMap/HashSet iteration-order model and the JVM run that answers them.

    python tests/java/orders.py        # recompile HashMapOrder.java, rerun every case, rewrite hashmap_orders.jsonl

Every case is a key list put into a Java collection (see HashMapOrder.java for the modes). The key lists are
built from Java's String.hashCode so that they collide on purpose: strings made of "Aa"/"BB" blocks share one
hash (31*'A' + 'a' == 31*'B' + 'B'), other names share a bucket without sharing a hash, and the sets grow
through resizes, treeified bins, and tree bins split back by a resize.
"""
from __future__ import annotations

import itertools
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "HashMapOrder.java"
DATA = HERE / "hashmap_orders.jsonl"
NO_JDK_ENV = "RMQTOOL_NO_JDK"  # set to 1 on a machine without a JDK to skip the live JVM comparison

try:
    from engine.java.lang import java_string_hash
except ImportError:  # run as a script from anywhere: use this checkout's engine
    sys.path.insert(0, str(HERE.parent.parent))
    from engine.java.lang import java_string_hash


def bucket(key: str, cap: int) -> int:
    h = java_string_hash(key) & 0xFFFFFFFF
    return (h ^ (h >> 16)) & (cap - 1)


def same_hash(prefix: str, blocks: int, n: int | None = None) -> list[str]:
    """Names of equal Java hash: prefix + every combination of `blocks` "Aa"/"BB" blocks."""
    out = [prefix + "".join(c) for c in itertools.product(("Aa", "BB"), repeat=blocks)]
    return out[:n] if n is not None else out


def same_bucket(prefix: str, cap: int, b: int, n: int, start: int = 0, high_bit: int | None = None) -> list[str]:
    """n names in bucket b of a table of `cap`, of distinct hashes; with high_bit, alternate the bit that decides
    where a resize moves them (so a tree bin splits into two halves)."""
    out, seen, i = [], set(), start
    while len(out) < n:
        k = f"{prefix}{i}"
        i += 1
        h = java_string_hash(k)
        if bucket(k, cap) != b or h in seen:
            continue
        if high_bit is not None:
            want = len(out) % 2
            if bool((h & 0xFFFFFFFF ^ (h & 0xFFFFFFFF) >> 16) & high_bit) != bool(want):
                continue
        seen.add(h)
        out.append(k)
    return out


def fillers(prefix: str, n: int, avoid: set[int], cap: int) -> list[str]:
    """n names outside the given buckets (they only make the table grow)."""
    out, i = [], 0
    while len(out) < n:
        k = f"{prefix}{i}"
        i += 1
        if bucket(k, cap) not in avoid:
            out.append(k)
    return out


def _surrogate_pair_names() -> list[str]:
    # U+10FC00 (UTF-16 DBFF DC00) and U+E000 U+5FE1 have the same String hash; Java's compareTo sees 0xDBFF <
    # 0xE000 while Python compares code points the other way round, so their tree order tells them apart.
    a, b = "\U0010fc00", "\ue000\u5fe1"
    assert java_string_hash(a) == java_string_hash(b)
    return [x + y for x in (a, b) for y in same_hash("", 3)]


def property_names() -> list[str]:
    """Property names of one message, in the order a producer sets them: sixteen names of one Java hash (a
    default HashMap treeifies their bin at the 11th, a HashMap(128) at the 9th), three that share their bucket
    in a 128 table without sharing the hash, then the names rmqtool put adds last."""
    names = same_hash("prop", 4)
    names += same_bucket("user", 128, bucket(names[0], 128), 3)
    return names + ["KEYS", "TAGS", "UNIQ_KEY"]


def cases() -> list[dict]:
    """Every case as {mode, capacity, keys}; deterministic."""
    rnd = random.Random(20250919)
    out: list[dict] = []

    def add(mode: str, capacity, keys: list[str]) -> None:
        out.append({"mode": mode, "capacity": capacity, "keys": keys})

    # Equal hashes: 9 names resize a default table (treeifyBin below 64), 11 treeify it, a HashMap(128)
    # treeifies at the 9th; longer runs rebalance the tree many times.
    for n in (8, 9, 10, 11, 12, 16, 32, 64):
        names = same_hash("P", 6, n)
        for mode, cap in (("set", None), ("map", 128), ("remap", 128), ("setall", None)):
            add(mode, cap, names)
        add("set", None, list(reversed(names)))
        add("map", 128, rnd.sample(names, len(names)))
    # Shared bucket, distinct hashes (tree ordered by hash), and both kinds mixed in one bucket.
    for n in (9, 12, 20):
        add("map", 128, same_bucket("prop", 128, 37, n))
        add("set", None, same_bucket("key", 64, 5, n))
    mixed = same_bucket("m", 128, 40, 6) + [k for k in same_hash("Q", 4) if bucket(k, 128) == 40]
    add("map", 128, mixed + same_hash("Q", 4))
    # Tree bins then resizes: kept whole (equal hashes all move together), split into two trees, split into
    # a tree and a plain bin, split into two plain bins.
    tree = same_hash("R", 5, 12)
    add("set", None, tree + fillers("f", 60, {bucket(tree[0], 64)}, 64))
    for n_tree in (16, 10, 9):
        names = same_bucket("s", 64, 9, n_tree, high_bit=64)
        if n_tree == 10:
            names = names + same_bucket("s", 128, 9, 4, start=5000)  # 7 on the low side, 5 on the high side
        add("set", None, names + fillers("g", 80, {9}, 64))
        add("map", 64, names + fillers("g", 80, {9}, 64))
        add("map", 128, names + fillers("h", 200, {9, 73}, 256))
    # Several tree bins at once, growing through several resizes.
    big = same_hash("T", 5) + same_hash("U", 4) + same_bucket("v", 64, 3, 14) + fillers("w", 300, set(), 1)
    add("set", None, big)
    add("set", None, rnd.sample(big, len(big)))
    # Surrogate pairs against high BMP characters inside a tree bin (String.compareTo works on UTF-16 units).
    sur = _surrogate_pair_names()
    add("map", 128, sur)
    add("set", None, sur + ["", " ", "é", "ключ", "😀"] + fillers("z", 70, set(), 1))
    # Initial capacities the constructors round: tableSizeFor and the small-table thresholds.
    for cap in (0, 1, 2, 3, 5, 17, 100, 1000):
        add("map", cap, fillers("c", 40, set(), 1))
        add("set", cap, same_hash("S", 4))
    # One message's properties: the order of a producer's HashMap (what encode_record writes) and the order
    # after the broker re-puts them into string2messageProperties' HashMap(128).
    add("map", None, property_names())
    add("remap", 128, property_names())
    # Random property-like names, with repeats.
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz0123456789#é中😀"
    for size in (1, 5, 13, 25, 49, 97, 200):
        names = ["".join(rnd.choice(alphabet) for _ in range(rnd.randrange(1, 12))) for _ in range(size)]
        names += rnd.sample(names, min(3, len(names)))
        add("set", None, names)
        add("remap", 128, names)
    return out


def encode_line(case: dict) -> str:
    cap = "-" if case["capacity"] is None else str(case["capacity"])
    keys = ["x" + k.encode("utf-16-be", "surrogatepass").hex() for k in case["keys"]]
    return " ".join([case["mode"], cap, *keys])


def run_jvm(case_list: list[dict], workdir: Path) -> list[dict]:
    """Compile HashMapOrder.java into workdir and run it on the cases; one answer per case."""
    javac, java = shutil.which("javac"), shutil.which("java")
    if not javac or not java:
        raise RuntimeError(f"javac/java not found on PATH: install a JDK (17) or set {NO_JDK_ENV}=1")
    subprocess.run([javac, "-d", str(workdir), str(SOURCE)], check=True, capture_output=True, text=True)
    text = "".join(encode_line(c) + "\n" for c in case_list)
    r = subprocess.run([java, "--add-opens", "java.base/java.util=ALL-UNNAMED", "-cp", str(workdir), "HashMapOrder"],
                       input=text, check=True, capture_output=True, text=True, timeout=300)
    return [json.loads(line) for line in r.stdout.splitlines()]


def load_data() -> list[dict]:
    return [json.loads(line) for line in DATA.read_text(encoding="ascii").splitlines() if line.strip()]


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        answers = run_jvm(cases(), Path(tmp))
    DATA.write_text("".join(json.dumps(a, ensure_ascii=True, separators=(",", ":")) + "\n" for a in answers),
                    encoding="ascii")
    print(f"{len(answers)} cases written to {DATA.relative_to(HERE.parent.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
