"""rmqtool tiered ...: the RocketMQ 5 tiered flat store (engine.tiered.flat) and its index (engine.tiered.index),
offline. One function per subcommand; the reading ones take the tier opened by open_tier (or its index service,
open_index) and answer plain values; the exit codes are decided here (3: a read stopped on damage, verification
found problems, a queue could not be tiered out to its end; 2: bad question lines)."""
from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Callable, Optional

from engine.errors import InvalidArgumentError

#: Exit codes (docs/output-contract.md).
OK, BAD_INPUT, PARTIAL = 0, 2, 3
#: --count's bound for a key question (maxCount is a Java int).
INT_MAX = 2**31 - 1


def open_tier(source, **overrides):
    """The tier a TierSource names, opened read-only (close it when done; its `warnings` after); `overrides` are
    tiered config keys."""
    from engine.tiered.flat.store import open_tier as open_flat

    return open_flat(source, **overrides)


# -- reading the flat store ------------------------------------------------------------------------------------------

def segments(st, topic: str, queue_id: int) -> list[dict]:
    """rmqtool tiered segments: a row per COMMIT_LOG and CONSUME_QUEUE segment of the queue."""
    from engine.tiered.flat.answers import segment_rows

    return segment_rows(st, topic, queue_id)


def queues(st, topic: Optional[str] = None) -> list[dict]:
    """rmqtool tiered queues: a row per tiered queue the broker loads (of one topic)."""
    from engine.tiered.flat.answers import queue_rows

    return list(queue_rows(st, topic))


def dump_cq(st, topic: str, queue_id: int):
    """rmqtool tiered dump-cq: the queue's CONSUME_QUEUE units as rows (read as they are iterated)."""
    from engine.tiered.flat.answers import cq_rows

    return cq_rows(st, topic, queue_id)


def offset_by_time(st, topic: str, queue_id: int, stamps: list[int], boundary: str) -> list[dict]:
    """rmqtool tiered offset-by-time: getOffsetInQueueByTime per timestamp (an `error` where the broker throws)."""
    from engine.tiered.flat.answers import offsets_by_time

    return offsets_by_time(st, topic, queue_id, stamps, boundary)


def offset_by_time_exit_code(rows: list[dict]) -> int:
    """3 when the broker throws for any timestamp."""
    return PARTIAL if any("error" in r for r in rows) else OK


def get(st, topic: str, queue_id: int, queue_offset: int, count: int = 1, raw: bool = False,
        as_consumer: bool = False):
    """rmqtool tiered get: (the fetcher's result, its --json document)."""
    from engine.tiered.flat.answers import fetch_json, get_messages

    res = get_messages(st, topic, queue_id, queue_offset, count, raw, as_consumer)
    return res, fetch_json(res)


def get_exit_code(res, undecoded: list) -> int:
    """3 when a read stopped on a damaged record or a body does not decode."""
    return PARTIAL if res.problem or undecoded else OK


def verify(st, topic: Optional[str] = None, progress: Optional[Callable] = None):
    """rmqtool tiered verify: engine.tiered.index.operations.verify_tier's report (the tier's warnings become
    its problems: they are taken off the tier's own list)."""
    from engine.tiered.index.operations import verify_tier

    rep = verify_tier(st, topic, **({"progress": progress} if progress is not None else {}))
    st.warnings.clear()   # verify reports them as problems
    return rep


def verify_exit_code(rep) -> int:
    return OK if rep.ok else PARTIAL


# -- changing the tier -----------------------------------------------------------------------------------------------

def reserved_hours(hours: float):
    """--reserved-hours checked (a Java int of hours); whole hours as an int, as the broker's setting."""
    if not -(2**31) <= hours <= 2**31 - 1:
        raise InvalidArgumentError(f"--reserved-hours {hours:g} is out of range (a Java int of hours)")
    if float(hours).is_integer():
        hours = int(hours)  # whole hours stay an int in the plan, as the broker's setting
    return hours


