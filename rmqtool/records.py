"""The streamed message table of get and dump-commitlog, and the notes both print for a message.

Every record is formatted from its bytes and written as it is read (NDJSON, or a table with one row per line,
planned by rmqtool.tables), so memory does not grow with the number of messages and `| head` answers at once.
"""
from __future__ import annotations

from rmqtool import render

def table_columns() -> list:
    """The streamed table of get and dump-commitlog: one row per entry (a message, or damage met on the way)."""
    from rmqtool.tables import FIXED, NUM, Column

    return [Column("offset", "offset", NUM), Column("type", "type", FIXED), Column("size", "size", NUM, drop=2),
            Column("storeTime", "storeTime", FIXED, drop=4), Column("topic", "topic", FIXED, drop=3),
            Column("queueId", "queueId", NUM, drop=7), Column("queueOffset", "queueOffset", NUM, drop=6),
            Column("note", "msgId / note", FIXED), Column("keys", "keys", FIXED, drop=5)]


#: The widths a row is planned for (wider values push their row on): a Java long, a kind, a local ISO time with
#: milliseconds (engine.views.times.local_time), a topic, an int, a long, an offset message id (32 hex digits).
TABLE_HINTS = {"offset": 20, "type": 15, "size": 7, "storeTime": 23, "topic": 24, "queueId": 7, "queueOffset": 11,
               "note": 32}
MESSAGE = {"type": "MESSAGE"}


def open_table(json_out: bool):
    """(the LineWriter every line goes through, the RowStream of the table or None with --json)."""
    from rmqtool.tables import LineWriter, RowStream

    out = LineWriter()
    if json_out:
        return out, None
    table = RowStream(table_columns(), TABLE_HINTS, out)
    table.start()
    return out, table



def warn_problems(st) -> None:
    """A `warning:` line for each problem of the segment files read (kind and fields: SegmentProblem.warning)."""
    for p in st.problems:
        render.problem(p.warning())


def undecoded_notes(out, run) -> int:
    """Notes for the compressed bodies of a run that do not decode (after the lines written so far); how many."""
    from engine.commands.dump_commitlog import undecodable_note

    found = run.undecodable()
    if found:
        out.flush()
    for off, codec, why in found:
        render.note(undecodable_note(off, codec, why))
    return len(found)


