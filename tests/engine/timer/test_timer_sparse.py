"""The timer store's writers allocate only what they write (issue 23 item 3, as the commit log now does): timer-log
files have the broker's full length but only their written prefix on disk, the wheel is written slot by slot into
a sparse file, and `repair timer` (padding a short file) and `recover` (cutting units after lost records) add
nothing on disk. Measured with st_blocks."""
from __future__ import annotations

import os
import time
from pathlib import Path

from helpers import make_timer_store, run

LOG_SIZE = 4 * 1024 * 1024      # mappedFileSizeTimerLog of these stores
BLOCK = 4096


def on_disk(p: Path) -> int:
    return os.stat(p).st_blocks * 512


def store(tmp_path, count: int = 12) -> tuple[Path, Path, list]:
    now = int(time.time() * 1000)
    conf, puts = make_timer_store(tmp_path / "s", count, fire_base=now + 3_600_000, write_ms=now - 1000,
                                  read_ms=now - 1000, timer_log_size=LOG_SIZE)
    return tmp_path / "s", conf, puts


def log_file(root: Path) -> Path:
    (p,) = sorted((root / "timerlog").iterdir())
    return p


def written(p: Path) -> int:
    """Bytes up to the last non-zero byte (the units the writer appended)."""
    return len(p.read_bytes().rstrip(b"\0"))


def test_the_writer_allocates_what_it_writes(tmp_path):
    root, conf, puts = store(tmp_path)
    log = log_file(root)
    assert os.path.getsize(log) == LOG_SIZE                      # the broker's length
    assert written(log) > 0 and on_disk(log) <= -(-written(log) // BLOCK) * BLOCK
    wheel = root / "timerwheel"
    assert os.path.getsize(wheel) > 1024 * 1024 and on_disk(wheel) <= len(puts) * BLOCK   # slot by slot
    assert run(["timer", "verify", "-c", conf]).exit_code == 0   # and the files are what the broker reads


def test_repair_timer_pads_with_a_hole(tmp_path):
    root, conf, puts = store(tmp_path)
    log = log_file(root)
    n = written(log)
    os.truncate(log, n)
    r = run(["repair", "timer", "-c", conf])
    assert r.exit_code == 0, r.output
    assert os.path.getsize(log) == LOG_SIZE and on_disk(log) <= -(-n // BLOCK) * BLOCK
    assert run(["timer", "verify", "-c", conf]).exit_code == 0
    assert len(run(["timer", "list", "-c", conf, "--json"]).stdout.splitlines()) == len(puts)


def test_recover_cuts_timer_units_without_allocating(tmp_path):
    root, conf, puts = store(tmp_path)
    log = log_file(root)
    before = on_disk(log)
    last = sorted((root / "commitlog").iterdir())[-1]
    with open(last, "r+b") as f:   # the last records' pages never reached the disk
        f.seek(1200)
        f.write(bytes(os.path.getsize(last) - 1200))
    r = run(["recover", "-c", conf])
    assert r.exit_code == 0, r.output
    assert os.path.getsize(log) == LOG_SIZE and on_disk(log) <= before
    assert run(["timer", "verify", "-c", conf]).exit_code == 0
    left = len(run(["timer", "list", "-c", conf, "--json"]).stdout.splitlines())
    assert 0 < left < len(puts)
