"""The doctor's view of the tiered store a broker is configured with (broker.conf's tieredStoreFilePath, or -T):
its metadata as DefaultMetadataStore loads it, then `tiered verify`'s findings (engine.tiered.index.operations
verify_tier: the flat files against the metadata, the INDEX flat file, the local tiered index files), each given
what the broker does with it at its next start and the fix.

What the broker does was read from RocketMQ's tieredstore sources (8fc57f1468): TieredMessageStore.load ->
FlatFileStore.load (recover: one flat file per topic and queue entry of the metadata, each segment list rebuilt
from the metadata, only the last segment's size from its file: flat-store §6), IndexStoreService.start (recover:
the numeric files of tiered_index_file/, a file that fails to load is logged and left out, then the INDEX flat
file's segments), PosixFileSegment (a segment's file is created empty when missing, written at the metadata's
position). DefaultMetadataStore is a ConfigManager whose failed load is ignored: a torn file falls back to its
.bak, and with no usable .bak the broker starts with empty tables and forgets every tiered segment.

Fixes: `repair config tieredStoreMetadata.json --from-bak` and `tiered rebuild-metadata` (into a missing file);
everything else needs a person (restore a file, move one out of the tier), and the problem says what to do.
"""
from __future__ import annotations

import os
import shlex
from dataclasses import replace
from pathlib import Path

from engine.broker.config.brokerconf import read_properties_file
from engine.broker.layout import TIERED_METADATA_FILE, StoreLayout
from engine.survey.doctor.report import ERROR, INFO, WARNING, DoctorReport, Finding, Fixes
from engine.tiered.flat import verify as fv
from engine.tiered.flat.config import TieredConfig
from engine.tiered.flat.layout import cluster_dir_name, is_dir_no_follow
from engine.tiered.flat.metadata import LoadedMetadata, bak_path, load_metadata
from engine.tiered.flat.store import TierSource, open_flat_store
from engine.tiered.index import operations as iv
from engine.tiered.index.flatfile import INDEX_GEOMETRY, INDEX_SEGMENT

META_REL = f"config/{TIERED_METADATA_FILE}"
#: The broker.conf value that makes a broker load the tiered store (BrokerController: messageStorePlugIn).
PLUGIN = "org.apache.rocketmq.tieredstore.TieredMessageStore"

_REBUILD = "rebuild"      # the manual step of a metadata rebuild (see _rebuild_step)
_RESTORE = "restore the file from a backup of the tier"
_MOVE_OUT = "move the file out of the tier (the broker never reads it)"

#: kind -> the manual step, for the problems of `tiered verify` (their severity and what the broker does at its
#: next start come with each finding: engine.tiered.flat.verify and engine.tiered.index.operations state them).
STEPS = {
    fv.CLUSTER_DIR: "rename the directory if it holds this cluster's files, else move it out of the tier",
    fv.QUEUE_UNLOADED: _REBUILD,
    fv.SEGMENT_NAME: _MOVE_OUT,
    fv.SEGMENT_UNLISTED: _MOVE_OUT,
    fv.SEGMENT_MISSING: _RESTORE,
    fv.SEGMENT_SIZE: _REBUILD,
    fv.SEGMENT_SIZE_LAST: "nothing to do: the records and units of the segment are checked on their own",
    fv.SEGMENT_GAP: _RESTORE,
    fv.CQ_TORN: _RESTORE,
    fv.RECORD_DAMAGED: _RESTORE,
    fv.RECORD_OFFSET: _RESTORE,
    fv.RECORD_QUEUE: _RESTORE,
    fv.QUEUE_OFFSET: _RESTORE,
    fv.SEGMENT_TIMES: _REBUILD,
    fv.CQ_UNIT: _RESTORE,
    fv.COMMITLOG_PAST_CQ: "nothing to do for reads; the bytes cost their space until retention removes the segment",
    INDEX_GEOMETRY: "if the broker ran with the slot count the files were compacted with, set "
                    "tieredStoreIndexFileMaxHashSlotNum to it in broker.conf; else rebuild the tiered index "
                    "(`rmqtool tiered reindex`)",
    INDEX_SEGMENT: "rebuild the tiered index (`rmqtool tiered reindex`) and upload it in place of the INDEX flat "
                   "file, or accept that key queries miss these messages (they stay readable by queue offset and "
                   "time)",
    iv.INDEX_FILE: "move the file out of tiered_index_file/ or the INDEX directory and rebuild the tiered index "
                   "(`rmqtool tiered reindex`)",
    iv.INDEX_LOCAL_UNLOADABLE: "move the file out of tiered_index_file/ with the broker stopped (its keys are lost "
                               "to key queries either way; `rmqtool tiered reindex` rebuilds them)",
    iv.INDEX_ITEM: "rebuild the tiered index (`rmqtool tiered reindex`)",
}