def clean(st, hours, now_ms: int, dry_run: bool = False, topic: Optional[str] = None) -> dict:
    """rmqtool tiered clean: retention planned (and applied unless `dry_run`); the plan as a dict."""
    from engine.tiered.flat.retention import apply_clean, plan_clean

    plan = plan_clean(st, hours, now_ms, dry_run, topic)
    if not dry_run:
        apply_clean(st, plan)
    return plan.as_dict(st.layout.rel)


def dispatch_request(store: Optional[Path], broker_conf: Optional[Path], tiered_store_path: Optional[Path],
                     metadata: Optional[Path], cluster_name: Optional[str], broker_name: Optional[str],
                     topics: Optional[list[str]], commitlog_max_size: Optional[int],
                     consume_queue_max_size: Optional[int], master: str, dry_run: bool):
    """rmqtool tiered dispatch's question checked: the local store (read), the tier and its settings."""
    from engine.broker.config.brokerconf import load_config
    from engine.tiered.flat.config import load_tiered_config
    from engine.tiered.flat.dispatch import DispatchRequest

    local = load_config(broker_conf, storePathRootDir=store)
    if store is None and broker_conf is None:
        raise InvalidArgumentError("no local store given: pass --store DIR (or --broker-conf)")
    cfg = load_tiered_config(broker_conf, tieredStoreCommitLogMaxSize=commitlog_max_size,
                             tieredStoreConsumeQueueMaxSize=consume_queue_max_size)
    root = tiered_store_path or (Path(cfg.tieredStoreFilePath) if cfg.tieredStoreFilePath else None)
    if root is None:
        raise InvalidArgumentError("no tiered store given: pass --tiered-store-path DIR")
    return DispatchRequest(local, root, cfg, metadata, cluster_name, broker_name, topics or None, master, dry_run)


def dispatch(req, progress: Optional[Callable] = None):
    """rmqtool tiered dispatch: the store tiered out (or planned) as MessageStoreDispatcherImpl does."""
    from engine.tiered.flat.dispatch import dispatch as run_dispatch

    return run_dispatch(req, progress)


def dispatch_exit_code(res) -> int:
    """3 when a queue could not be tiered out to its end."""
    return PARTIAL if res.problems else OK


def rebuild_metadata(tiered_store_path: Optional[Path], broker_name: Optional[str], out: Path,
                     cluster_name: Optional[str] = None, from_file: Optional[Path] = None):
    """rmqtool tiered rebuild-metadata: tieredStoreMetadata.json rebuilt from the segment files into `out`."""
    from engine.tiered.flat.rebuild import rebuild_metadata as run_rebuild

    if tiered_store_path is None:
        raise InvalidArgumentError("pass --tiered-store-path DIR")
    return run_rebuild(tiered_store_path, broker_name, out, cluster_name, from_file)


# -- the tiered index ------------------------------------------------------------------------------------------------

def open_index(source, local_dir: Optional[Path] = None, hash_slots: Optional[int] = None,
               max_index: Optional[int] = None):
    """The tier's index service (engine.tiered.index.fetcher.open_tier_index; a context manager)."""
    from engine.tiered.index.fetcher import open_tier_index

    return open_tier_index(source, local_dir, hash_slots, max_index)


def inspect_local(file: Optional[Path], source, tiered_dir: Optional[Path], hash_slots: Optional[int],
                  max_index: Optional[int], asked: dict, say: Optional[Callable[[str], None]] = None):
    """rmqtool tiered inspect-index of FILE alone, or without a tier (no --tiered-store-path, none in broker.conf)
    of the local tiered index files (`say`: the note that only those are read)."""
    from engine.tiered.index import inspect_files, list_tiered_index_files

    if file is not None:
        if tiered_dir is not None:
            raise InvalidArgumentError("give FILE or --tiered-dir, not both")
        paths = [file]
    else:
        directory = tiered_dir or source.local_index_dir()
        if directory is None:
            raise InvalidArgumentError("no tier and no local files given: pass --tiered-store-path (and --store), or "
                                       "--tiered-dir DIR for local tiered index files alone")
        paths = [p for _ts, p in list_tiered_index_files(directory)]
        if not paths:
            raise InvalidArgumentError(f"no tiered index files (numeric names) in {directory}")
        if tiered_dir is None and say is not None:
            say("note: no tier given (--tiered-store-path): the local tiered index files only")
    return inspect_files(paths, hash_slot_num=hash_slots, index_num=max_index, **asked)


