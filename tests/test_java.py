"""Java semantics: String.hashCode over UTF-16, truncating division, CRC, HashSet order."""
from __future__ import annotations

import random

import numpy as np

from engine.java.collections import hashset_order
from engine.java.lang import (index_hash, java_div, java_rem, java_string_hash, java_string_hashes,
                             rmq_crc32, tiered_hash, to_i32)


def test_spec_check_values():
    assert java_string_hash("TopicTest#MessageKey") == 638347386
    assert java_string_hash("TagA") == 2598919
    assert java_string_hash("polygenelubricants") == -2147483648
    assert java_string_hash("Tópico#ключ😀") == -143114948
    assert rmq_crc32(b"Hello RocketMQ") == 1774740973
    assert rmq_crc32(b"") == 0


def reference_hash(s: str) -> int:
    # Independent formulation: sum of u_i * 31^(n-1-i) over UTF-16 code units, mod 2^32.
    units = [int.from_bytes(s.encode("utf-16-be", "surrogatepass")[i:i + 2], "big")
             for i in range(0, len(s.encode("utf-16-be", "surrogatepass")), 2)]
    n = len(units)
    return to_i32(sum(u * pow(31, n - 1 - i, 2**32) for i, u in enumerate(units)) % 2**32)


def test_vectorized_hash_equals_scalar_on_mixed_strings():
    rnd = random.Random(1)
    alphabet = "aZ09#-_ éß中文ключ😀𝄞\u0000"
    keys = ["", "a", "Aa", "BB", "polygenelubricants", "😀", "x" * 300]
    keys += ["".join(rnd.choice(alphabet) for _ in range(rnd.randrange(0, 40))) for _ in range(2000)]
    got = java_string_hashes(keys, chunk=97)
    want = np.array([reference_hash(k) for k in keys], dtype=np.int32)
    assert np.array_equal(got, want)
    assert [java_string_hash(k) for k in keys] == want.tolist()


def test_collision_pair():
    assert java_string_hash("Aa") == java_string_hash("BB")
    assert java_string_hash("T#Aa") == java_string_hash("T#BB")


def test_java_division_and_remainder():
    assert java_div(-1500, 1000) == -1 and java_div(1500, 1000) == 1 and java_div(-999, 1000) == 0
    assert java_rem(-7, 5) == -2 and java_rem(7, -5) == 2 and java_rem(-2**31, 5_000_000) == -2483648


def test_hash_rules():
    assert index_hash(-2**31) == 0 and index_hash(-5) == 5
    assert tiered_hash(-2**31) == -2**31 and tiered_hash(-5) == 5


def test_hashset_order_matches_broker_property_order():
    # The golden commit log's properties were serialised from a HashMap in this order.
    assert hashset_order(["UNIQ_KEY", "KEYS", "TAGS", "WAIT", "CLUSTER"]) == ["KEYS", "UNIQ_KEY", "CLUSTER", "WAIT", "TAGS"]
    assert hashset_order(["a", "b", "a"]) == ["a", "b"]