def tier_configured(tier: TierSource | None) -> bool:
    """Whether doctor was told where the tiered store is (-T, or broker.conf's tieredStoreFilePath)."""
    return tier is not None and tier.tier_root() is not None


def check_tiered(layout: StoreLayout, tier: TierSource | None, fix: Fixes, rep: DoctorReport) -> bool:
    """The tiered store's findings; False when it was not checked (no tiered store configured)."""
    if not tier_configured(tier):
        if _local_tiered_state(layout):
            rep.notes.append(f"{META_REL} or tiered_index_file/ is there but no tieredStoreFilePath was given "
                             "(-c broker.conf or -T): the tiered store was not checked")
        return False
    cfg = tier.config()
    _plugin_note(cfg, rep)
    root = tier.tier_root(cfg)
    loaded = _metadata(layout, fix, rep)
    names = _names(tier, cfg, root, loaded, rep)
    if names is None:
        return True
    cluster, broker = names
    if not is_dir_no_follow(root / cluster_dir_name(cluster) / broker):
        _no_broker_dir(root, cluster, broker, loaded, rep)
        return True
    if loaded is not None and loaded.metadata is None:
        _metadata_lost(layout, root, cluster, broker, loaded, rep)
        return True
    if loaded is None and any(os.scandir(root / cluster_dir_name(cluster) / broker)):
        _metadata_lost(layout, root, cluster, broker, loaded, rep)
        return True
    _verify(layout, root, cluster, broker, cfg, rep)
    return True


def _local_tiered_state(layout: StoreLayout) -> bool:
    meta = layout.tiered_metadata
    return meta.exists() or bak_path(meta).exists() or layout.tiered_index_dir.is_dir()


def _plugin_note(cfg: TieredConfig, rep: DoctorReport) -> None:
    if cfg.broker_conf is None:
        return
    plugin = read_properties_file(cfg.broker_conf).get("messageStorePlugIn", "")
    if PLUGIN not in plugin:
        rep.notes.append(f"{cfg.broker_conf} sets tieredStoreFilePath but messageStorePlugIn does not name "
                         f"{PLUGIN}: the broker does not load the tiered store (it was checked anyway)")


def _metadata(layout: StoreLayout, fix: Fixes, rep: DoctorReport) -> LoadedMetadata | None:
    """The metadata as DefaultMetadataStore loads it (None when neither file exists); a finding when the main
    file is not what it loads."""
    path = layout.tiered_metadata
    if not (os.path.lexists(path) or os.path.lexists(bak_path(path))):
        return None
    loaded = load_metadata(path)
    if loaded.main_ok or loaded.metadata is None:
        return loaded
    rep.findings.append(Finding(
        "tiered-metadata-from-bak", WARNING, META_REL, None,
        f"{META_REL} {loaded.main_problem}; {TIERED_METADATA_FILE}.bak is readable (one change behind)",
        f"deletes {META_REL} and loads the .bak (DefaultMetadataStore is a ConfigManager): the last change to the "
        "tiered tables is lost (a segment appended or committed, a queue added)",
        fix("repair", "config", TIERED_METADATA_FILE, "--from-bak")))
    return loaded


def _names(tier: TierSource, cfg: TieredConfig, root: Path, loaded: LoadedMetadata | None,
           rep: DoctorReport) -> tuple[str, str] | None:
    """The cluster and broker whose files the broker reads: given, else broker.conf's, else the only ones the tier
    and the metadata name. None (with a finding or note) when they cannot be told or the tier is not there."""
    if not is_dir_no_follow(root):
        listed = _listed(loaded)
        if listed:
            rep.findings.append(Finding(
                "tiered-store-missing", ERROR, str(root), None,
                f"tieredStoreFilePath {root} is no directory but {META_REL} lists {listed} tiered segment(s); only "
                "a person can decide: mount or restore the tiered store",
                "creates every listed segment file empty when it loads the queues (PosixFileSegment): every tiered "
                "message is lost to readers", None))
        else:
            rep.notes.append(f"tieredStoreFilePath {root} does not exist yet: nothing is tiered")
        return None
    cluster, broker = tier.broker_names(cfg, loaded.metadata if loaded is not None else None)
    if broker is None:
        rep.findings.append(Finding(
            "tiered-not-checked", WARNING, str(root), None,
            f"cannot tell which broker's tiered files to check under {root / cluster_dir_name(cluster)}: give "
            "brokerName in broker.conf (-c)", "reads the files of its own brokerName", None))
        return None
    return cluster, broker


