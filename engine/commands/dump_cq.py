"""rmqtool dump-cq: consume-queue units with the message each points at (mqadmin queryCq); the exit code is
decided here (3 when a unit shown cannot be used or a damaged file ends the queue early)."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Iterator, Optional

from engine.broker.config.brokerconf import BrokerConfig
from engine.broker.consumequeue.view import CUT, OK, PLACEHOLDER, POINTS_OUTSIDE
from engine.errors import InvalidArgumentError

#: --count's bound.
COUNT_LIMIT = 1_000_000_000
#: Exit codes (docs/output-contract.md).
DAMAGED = 3


@dataclass
class CqAnswer:
    """What dump_cq() answers while the store is open: `dump` (engine.broker.consumequeue.view's answer, its
    units read as they are iterated) and log_end() (the commit log's max offset, for the column widths)."""

    dump: object
    store: object

    def log_end(self) -> int:
        return self.store.commitlog.max_file_offset()


def check_dump_cq(count: int, queue_offset: Optional[int]) -> None:
    """InvalidArgumentError for a count or start that cannot be answered."""
    if not 0 < count <= COUNT_LIMIT:
        raise InvalidArgumentError(f"--count {count} is out of range 1..{COUNT_LIMIT}")
    if queue_offset is not None and queue_offset < 0:
        raise InvalidArgumentError(f"--queue-offset {queue_offset} is negative")


@contextlib.contextmanager
def dump_cq(cfg: BrokerConfig, topic: str, queue_id: int, queue_offset: Optional[int] = None, count: int = 10,
            check_crc: bool = True) -> Iterator[CqAnswer]:
    """`count` units of topic/queue_id from `queue_offset` (default the queue's min offset), each with the
    message it points at; the store stays open while the units are read."""
    from engine.broker.store import MessageStore
    from engine.broker.consumequeue.view import dump_cq as engine_dump_cq

    check_dump_cq(count, queue_offset)
    with MessageStore(cfg) as st:
        d = engine_dump_cq(st, topic, queue_id, queue_offset, count, check_crc=check_crc)
        yield CqAnswer(d, st)


def unusable(unit) -> bool:
    """Whether a unit cannot be used (not OK, a BLANK pre-fill, CUT or rmqtool's placeholder)."""
    return unit.status not in (OK, "BLANK", CUT, PLACEHOLDER)


def points_outside(status: str) -> bool:
    """Whether a status says the unit points outside the commit log."""
    return status in POINTS_OUTSIDE


def exit_code(unusable_units: int, damage: list) -> int:
    """3 when units shown cannot be used or a damaged file ends the queue early, else 0."""
    return DAMAGED if unusable_units or damage else 0
