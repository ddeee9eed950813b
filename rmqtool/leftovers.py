"""The folders rmqtool left in a store (quarantine runs, index backups) as info and prune show them."""
from __future__ import annotations

from rmqtool import tables, times

LEFTOVER_COLUMNS = [
    tables.Column("name", "folder", tables.FIXED),
    tables.Column("age", "age", tables.FIXED),
    tables.Column("size", "on disk", tables.FIXED),
    tables.Column("what", "what", tables.TEXT, min_width=16),
]


def size_text(u: dict, short: bool = False) -> str:
    """Bytes on disk, and the apparent size beside them when it differs (unless short)."""
    from engine.fsutil import format_bytes

    if short or u["apparent"] == u["allocated"]:
        return format_bytes(u["allocated"])
    return f"{format_bytes(u['allocated'])} on disk ({format_bytes(u['apparent'])} apparent)"


def leftover_what(x: dict) -> str:
    if not x["recognised"]:
        return f"not rmqtool's: {x['notRecognisedBecause']}"
    m = x["manifest"]
    if x["kind"] == "quarantine":
        return (f"{m['tool'].replace('rmqtool ', '')} run, {'complete' if x['complete'] else 'NOT complete'}, "
                f"{m['entries']} entr"
                f"{'y' if m['entries'] == 1 else 'ies'}, {x['placeholderCount']} placeholder(s)")
    return f"index backup ({m.get('by') or 'rmqtool'})"


def leftover_table(xs: list[dict], title: str, why: bool = False) -> None:
    rows = [{"name": x["path"], "age": times.format_duration(None if x["ageSeconds"] is None else x["ageSeconds"] * 1000),
             "size": size_text(x["bytes"], short=True), "what": x["why"] if why else leftover_what(x)} for x in xs]
    tables.table(rows, LEFTOVER_COLUMNS, title=title, empty="(nothing to remove)")
