"""rmqtool inspect-index: headers, slot chains, statistics and verification of the broker's index files (one
file on its own, or every file of a store); the exit code is decided here (3 when verification found problems
or a file is damaged)."""
from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Iterator, Optional

from engine.broker.config.brokerconf import BrokerConfig
from engine.broker.index.inspect import IndexFileReport, InspectRequest
from engine.errors import InvalidArgumentError

#: Exit codes (docs/output-contract.md).
OK, VERIFY_FAILED = 0, 3


def inspect_request(file: Optional[str | os.PathLike], walk_slot: Optional[int], walk_key: Optional[str],
                    limit: int, stats: bool, verify: bool) -> InspectRequest:
    """What is asked, checked before the store is named: InvalidArgumentError for a tiered index file (its own
    command) or both walks."""
    if file is not None and is_tiered(Path(file)):
        raise InvalidArgumentError(f"{file} is a tiered index file: use `rmqtool tiered inspect-index`")
    if walk_slot is not None and walk_key is not None:
        raise InvalidArgumentError("give --walk-slot or --walk-key, not both")
    return InspectRequest(walk_slot, walk_key, limit, stats, verify)


def inspect_index(cfg: Optional[BrokerConfig], file: Optional[Path], req: InspectRequest,
                  hash_slots: Optional[int] = None, max_index: Optional[int] = None,
                  progress=None) -> Iterator[IndexFileReport]:
    """A report per index file: of the store `cfg` names (every file, or `file`), or with no cfg of `file` on
    its own (the geometry `hash_slots`/`max_index`, else the file's)."""
    from engine.broker.config.brokerconf import load_config
    from engine.broker.index.inspect import inspect_index_files

    with_store = cfg is not None
    if not with_store:
        cfg = load_config(None, maxHashSlotNum=hash_slots, maxIndexNum=max_index)
    return inspect_index_files(cfg, file, with_store, req, progress=progress)


def asked_headers(req: InspectRequest) -> bool:
    """Whether the answer is the files' headers (no walk, statistics or verification asked)."""
    return not (req.walk_slot is not None or req.walk_key is not None or req.stats or req.verify)


def verify_failed(rep: IndexFileReport) -> bool:
    """Whether the file's verification found problems."""
    return rep.verify is not None and not rep.verify.ok


def exit_code(failed: bool, damaged: list) -> int:
    """3 when verification found problems or files are damaged, else 0."""
    return VERIFY_FAILED if failed or damaged else OK


def is_tiered(path: Path) -> bool:
    """Tiered layout detected, or at least a tiered magic at offset 0 (then a damaged tiered file gets the tiered
    error message; a broker index file starts with a positive timestamp and never has it)."""
    from engine.tiered.index import BEGIN_MAGIC_CODE, END_MAGIC_CODE, detect_tiered

    if detect_tiered(path):
        return True
    try:
        with open(path, "rb") as fh:
            head = fh.read(4)
    except OSError:
        return False
    return len(head) == 4 and struct.unpack(">i", head)[0] in (BEGIN_MAGIC_CODE, END_MAGIC_CODE)
