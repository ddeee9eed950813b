"""A CI-sized run of both reliability harnesses (the large runs are `bench/crash_loop.py --trials 200` and
`bench/corruption_matrix.py`)."""
from __future__ import annotations

from helpers import REPO
import re
import subprocess
import sys
from pathlib import Path

import pytest



def run_bench(script: str, *args: str, timeout: float = 600) -> tuple[str, str]:
    r = subprocess.run([sys.executable, str(REPO / "bench" / script), *args], capture_output=True, text=True,
                       timeout=timeout, cwd=REPO)
    last = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""
    assert r.returncode == 0, f"{script} exit {r.returncode}\n{r.stdout}\n{r.stderr}"
    return last, r.stderr


def figures(line: str) -> dict[str, int]:
    return {k.strip(): int(v) for k, v in re.findall(r"([a-z -]+): (\d+)", line)}


@pytest.mark.slow
def test_crash_loop_small(tmp_path):
    line, err = run_bench("crash_loop.py", "--trials", "3", "--messages", "400", "--cli-sample", "1",
                          "--seed", "11", "--workdir", str(tmp_path))
    f = figures(line)
    assert line.startswith("trials: 3,"), line
    assert f["trials"] == 3 and f["acknowledged messages"] > 0
    assert f["lost messages"] == 0 and f["verify failures"] == 0, err


@pytest.mark.slow
def test_corruption_matrix_small(tmp_path):
    line, err = run_bench("corruption_matrix.py", "--quick", "--timeout", "120", "--workdir", str(tmp_path))
    f = figures(line)
    assert line.startswith("cases tried: "), line
    assert f["cases tried"] >= 12
    for k in ("tracebacks", "hangs", "keys unfindable after recover", "read-only writes", "outside changes",
              "failures"):
        assert f[k] == 0, (k, err)
