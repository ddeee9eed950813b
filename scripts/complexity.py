#!/usr/bin/env python3
"""Size and complexity figures of the code (for the architecture issue's before/after note).

    python3 scripts/complexity.py [ROOT]

Prints: modules over 600 lines, functions over 60 lines or 10 parameters (with a reason written beside
them or not), and totals, for engine/ and rmqtool/.
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path


def main() -> int:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent)
    files = sorted(p for d in ("engine", "rmqtool") for p in (root / d).rglob("*.py"))
    total_lines = 0
    big_modules, long_funcs, wide_funcs = [], [], []
    n_funcs = 0
    for p in files:
        text = p.read_text()
        lines = text.count("\n")
        total_lines += lines
        rel = p.relative_to(root)
        if lines > 600:
            big_modules.append((lines, str(rel)))
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n_funcs += 1
                length = node.end_lineno - node.lineno + 1
                a = node.args
                params = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs) + bool(a.vararg) + bool(a.kwarg)
                if a.args and a.args[0].arg in ("self", "cls"):
                    params -= 1
                if length > 60:
                    long_funcs.append((length, f"{rel}:{node.lineno} {node.name}"))
                if params > 10:
                    wide_funcs.append((params, f"{rel}:{node.lineno} {node.name}"))
    print(f"modules: {len(files)}, lines: {total_lines}, functions: {n_funcs}")
    print(f"modules over 600 lines: {len(big_modules)}")
    for n, name in sorted(big_modules, reverse=True):
        print(f"  {n:5d}  {name}")
    print(f"functions over 60 lines: {len(long_funcs)}")
    for n, name in sorted(long_funcs, reverse=True):
        print(f"  {n:5d}  {name}")
    print(f"functions over 10 parameters: {len(wide_funcs)}")
    for n, name in sorted(wide_funcs, reverse=True):
        print(f"  {n:5d}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
