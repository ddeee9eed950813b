"""Which timer messages are pending (timer §9): what the broker will still deliver, and when.

The rule, in the broker's terms:
1. The live slots (time >= timercheck.lastReadTimeMs, timer §2) hold the units the dequeue has still to fire.
   Each slot's chain is walked from lastPos (chain.walk_chain: it stops where the broker's walk would go wrong).
2. The units of rmq_sys_wheel_timer/0 the enqueue has still to read (from the enqueue cursor, timer §7) will be
   put in the wheel at the next start: their messages are pending too (state "queued").
3. A unit's record is read as the broker reads it (records.resolve); a unit whose record cannot be read is not
   pending (the broker drops it): it is a problem, reported with the list.
4. A record with TIMER_DEL_UNIQKEY is a delete marker (a recall), never a message. A message is cancelled when a
   pending marker names `<REAL_TOPIC>+<UNIQ_KEY>` and has the same TIMER_OUT_MS: both end in the slot of that
   time, where the dequeue drops the message (a marker's recall handle carries TIMER_OUT_MS + 1, floored again).
5. A rolled unit (magic roll) sits in a nearer slot: its message is re-put and enqueued again when the slot fires;
   its fire time is TIMER_OUT_MS all the same.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from engine.timer.chain import ChainWalk, walk_chain
from engine.timer.codec import Slot, TimerUnit, is_delete, is_roll
from engine.timer.records import BAD_CRC, TimerRecord
from engine.timer.store import EnqueueCursor, TimerStore

WHEEL, ROLLED, QUEUED = "wheel", "rolled", "queued"
#: A unit whose magic and record disagree on being a delete marker (never delivered).
MAGIC_MISMATCH = "magic-mismatch"


@dataclass
class PendingMessage:
    """One pending timer message (the plain record `timer list` prints)."""
    uniq_key: str | None
    topic: str | None             # REAL_TOPIC
    queue_id: int | None          # REAL_QID
    keys: list[str]
    tags: str | None
    fire_at_ms: int               # TIMER_OUT_MS
    roll_times: int               # TIMER_ROLL_TIMES of the record (rolls so far)
    state: str                    # wheel | rolled | queued
    slot_time_ms: int | None      # the slot its unit waits in (None: not in the wheel yet)
    commit_log_offset: int        # the record the unit points at (the latest roll copy for a rolled message)
    store_size: int
    store_timestamp: int
    queue_offset: int             # its queue offset in rmq_sys_wheel_timer/0
    timer_log_position: int | None

    def as_dict(self) -> dict:
        return {"uniqKey": self.uniq_key, "topic": self.topic, "queueId": self.queue_id, "keys": self.keys,
                "tags": self.tags, "fireAtMs": self.fire_at_ms, "rollTimes": self.roll_times, "state": self.state,
                "slotTimeMs": self.slot_time_ms, "commitLogOffset": self.commit_log_offset,
                "storeSize": self.store_size, "storeTimestamp": self.store_timestamp,
                "storedQueueOffset": self.queue_offset, "timerLogPosition": self.timer_log_position}


@dataclass
class Unresolved:
    """A unit the broker will read but cannot use (its message is lost or its dequeue goes wrong)."""
    kind: str                     # records.* kind
    why: str
    slot_time_ms: int | None
    timer_log_position: int | None
    queue_offset: int | None      # for a unit of rmq_sys_wheel_timer/0 still to be enqueued
    offset_py: int
    size_py: int
    magic: int | None


@dataclass
class DeleteMarker:
    key: str
    fire_at_ms: int | None
    timer_log_position: int | None
    queue_offset: int | None
    offset: int                   # its record's commit-log offset
    size: int


@dataclass
class SlotWalk:
    """One live slot and its chain."""
    index: int
    time_ms: int
    first: int
    last: int
    num: int
    walk: ChainWalk
    disk: Slot | None = None      # the slot as the file holds it, when the broker's start-up changes it


@dataclass
class PendingResult:
    messages: list[PendingMessage] = field(default_factory=list)
    cancelled: list[PendingMessage] = field(default_factory=list)   # recalled: a pending delete marker names them
    markers: list[DeleteMarker] = field(default_factory=list)
    unresolved: list[Unresolved] = field(default_factory=list)
    slots: list[SlotWalk] = field(default_factory=list)
    cursor: EnqueueCursor | None = None
    crc_damaged: list[int] = field(default_factory=list)   # commit-log offsets of pending records with a bad CRC


def _message(u: TimerUnit | None, r: TimerRecord, slot_ms: int | None, queue_offset: int | None) -> PendingMessage:
    if u is None:
        state = QUEUED
    else:
        state = ROLLED if is_roll(u.magic) else WHEEL
    return PendingMessage(r.uniq_key, r.real_topic, r.real_queue_id, r.keys, r.tags, r.timer_out_ms or 0,
                          r.roll_times, state, slot_ms, r.offset, r.size, r.store_timestamp,
                          r.queue_offset if queue_offset is None else queue_offset,
                          None if u is None else u.pos)


def _mismatch(u: TimerUnit, r: TimerRecord) -> str:
    if r.is_delete:
        return (f"the unit at timer-log position {u.pos} is not a delete unit (magic {u.magic}) but its record is a "
                "delete marker: the broker refuses to put it when its slot fires")
    return (f"the unit at timer-log position {u.pos} is a delete unit (magic {u.magic}) but its record is a message: "
            "the broker takes it for a marker and never delivers it")


def pending(ts: TimerStore, check_crc: bool = False) -> PendingResult:
    """Every pending timer message of the store, sorted by fire time (then uniqKey), and what was in the way."""
    out = PendingResult()
    p = ts.geometry.precision_ms
    candidates: list[PendingMessage] = []
    for s in ts.live_slots():
        t_ms = int(s["time"]) * p
        w = walk_chain(ts.log, int(s["last"]), ts.end.end)
        disk = ts.wheel.slot(int(s["index"]))
        changed = disk is None or (disk.time, disk.first, disk.last) != (int(s["time"]), int(s["first"]),
                                                                           int(s["last"]))
        out.slots.append(SlotWalk(int(s["index"]), t_ms, int(s["first"]), int(s["last"]), int(s["num"]), w,
                                  disk if changed else None))
        for u in reversed(w.units):  # append order, as the dequeue reads them
            res = ts.resolve(u.offset_py, u.size_py, check_crc)
            if not res.ok:
                out.unresolved.append(Unresolved(res.kind, res.why, t_ms, u.pos, None, u.offset_py, u.size_py,
                                                 u.magic))
                continue
            if res.kind == BAD_CRC:
                out.crc_damaged.append(u.offset_py)
            r = res.record
            final_delete = is_delete(u.magic) and not is_roll(u.magic)
            if r.is_delete and (final_delete or is_roll(u.magic)):
                out.markers.append(DeleteMarker(r.delete_key, r.timer_out_ms, u.pos, None, r.offset, r.size))
            elif r.is_delete or final_delete:
                # A marker record under a normal unit is refused when put; a message under a delete unit is
                # taken for a marker: neither is ever delivered (timer §6).
                out.unresolved.append(Unresolved(MAGIC_MISMATCH, _mismatch(u, r), t_ms, u.pos, None, u.offset_py,
                                                 u.size_py, u.magic))
            else:
                candidates.append(_message(u, r, t_ms, None))
    out.cursor = ts.enqueue_cursor()
    for q, off, size in ts.queued_units(out.cursor.offset):
        res = ts.resolve(off, size, check_crc)
        if not res.ok:
            out.unresolved.append(Unresolved(res.kind, res.why, None, None, q, off, size, None))
            continue
        if res.kind == BAD_CRC:
            out.crc_damaged.append(off)
        r = res.record
        if r.is_delete:
            out.markers.append(DeleteMarker(r.delete_key, r.timer_out_ms, None, q, r.offset, r.size))
        else:
            candidates.append(_message(None, r, None, q))
    cancels = {(m.key, m.fire_at_ms) for m in out.markers}
    for m in candidates:
        key = f"{m.topic}+{m.uniq_key}" if m.topic is not None and m.uniq_key is not None else None
        (out.cancelled if (key, m.fire_at_ms) in cancels else out.messages).append(m)
    out.messages.sort(key=lambda m: (m.fire_at_ms, m.uniq_key or "", m.commit_log_offset))
    out.cancelled.sort(key=lambda m: (m.fire_at_ms, m.uniq_key or "", m.commit_log_offset))
    return out


@dataclass
class PendingList:
    """`rmqtool timer list`'s answer: the pending messages that pass the filters, and what could not be read."""
    messages: list[PendingMessage]
    total: int                    # pending messages before the filters
    recalled: int                 # messages a pending delete marker cancels (not listed)
    unresolved: list[Unresolved]  # units the broker will read but cannot use (not listed)
    notes: list[str]


