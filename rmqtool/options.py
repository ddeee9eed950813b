"""Option definitions shared by every command (defined once, as sqlite-utils and pip-tools do), and the store option
group (GROUP, StoreOptions) every command takes whole through @store_options."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Optional

import typer

from engine.broker.config.brokerconf import BrokerConfig, load_config

STORE_PANEL = "Store"
OUTPUT_PANEL = "Output"
GEOMETRY_PANEL = "Geometry (default: broker.conf, else read from the files, else RocketMQ's defaults)"

StoreOpt = Annotated[Optional[Path], typer.Option(
    "--store", "-s", help="Store root directory (storePathRootDir).", rich_help_panel=STORE_PANEL,
    file_okay=False, dir_okay=True)]
BrokerConfOpt = Annotated[Optional[Path], typer.Option(
    "--broker-conf", "-c", help="broker.conf to read store paths and geometry from.", rich_help_panel=STORE_PANEL,
    exists=False)]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output: camelCase names, one JSON document "
                                       "per answer, NDJSON (one object per line) for streams of records.",
                                       rich_help_panel=OUTPUT_PANEL)]
QuietOpt = Annotated[bool, typer.Option(
    "--quiet", "-Q", help="No notes on stderr (empty answers, cuts, columns left out, summaries, progress); data, "
    "warnings and errors still print.", rich_help_panel=OUTPUT_PANEL)]
HashSlotsOpt = Annotated[Optional[int], typer.Option(
    "--hash-slots", help="Index hash slots per file (maxHashSlotNum; default: from the store's index files, else "
    "5000000; writers never write another geometry beside the files').",
    rich_help_panel=GEOMETRY_PANEL)]
MaxIndexOpt = Annotated[Optional[int], typer.Option(
    "--max-index", help="Index items per file (maxIndexNum; default: from the store's index files, else "
    "20000000).",
    rich_help_panel=GEOMETRY_PANEL)]
CommitLogSizeOpt = Annotated[Optional[int], typer.Option(
    "--commitlog-file-size", help="Commit-log segment size (mappedFileSizeCommitLog; default: from the files, "
    "else 1 GiB).", rich_help_panel=GEOMETRY_PANEL)]
CqSizeOpt = Annotated[Optional[int], typer.Option(
    "--cq-file-size", help="Consume-queue file size (mappedFileSizeConsumeQueue, default 6000000).",
    rich_help_panel=GEOMETRY_PANEL)]
BeginOpt = Annotated[Optional[str], typer.Option(
    "--begin", "-b", help="Start of the time range: epoch milliseconds or ISO-8601 (default: 0).")]
EndOpt = Annotated[Optional[str], typer.Option(
    "--end", "-e", help="End of the time range, inclusive: epoch milliseconds or ISO-8601 (default: no limit).")]


def values(*choices: str):
    """The values an option's completion offers (scripts/regen.py writes them into completions/): for options
    that take one of a few words, or any Spark master URL beside the usual ones."""
    def complete() -> list[str]:
        return list(choices)
    complete.choices = choices
    return complete


MASTER_VALUES = values("local[*]", "inline")


# The tier and its broker, shared by every `rmqtool tiered` command (defined once; engine.tiered.flat.store.TierSource
# fills what is not given from broker.conf).
TIER_PANEL = "Tiered store"
TieredPathOpt = Annotated[Optional[Path], typer.Option(
    "--tiered-store-path", "-T", help="Root of the flat files (tieredStoreFilePath; default: broker.conf).",
    rich_help_panel=TIER_PANEL, file_okay=False)]
MetadataOpt = Annotated[Optional[Path], typer.Option(
    "--metadata", help="tieredStoreMetadata.json (default: <store>/config/tieredStoreMetadata.json with --store).",
    rich_help_panel=TIER_PANEL, dir_okay=False)]
ClusterOpt = Annotated[Optional[str], typer.Option(
    "--cluster-name", help="brokerClusterName (default: broker.conf, else the only cluster under the root).",
    rich_help_panel=TIER_PANEL)]
BrokerOpt = Annotated[Optional[str], typer.Option(
    "--broker-name", help="brokerName (default: broker.conf, else the only broker of the cluster).",
    rich_help_panel=TIER_PANEL)]
TieredDirOpt = Annotated[Optional[Path], typer.Option(
    "--tiered-dir", help="The broker's local tiered index files (default: <store>/tiered_index_file); also a "
    "directory `tiered reindex --out` wrote (compacted files, read as uploaded ones).",
    rich_help_panel=TIER_PANEL, file_okay=False)]
TieredSlotsOpt = Annotated[Optional[int], typer.Option(
    "--hash-slots", help="tieredStoreIndexFileMaxHashSlotNum (default: broker.conf's, 5000000 when it leaves it out; "
    "without broker.conf, read from the files).", rich_help_panel=GEOMETRY_PANEL)]
TieredItemsOpt = Annotated[Optional[int], typer.Option(
    "--max-index", help="tieredStoreIndexFileMaxIndexNum (default: broker.conf's, 20000000 when it leaves it out; "
    "without broker.conf, read from the files).", rich_help_panel=GEOMETRY_PANEL)]


def expand_path(p):
    """`~` and `~user` expanded in a path option (the shell does not expand them after `--opt=` or in quotes)."""
    if p is None:
        return None
    if isinstance(p, Path):
        return Path(os.path.expanduser(p))
    if isinstance(p, str):
        return p if p == "-" else os.path.expanduser(p)
    return p


@dataclass(frozen=True)
class StoreOptions:
    """The store option group every command shares, as given (None: not given or not taken): the store and
    broker.conf, the broker's index and file geometry, the tier and its broker, the tiered index geometry. Settled
    once into the store's configuration (settle), into the tier's location (tier), repeated by the fixes doctor
    prints (args). A command takes it whole through @store_options, which declares its options (GROUP)."""

    store: Optional[Path] = None
    broker_conf: Optional[Path] = None
    hash_slots: Optional[int] = None
    max_index: Optional[int] = None
    commitlog_file_size: Optional[int] = None
    cq_file_size: Optional[int] = None
    tiered_store_path: Optional[Path] = None
    metadata: Optional[Path] = None
    cluster_name: Optional[str] = None
    broker_name: Optional[str] = None
    tiered_hash_slots: Optional[int] = None
    tiered_max_index: Optional[int] = None

    #: Each geometry option's flag and the broker.conf key it sets.
    GEOMETRY = (("hash_slots", "--hash-slots", "maxHashSlotNum"), ("max_index", "--max-index", "maxIndexNum"),
                ("commitlog_file_size", "--commitlog-file-size", "mappedFileSizeCommitLog"),
                ("cq_file_size", "--cq-file-size", "mappedFileSizeConsumeQueue"))

    def settle(self) -> BrokerConfig:
        """The settled, frozen configuration: defaults < broker.conf < options
        (engine.broker.config.brokerconf.load_config, which records where each geometry value came from). The
        paths arrive expanded (`~`: rmqtool.cli.handles_errors expands every path option once) and stay Paths."""
        from engine.errors import InvalidArgumentError

        if self.store is None and self.broker_conf is None:
            raise InvalidArgumentError("no store given: pass --store DIR or --broker-conf FILE")
        return load_config(self.broker_conf, storePathRootDir=self.store,
                           **{key: getattr(self, name) for name, _flag, key in self.GEOMETRY})

    def tier(self):
        """Where the tier and its broker's files are (engine.tiered.flat.store.TierSource fills what is not given
        from broker.conf)."""
        from engine.tiered.flat.store import TierSource

        return TierSource(self.tiered_store_path, self.metadata, self.store, self.broker_conf, self.cluster_name,
                          self.broker_name)

    def args(self) -> list[str]:
        """The store and broker geometry options as a command line repeats them (absolute paths: runnable
        anywhere)."""
        out: list[str] = []
        if self.broker_conf is not None:
            out += ["-c", str(Path(expand_path(self.broker_conf)).absolute())]
        if self.store is not None:
            out += ["-s", str(Path(expand_path(self.store)).absolute())]
        for name, flag, _key in self.GEOMETRY:
            if getattr(self, name) is not None:
                out += [flag, str(getattr(self, name))]
        return out


#: Every option of the group, declared once, by the StoreOptions field (and command parameter) it fills.
GROUP = {"store": StoreOpt, "broker_conf": BrokerConfOpt, "hash_slots": HashSlotsOpt, "max_index": MaxIndexOpt,
         "commitlog_file_size": CommitLogSizeOpt, "cq_file_size": CqSizeOpt, "tiered_store_path": TieredPathOpt,
         "metadata": MetadataOpt, "cluster_name": ClusterOpt, "broker_name": BrokerOpt,
         "tiered_hash_slots": TieredSlotsOpt, "tiered_max_index": TieredItemsOpt}

# The parts of the group commands take, each in the order the help lists it.
STORE = ("store", "broker_conf")
GEOMETRY = ("hash_slots", "max_index", "commitlog_file_size", "cq_file_size")
INDEX_GEOMETRY = GEOMETRY[:3]  # what reading the index takes: its geometry and the commit log's segment size
TIER = ("tiered_store_path", "metadata", "store", "broker_conf", "cluster_name", "broker_name")
TIERED_GEOMETRY = ("tiered_hash_slots", "tiered_max_index")


def option_flags(option) -> list[str]:
    """An Annotated typer option's flags (typer takes the first one as the OptionInfo's default)."""
    info = option.__metadata__[0]
    return [d for d in (info.default, *info.param_decls) if isinstance(d, str) and d.startswith("-")]


def store_options(at: tuple[str, ...] = STORE, then: tuple[str, ...] = (), after: Optional[str] = "quiet"):
    """A command takes the store option group: the options named in `at` (GROUP's names) stand where its one
    parameter annotated StoreOptions stands, those in `then` follow its parameter `after` (None: right after
    `at`'s), and it is called with one StoreOptions of their values in that parameter (None: an option it does not
    take). Goes below @handles_errors, which expands `~` in the group's paths as in every path option.

    typer builds a command from its signature and type hints: the wrapper's __signature__ and __annotations__
    list the group's options in the placeholder's stead."""
    import functools
    import inspect
    import typing

    names = (*at, *then)
    unknown = [n for n in names if n not in GROUP]
    if unknown or len(set(names)) != len(names):
        raise TypeError(f"store_options: unknown or repeated option(s) {unknown or names}")
    flags = [f for n in names for f in option_flags(GROUP[n])]
    if len(set(flags)) != len(flags):
        raise TypeError(f"store_options: two options of {names} share a flag")

    def option(name: str) -> inspect.Parameter:
        return inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None,
                                 annotation=GROUP[name])

    def decorate(fn):
        hints = typing.get_type_hints(fn, include_extras=True)
        own = inspect.signature(fn).parameters
        holders = [n for n in own if hints.get(n) is StoreOptions]
        if len(holders) != 1 or (then and after is not None and after not in own) or set(names) & set(own):
            raise TypeError(f"{fn.__name__}: @store_options needs one StoreOptions parameter, `after` among the "
                            "parameters, and none of the group's names")
        holder = holders[0]
        params = []
        for p in own.values():
            if p.name == holder:
                params += [option(n) for n in at] + ([option(n) for n in then] if after is None else [])
            else:
                params.append(p.replace(annotation=hints.get(p.name, p.annotation)))
            if p.name == after:
                params += [option(n) for n in then]

        @functools.wraps(fn)
        def command(*args, **kwargs):
            given = {n: kwargs.pop(n) for n in names if n in kwargs}
            return fn(*args, **{holder: StoreOptions(**given)}, **kwargs)

        returns = hints.get("return", inspect.Signature.empty)
        command.__signature__ = inspect.Signature(params, return_annotation=returns)
        command.__annotations__ = {p.name: p.annotation for p in params if p.annotation is not p.empty}
        if returns is not inspect.Signature.empty:
            command.__annotations__["return"] = returns
        return command

    return decorate


def _use_workers(n: Optional[int]) -> Optional[int]:
    """--workers' callback: the engine's worker count for this command (engine.workers.use), set once before
    any work; a bad value is a one-line error, exit 2."""
    from engine import workers

    why = workers.problem(n)
    if why is not None:
        raise typer.BadParameter(why.split(" is ", 1)[1] if " is " in why else why)
    workers.use(n)
    return n


WORKERS_PANEL = "Performance"
#: Per-segment work on N worker processes (issue 32), defined once for every bulk command.
WorkersOpt = Annotated[Optional[int], typer.Option(
    "--workers", help="Worker processes for the per-segment work (default: the CPUs this process may use; "
    "1: none, all in this process). The answer is the same whatever N.", callback=_use_workers,
    rich_help_panel=WORKERS_PANEL, show_default=False)]
