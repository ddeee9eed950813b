"""Where the timer store lives and its geometry (timer §1, §2, §3).

Every path of the timer store is spelled here (beside StoreLayout, which owns the rest of the store), and the
numbers the broker derives from broker.conf: the precision (snapped by the setter), the roll window (clamped), the
timer-log file size, and the wheel's fixed slot count (7 days of slots, twice over: it does not depend on the
precision).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from engine.broker.commitlog.segments import pick_segment_size
from engine.broker.config.brokerconf import BrokerConfig
from engine.broker import topics
from engine.broker.layout import SEGMENT_NAME, TIMER_LOG_DIR, TIMER_WHEEL_FILE, StoreLayout, relative_name
from engine.timer.codec import MIN_BLANK_LEN, UNIT_SIZE

TIMER_CHECK_FILE = "timercheck"          # under config/
TIMER_METRICS_FILE = "timermetrics"      # under config/, with a .bak
#: The system topic timer messages wait in, queue 0 (TimerMessageStore.TIMER_TOPIC; a broker routing name).
TIMER_TOPIC = topics.TIMER_TOPIC
TIMER_QUEUE_ID = 0

#: TimerMessageStore.TIMER_WHEEL_TTL_DAY x DAY_SECS: slots per half of the wheel, whatever the precision.
TIMER_WHEEL_TTL_DAY = 7
DAY_SECS = 24 * 3600
SLOTS_TOTAL = TIMER_WHEEL_TTL_DAY * DAY_SECS
#: The wheel holds 2 x SLOTS_TOTAL slots (timer §2).
WHEEL_SLOTS = 2 * SLOTS_TOTAL
SLOT_SIZE = 32
WHEEL_LENGTH = WHEEL_SLOTS * SLOT_SIZE
#: TimerMessageStore.TIMER_BLANK_SLOTS: the roll window's upper clamp leaves these slots free (timer §6).
TIMER_BLANK_SLOTS = 60


@dataclass(frozen=True)
class TimerGeometry:
    """The numbers TimerMessageStore derives from MessageStoreConfig (timer §1)."""
    precision_ms: int
    log_file_size: int
    roll_window_slots: int
    max_delay_sec: int
    skip_unknown_error: bool = False
    wheel_enabled: bool = True

    @classmethod
    def of(cls, cfg: BrokerConfig) -> "TimerGeometry":
        cfg = settle_timer_log_size(cfg)
        roll = cfg.timerRollWindowSlot
        if roll > SLOTS_TOTAL - TIMER_BLANK_SLOTS or roll < 2:  # the constructor's clamp
            roll = SLOTS_TOTAL - TIMER_BLANK_SLOTS
        return cls(cfg.timer_precision_ms, cfg.mappedFileSizeTimerLog, roll, cfg.timerMaxDelaySec,
                   cfg.timerSkipUnknownError, cfg.timerWheelEnable)

    def slot_index(self, time_ms: int) -> int:
        """TimerWheel.getSlotIndex: the slot a time falls in."""
        return (time_ms // self.precision_ms) % WHEEL_SLOTS

    def format_time(self, time_ms: int) -> int:
        """formatTimeMs: a time floored to the precision."""
        return time_ms // self.precision_ms * self.precision_ms

    @property
    def offset_for_last_unit(self) -> int:
        """TimerLog.getOffsetForLastUnit: where a full file's last unit starts (timer §3, §8)."""
        f = self.log_file_size
        return f - (f - MIN_BLANK_LEN) % UNIT_SIZE - MIN_BLANK_LEN - UNIT_SIZE


def settle_timer_log_size(cfg: BrokerConfig) -> BrokerConfig:
    """Without mappedFileSizeTimerLog in broker.conf or an option, the timer-log files say it, by the rule the commit
    log's segments follow (the size they agree on; engine.broker.commitlog.segments.pick_segment_size): a store is
    read with its own geometry, not the default, and a file whose size differs from the others' is still found
    wrong. Returns cfg with mappedFileSizeTimerLog settled (a new BrokerConfig; cfg itself is never changed)."""
    if cfg.timerLogSizeGiven:
        return cfg
    found = []
    try:
        with os.scandir(cfg.root / TIMER_LOG_DIR) as it:
            for e in it:
                if SEGMENT_NAME.match(e.name) and e.is_file(follow_symlinks=False):
                    found.append((int(e.name), Path(e.path), e.stat(follow_symlinks=False).st_size))
    except OSError:
        return cfg
    size = pick_segment_size(sorted(found))
    if size is not None and size > MIN_BLANK_LEN + UNIT_SIZE:
        return cfg.settled_with(mappedFileSizeTimerLog=size)
    return cfg


class TimerLayout:
    """The timer store's paths under one store root (timer §1)."""

    def __init__(self, store: StoreLayout):
        self.store = store
        self.root = store.root

    @classmethod
    def of(cls, cfg: BrokerConfig) -> "TimerLayout":
        return cls(StoreLayout.of(cfg))

    @property
    def wheel(self) -> Path:
        return self.root / TIMER_WHEEL_FILE

    @property
    def log_dir(self) -> Path:
        return self.root / TIMER_LOG_DIR

    @property
    def checkpoint(self) -> Path:
        return self.store.config_file(TIMER_CHECK_FILE)

    @property
    def metrics(self) -> Path:
        return self.store.config_file(TIMER_METRICS_FILE)

    def rel(self, path: Path) -> str:
        """A path as findings name it: relative to the store root."""
        return relative_name(path, self.root)

    def exists(self) -> bool:
        """Whether the store has a timer store at all (any of its files)."""
        return self.wheel.exists() or self.log_dir.is_dir() or self.checkpoint.exists()