def inspect_tier(ti, asked: dict):
    """rmqtool tiered inspect-index of the broker's whole table (the uploaded INDEX segments and the local files)."""
    from engine.tiered.index.operations import inspect_tier as run_inspect

    return run_inspect(ti, **asked)


def inspect_exit_code(failed: bool) -> int:
    return PARTIAL if failed else OK


def ask(ti, topic: str, key: str, max_num: int, begin: int, end: int, unique: bool = False):
    """rmqtool tiered query-key: the tier's answer to one key question, checked (`unique`: UNIQ_KEY only)."""
    from engine.tiered.index.fetcher import KeyQuestion

    return ti.ask(KeyQuestion(topic, key, max_num, begin, end), require_topic=True).check(unique)


def check_count(max_num: int) -> None:
    """InvalidArgumentError for a maxCount the broker cannot take (a Java int, above 0)."""
    if not 0 < max_num <= INT_MAX:
        raise InvalidArgumentError(f"--count {max_num} is out of range 1..{INT_MAX}")


def key_exit_code(ans) -> int:
    """3 when a file or a read failed (the broker's answer fails or lacks that file)."""
    return PARTIAL if ans.failed or any(f.error for f in ans.index.per_file) else OK


@contextlib.contextmanager
def answer_jsonl(ti, path, max_num: int, begin: int, end: int, raw: bool = False):
    """rmqtool tiered query-key --from-jsonl: the answer lines (dicts) of the question lines of `path` ('-':
    stdin), one question read at a time; missing values from max_num, begin, end."""
    from engine.tiered.index.fetcher import KeyQuestion, answer_lines

    with contextlib.ExitStack() as stack:
        fh = sys.stdin if str(path) == "-" else stack.enter_context(open(path, encoding="utf-8"))
        yield answer_lines(ti, fh, KeyQuestion("", "", max_num, begin, end), raw)


def jsonl_exit_code(bad: int, failed: int) -> int:
    """2 when question lines were bad, else 3 when answers failed or lack a file."""
    return BAD_INPUT if bad else PARTIAL if failed else OK


def compact_index(file: Path, out: Path, force: bool = False, mapped: bool = False, hash_slots: Optional[int] = None,
                  max_index: Optional[int] = None, broker_conf: Optional[Path] = None, new_geometry: bool = False):
    """rmqtool tiered compact-index: the compaction summary (engine.tiered.index.compact_file)."""
    from engine.tiered.index import compact_file

    return compact_file(file, out, force=force, mapped=mapped, hash_slot_num=hash_slots, index_num=max_index,
                        broker_conf=broker_conf, new_geometry=new_geometry)


def reindex_request(**options):
    """rmqtool tiered reindex's options as an engine.jobs.tiered_index.TieredReindexRequest."""
    from engine.jobs.tiered_index import TieredReindexRequest

    return TieredReindexRequest(**options)


def reindex(req, progress=None):
    """rmqtool tiered reindex: the job run (engine.jobs.tiered_index.tiered_reindex_request)."""
    from engine.jobs.tiered_index import tiered_reindex_request

    return tiered_reindex_request(req, progress)


def reindex_json(result) -> dict:
    """The job's result as its --json document (camelCase names)."""
    from engine.jobs.framework import camel_keys

    return camel_keys(result.as_dict())
