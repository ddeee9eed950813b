"""The text forms of info, doctor and timer inspect|list fit 80 columns on every golden store (issue 23 item 6),
with store paths longer than a line: long values wrap, and doctor's fix commands cut a long path with shell
continuations that still give the same words when pasted into a shell."""
from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import pytest

from helpers import put_jsonl, run, tiered_store, unpack_golden

#: The golden stores RocketMQ wrote (helpers.unpack_golden names), each read through its own broker.conf.
GOLDEN_STORES = ["broker/r1", "broker/r2/killed", "broker/r2/damaged", "broker/r2/recovered_by_broker", "timer/t1",
                 "timer/t2"]
#: What each store is asked, with the exit code it answers (3: doctor found an error on a damaged store).
COMMANDS = [["info"], ["doctor"], ["timer", "inspect"], ["timer", "list"]]
TIMER_STORES = {"timer/t1", "timer/t2"}
#: Config files of the put store beyond what put writes: a list longer than a line.
CONFIG_FILES = ["consumerFilter.json", "consumerOffset.json", "consumerOrderInfo.json", "delayOffset.json",
                "subscriptionGroup.json", "topics.json", "transactionMetrics", "timercheck", "timermetrics"]


def deep(tmp_path: Path) -> Path:
    """A folder whose path alone is wider than 80 columns (every path the commands print is longer still)."""
    d = tmp_path / ("a-folder-name-long-enough-that-no-store-path-below-it-fits-on-one-line-" * 2)
    d.mkdir()
    return d


def over_80(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if len(ln) > 80]


def store_conf(name: str, root: Path) -> tuple[str, Path]:
    """("-c" or "-s", its path) for a golden store, the f3 tier beside a put store, or a put store alone."""
    if name == "tiered-flat/f3_index":
        return "-c", tiered_store(root, "f3_index")[2]
    if name == "put":
        store = root / "store"
        put_jsonl(store, [{"topic": "TopicA", "keys": [f"k{i}"], "body": f"m{i}"} for i in range(3)])
        (store / "config").mkdir(exist_ok=True)
        for f in CONFIG_FILES:
            (store / "config" / f).write_text("{}")
            (store / "config" / (f + ".bak")).write_text("{}")
        return "-s", store
    return "-c", unpack_golden(name, root).conf


@pytest.mark.parametrize("name", [*GOLDEN_STORES, "tiered-flat/f3_index", "put"])
def test_text_fits_80_columns_on_every_golden_store(tmp_path, name):
    flag, path = store_conf(name, deep(tmp_path))
    assert len(str(path)) > 80
    asked = 0
    for cmd in COMMANDS:
        if cmd[0] == "timer" and name not in TIMER_STORES:
            continue
        r = run([*cmd, flag, path], env={"COLUMNS": "80"})
        assert r.exit_code in ((0, 3) if cmd == ["doctor"] else (0,)), f"{cmd}: {r.output}"
        assert r.stdout.strip(), f"{cmd} printed nothing"
        assert over_80(r.stdout) == [], f"{' '.join(cmd)} on {name}: lines over 80 columns"
        asked += 1
    assert asked == (4 if name in TIMER_STORES else 2)


def test_info_wraps_a_long_config_file_list(tmp_path):
    flag, store = store_conf("put", deep(tmp_path))
    r = run(["info", flag, store], env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith("config files"))
    block = [lines[at]] + [ln for ln in lines[at + 1:at + 6] if ln.startswith(" ")]
    assert len(block) > 1 and over_80("\n".join(block)) == []
    listed = " ".join(ln[len("config files"):].strip() for ln in block)
    assert all(f"{f} (+.bak)" in listed for f in CONFIG_FILES)


def pasted(lines: list[str]) -> list[str]:
    """The words a POSIX shell makes of these lines (the block doctor prints under "commands to run")."""
    out = subprocess.run(["sh", "-c", "printf '%s\\0' " + "\n".join(lines).strip()], capture_output=True, check=True)
    return out.stdout.decode().split("\0")[:-1]


def test_doctor_cuts_a_long_path_so_the_pasted_command_still_runs(tmp_path):
    flag, conf = store_conf("broker/r2/damaged", deep(tmp_path))
    doc = run(["doctor", flag, conf, "--json"])
    assert doc.exit_code == 3, doc.output
    commands = json.loads(doc.stdout)["commands"]
    assert commands and all(str(conf) in c for c in commands)
    r = run(["doctor", flag, conf], env={"COLUMNS": "80"})
    assert r.exit_code == 3 and over_80(r.stdout) == []
    lines = r.stdout.splitlines()
    block = lines[next(i for i, ln in enumerate(lines) if ln.startswith("commands to run")) + 1:]
    starts = [i for i, ln in enumerate(block) if ln.startswith("  rmqtool ")]
    assert len(starts) == len(commands)
    for cmd, a, b in zip(commands, starts, starts[1:] + [len(block)]):
        assert any(not ln.startswith(" ") for ln in block[a:b])   # the path was cut: a piece at column 0
        assert pasted(block[a:b]) == shlex.split(cmd)
