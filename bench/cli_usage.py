#!/usr/bin/env python3
"""One rmqtool command run in this process, with what it cost: wall seconds (the command alone, not the
interpreter's start), CPU seconds of this process and of its workers (getrusage: self and children), and minor
page faults. For comparing two versions of the code side by side (PYTHONPATH names the tree to run):

    PYTHONPATH=/path/to/tree python3 bench/cli_usage.py inspect-index -s STORE --verify --json --workers 2 >/dev/null

The figures go to stderr, one line; the command's output goes where it always goes.
"""
from __future__ import annotations

import resource
import sys
import time


def main() -> None:
    t0 = time.perf_counter()
    from rmqtool.app import main as rmqtool

    sys.argv = ["rmqtool", *sys.argv[1:]]
    code = 0
    try:
        rmqtool()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 0
    finally:
        me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        print(f"wall {time.perf_counter() - t0:.2f} s  cpu {me.ru_utime + me.ru_stime:.2f} s here + "
              f"{kids.ru_utime + kids.ru_stime:.2f} s workers  minflt {me.ru_minflt} + {kids.ru_minflt}  exit {code}",
              file=sys.stderr)
    sys.exit(code)


if __name__ == "__main__":
    main()
