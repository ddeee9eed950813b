"""rmqtool demo: a sample folder (broker.conf and a JSON-lines file of messages with keys) for the README's first
command, the check of the Spark master its reindex step runs on, and the rebuilt index compared with the one put
wrote. The steps themselves are rmqtool commands, which the command runs."""
from __future__ import annotations

import json
import random
import shutil
import time
from pathlib import Path
from typing import Iterator, Optional

from engine.errors import InvalidArgumentError

SAMPLE_CONF = """# rmqtool sample store: small geometry so index files roll
storePathRootDir={root}
mappedFileSizeCommitLog=1048576
mappedFileSizeConsumeQueue=6000
maxHashSlotNum=1000
maxIndexNum=4000
"""


def sample_messages(n: int, start_ms: int, seed: int = 7) -> Iterator[dict]:
    rnd = random.Random(seed)
    topics = ["OrderTopic", "PaymentTopic", "%RETRY%audit-group"]  # a retry topic too: the broker writes those
    for i in range(n):
        topic = topics[i % len(topics)]
        user = rnd.randrange(200)
        yield {
            "topic": topic,
            "queueId": i % 4,
            "tags": rnd.choice(["TagA", "TagB", "TagC"]),
            "keys": [f"order-{i}", f"user-{user}"],
            "body": json.dumps({"order": i, "user": user, "amount": rnd.randrange(1, 10_000)}),
            "storeTimestamp": start_ms + i * 250,
            "bornTimestamp": start_ms + i * 250 - 3,
        }


def check_master(master: str) -> None:
    """InvalidArgumentError for a Spark master the reindex step cannot run on (before anything is written)."""
    import importlib.util

    from engine.exec.runners import INLINE, master_problem

    why = master_problem(master)
    if why:
        raise InvalidArgumentError(why)
    if master != INLINE and importlib.util.find_spec("pyspark") is None:
        raise InvalidArgumentError(f"--master {master} needs pyspark, which is not installed: use --master inline "
                                   "(no JVM) or --master none (no reindex step)")


def make_sample(directory: Path, messages: int) -> tuple[Path, Path, int]:
    """A fresh sample folder (replacing only a previous sample): its broker.conf, a JSONL file of `messages`
    messages and their first store time."""
    marker = directory / ".rmqtool-sample"
    if directory.exists():
        if not marker.exists():
            raise InvalidArgumentError(f"{directory} exists and is not an rmqtool sample store; pick another path")
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    marker.write_text("created by rmqtool demo\n")
    conf = directory / "broker.conf"
    conf.write_text(SAMPLE_CONF.format(root=directory))
    jsonl = directory / "sample-messages.jsonl"
    start = int(time.time() * 1000) - messages * 250
    with open(jsonl, "w", encoding="utf-8") as f:
        for m in sample_messages(messages, start):
            f.write(json.dumps(m, ensure_ascii=False) + "\n")
    return conf, jsonl, start


def compare_rebuilt(directory: Path) -> Optional[tuple[int, bool]]:
    """(rebuilt index files, whether they are byte-identical to the ones put wrote, kept as index.bak-*), or None
    when no index.bak-* is there."""
    from engine.broker.layout import list_index_files

    backups = sorted(directory.glob("index.bak-*"))
    if not backups:
        return None
    old = [p.read_bytes() for p in list_index_files(backups[-1])]
    new = [p.read_bytes() for p in list_index_files(directory / "index")]
    return len(new), old == new
