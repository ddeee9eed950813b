"""rmqtool dump-commitlog: the commit log in order, damage reported where it is met (a CORRUPT, MISPLACED or GAP
entry) and in the exit code (3 after damage or a compressed body that does not decode, decided by exit_code).

dump_filter() checks the options and makes the filter (before the store's configuration is resolved, as the
command always did); dump_commitlog() opens what is read (the store read-only, or segment files on their own),
decides whether --json runs on worker processes, and hands back the entries as they are read."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

from engine.broker.commitlog.compression import undecodable_note
from engine.broker.commitlog.dump import BodyDir, DumpFilter, entry_json
from engine.broker.commitlog.logrun import RecordRun
from engine.broker.commitlog.message import BLANK
from engine.broker.config.brokerconf import BrokerConfig

__all__ = ["DumpAnswer", "RecordRun", "dump_commitlog", "dump_filter", "entry_json", "exit_code", "is_damage",
           "undecodable_note"]

#: Exit codes (docs/output-contract.md).
OK, DAMAGED = 0, 3


@dataclass
class DumpAnswer:
    """What dump_commitlog() answers while the source is open: `source` (its `problems` to warn of first),
    `bodies` (the --body-dir, created by the command once it has warned), `spooled` (--json lines formatted by
    worker processes: SegmentTurns, whose take() answers a SpooledSegment, and GAP entries) and `entries` (else RecordRuns and the
    other scan entries, BLANK fillers and damage, in log order)."""

    source: object
    bodies: Optional[BodyDir]
    spooled: bool
    entries: Iterator


def dump_filter(topic: Optional[str], begin: int, end: int, from_offset: Optional[int], to_offset: Optional[int],
                files: Optional[list[str]], max_message_size: Optional[int], check_crc: bool) -> DumpFilter:
    """The checked filter (InvalidArgumentError for options that cannot be answered)."""
    flt = DumpFilter(topic, begin, end, from_offset, to_offset, files, max_message_size, check_crc, "--from-offset")
    flt.check()
    return flt


@contextlib.contextmanager
def dump_commitlog(cfg: Optional[BrokerConfig], flt: DumpFilter, files: Optional[list[str]] = None,
                   file_size: Optional[int] = None, body_dir: Optional[Path] = None, body: str = "auto",
                   json_out: bool = False, count: Optional[int] = None,
                   out_fd: Optional[int] = None) -> Iterator[DumpAnswer]:
    """The entries of the store `cfg` names, or (no cfg) of the segment files `files` on their own (`file_size`
    their segment size, else each file's), that pass `flt`. --json of a whole store with neither --count nor
    --body-dir runs on worker processes when engine.workers says it pays; out_fd: the output's file descriptor
    when the workers may write their lines to it themselves (dump_json_spooled)."""
    from engine.broker.commitlog.dump import dump_entries, dump_json_spooled, open_dump_source, parallel_dump_wanted
    from engine.views.runjson import run_json_text

    alone = cfg is None
    with open_dump_source(cfg, files if alone else None, file_size) as st:
        bodies = BodyDir(body_dir, st.protected_dirs()) if body_dir is not None else None
        if json_out and bodies is None and count is None and not alone and parallel_dump_wanted(st):
            yield DumpAnswer(st, None, True, dump_json_spooled(st, flt, body, run_json_text, out_fd))
            return
        yield DumpAnswer(st, bodies, False, dump_entries(st, flt))


def is_damage(entry) -> bool:
    """Whether a scan entry (not a RecordRun) is damage: CORRUPT, MISPLACED or GAP, not a BLANK filler."""
    return entry.kind != BLANK


def exit_code(damaged: int, undecoded: int) -> int:
    """3 after damaged entries or compressed bodies that do not decode, else 0."""
    return DAMAGED if damaged or undecoded else OK
