"""rmqtool print-msg: the messages of a topic stored in a time range, found through the consume queues (mqadmin
printMsg / printMsgByQueue); the exit code is decided here (3 when a unit in the range points at a message that
cannot be read, or a message's compressed body does not decode)."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Iterator, Optional

from engine.broker.config.brokerconf import BrokerConfig
from engine.broker.commitlog.compression import BODY_UNDECODABLE
from engine.errors import InvalidArgumentError
from engine.findings import Note

#: --count's bound.
MAX_LIMIT = 1_000_000_000
#: Exit codes (docs/output-contract.md).
OK, DAMAGED = 0, 3


@dataclass
class PrintAnswer:
    """What print_msg() answers while the store is open: `scan` (engine.broker.consumequeue.timerange's scan: its
    notes, ranges, tag filter and searched line, the messages found as it is iterated, then its problems) and
    log_end() (the commit log's max offset, for the column widths)."""

    scan: object
    store: object

    def log_end(self) -> int:
        return self.store.commitlog.max_file_offset()


def check_print_msg(max_num: Optional[int]) -> None:
    """InvalidArgumentError for a count that cannot be answered."""
    if max_num is not None and not 0 < max_num <= MAX_LIMIT:
        raise InvalidArgumentError(f"--count {max_num} is out of range 1..{MAX_LIMIT}")


@contextlib.contextmanager
def print_msg(cfg: BrokerConfig, topic: str, begin: int, end: int, queue_id: Optional[int] = None,
              tags: Optional[str] = None, check_crc: bool = True, scan_log: bool = False) -> Iterator[PrintAnswer]:
    """The messages of `topic` (of queue `queue_id`, with `tags`) stored in [begin, end]; the store stays open
    while they are read."""
    from engine.broker.store import MessageStore
    from engine.broker.consumequeue.timerange import scan_time_range

    with MessageStore(cfg) as st:
        yield PrintAnswer(scan_time_range(st, topic, begin, end, queue_id, tags, check_crc=check_crc,
                                          scan_log=scan_log), st)


def placeholder(record) -> Optional[dict]:
    """{manifest, origin} when the record is rmqtool recover's placeholder for a damaged message, else None."""
    from engine.broker.commitlog.placeholder import is_placeholder, placeholder_info

    return placeholder_info(record) if is_placeholder(record) else None


def exit_code(undecoded: int, problems: list) -> int:
    """3 when units in the range could not be read or bodies do not decode, else 0."""
    return DAMAGED if undecoded or problems else OK


def undecodable(found) -> Optional[Note]:
    """The note that a message found has a compressed body that does not decode (the consumer cannot read it; it
    counts as damage), by its queue and offset; None when it decodes or is not compressed."""
    if not found.record.compression():
        return None
    dec = found.record.decoded_body()
    if dec.ok:
        return None
    return Note(BODY_UNDECODABLE, f"queue {found.queue_id} offset {found.queue_offset}: its {dec.codec} body does not "
                f"decode ({dec.error}); the consumer cannot read it", queueId=found.queue_id,
                queueOffset=found.queue_offset, commitLogOffset=found.record.physical_offset, codec=dec.codec,
                reason=dec.error)
