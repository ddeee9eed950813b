"""Helpers for the tiered flat store tests: the f1 vector, local stores written with the engine, dispatch."""
from __future__ import annotations

import base64
import json
import re
import shutil
from pathlib import Path

from engine.broker.config.brokerconf import load_config
from engine.broker.commitlog.message import MessageRecord, check_message
from engine.broker.store import MessageStore
from engine.tiered.flat.config import load_tiered_config
from engine.tiered.flat.dispatch import DispatchRequest, dispatch
from engine.tiered.flat.metadata import TieredMetadata, write_metadata
from helpers import GOLDEN

F1 = GOLDEN / "tiered-flat" / "f1_basic"
F1_STORE = F1 / "store"
F1_TIER = F1_STORE / "tiered"
F1_META = F1_STORE / "broker-a" / "config" / "tieredStoreMetadata.json"
F1_BAK = F1_STORE / "broker-a" / "config" / "tieredStoreMetadata.json.bak"
F1_GEOM = {"tieredStoreCommitLogMaxSize": 4096, "tieredStoreConsumeQueueMaxSize": 200}
CLOCK = 1_700_000_000_000
WALL_CLOCK = re.compile(r'"(createTimestamp|updateTimestamp)":\d+')


def strip_wall_clock(text: str) -> str:
    return WALL_CLOCK.sub(r'"\1":0', text)


def f1_messages() -> list[dict]:
    return [json.loads(line) for line in (F1 / "messages.jsonl").read_text().splitlines()]


def f1_expected() -> list[dict]:
    return [json.loads(line) for line in (F1 / "expected.jsonl").read_text().splitlines()]


def f1_local_store(root: Path, limit: int | None = None) -> Path:
    """A local store holding the f1 records at their original commit-log offsets, written with the engine."""
    ms = sorted(f1_messages(), key=lambda m: m["originalCommitLogOffset"])[:limit]
    cfg = load_config(None, storePathRootDir=str(root), mappedFileSizeCommitLog=1 << 20, mappedFileSizeConsumeQueue=400)
    with MessageStore(cfg, writable=True, create=True) as st:
        for m in ms:
            rec = check_message(base64.b64decode(m["recordBase64"]), 0).record
            r = st.put(rec)
            assert r.commitLogOffset == m["originalCommitLogOffset"]
    return root


def put_messages(root: Path, recs: list[MessageRecord], commitlog_size: int = 1 << 20, cq_size: int = 6000) -> Path:
    cfg = load_config(None, storePathRootDir=str(root), mappedFileSizeCommitLog=commitlog_size,
                      mappedFileSizeConsumeQueue=cq_size, messageIndexEnable=False)
    with MessageStore(cfg, writable=True, create=True) as st:
        for rec in recs:
            st.put(rec)
    return root


def run_dispatch(local: Path, tier: Path, cluster: str = "DefaultCluster", broker: str = "broker-a",
                 master: str = "inline", clock=None, metadata: Path | None = None, topics=None, dry_run=False, **geom):
    tc = load_tiered_config(None, **(geom or F1_GEOM))
    req = DispatchRequest(load_config(None, storePathRootDir=str(local)), tier, tc, metadata, cluster, broker,
                          topics, master, dry_run)
    return dispatch(req, clock=clock or (lambda: CLOCK))


def copy_f1(dst: Path) -> tuple[Path, Path]:
    """A writable copy of the f1 tier and metadata: (tier root, metadata file)."""
    shutil.copytree(F1_STORE, dst)
    for p in dst.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    return dst / "tiered", dst / "broker-a" / "config" / "tieredStoreMetadata.json"


def tier_files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def edit_metadata(path: Path, fn) -> None:
    """Load, change (fn(TieredMetadata)), write back (main only)."""
    md = TieredMetadata.decode(path.read_bytes())
    fn(md)
    write_metadata(path, None, md.encode().encode())
