"""Helpers shared by the tests: the golden-vector folder, a CLI runner, store snapshots, error-shape checks."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from typer.testing import CliRunner

GOLDEN = Path(__file__).parent / "golden"
# Small geometry so segments and index files roll after a few messages.
SMALL = ["--hash-slots", "16", "--max-index", "64", "--commitlog-file-size", "4096", "--cq-file-size", "200"]
READ_GEOM = ["--hash-slots", "16", "--max-index", "64"]

def run(args: list[str], input: str | None = None, env: dict | None = None):
    """Invoke the CLI in-process; stdout and stderr are kept apart."""
    from rmqtool.app import app

    return CliRunner(env=env).invoke(app, [str(a) for a in args], input=input, catch_exceptions=True)


def command_paths() -> list[tuple[str, object]]:
    """("tiered get", click command) of every command and subcommand the application registers (groups too)."""
    import typer.main

    from rmqtool.app import app

    out = []

    def walk(cmd, prefix):
        out.append((" ".join(prefix), cmd))
        for name, sub in (getattr(cmd, "commands", None) or {}).items():
            walk(sub, prefix + [name])

    for name, cmd in typer.main.get_command(app).commands.items():
        walk(cmd, [name])
    return out


def snapshot(root: Path) -> dict[str, str]:
    """sha256 and mtime of every file below root."""
    out = {}
    for p in sorted(Path(root).rglob("*")):
        if p.is_file():
            st = p.stat()
            out[str(p.relative_to(root))] = (hashlib.sha256(p.read_bytes()).hexdigest(), st.st_mtime_ns)
    return out


def put_jsonl(store: Path, messages: list[dict], extra: list[str] | None = None):
    data = "".join(json.dumps(m, ensure_ascii=False) + "\n" for m in messages)
    r = run(["put", "--store", store, *SMALL, "--from-jsonl", "-", "--json", *(extra or [])], input=data)
    assert r.exit_code == 0, r.output
    return [json.loads(line) for line in r.stdout.splitlines() if line.strip()]


def assert_one_line_error(r, code: int | None = None, contains: str | None = None):
    assert r.exit_code != 0, r.output
    if code is not None:
        assert r.exit_code == code, (r.exit_code, r.output)
    err = r.stderr.strip()
    assert err, "expected an error message on stderr"
    assert "Traceback" not in r.output and "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: "), lines[0]
    if contains:
        assert contains in lines[0], lines[0]
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)


def spy(monkeypatch, owner, name: str, note) -> list:
    """Wrap method `name` of class `owner`: each call still returns what it returned, and note(self, result) is
    appended to the list returned here."""
    real = getattr(owner, name)
    seen: list = []

    def wrapped(self, *args, **kwargs):
        got = real(self, *args, **kwargs)
        seen.append(note(self, got))
        return got
    monkeypatch.setattr(owner, name, wrapped)
    return seen


def sample_workspace(root: Path) -> dict[str, Path]:
    """A small store of every kind of thing the commands read (docs/output-contract.md's contract test walks
    every command over it): two topics in four queues with keys and tags, committed consumer offsets, a
    recovery placeholder with its quarantine run, an index backup; beside it a tiered flat store (golden f1), a
    tiered index file (golden t2) and a path for outputs."""
    import shutil

    store = root / "store"
    msgs = [{"topic": "TopicA" if i % 3 else "TopicB", "queueId": i % 2, "keys": [f"k{i}", "common"],
             "tags": "TagA" if i % 2 else "TagB", "storeTimestamp": 1_700_000_000_000 + i * 1000,
             "body": f"hello {i}"} for i in range(40)]
    acks = put_jsonl(store, msgs)
    (store / "config").mkdir()
    (store / "config" / "consumerOffset.json").write_text(json.dumps(
        {"offsetTable": {"TopicA@g1": {"0": 3, "1": 1}, "TopicB@g1": {"0": 2}}}))
    (store / "config" / "topics.json").write_text(json.dumps(
        {"topicConfigTable": {"TopicA": {"topicName": "TopicA", "readQueueNums": 2, "writeQueueNums": 2},
                              "TopicB": {"topicName": "TopicB", "readQueueNums": 2, "writeQueueNums": 2}}}))
    victim = acks[5]  # one flipped body bit: recover --full-scan puts a placeholder there, kept in quarantine/
    seg = store / "commitlog" / f"{victim['commitLogOffset'] // 4096 * 4096:020d}"
    data = bytearray(seg.read_bytes())
    data[victim["commitLogOffset"] % 4096 + 90] ^= 1
    seg.write_bytes(bytes(data))
    r = run(["recover", "-s", store, *READ_GEOM, "--full-scan", "-Q"])
    assert r.exit_code == 0, r.output
    r = run(["spark-reindex", "-s", store, *READ_GEOM, "--master", "inline", "-Q"])  # leaves index.bak-*
    assert r.exit_code == 0, r.output
    tiered = root / "tiered"
    shutil.copytree(GOLDEN / "tiered-flat" / "f1_basic" / "store" / "tiered", tiered)
    meta = root / "tieredStoreMetadata.json"
    shutil.copy(GOLDEN / "tiered-flat" / "f1_basic" / "store" / "broker-a" / "config" / "tieredStoreMetadata.json",
                meta)
    t2 = GOLDEN / "tiered" / "t2_full"
    tidx = root / "tiered_index_file"
    tidx.mkdir()
    begin = json.loads((t2 / "params.json").read_text())["beginTimestamp"]
    shutil.copy(t2 / "unsealed.bin", tidx / str(begin))
    return {"store": store, "tiered": tiered, "meta": meta, "tidx": tidx, "tfile": tidx / str(begin),
            "out": root / "out", "segment": store / "commitlog" / "00000000000000000000"}
