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


def broker_store_copy(name: str, dest: Path) -> Path:
    """A fresh copy of the store a real broker wrote (tests/golden/broker/<name>/store.tar.gz, unpacked with its
    sparse files sparse) under dest; returns the store root."""
    import subprocess

    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    subprocess.run(["tar", "--sparse", "-xzf", str(GOLDEN / "broker" / name / "store.tar.gz"), "-C", str(dest)],
                   check=True)
    return dest / "store"


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