def list_pending(cfg, topic: str | None = None, due_after: int | None = None, due_before: int | None = None,
                 check_crc: bool = False) -> PendingList:
    """Every pending timer message of the store (timer §9) whose real topic is `topic` and whose fire time lies in
    [due_after, due_before); sorted by fire time. Reads only."""
    from engine.errors import InvalidArgumentError

    if due_after is not None and due_before is not None and due_after >= due_before:
        raise InvalidArgumentError(f"--due-after {due_after} is not before --due-before {due_before}")
    with TimerStore(cfg) as ts:
        res = pending(ts, check_crc)
        notes = []
        if not ts.wheel.exists:
            notes.append("there is no timerwheel: only the units still to be enqueued are listed")
        elif not ts.wheel.length_ok:
            notes.append(f"timerwheel is {ts.wheel.length} bytes, not the broker's length: the broker will not "
                         "start with it (run `rmqtool timer verify`)")
        if res.cursor is not None and res.cursor.queue_max > res.cursor.offset:
            notes.append(f"{res.cursor.queue_max - res.cursor.offset} unit(s) of rmq_sys_wheel_timer/0 are not in the "
                         "wheel yet (state queued): the broker enqueues them at its next start")
    out = [m for m in res.messages
           if (topic is None or m.topic == topic) and (due_after is None or m.fire_at_ms >= due_after)
           and (due_before is None or m.fire_at_ms < due_before)]
    return PendingList(out, len(res.messages), len(res.cancelled), res.unresolved, notes)
