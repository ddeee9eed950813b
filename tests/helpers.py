"""Helpers shared by the tests: the golden-vector folder, a CLI runner, store snapshots, error-shape checks, small
stores put through the CLI (recovery and damage tests), and commit logs laid out record by record (index jobs)."""
from __future__ import annotations

import ast
import hashlib
import json
import os
import random
import struct
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

from typer.testing import CliRunner

from engine.broker.commitlog.message import (TRANSACTION_ROLLBACK_TYPE, MessageRecord, blank_record, check_message,
                                             encode_record)
from engine.broker.config.brokerconf import load_config
from engine.broker.consumequeue.queue import list_queues
from engine.broker.layout import list_index_files
from engine.broker.store import MessageStore
from engine.broker.commitlog.ranges import SegmentRange, whole_segment

TESTS = Path(__file__).resolve().parent  # tests/: the shared code, data and Java probes
REPO = TESTS.parent
GOLDEN = TESTS / "golden"
# Small geometry so segments and index files roll after a few messages.
SMALL = ["--hash-slots", "16", "--max-index", "64", "--commitlog-file-size", "4096", "--cq-file-size", "200"]
READ_GEOM = ["--hash-slots", "16", "--max-index", "64"]
T0 = 1_700_000_000_000
#: The segment size of fuzz_store's commit logs.
FUZZ_SEG = 16384


#: Stores a real RocketMQ broker wrote, with what its clients received (tests/golden/broker/*/README.md).
BROKER_R1 = GOLDEN / "broker" / "r1"
BROKER_R2 = GOLDEN / "broker" / "r2"


class GoldenStore(NamedTuple):
    store: Path   # the store root
    conf: Path    # a broker.conf pointing at it


_PRISTINE: dict[str, Path] = {}   # golden set -> its archive unpacked once (never handed to a test)


def _pristine(name: str) -> Path:
    """The golden set's packed store (`tar --sparse -czf`) unpacked once per session into a private folder:
    tarfile seeks over the holes of a --sparse archive, so sparse files stay sparse."""
    if name not in _PRISTINE:
        import atexit
        import shutil
        import tarfile
        import tempfile

        into = Path(tempfile.mkdtemp(prefix="rmqtool-golden-"))
        atexit.register(shutil.rmtree, into, ignore_errors=True)
        with tarfile.open(GOLDEN / name / "store.tar.gz") as tf:
            tf.extractall(into, filter="data")
        _PRISTINE[name] = into / "store"
    return _PRISTINE[name]


def unpack_golden(name: str, dest: Path) -> GoldenStore:
    """A fresh copy of a golden store (`broker/r1`, `broker/r2/killed`, `timer/t1`, ...: a folder of tests/golden
    with a store.tar.gz) for one test to read or change: the store at dest/store, holes kept and file times as the
    broker left them, and dest/broker.conf, the set's own (or its parent's) pointing at the copy. Every call copies;
    no two tests share a store."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    store = dest / "store"
    subprocess.run(["cp", "-a", "--sparse=always", str(_pristine(name)), str(store)], check=True)
    src = GOLDEN / name
    conf_src = src / "broker.conf" if (src / "broker.conf").exists() else src.parent / "broker.conf"
    conf = dest / "broker.conf"
    conf.write_text(conf_src.read_text().replace("<store>", str(store)).replace("<SET>", str(dest)))
    return GoldenStore(store, conf)


_BUILT: dict[str, tuple[Path, object]] = {}   # key -> (the store build made, what it returned)


def built_store(key: str, dest: Path, build):
    """A store that build(root) makes, made once per test process (pytest-xdist: once per worker) for `key` and
    copied to dest (file times kept) for each caller, with a fresh copy of what build returned (the
    acknowledgements, say). For a fixture that put the same messages for every test: each test still has a
    store of its own to change, and the put is paid once. build makes the store at root (files beside it, under
    root.parent, are not copied) and returns data that names no path of it."""
    import copy
    import shutil

    if key not in _BUILT:
        import atexit
        import tempfile

        into = Path(tempfile.mkdtemp(prefix="rmqtool-built-"))
        atexit.register(shutil.rmtree, into, ignore_errors=True)
        _BUILT[key] = (into / "store", build(into / "store"))
    src, value = _BUILT[key]
    shutil.copytree(src, dest, symlinks=True)
    return copy.deepcopy(value)


_IMPORT_NODES: dict[tuple[str, int, int], tuple] = {}


def import_nodes(path: Path) -> tuple:
    """Every import statement (ast.Import, ast.ImportFrom) of a Python file, wherever it stands (inside a function,
    under `if TYPE_CHECKING:`), in ast.walk's order. Parsed once per run and file version (path, mtime, size): the
    layer, cycle, private-name and floor checks each ask about every file of the project."""
    p = Path(path)
    st = p.stat()
    key = (str(p.resolve()), st.st_mtime_ns, st.st_size)
    got = _IMPORT_NODES.get(key)
    if got is None:
        tree = ast.parse(p.read_text(encoding="utf-8"))
        got = _IMPORT_NODES[key] = tuple(n for n in _statements(tree) if isinstance(n, (ast.Import, ast.ImportFrom)))
    return got


def _statements(tree: ast.AST):
    """ast.walk over the statements only: an import is a statement, and the path to a statement passes through
    statements, except handlers and match cases alone, so its nodes come in ast.walk's order without a visit to
    the expressions (most of a module's nodes)."""
    from collections import deque

    todo = deque([tree])
    while todo:
        node = todo.popleft()
        yield node
        todo.extend(c for c in ast.iter_child_nodes(node) if isinstance(c, (ast.stmt, ast.excepthandler,
                                                                             ast.match_case)))


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]


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
    """A content hash and mtime of every file below root."""
    out = {}
    for p in sorted(Path(root).rglob("*")):
        if p.is_file():
            st = p.stat()
            out[str(p.relative_to(root))] = (content_hash(p), st.st_mtime_ns)
    return out


