"""Helpers shared by the tests: the golden-vector folder, a CLI runner, store snapshots, error-shape checks."""
from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

from typer.testing import CliRunner

GOLDEN = Path(__file__).parent / "golden"
# Small geometry so segments and index files roll after a few messages.
SMALL = ["--hash-slots", "16", "--max-index", "64", "--commitlog-file-size", "4096", "--cq-file-size", "200"]
READ_GEOM = ["--hash-slots", "16", "--max-index", "64"]

#: Stores a real RocketMQ broker wrote, with what its clients received (tests/golden/broker/*/README.md).
BROKER_R1 = GOLDEN / "broker" / "r1"
BROKER_R2 = GOLDEN / "broker" / "r2"
TIMER_T2 = GOLDEN / "timer" / "t2"


def unpack_store(tarball: Path, dest: Path) -> Path:
    """A golden set's packed store (`tar --sparse -czf`) unpacked into dest, sparse files kept sparse; the store
    root (dest/store)."""
    dest.mkdir(parents=True, exist_ok=True)
    subprocess.run(["tar", "--sparse", "-xzf", str(tarball), "-C", str(dest)], check=True)
    return dest / "store"


def copy_store(src: Path, dest: Path) -> Path:
    """A copy of a store to change (holes stay holes)."""
    subprocess.run(["cp", "-a", "--sparse=always", str(src), str(dest)], check=True)
    return dest


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]


def run(args: list[str], input: str | None = None):
    """Invoke the CLI in-process; stdout and stderr are kept apart."""
    from rmqtool.app import app

    return CliRunner().invoke(app, [str(a) for a in args], input=input, catch_exceptions=True)


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
