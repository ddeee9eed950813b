"""SIGINT and SIGTERM stop a writer at once (issue 34 item 16): `put --from-jsonl` of a large file (with its parse
helper) and `recover` (with its CRC helper) exit 130 / 143 with one line on stderr, leave no child process, and
leave the store as a crash would (every acknowledged message kept; a recover run again finishes the job). SIGINT
works even when the process started with it ignored (a background job of a script)."""
from __future__ import annotations

from helpers import REPO, child_pids, proc_state, stop_and_reap
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import cli

N = 3000  # messages of the recover tests
#: The records whose bodies the recover test damages: each costs the recovery a placeholder (about 35 ms), and
#: with a hundred the walk and its repair still run for seconds after the CRC helper starts (every third record,
#: as before, made the second run alone take 8 s on a quiet machine).
DAMAGED = range(3, N, 30)


def _spawn(args: list[str], ignore_sigint: bool) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    pre = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if ignore_sigint else None
    return subprocess.Popen([sys.executable, "-m", "rmqtool", *args], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=pre)


def _writing_to_a_full_pipe(pid: int) -> bool:
    try:
        # pipe_write, or anon_pipe_write on newer kernels (6.x): with the name of only one, the wait below
        # always ran to its 20 s bound
        return Path(f"/proc/{pid}/wchan").read_text().strip() in ("pipe_write", "anon_pipe_write")
    except OSError:
        return False


@pytest.mark.parametrize("sig,code,ignored", [(signal.SIGINT, 130, True), (signal.SIGTERM, 143, False)],
                         ids=["sigint-ignored-at-start", "sigterm"])
def test_put_from_a_large_jsonl_stops_on_a_signal(tmp_path, sig, code, ignored):
    store = tmp_path / "s"
    cli("put", "-s", str(store), "-t", "T0", "--body", "first")
    inp = tmp_path / "big.jsonl"
    with open(inp, "w") as f:  # above the parse helper's threshold (8 MiB)
        for i in range(120_000):
            f.write(json.dumps({"topic": f"T{i % 3}", "keys": [f"k{i}"], "body": "x" * 80}) + "\n")
    p = _spawn(["put", "-s", str(store), "--from-jsonl", str(inp), "--json"], ignored)
    buf = b""
    kids: set[int] = set()
    while buf.count(b"\n") < 2000:  # some acknowledged, more to come
        chunk = os.read(p.stdout.fileno(), 1 << 16)
        assert chunk, p.stderr.read()
        buf += chunk
        kids |= set(child_pids(p.pid))
    t0 = time.time()  # no more reading: the pipe fills and put blocks in its write (a slow reader)
    while time.time() - t0 < 20 and p.poll() is None and not _writing_to_a_full_pipe(p.pid):
        kids |= set(child_pids(p.pid))
        time.sleep(0.02)
    rc, out, err = stop_and_reap(p, sig, kids)
    out = buf.decode() + out
    assert out.endswith("\n")  # the signal cut no acknowledgement in half (the write interrupted is finished)
    acks = [json.loads(line) for line in out.splitlines()]
    assert rc == code and len(err.strip().splitlines()) == 1 and err.startswith("error: "), err
    assert len(acks) < 120_000 and kids
    got = cli("get", "-s", str(store), "-o", str(acks[-1]["commitLogOffset"]), "--json", code=None)
    assert json.loads(got.stdout.splitlines()[0])["commitLogOffset"] == acks[-1]["commitLogOffset"]
    if (store / "abort").exists():
        cli("recover", "-s", str(store))
    d = json.loads(cli("doctor", "-s", str(store), "--json", code=None).stdout)
    assert d["healthy"]
    r = cli("get", "-s", str(store), "-t", "T1", "-q", "0", "-i", "0", "-n", "100000", "--json", code=None)
    have = {json.loads(line)["commitLogOffset"] for line in r.stdout.splitlines()}
    assert {a["commitLogOffset"] for a in acks if a["topic"] == "T1"} <= have


@pytest.mark.parametrize("sig,code,ignored", [(signal.SIGINT, 130, True),
                                               pytest.param(signal.SIGTERM, 143, False, marks=pytest.mark.slow)],
                         ids=["sigint-ignored-at-start", "sigterm"])
def test_recover_stops_on_a_signal_and_a_second_run_finishes(tmp_path, sig, code, ignored):
    from helpers import sample_messages

    store = tmp_path / "s"
    seg = 1 << 29  # a 512 MiB (sparse) segment: the walk checks CRCs in a helper process
    geom = ["--commitlog-file-size", str(seg), "--hash-slots", "64", "--max-index", "4096"]
    sent = sample_messages(N)
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps(m) + "\n" for m in sent))
    acks = [json.loads(line) for line in
            cli("put", "-s", str(store), "--json", "--from-jsonl", str(inp), *geom).stdout.splitlines()]
    seg_file = store / "commitlog" / "00000000000000000000"
    with open(seg_file, "r+b") as f:
        for i in DAMAGED:  # damaged bodies: a long walk
            a = acks[i]
            pos = a["commitLogOffset"]
            data = os.pread(f.fileno(), a["storeSize"], pos)
            os.pwrite(f.fileno(), bytes(2), pos + data.index(sent[i]["body"].encode()))
    (store / "abort").write_text("")
    p = _spawn(["recover", "-s", str(store), *geom], ignored)
    kids: set[int] = set()
    t0 = time.time()
    while not kids and time.time() - t0 < 20 and p.poll() is None:  # the walk's CRC helper: the walk runs
        kids |= set(child_pids(p.pid))
        time.sleep(0.01)
    if p.poll() is not None:
        pytest.skip("recover finished before the signal could be sent")
    rc, out, err = stop_and_reap(p, sig, kids)
    assert rc == code and len(err.strip().splitlines()) == 1 and err.startswith("error: "), err
    assert (store / "abort").exists()  # as a crash leaves it: the next recover recovers again
    done = json.loads(cli("recover", "-s", str(store), "--json", *geom).stdout)
    assert done["truncatedRecords"] == 0 and done["recordsScanned"] == N - len(DAMAGED)
    d = json.loads(cli("doctor", "-s", str(store), "--json", *geom[:2], code=None).stdout)
    assert d["healthy"]