def content_hash(path: Path, block: int = 1 << 20) -> str:
    """sha256 of a file's length and its non-zero 1 MiB blocks (by block number): equal for equal contents
    whichever zeros are holes, and the holes of a sparse file (a 1 GiB commit-log file holding a few records)
    are never read."""
    from engine.fsutil import data_ranges

    h = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        h.update(size.to_bytes(8, "big"))
        blocks = sorted({b for a, e in data_ranges(fd, 0, size) for b in range(a // block, -(-e // block))})
        for b in blocks:
            data = os.pread(fd, block, b * block)
            if data.count(0) != len(data):
                h.update(b.to_bytes(8, "big") + len(data).to_bytes(8, "big") + data)
    finally:
        os.close(fd)
    return h.hexdigest()


def jlines(r) -> list[dict]:
    """The JSON objects of an NDJSON stdout, one per line."""
    return [json.loads(line) for line in r.stdout.splitlines() if line.strip()]


#: The keys naming the level of a line of stderr under --json (rmqtool.notes).
LEVELS = ("note", "warning", "error")


def said(r, kind: str | None = None) -> list[dict]:
    """What a command run with --json said on stderr: one JSON object per line ({level: kind, "message", ...fields},
    docs/output-contract.md); with `kind`, only the lines of that kind. The `error:` line that ends a command is
    not JSON: it is left out (assert_one_line_error reads it)."""
    out = [json.loads(line) for line in r.stderr.splitlines() if line.strip() and not line.startswith("error: ")]
    return out if kind is None else [d for d in out if said_kind(d) == kind]


def said_kind(d: dict) -> str | None:
    """The kind of one line said (the value of its level key)."""
    return next((d[k] for k in LEVELS if k in d), None)


def said_kinds(r) -> list[str | None]:
    """The kinds of the lines a command run with --json said on stderr, in order."""
    return [said_kind(d) for d in said(r)]


def put_jsonl(store: Path, messages: list[dict], extra: list[str] | None = None):
    data = "".join(json.dumps(m, ensure_ascii=False) + "\n" for m in messages)
    r = run(["put", "--store", store, *SMALL, "--from-jsonl", "-", "--json", *(extra or [])], input=data)
    assert r.exit_code == 0, r.output
    return [json.loads(line) for line in r.stdout.splitlines() if line.strip()]


def assert_one_line_error(r, code: int = 2, contains: str | None = None):
    """One line `error: ...` on stderr, exit `code` (2, bad input, unless the case is another: output contract),
    no traceback."""
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
    tiered index file (golden t2) and a path for outputs, all under root/ws (what a writer may change). Read
    only, outside it: a timer store (its wheel is 38 MB) and the tiered INDEX set f3 (golden)."""
    import shutil
    import time

    ro = root / "ro"
    ro.mkdir(parents=True)
    now = int(time.time() * 1000)
    timer_conf, _ = make_timer_store(ro / "timer", 8, fire_base=now + 3_600_000, write_ms=now - 1000,
                                     read_ms=now - 1000)
    f3 = GOLDEN / "tiered-flat" / "f3_index"
    f3_first = json.loads((f3 / "messages.jsonl").read_text(encoding="utf-8").splitlines()[0])
    root = root / "ws"
    store = root / "store"
    msgs = [{"topic": "TopicA" if i % 3 else "TopicB", "queueId": i % 2, "keys": [f"k{i}", "common"],
             "tags": "TagA" if i % 2 else "TagB", "storeTimestamp": 1_700_000_000_000 + i * 1000,
             "body": f"hello {i}"} for i in range(40)]
    acks = put_jsonl(store, msgs)
    (store / "config").mkdir(exist_ok=True)
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
    from rocksdb_helpers import rocksdb_twin
    rstore = rocksdb_twin(store, root / "rstore", keep_files=True)  # a double-writing broker's store
    return {"store": store, "rstore": rstore, "tiered": tiered, "meta": meta, "tidx": tidx, "tfile": tidx / str(begin),
            "out": root / "out", "segment": store / "commitlog" / "00000000000000000000", "timerconf": timer_conf,
            "f3tier": f3 / "store" / "tiered", "f3store": f3 / "store" / "broker-a", "f3topic": f3_first["topic"],
            "f3key": f3_first["uniqKey"]}


#: The tiered store's metadata file in the local store's config/ (as the broker keeps it).
TIERED_META = "tieredStoreMetadata.json"


def tiered_store(tmp: Path, name: str, geometry: bool = True) -> tuple[Path, Path, Path]:
    """(local store, tier, broker.conf): a store written by put beside a copy of golden set `name`'s tier, its
    metadata in the store's config/ as the broker keeps it, and a broker.conf that configures the tier."""
    import shutil

    store, tier = tmp / "store", tmp / "tiered"
    r = run(["put", "-s", store, *SMALL, "-t", "LocalTopic", "--body", "local"])   # small files: cheap to hash
    assert r.exit_code == 0, r.output
    shutil.copytree(GOLDEN / "tiered-flat" / name / "store" / "tiered", tier)
    (store / "config").mkdir(exist_ok=True)
    for f in (TIERED_META, TIERED_META + ".bak"):
        shutil.copy(GOLDEN / "tiered-flat" / name / "store" / "broker-a" / "config" / f, store / "config" / f)
    params = json.loads((GOLDEN / "tiered-flat" / name / "params.json").read_text())["brokers"][0]
    lines = [f"storePathRootDir={store}", "mappedFileSizeCommitLog=4096", "mappedFileSizeConsumeQueue=200",
             "maxHashSlotNum=16", "maxIndexNum=64", f"tieredStoreFilePath={tier}", "brokerName=broker-a",
             "brokerClusterName=DefaultCluster",
             "messageStorePlugIn=org.apache.rocketmq.tieredstore.TieredMessageStore"]
    if geometry and "tieredStoreIndexFileMaxHashSlotNum" in params:
        lines += [f"tieredStoreIndexFileMaxHashSlotNum={params['tieredStoreIndexFileMaxHashSlotNum']}",
                  f"tieredStoreIndexFileMaxIndexNum={params['tieredStoreIndexFileMaxIndexNum']}"]
    conf = tmp / "broker.conf"
    conf.write_text("\n".join(lines) + "\n")
    return store, tier, conf


# ---------------------------------------------------------------- small stores put through the CLI

SEG = 4096

SEG_GEOM = ["--commitlog-file-size", str(SEG), "--hash-slots", "16", "--max-index", "64"]


def cli(*args: str, code: int | None = 0):
    """Invoke the CLI in-process and check its exit code (None: any)."""
    from rmqtool.app import app

    r = CliRunner().invoke(app, list(args))
    if code is not None:
        assert r.exit_code == code, f"exit {r.exit_code}: {r.stdout}\n{r.stderr}"
    return r


def cfg_for(store: Path):
    return load_config(None, storePathRootDir=str(store), mappedFileSizeCommitLog=SEG, maxHashSlotNum=16,
                       maxIndexNum=64)


def sample_messages(n: int, start: int = 0, topic: str | None = None, queue_id: int | None = None) -> list[dict]:
    """Messages with two KEYS tokens and a UNIQ_KEY each, a second apart, over two topics and three queues."""
    out = []
    for i in range(start, start + n):
        out.append({"topic": topic or f"Topic{'AB'[i % 2]}", "queueId": (i % 3) if queue_id is None else queue_id,
                    "tags": "TAG1", "keys": [f"k{i}", f"g{i}"], "uniqKey": f"UNIQ{i:08d}",
                    "storeTimestamp": 1_700_000_000_000 + i * 600, "body": f"body offset {i} " + "x" * (i % 37)})
    return out


def put(store: Path, msgs: list[dict], tmp: Path, *extra: str) -> list[dict]:
    """`rmqtool put --from-jsonl` of msgs into a store of SEG_GEOM; the acknowledgements."""
    inp = tmp / f"in-{time.monotonic_ns()}.jsonl"
    inp.write_text("".join(json.dumps(m) + "\n" for m in msgs))
    r = cli("put", "--store", str(store), "--json", "--from-jsonl", str(inp), *extra, *SEG_GEOM)
    return [json.loads(line) for line in r.stdout.splitlines()]


def put_store(dest: Path) -> Path:
    """dest: a store of SEG_GEOM with sample_messages(300) put into it (many small segments, index files, consume
    queues), put once per test process and copied here (built_store)."""
    built_store("put-300-sample-messages", dest, lambda r: put(r, sample_messages(300), r.parent))
    return dest


def item_at(n: int, slots: int = 16) -> int:
    """The byte offset of item n of an index file of `slots` hash slots (SEG_GEOM's 16 by default)."""
    from engine.broker.index.file import INDEX_HEADER_SIZE, ITEM_SIZE, SLOT_SIZE

    return INDEX_HEADER_SIZE + SLOT_SIZE * slots + ITEM_SIZE * n


def recover_json(store: Path, *extra: str, code: int = 0) -> dict:
    return json.loads(cli("recover", "--store", str(store), "--json", *extra, *SEG_GEOM, code=code).stdout)


def found(store: Path, topic: str, key: str, unique: bool = False) -> list[int]:
    args = ["query-key", "--store", str(store), "--topic", topic, "--key", key, "--json", *SEG_GEOM]
    if unique:
        args.append("--unique-key")
    r = cli(*args)
    return [json.loads(line)["commitLogOffset"] for line in r.stdout.splitlines() if line.strip()]


def assert_all_found(store: Path, acks: list[dict], sent: list[dict]) -> None:
    """Every message by each of its keys and its UNIQ_KEY: the engine query (what query-key runs) for all,
    the query-key command itself for a few."""
    with MessageStore(cfg_for(store)) as st:
        for a, m in zip(acks, sent):
            for k in m["keys"]:
                assert a["commitLogOffset"] in [r.physical_offset for r in st.query(m["topic"], k).messages], k
            got = st.query(m["topic"], m["uniqKey"], unique=True).messages
            assert a["commitLogOffset"] in [r.physical_offset for r in got]
    for a, m in list(zip(acks, sent))[::max(1, len(acks) // 3)]:
        assert a["commitLogOffset"] in found(store, m["topic"], m["keys"][1])
        assert a["commitLogOffset"] in found(store, m["topic"], m["uniqKey"], unique=True)


def verify_ok(store: Path) -> None:
    r = cli("inspect-index", "--store", str(store), "--verify", *SEG_GEOM, code=None)
    assert r.exit_code == 0, r.stdout


def data_bytes(store: Path) -> dict[str, bytes]:
    """Commit log, consume queues, index files (by position: their names are creation times)."""
    out = {}
    for p in sorted((store / "commitlog").iterdir()):
        out[f"commitlog/{p.name}"] = p.read_bytes()
    for topic, qid in list_queues(store):
        for p in sorted((store / "consumequeue" / topic / str(qid)).iterdir()):
            out[f"cq/{topic}/{qid}/{p.name}"] = p.read_bytes()
    for i, p in enumerate(list_index_files(store / "index")):
        out[f"index#{i}"] = p.read_bytes()
    return out


def seg_file(store: Path, offset: int) -> tuple[Path, int]:
    start = offset - offset % SEG
    return store / "commitlog" / f"{start:020d}", offset % SEG


def patch(path: Path, pos: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(pos)
        f.write(data)


# ---------------------------------------------------------------- commit logs laid out record by record

def index_bytes(d: Path) -> list[bytes]:
    return [p.read_bytes() for p in list_index_files(d)]


def multikey_messages(n: int, seed: int = 7) -> list[dict]:
    """Messages with several keys each (UNIQ_KEY from put + 1..4 KEYS tokens, empty tokens, repeats)."""
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        toks = [f"k{i}", f"c{i % 5}", "", f"ключ{i % 3}", "😀" if i % 7 == 0 else f"x{i}"][: rnd.randrange(1, 6)]
        out.append({"topic": rnd.choice(["TopicA", "TopicB", "%RETRY%grp-1"]), "keys": " ".join(toks),
                    "body": "b" * rnd.randrange(0, 300), "storeTimestamp": T0 + 400 * i + rnd.randrange(0, 50)})
    return out


def rec(topic="T", props_raw: bytes | None = None, props=None, **kw) -> MessageRecord:
    r = MessageRecord(topic=topic, body=kw.pop("body", b"body"), properties=dict(props or {}), **kw)
    if props_raw is not None:
        r.properties_raw = props_raw
    return r


def place(records: list[MessageRecord], size: int, fake_phy=None) -> list[bytes]:
    """Encode records at their commit-log positions (PHYSICALOFFSET = position unless fake_phy says)."""
    blobs, start, pos = [], 0, 0
    for i, r in enumerate(records):
        r.physical_offset = 0
        n = len(encode_record(r))
        if n + 8 > size - pos:
            start, pos = start + size, 0
        r.physical_offset = fake_phy(i, start + pos) if fake_phy else start + pos
        blobs.append(encode_record(r))
        pos += n
    return blobs


def write_segments(root: Path, blobs: list[bytes], size: int) -> list[Path]:
    """Lay records out in commit-log segments by the broker's rule (format §3.1), blank filler included."""
    d = root / "commitlog"
    d.mkdir(parents=True, exist_ok=True)
    segs, cur, start, pos = [], bytearray(size), 0, 0
    for data in blobs:
        if len(data) + 8 > size - pos:
            cur[pos:pos + 8] = blank_record(size - pos)
            segs.append((start, cur))
            start, cur, pos = start + size, bytearray(size), 0
        cur[pos:pos + len(data)] = data
        pos += len(data)
    segs.append((start, cur))
    paths = []
    for s, buf in segs:
        p = d / f"{s:020d}"
        p.write_bytes(bytes(buf))
        paths.append(p)
    return paths


def seg_infos(paths: list[Path]) -> list[SegmentRange]:
    return [whole_segment(i, p, int(p.name)) for i, p in enumerate(paths)]


def embedded_chain(n: int) -> bytes:
    """A body that looks like a run of commit-log records: a range starting inside it guesses wrong."""
    out, pos = bytearray(), 0
    for i in range(n):
        r = MessageRecord(topic="Fake", body=b"f" * 20, properties={"KEYS": f"fake{i}"}, physical_offset=pos)
        data = encode_record(r)
        out += data
        pos += len(data)
    return bytes(out)


def fuzz_store(root: Path, seed: int) -> None:
    """A commit log of FUZZ_SEG segments with every kind of walk stop: bodies that look like records, rollbacks,
    a LENGTH_MISMATCH record (the walk goes on) and a corrupt one (its segment's walk ends there)."""
    rnd = random.Random(seed)
    recs = []
    for i in range(260):
        body = embedded_chain(rnd.randrange(9, 14)) if rnd.random() < 0.08 else b"b" * rnd.randrange(0, 700)
        recs.append(rec(topic=rnd.choice(["TA", "TB", "Tö"]), body=body, store_timestamp=T0 + 10 * i,
                        queue_id=rnd.randrange(3), sys_flag=rnd.choice([0, 0, 0, TRANSACTION_ROLLBACK_TYPE]),
                        props={"KEYS": " ".join(f"k{rnd.randrange(50)}" for _ in range(rnd.randrange(0, 4))),
                               "UNIQ_KEY": f"U{i}"}))
    blobs = place(recs, FUZZ_SEG)
    lm = bytearray(encode_record(rec(props={"KEYS": "mismatch"}))) + b"\x07" * 5  # LENGTH_MISMATCH, walk goes on
    struct.pack_into(">i", lm, 0, len(lm))
    blobs.insert(40, bytes(lm))
    paths = write_segments(root, blobs, FUZZ_SEG)
    data = bytearray(paths[2].read_bytes())  # segment 2: a corrupt record in the middle ends its walk there
    pos = 0
    for _ in range(6):
        pos += check_message(bytes(data), pos, check_crc=False).size
    data[pos + 4:pos + 8] = b"\x00\x00\x00\x01"
    paths[2].write_bytes(bytes(data))


def fuzz_config(root: Path):
    return load_config(storePathRootDir=str(root), mappedFileSizeCommitLog=FUZZ_SEG, maxHashSlotNum=16, maxIndexNum=64)


# ------------------------------------------------------------------------------------------- timer store

TIMER_T1 = GOLDEN / "timer" / "t1"


def t1_answer(name: str, set_name: str = "t1"):
    """One of a timer set's answers: a .jsonl as a list of objects, a .json as one."""
    path = GOLDEN / "timer" / set_name / "answers" / name
    if name.endswith(".jsonl"):
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return json.loads(path.read_text())


def patch_file(path: Path, pos: int, data: bytes) -> None:
    """Overwrite bytes of a file in place (fault injection into a copy)."""
    import os

    fd = os.open(path, os.O_RDWR)
    try:
        os.pwrite(fd, data, pos)
    finally:
        os.close(fd)


def make_timer_store(root: Path, count: int, *, fire_base: int, write_ms: int, read_ms: int, step_ms: int = 1000,
                     body: int = 300, timer_log_size: int = 276, topic: str = "TopicT") -> tuple[Path, list]:
    """A store of `count` timer messages in rmq_sys_wheel_timer/0 (4 KiB commit-log segments), their timer log
    (files of timer_log_size bytes) and wheel written as the broker's enqueue writes them, and a timercheck.
    Message i fires at fire_base + i * step_ms (whole seconds, as the broker floors them). Returns (broker.conf,
    [PutResult per message])."""
    from engine.broker.config.brokerconf import load_config
    from engine.broker.commitlog.message import MessageRecord
    from engine.broker.store import MessageStore
    from engine.timer.codec import TimerCheckpoint
    from engine.timer.layout import TimerGeometry, TimerLayout
    from engine.timer.write import TimerStoreWriter

    fire_base, write_ms, step_ms = fire_base // 1000 * 1000, write_ms // 1000 * 1000, max(1000, step_ms // 1000 * 1000)
    root = Path(root)
    conf = root.parent / f"{root.name}.conf"
    conf.write_text(f"storePathRootDir={root}\nmappedFileSizeCommitLog=4096\nmappedFileSizeConsumeQueue=200\n"
                    f"mappedFileSizeTimerLog={timer_log_size}\nmaxHashSlotNum=16\nmaxIndexNum=64\n")
    cfg = load_config(conf)
    puts = []
    with MessageStore(cfg, writable=True, create=True) as st:
        for i in range(count):
            rec = MessageRecord(topic="rmq_sys_wheel_timer", queue_id=0, body=b"b" * body,
                                properties={"REAL_TOPIC": topic, "REAL_QID": str(i % 4), "KEYS": f"key-{i}",
                                            "TAGS": "t", "TIMER_OUT_MS": str(fire_base + i * step_ms)})
            puts.append(st.put(rec))
    w = TimerStoreWriter(TimerLayout.of(cfg), TimerGeometry.of(cfg))
    for i, r in enumerate(puts):
        w.enqueue(r.commitLogOffset, r.storeSize, fire_base + i * step_ms, write_ms, topic)
    w.write(TimerCheckpoint(read_ms, w.end, count, count))
    return conf, puts


@contextmanager
def lock_held(store, by_rmqtool: bool = False):
    """Another process holds the store's lock (fcntl, as a running broker does) while the block runs; yields its
    pid. The lock is the store's `lock` file (created if missing); by_rmqtool: the holder takes it as another
    rmqtool does (engine.broker.config.lock.StoreLock)."""
    if by_rmqtool:
        code = ("import sys, time\nsys.path.insert(0, %r)\nfrom engine.broker.config.lock import StoreLock\n"
                "l = StoreLock(sys.argv[1]).acquire()\nprint('locked', flush=True)\ntime.sleep(60)\n" % str(REPO))
        arg = str(store)
    else:
        code = ("import fcntl, os, sys, time\nfd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)\n"
                "fcntl.lockf(fd, fcntl.LOCK_EX)\nprint('locked', flush=True)\ntime.sleep(60)\n")
        arg = str(Path(store) / "lock")
    holder = subprocess.Popen([sys.executable, "-c", code, arg], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        yield holder.pid
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()


# processes: a command stopped by a signal, and the children it must not leave behind
def child_pids(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    return [int(x) for x in out]


def stop_and_reap(p: subprocess.Popen, sig: int, kids: set[int]) -> tuple[int, str, str]:
    p.send_signal(sig)
    out, err = p.communicate(timeout=60)
    # the children get the signal too and end on their own: wait for that (a generous bound, not a guess at
    # how long it takes on a loaded machine)
    deadline = time.monotonic() + 30
    while True:
        alive = [k for k in kids if os.path.exists(f"/proc/{k}") and "zombie" not in proc_state(k)]
        if not alive or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    assert not alive, f"child processes left: {alive}"
    return p.returncode, out, err


def proc_state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text().split("State:")[1].split("\n")[0].lower()
    except (OSError, IndexError):
        return "zombie"


def die_first(fn, *args):
    """A worker's job that kills its own process first (a worker killed mid-job: SIGKILL); the conftest fixture
    `killed` hands every job through it."""
    os.kill(os.getpid(), 9)
    return fn(*args)


def record_starts(data) -> tuple[list[int], int]:
    """Where each record of a segment's bytes starts, walked one record at a time with check_message (valid and
    length-mismatch records are walked over, as the dispatcher does), and where the walk stopped: at the first
    record that is neither."""
    from engine.broker.commitlog.message import LENGTH_MISMATCH, VALID

    starts, pos = [], 0
    while True:
        c = check_message(data, pos, check_crc=False)
        if c.status not in (VALID, LENGTH_MISMATCH):
            return starts, pos
        starts.append(pos)
        pos += c.size


def keyed_record(off, ts, keys="", uniq=None, topic="T", sys_flag=0) -> MessageRecord:
    """A record at commit-log offset off, stored at ts, with its index keys (KEYS, UNIQ_KEY) as the only properties."""
    props = {}
    if keys:
        props["KEYS"] = keys
    if uniq:
        props["UNIQ_KEY"] = uniq
    return MessageRecord(topic=topic, physical_offset=off, store_timestamp=ts, properties=props, sys_flag=sys_flag)


def assert_queues_match(r, admin: dict) -> dict:
    """`queues --json` (r) gives every queue's min and max offsets as the broker's topicStats (admin) do (a queue
    rmqtool does not list: 0, 0); returns the broker's, by (topic, queue id)."""
    assert r.exit_code == 0, r.stderr
    mine = {(q["topic"], q["queueId"]): (q["minOffset"], q["maxOffset"]) for q in json.loads(r.stdout)["queues"]}
    theirs = {(t, int(q)): (v["min"], v["max"]) for t, qs in admin["topicStats"].items() for q, v in qs.items()}
    assert {k: mine.get(k, (0, 0)) for k in theirs} == theirs
    return theirs


def assert_consumers_match(r, admin: dict) -> dict:
    """`consumers --json` (r) gives every queue's broker and consumer offsets as the broker's consumeStats (admin)
    do; returns the broker's, by (group, topic/queue)."""
    assert r.exit_code == 0, r.stderr
    mine = {(g["group"], f"{q['topic']}/{q['queueId']:03d}"): (q["brokerOffset"], q["consumerOffset"])
            for g in json.loads(r.stdout)["groups"] for q in g["queues"]}
    theirs = {(g, k): (q["brokerOffset"], q["consumerOffset"]) for g, v in admin["consumeStats"].items()
              if "queues" in v for k, q in v["queues"].items()}
    assert theirs and {k: mine.get(k) for k in theirs} == theirs
    return theirs
