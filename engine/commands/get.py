"""rmqtool get: messages by commit-log offset, message id (an offset message id or the client's UNIQ_KEY) or
queue offset, read straight from the commit log.

get() checks the question, opens the store and answers with a stream of events in the order they are to be shown
(a message, a stretch of records decoded together, a line for stderr) and ends with Done, whose exit code is
decided here: 3 when a message asked for is damaged (or its compressed body does not decode), 2 when every
failure is an address that does not exist (outside the commit log, not a message id), else 0.

Where each rule lives: message ids are decoded by engine.broker.commitlog.message.decode_offset_msg_id; an id
that is not a valid offset message id is looked up as a UNIQ_KEY through the index (engine.broker.read.find_msg_id);
several offsets are read a stretch at a time (engine.broker.commitlog.logrun.lookup_runs).
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Optional, Union

from engine.broker.commitlog.compression import undecodable_note
from engine.broker.commitlog.logrun import RecordRun
from engine.broker.config.brokerconf import BrokerConfig
from engine.errors import InvalidArgumentError
from engine.findings import Note

#: Exit codes (docs/output-contract.md).
OK, BAD_INPUT, DAMAGED = 0, 2, 3
#: Lookups of a --from-file list read at once (a few thousand lines: memory does not grow with the list).
READ_HINT = 1 << 15
#: The kinds of the lines get says on stderr besides those of the store's files and messages (engine.findings.Note):
#: a message asked for that cannot be returned, and how many; a unit read by queue offset that cannot be answered
#: with its message, and how many; a --count that reaches past the queue's max offset.
NOT_FOUND, NOT_RETURNED = "message-not-found", "messages-not-returned"
UNIT_UNUSABLE, UNITS_UNANSWERED, COUNT_PAST_MAX = "unit-unusable", "units-not-answered", "count-past-max-offset"


@dataclass(frozen=True)
class Message:
    """One message to show: in full (`full`: the only one asked for) or as a line of the stream. `placeholder`
    is {manifest, origin} when the record is rmqtool recover's placeholder for a damaged message."""

    record: object
    full: bool = False
    placeholder: Optional[dict] = None


@dataclass(frozen=True)
class Records:
    """A stretch of records decoded together (RecordRun): lines of the stream."""

    run: RecordRun


@dataclass(frozen=True)
class Said:
    """A line for stderr, after what was shown so far: a problem (warning or error) or a note; `text` is an
    engine.findings.Note (its kind and fields are what --json prints)."""

    text: str
    problem: bool = False


@dataclass(frozen=True)
class Done:
    """The end of the answer: the exit code the command ends with."""

    exit_code: int


Event = Union[Message, Records, Said, Done]


@dataclass
class GetAnswer:
    """What get() answers: `stream` (several messages: NDJSON or one table row each) or one message in full, and
    the events to render (the store stays open until they are read)."""

    stream: bool
    events: Iterator[Event]


def read_lookups(stream, hint: int = READ_HINT) -> Iterator[list[str]]:
    """The non-empty lines of an open text stream (a --from-file list), a chunk at a time."""
    while True:
        lines = stream.readlines(hint)
        if not lines:
            return
        texts = [t for t in map(str.strip, lines) if t]
        if texts:
            yield texts


@contextlib.contextmanager
def get(cfg: BrokerConfig, offsets: Optional[list[int]] = None, msg_ids: Optional[list[str]] = None,
        chunks: Optional[Iterable[list[str]]] = None, topic: Optional[str] = None, queue_id: Optional[int] = None,
        queue_offset: Optional[int] = None, count: Optional[int] = None) -> Iterator[GetAnswer]:
    """The messages asked for: by commit-log offset (`offsets`), message id (`msg_ids`), lines of a list
    (`chunks`, each line an offset or a message id by its form), or from a queue offset of topic/queue_id
    (`count` units, default one shown in full). InvalidArgumentError for options that do not go together."""
    from engine.broker.store import MessageStore

    by_queue = check_get_args(offsets, msg_ids, chunks, topic, queue_id, queue_offset, count)
    if not by_queue and not offsets and not msg_ids and chunks is None:
        raise InvalidArgumentError("give --offset, --msg-id, --from-file or --topic/--queue-id/--queue-offset")
    with MessageStore(cfg) as st:
        if by_queue:
            yield GetAnswer(count is not None, _by_queue(st, topic, queue_id, queue_offset, count))
            return
        asked = _lookups(offsets, msg_ids, chunks)
        if len(offsets or []) + len(msg_ids or []) == 1 and chunks is None:
            yield GetAnswer(False, _one(st, *next(asked), topic))
            return
        yield GetAnswer(True, _many(st, asked, topic))


