"""Which keys a message indexes: the one statement of both rules (everything that builds or checks an index
entry asks here; the bulk decoders in engine.jobs are tested against these functions).

* broker IndexService (format §5.8, pitfalls 23, 24): the UNIQ_KEY, then each KEYS token (KEYS split on a single
  space, empty tokens skipped), each as "topic#key", not de-duplicated; rollback records index nothing.
* tiered dispatcher (format §9.6, pitfalls 24, 39): the UNIQ_KEY unless blank, then every KEYS token unless KEYS
  is blank (empty tokens kept, trailing empty tokens dropped by Java's split), de-duplicated, in Java HashSet
  iteration order.
"""
from __future__ import annotations

from typing import Optional

from engine.java.collections import hashset_order
from engine.java.lang import java_is_blank, java_split


def split_keys(keys_property: Optional[str]) -> list[str]:
    """The KEYS property's tokens: KEYS.split(" ") with Java's rules (trailing empty tokens dropped)."""
    if not keys_property:
        return []
    return java_split(keys_property, " ")


def broker_index_keys(topic: str, uniq_key: Optional[str], keys_property: Optional[str],
                      rollback: bool = False) -> list[str]:
    """The "topic#key" strings the broker's IndexService puts for one record, in put order."""
    if rollback:
        return []
    out = []
    if uniq_key is not None:
        out.append(f"{topic}#{uniq_key}")
    for k in split_keys(keys_property):
        if k:
            out.append(f"{topic}#{k}")
    return out


def tiered_key_set(uniq_key: Optional[str], keys_property: Optional[str]) -> list[str]:
    """The key set the tiered dispatcher builds for one message (MessageStoreDispatcherImpl.constructIndexFile),
    in Java HashSet iteration order; pass it to IndexStoreFile.put_key."""
    keys: list[str] = []
    if not java_is_blank(uniq_key):
        keys.append(uniq_key)  # type: ignore[arg-type]
    if not java_is_blank(keys_property):
        keys.extend(java_split(keys_property, " "))  # type: ignore[arg-type]
    return hashset_order(keys)