def _listed(loaded: LoadedMetadata | None) -> int:
    """Segment entries the metadata lists (every file type)."""
    if loaded is None or loaded.metadata is None:
        return 0
    return sum(len(v) for p in loaded.metadata.paths() for ft in (0, 1, 2)
               for v in [loaded.metadata.segment_entries(p, ft)])


def _no_broker_dir(root: Path, cluster: str, broker: str, loaded: LoadedMetadata | None, rep: DoctorReport) -> None:
    where = root / cluster_dir_name(cluster) / broker
    listed = _listed(loaded)
    if not listed:
        rep.notes.append(f"{where} does not exist yet: nothing of broker {broker!r} is tiered")
        return
    rep.findings.append(Finding(
        "tiered-store-missing", ERROR, str(where), None,
        f"{where} does not exist but {META_REL} lists {listed} tiered segment(s) of broker {broker!r}; only a person "
        "can decide: restore the broker's tiered files (or check tieredStoreFilePath, brokerClusterName and "
        "brokerName)", "creates every listed segment file empty when it loads the queues (PosixFileSegment): every "
        "tiered message of the broker is lost to readers", None))


def _rebuild_command(layout: StoreLayout, root: Path, cluster: str, broker: str, out: Path | None = None) -> str:
    return "rmqtool " + shlex.join(["tiered", "rebuild-metadata", "-T", str(root.absolute()), "--cluster-name",
                                    cluster, "--broker-name", broker, "-o",
                                    str((out or layout.tiered_metadata).absolute())])


def _metadata_lost(layout: StoreLayout, root: Path, cluster: str, broker: str, loaded: LoadedMetadata | None,
                   rep: DoctorReport) -> None:
    """No metadata the broker can load while the tier holds the broker's files."""
    main_there = os.path.lexists(layout.tiered_metadata)
    if loaded is None:
        problem = f"{META_REL} and its .bak are missing but the tier holds files of broker {broker!r}"
    else:
        problem = f"{META_REL} {loaded.main_problem} and its .bak cannot be loaded either"
    cmd = _rebuild_command(layout, root, cluster, broker)
    if main_there:   # rebuild-metadata writes only a file that does not exist
        aside = _rebuild_command(layout, root, cluster, broker, layout.tiered_metadata.with_name("rebuilt.json"))
        problem += (f"; only a person can decide: with the broker stopped run `{aside}` and put that file in place "
                    f"of {META_REL} (the damaged one kept elsewhere)")
    rep.findings.append(Finding(
        "tiered-metadata-lost", ERROR, META_REL, None, problem,
        "starts with empty tiered tables (DefaultMetadataStore ignores its failed load): it forgets every tiered "
        "segment, hands out topic ids from 0 again and dispatches new flat files over the old ones",
        None if main_there else cmd))


def _verify(layout: StoreLayout, root: Path, cluster: str, broker: str, cfg: TieredConfig,
            rep: DoctorReport) -> None:
    st = open_flat_store(root, layout.tiered_metadata, cluster, broker, cfg, layout.root)
    try:
        v = iv.verify_tier(st, None, layout.tiered_index_dir)
    finally:
        st.close()
    rebuild = (f"rebuild the metadata from the files with the broker stopped: "
               f"`{_rebuild_command(layout, root, cluster, broker, layout.tiered_metadata.with_name('rebuilt.json'))}`"
               f", then put that file in place of {META_REL}")
    for f in v.problems:
        if f.kind == fv.METADATA:
            continue   # said by _metadata, as the broker loads it
        step = STEPS.get(f.kind, _RESTORE)
        step = rebuild if step == _REBUILD else step
        rep.findings.append(replace(f, file=_tier_rel(f.file, layout, root),
                                    problem=f"{f.problem}; only a person can decide: {step}", fix=None))
    rep.findings += [replace(n, file=_tier_rel(n.file, layout, root)) for n in v.notes]


def _tier_rel(file: str, layout: StoreLayout, root: Path) -> str:
    """A finding's file as doctor shows files: relative to the store root, else the tier's path (absolute)."""
    p = Path(file)
    if p.is_absolute():
        try:
            return p.relative_to(layout.root).as_posix()
        except ValueError:
            return file
    return (root / p).as_posix()