def check_get_args(offsets, msg_ids, chunks, topic, queue_id, queue_offset, count) -> bool:
    """True for a read by queue offset; InvalidArgumentError for options that do not go together."""
    if queue_offset is None:
        if queue_id is not None:
            raise InvalidArgumentError("--queue-id goes with --queue-offset (and --topic)")
        if count is not None:
            raise InvalidArgumentError("--count goes with --queue-offset (give several --offset or --msg-id instead)")
        return False
    if offsets or msg_ids or chunks is not None:
        raise InvalidArgumentError("give --queue-offset or --offset/--msg-id/--from-file, not both")
    if topic is None or queue_id is None:
        raise InvalidArgumentError("--queue-offset needs --topic and --queue-id")
    return True


def _lookups(offsets, msg_ids, chunks):
    """(kinds, texts) chunks for every message asked for, in order, streamed. kinds[i] is "offset" or "msgId";
    kinds is None for a chunk of the list, whose lines say by their form what they are (_kind)."""
    given = [("offset", str(o)) for o in offsets or []] + [("msgId", m) for m in msg_ids or []]
    if given:
        yield [k for k, _ in given], [t for _, t in given]
    for texts in chunks or ():
        yield None, texts


def _kind(text: str) -> str:
    return "offset" if text.lstrip("-").isdecimal() else "msgId"


def _warnings(st) -> Iterator[Said]:
    for p in st.problems:
        yield Said(p.warning(), problem=True)


def _message(rec, full: bool = False) -> Iterator[Event]:
    """A message, the note that it is a recovery placeholder, and the one that its compressed body does not
    decode (the caller counts that one as damage: _undecoded)."""
    from engine.broker.commitlog.placeholder import is_placeholder, placeholder_info, placeholder_note

    held = is_placeholder(rec)
    yield Message(rec, full, placeholder_info(rec) if held else None)
    if held:
        n = placeholder_note(rec)
        yield Said(Note(n.kind, f"note: {n}", **n.fields))


def _undecoded(rec) -> Optional[Said]:
    """The note that a message's compressed body does not decode (the consumer could not read it), or None."""
    if not rec.compression():
        return None
    dec = rec.decoded_body()
    if dec.ok:
        return None
    return Said(undecodable_note(rec.physical_offset, dec.codec, dec.error))


def _one(st, kinds: list[str], texts: list[str], topic: Optional[str]) -> Iterator[Event]:
    """The one message asked for, in full (exit 3 when its body does not decode)."""
    from engine.broker.read import find_msg_id

    kind, text = kinds[0], texts[0]
    found = None if kind == "offset" else find_msg_id(st, text, topic)
    rec = st.get(int(text)) if found is None else found.record
    yield from _warnings(st)  # after the answer is found: a failed lookup stays one error line
    yield from _message(rec, full=True)
    for n in found.notes() if found is not None else ():
        yield Said(n)
    bad = _undecoded(rec)
    if bad is not None:
        yield bad
    yield Done(DAMAGED if bad is not None else OK)


def _by_queue(st, topic: str, queue_id: int, queue_offset: int, count: Optional[int]) -> Iterator[Event]:
    """Units from a queue offset and their messages (engine.broker.read.read_by_queue_offset): one in full without
    `count`, else streamed. A unit that cannot be answered with its message is damage (exit 3)."""
    from engine.broker.read import read_by_queue_offset

    qr = read_by_queue_offset(st, topic, queue_id, queue_offset, 1 if count is None else count)
    yield from _warnings(st)
    if qr.note:
        yield Said(qr.note)
    bad = 0
    for c in qr.units:
        if c.record is None or c.status not in ("OK", "PLACEHOLDER"):
            bad += 1
            yield Said(Note(UNIT_UNUSABLE, f"error: {topic}/{queue_id} queue offset {c.queue_offset}: {c.status}: "
                            f"{c.reason}", topic=topic, queueId=queue_id, queueOffset=c.queue_offset,
                            status=c.status, commitLogOffset=c.commit_log_offset), problem=True)
            continue
        yield from _message(c.record, full=count is None)
        undecoded = _undecoded(c.record)
        if undecoded is not None:
            bad += 1
            yield undecoded
    if count is None:
        yield Done(DAMAGED if bad else OK)
        return
    if qr.count < qr.asked:
        yield Said(Note(COUNT_PAST_MAX, f"--count {qr.asked} cut to {qr.count}: the max offset of {topic}/{queue_id} "
                        f"is {qr.maxOffset}", asked=qr.asked, count=qr.count, maxOffset=qr.maxOffset))
    if bad:
        yield Said(Note(UNITS_UNANSWERED, f"{bad} of {qr.count} unit(s) could not be answered with their message",
                        failed=bad, count=qr.count), problem=True)
    yield Done(DAMAGED if bad else OK)


