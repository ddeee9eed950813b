"""The consume-queue file size (mappedFileSizeConsumeQueue) of a store, from its files (issue 34 item 12).

A queue that has files is read and written with their size (engine.broker.consumequeue.queue.ConsumeQueue); a
queue a writer creates (put to a new topic or queue, recover re-dispatching into a queue whose files are gone)
takes the configured size. Without mappedFileSizeConsumeQueue in broker.conf or an option, that is the size the
store's other queue files have, by the rule the commit log's segments follow
(engine.broker.commitlog.segments.pick_segment_size), not the default 6,000,000: the broker of a store made with
another size refuses to start on a queue file of the wrong size.
"""
from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

from engine.broker.commitlog.segments import pick_segment_size
from engine.broker.config.brokerconf import CQ_STORE_UNIT_SIZE, BrokerConfig
from engine.broker.layout import SEGMENT_NAME, StoreLayout
from engine.errors import GeometryError


def queue_file_sizes(cfg: BrokerConfig) -> Counter:
    """How many consume-queue files have each length (empty files left out), over every queue directory."""
    sizes: Counter = Counter()
    layout = StoreLayout.of(cfg)
    try:
        queues = layout.list_queues().queues
    except Exception:  # a store whose queues cannot be listed (RocksDB ...): its readers say why
        return sizes
    for topic, qid in queues:
        d = layout.cq_dir(topic, qid)
        try:
            with os.scandir(d) as it:
                for e in it:
                    if SEGMENT_NAME.match(e.name) and e.is_file(follow_symlinks=False):
                        n = e.stat(follow_symlinks=False).st_size
                        if n:
                            sizes[n] += 1
        except OSError:
            continue
    return sizes


def settle_cq_file_size(cfg: BrokerConfig, writer: str | None = None) -> BrokerConfig:
    """cfg with mappedFileSizeConsumeQueue settled from the store's queue files when neither broker.conf nor an
    option gave it (a new BrokerConfig; cfg itself is never changed). A writer (`writer` names it) refuses,
    with GeometryError and nothing changed, a store whose queue files disagree on their size, or whose files all
    contradict the size it was given."""
    sizes = queue_file_sizes(cfg)
    if not sizes:
        return cfg
    what = f"{writer} refuses to write: " if writer else ""
    if cfg.cqFileSizeGiven:
        if writer and cfg.cq_file_size not in sizes:
            listing = ", ".join(f"{n} bytes" for n in sorted(sizes))
            raise GeometryError(f"{what}the consume-queue files are {listing}, not mappedFileSizeConsumeQueue "
                                f"{cfg.cq_file_size}; pass the store's size (--cq-file-size or broker.conf)")
        return cfg
    if writer and len(sizes) > 1:
        listing = ", ".join(f"{c} file(s) of {n} bytes" for n, c in sorted(sizes.items()))
        raise GeometryError(f"{what}the consume-queue files disagree on their size ({listing}); run `rmqtool "
                            "doctor`, or pass the store's size (--cq-file-size or broker.conf)")
    size = pick_segment_size([(0, Path(), n) for n in sizes.elements()])
    if size and size % CQ_STORE_UNIT_SIZE == 0:
        return cfg.settled_with(mappedFileSizeConsumeQueue=size)
    return cfg
