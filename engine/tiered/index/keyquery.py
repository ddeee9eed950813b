"""query-key --tiered-dir: a key query over a directory of tiered index files (format §9.7), with everything
around it resolved the way an operator expects: the tiered geometry and paths from the options or broker.conf,
the topic's id from the tiered metadata, and each answer checked against the message it points at (in the
tiered flat commit log, or its copy in the local store) unless a raw answer is asked for.

One entry point: :func:`query_tiered_key` takes a :class:`TieredKeyQuery` and returns a :class:`TieredKeyAnswer`
that the CLI only renders.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from engine.broker.config.brokerconf import load_config
from engine.broker.layout import StoreLayout
from engine.findings import Note
from engine.tiered.flat.config import load_tiered_config
from engine.tiered.flat.metadata import TieredMetadata, read_metadata
from engine.tiered.index.service import FlatCommitLogVerifier, LocalStoreLocator, TieredQueryResult, query_tiered_dir

UNVERIFIED = "unverified"
TIERED_COMMITLOG = "tiered-commitlog"
LOCAL_STORE = "local-store"


@dataclass
class TieredKeyQuery:
    """What to ask. Only tiered_dir, topic, key, max_num, begin and end are required."""

    tiered_dir: Path
    topic: str
    key: str
    max_num: int
    begin: int
    end: int
    unique: bool = False                          # the key is a UNIQ_KEY (checked as such against the message)
    raw: bool = False                             # the index answer only: no check against the messages
    # where the surroundings come from
    store: Optional[Path] = None                  # local store root (metadata under config/, local copies)
    broker_conf: Optional[Path] = None            # broker.conf: store root, tiered keys, cluster/broker name
    tiered_metadata: Optional[Path] = None        # config/tieredStoreMetadata.json (topic ids)
    topic_id: Optional[int] = None                # instead of the metadata
    tiered_store_path: Optional[Path] = None      # tieredStoreFilePath of a POSIX backend (flat commit log)
    cluster_name: Optional[str] = None
    broker_name: Optional[str] = None
    # geometry: tiered files (default: broker.conf's tiered keys, else inferred per file) and the local store
    tiered_hash_slots: Optional[int] = None
    tiered_max_index: Optional[int] = None
    hash_slots: Optional[int] = None              # local store; also the tiered geometry when no store is given
    max_index: Optional[int] = None
    commitlog_file_size: Optional[int] = None


@dataclass
class TieredKeyAnswer:
    """The answer: kept items (each the item's fields, plus verifiedBy/message when checked), rejected items
    (with a reason), how they were checked, and notes for the operator (partial answers, unchecked items)."""

    items: list[dict] = field(default_factory=list)
    rejected: list[dict] = field(default_factory=list)
    mode: str = UNVERIFIED                        # UNVERIFIED, TIERED_COMMITLOG or LOCAL_STORE
    notes: list[str] = field(default_factory=list)
    index: TieredQueryResult = field(default_factory=TieredQueryResult)  # the service answer behind it


@dataclass
class _Sources:
    """The query's surroundings after broker.conf filled what the options left open."""

    root: Optional[Path]
    have_store: bool
    hash_slots: Optional[int]
    max_index: Optional[int]
    tiered_store_path: Optional[Path]
    cluster_name: Optional[str]
    broker_name: Optional[str]


#: The kinds of a tiered key query's notes (engine.findings.Note): a file the query failed on; no tiered metadata
#: (items not filtered by topicId); the topic is not in the metadata (the broker answers nothing); items not
#: checked against their messages; items not located in the local store; no item found.
QUERY_FAILED, NO_METADATA, TOPIC_NOT_IN_METADATA = "query-failed", "no-tiered-metadata", "topic-not-in-metadata"
UNVERIFIED_ITEMS, NOT_LOCATED, NO_ITEM = "items-unverified", "items-not-located", "no-item"


def query_tiered_key(q: TieredKeyQuery) -> TieredKeyAnswer:
    """Query the tiered index files of ``q.tiered_dir`` for ``q.topic``/``q.key``; everything that can fail on bad
    input (broker.conf, metadata, the flat commit log or the local store) is opened before the files are read."""
    src = _resolve_sources(q)
    topic_id, meta, meta_notes = _resolve_topic_id(q, src.root)
    topic_missing = meta is not None and topic_id is None
    with contextlib.ExitStack() as stack:
        verifier = locator = None
        if not q.raw and src.tiered_store_path is not None:
            hints = meta.broker_names(q.topic) if meta is not None else set()
            verifier = FlatCommitLogVerifier(src.tiered_store_path, q.topic, cluster_name=src.cluster_name,
                                             broker_name=src.broker_name, broker_hints=hints)
            stack.callback(verifier.close)
        elif not q.raw and src.have_store:
            locator = LocalStoreLocator(stack.enter_context(_open_local_store(q)), q.topic)
        res = query_tiered_dir(q.tiered_dir, q.topic, q.key, q.max_num, q.begin, q.end, topic_id=topic_id,
                               hash_slot_num=src.hash_slots, index_num=src.max_index)
        ans = TieredKeyAnswer(index=res)
        ans.notes = meta_notes + [Note(QUERY_FAILED, f"query failed on {e}") for e in res.errors]
        if topic_id is None and meta is None:
            ans.notes.append(Note(NO_METADATA, "no tiered metadata (pass --tiered-metadata, --topic-id or --store): "
                                  "items are not filtered by topicId"))
        if topic_missing:
            # MessageStoreFetcherImpl: no topic metadata -> an empty answer.
            for it in res.items:
                res.dropped.append({**it, "reason": f"topic {q.topic!r} is not in the tiered metadata"})
            res.items = []
            ans.notes.append(Note(TOPIC_NOT_IN_METADATA, f"topic {q.topic!r} is not in the tiered metadata: the "
                                  "broker answers nothing", topic=q.topic, dropped=len(res.dropped)))
        ans.rejected = [{**item_json(d), "reason": d["reason"]} for d in res.dropped]
        _check_items(q, res, verifier, locator, ans)
    ans.notes += _closing_notes(q, ans)
    return ans


def _resolve_sources(q: TieredKeyQuery) -> _Sources:
    cfg = load_tiered_config(q.broker_conf)   # the one reader of the tiered broker.conf keys
    props_root = cfg.storePathRootDir or None
    root = q.store if q.store is not None else (Path(props_root) if props_root else None)
    have_store = q.store is not None or q.broker_conf is not None
    # Tiered geometry: explicit tiered options, else broker.conf's tiered keys, else --hash-slots/--max-index
    # when there is no local store they could belong to, else inferred from each file.
    slots = q.tiered_hash_slots or (cfg.tieredStoreIndexFileMaxHashSlotNum
                                    if cfg.is_given("tieredStoreIndexFileMaxHashSlotNum") else None)
    items_num = q.tiered_max_index or (cfg.tieredStoreIndexFileMaxIndexNum
                                       if cfg.is_given("tieredStoreIndexFileMaxIndexNum") else None)
    if not have_store:
        slots = slots or q.hash_slots
        items_num = items_num or q.max_index
    tsp = q.tiered_store_path or (Path(cfg.tieredStoreFilePath) if cfg.tieredStoreFilePath else None)
    return _Sources(root, have_store, slots, items_num, tsp, q.cluster_name or cfg.brokerClusterName or None,
                    q.broker_name or cfg.brokerName or None)


def _resolve_topic_id(q: TieredKeyQuery, root: Optional[Path]
                      ) -> tuple[Optional[int], Optional[TieredMetadata], list[str]]:
    """(topicId, the tiered metadata, what loading it said): --topic-id, else the tiered metadata (the given file,
    else the one under the store root when it exists; its `.bak` when the main file is unusable, as the broker)."""
    if q.topic_id is not None:
        return q.topic_id, None, []
    meta_path = q.tiered_metadata
    if meta_path is None and root is not None:
        cand = StoreLayout(root).tiered_metadata
        if cand.exists() or cand.with_name(cand.name + ".bak").exists():
            meta_path = cand
    if meta_path is None:
        return None, None, []
    loaded = read_metadata(meta_path)
    topic = loaded.metadata.topic(q.topic)
    return (topic.topic_id if topic is not None else None), loaded.metadata, loaded.warnings


def _open_local_store(q: TieredKeyQuery):
    from engine.broker.store import MessageStore  # imported only when a local store is asked for

    cfg = load_config(q.broker_conf, storePathRootDir=q.store,
                      maxHashSlotNum=q.hash_slots, maxIndexNum=q.max_index,
                      mappedFileSizeCommitLog=q.commitlog_file_size)
    return MessageStore(cfg)


def _check_items(q: TieredKeyQuery, res: TieredQueryResult, verifier: Optional[FlatCommitLogVerifier],
                 locator: Optional[LocalStoreLocator], ans: TieredKeyAnswer) -> None:
    """Each item the index kept checked against its message: in the flat commit log (a mismatch rejects it) or
    in the local store (an item not found there stays, marked unverified), else kept as it is."""
    if verifier is not None:
        ans.mode = TIERED_COMMITLOG
        for it in res.items:
            rec, why = verifier.verify(it, q.key, q.unique, q.begin, q.end)
            if rec is not None and not why:
                ans.items.append({**item_json(it), "verifiedBy": ans.mode, "message": rec.to_json()})
            else:
                ans.rejected.append({**item_json(it), "reason": why})
    elif locator is not None:
        ans.mode = LOCAL_STORE
        for it in res.items:
            rec, why = locator.locate(it, q.key, q.unique, q.begin, q.end)
            if rec is not None:
                ans.items.append({**item_json(it), "verifiedBy": ans.mode, "message": rec.to_json()})
            else:
                ans.items.append({**item_json(it), "verifiedBy": None, "unverifiedReason": why, "message": None})
    else:
        ans.items = [item_json(it) for it in res.items]


def _closing_notes(q: TieredKeyQuery, ans: TieredKeyAnswer) -> list[str]:
    notes = []
    if ans.mode == UNVERIFIED and not q.raw and ans.items:
        notes.append(Note(UNVERIFIED_ITEMS, "index items only, not checked against the messages (hash collisions "
                          "possible); pass --tiered-store-path (or --store) to verify", items=len(ans.items)))
    if ans.mode == LOCAL_STORE:
        n = sum(1 for k in ans.items if k["verifiedBy"] is None)
        if n:
            notes.append(Note(NOT_LOCATED, f"{n} item(s) could not be located in the local store and are "
                              "unverified", items=n))
    if not ans.items:
        res = ans.index
        dropped = f", {len(ans.rejected)} rejected (see --explain)" if ans.rejected else ""
        notes.append(Note(NO_ITEM, f"no item found for key {q.key!r} in topic {q.topic!r} ({res.candidates} index "
                          f"candidate(s) in {len(res.files_selected)} of {res.files_total} tiered file(s){dropped}; "
                          "files are selected by their begin timestamp within [begin, end])", key=q.key,
                          topic=q.topic, candidates=res.candidates, filesSelected=len(res.files_selected),
                          filesTotal=res.files_total, rejected=len(ans.rejected)))
    return notes


def item_json(it: dict) -> dict:
    """An answered item as shown: its index fields and where it came from (file, the time the query filtered on)."""
    keys = ("queueId", "offset", "size", "hashCode", "topicId", "timeDiff", "itemIndex", "time", "file",
            "fileTimestamp")
    return {k: it[k] for k in keys if k in it}