def _uniq_fallback(st, text: str, topic: Optional[str]) -> tuple:
    """(the answer for the UNIQ_KEY `text` (engine.broker.read.MsgIdAnswer), "") for an id that is no valid offset
    message id, else (None, why neither form found a message)."""
    from engine.broker.read import find_msg_id

    try:
        return find_msg_id(st, text, topic), ""
    except InvalidArgumentError as e:
        return None, str(e)


def parse_lookups(kinds, texts: list[str]) -> tuple[list[int], list | None, dict]:
    """(commit-log offsets, expected (store host, port) of each or None, {index: why it cannot be looked up}) of
    a chunk of lookups; an offset of -1 lies in no segment (its error is in the dict)."""
    from engine.broker.commitlog.message import decode_offset_msg_id

    if kinds is None:
        digits = "".join(texts)
        if digits.isascii() and digits.isdigit():  # a list of offsets only: converted at once
            offsets = list(map(int, texts))
            if max(offsets) < 2**63:
                return offsets, None, {}
    offsets, hosts, errors = [], [], {}
    for i, text in enumerate(texts):
        if (kinds[i] if kinds else _kind(text)) == "offset":
            off = int(text)
            hosts.append(None)
        else:
            try:
                host, port, off = decode_offset_msg_id(text)
            except ValueError as e:
                errors[i], off = str(e), -1
            hosts.append((host, port) if i not in errors else None)
        if not 0 <= off < 2**63 and i not in errors:
            errors[i] = f"offset {off} is out of range"
        offsets.append(off if i not in errors else -1)  # -1: in no segment, reported with errors[i]
    return offsets, hosts, errors


def _many(st, asked, topic: Optional[str] = None) -> Iterator[Event]:
    """The messages asked for, in order, a stretch at a time (engine.broker.commitlog.logrun.lookup_runs); an id
    that is no offset message id is looked up as a UNIQ_KEY. Exit 2 when every failure is an address that does
    not exist (outside the log, not an id: bad input), 3 when any is damage."""
    from engine.broker.commitlog.logrun import lookup_runs

    yield from _warnings(st)
    bad = absent = total = 0
    for kinds, texts in asked:
        total += len(texts)
        offsets, hosts, errors = parse_lookups(kinds, texts)
        for item in lookup_runs(st.commitlog, offsets, hosts, check_crc=True):
            if isinstance(item, RecordRun):
                yield Records(item)
                for off, codec, why in item.undecodable():
                    bad += 1
                    yield Said(undecodable_note(off, codec, why))
                continue
            i, reason = item
            kind, text = kinds[i] if kinds else _kind(texts[i]), texts[i]
            why = ""
            if kind == "msgId":
                found, why = _uniq_fallback(st, text, topic)
                if found is not None:
                    yield from _message(found.record)
                    undecoded = _undecoded(found.record)
                    if undecoded is not None:
                        bad += 1
                        yield undecoded
                    for n in found.notes():
                        yield Said(n)
                    continue
            bad += 1
            absent += i in errors or st.commitlog.queue.find(offsets[i]) is None
            yield Said(Note(NOT_FOUND, f"error: {why}" if why else f"error: {kind} {text}: " + (
                errors[i] if i in errors else f"no valid message at commit-log offset {offsets[i]}: {reason}"),
                asked=kind, value=text, commitLogOffset=None if i in errors else offsets[i]), problem=True)
    if bad:
        yield Said(Note(NOT_RETURNED, f"{bad} of {total} message(s) could not be returned", failed=bad, asked=total),
                   problem=True)
    # only addresses that do not exist (outside the log, not an id): bad input; anything else is damage
    yield Done(OK if not bad else BAD_INPUT if absent == bad else DAMAGED)
