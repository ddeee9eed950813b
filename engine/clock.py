"""The wall clock the engine reads where an age or a "now" decides something (prune's --older-than, the created
time a marker records). One function, looked up at call time (`clock.now_ms()`), so a test can set the time
instead of sleeping: `monkeypatch.setattr(engine.clock, "now_ms", lambda: ...)`."""
from __future__ import annotations

import time


def now_ms() -> int:
    """Milliseconds since the epoch, as the broker's System.currentTimeMillis()."""
    return time.time_ns() // 1_000_000
