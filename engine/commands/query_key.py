"""rmqtool query-key: messages by key through the index, verified against the commit log (or, raw, what the
broker itself answers); the exit code is decided here: 3 for a partial answer (damaged index files, misplaced
commit-log data) or a message whose compressed body does not decode, else 0."""
from __future__ import annotations

from dataclasses import dataclass, field

from engine.broker.commitlog.compression import undecodable_note
from engine.broker.config.brokerconf import BrokerConfig
from engine.broker.index.keyquery import check_query_args
from engine.java.lang import LONG_MAX

__all__ = ["KeyAnswer", "check_query_args", "query_key"]

#: Exit codes (docs/output-contract.md).
OK, PARTIAL = 0, 3


@dataclass
class KeyAnswer:
    """What query_key() answers: `result` (engine.broker.index.keyquery.QueryResult, or RawAnswer when raw), the
    line for each message whose compressed body does not decode (`undecoded`, engine.findings.Note of kind
    body-undecodable) and the exit code."""

    result: object
    undecoded: list = field(default_factory=list)
    exit_code: int = OK


def query_key(cfg: BrokerConfig, topic: str, key: str, max_num: int = 64, begin: int = 0, end: int = LONG_MAX,
              unique: bool = False, raw: bool = False) -> KeyAnswer:
    """One key query (check_query_args first: a count or range that cannot be answered is InvalidArgumentError)."""
    from engine.broker.store import query_store

    res = query_store(cfg, topic, key, max_num=max_num, begin=begin, end=end, unique=unique, raw=raw)
    undecoded = []
    if not raw:
        undecoded = [(r, r.decoded_body()) for r in res.messages if r.compression()]
        undecoded = [undecodable_note(r.physical_offset, d.codec, d.error) for r, d in undecoded if not d.ok]
    return KeyAnswer(res, undecoded, PARTIAL if res.partial or undecoded else OK)
