"""The static completions (completions/, written by scripts/regen.py) complete every command, the subcommands of
the groups (`rmqtool tiered q<Tab>`), every option and the values of options that take one of a few words.

bash is run for real with COMP_WORDS/COMP_CWORD set, for every command path; zsh and fish files are checked for
every command and value, and parsed by zsh -n / fish --no-execute (and asked with fish's `complete -C`) where
those shells are installed.
"""
from __future__ import annotations

from helpers import REPO
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from helpers import command_paths

ROOT = REPO
BASH = ROOT / "completions" / "rmqtool.bash"
ZSH = ROOT / "completions" / "_rmqtool"
FISH = ROOT / "completions" / "rmqtool.fish"


def bash_complete(line: str) -> list[str]:
    """What bash offers for `line` (the word being completed is the last one; a trailing space starts a new one)."""
    words = shlex.split(line) + ([""] if line.endswith(" ") else [])
    arr = " ".join(shlex.quote(w) for w in words)
    script = (f"source {shlex.quote(str(BASH))}; COMP_WORDS=({arr}); COMP_CWORD={len(words) - 1}; "
              "COMP_LINE=" + shlex.quote(line) + "; _rmqtool; printf '%s\\n' \"${COMPREPLY[@]}\"")
    p = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30, cwd="/")
    assert p.returncode == 0, p.stderr
    return [w for w in p.stdout.splitlines() if w]


def visible_options(cmd) -> set[str]:
    return {o for p in cmd.params if getattr(p, "param_type_name", "") == "option" and not getattr(p, "hidden", False)
            for o in p.opts} | {"--help"}


def offered_values(cmd, p) -> list[str]:
    if getattr(p, "param_type_name", "") != "option" or p.is_flag or getattr(p, "hidden", False):
        return []
    ctx = cmd.make_context(cmd.name, [], resilient_parsing=True)
    return [str(c.value) for c in p.shell_complete(ctx, "")]


PATHS = command_paths()


def test_the_group_subcommands_complete():
    assert bash_complete("rmqtool tiered q") == ["query-key", "queues"]
    assert bash_complete("rmqtool timer l") == ["list"]
    group = dict(PATHS)["tiered"]
    assert set(bash_complete("rmqtool tiered ")) == set(group.commands) | {"--help"}
    assert "--queue-offset" in bash_complete("rmqtool tiered get --q")
    assert "--raw" in bash_complete("rmqtool tiered get --r")


def test_choice_values_complete():
    assert bash_complete("rmqtool dump-commitlog --body ") == ["none", "utf8", "hex", "base64"]
    assert bash_complete("rmqtool dump-commitlog -s /tmp --body h") == ["hex"]
    assert bash_complete("rmqtool tiered reindex --master i") == ["inline"]
    assert bash_complete("rmqtool spark-reindex --master ") == ["local[*]", "inline"]
    assert bash_complete("rmqtool tiered offset-by-time --boundary u") == ["upper"]
    assert bash_complete("rmqtool tiered dispatch --master i") == ["inline"]


def test_a_top_level_command_is_not_a_subcommand_of_the_same_name():
    top, sub = set(bash_complete("rmqtool get --")), set(bash_complete("rmqtool tiered get --"))
    paths = dict(PATHS)
    assert top == {o for o in visible_options(paths["get"]) if o.startswith("--")}
    assert sub == {o for o in visible_options(paths["tiered get"]) if o.startswith("--")}
    assert "--msg-id" in top and "--msg-id" not in sub


def test_directories_and_files_complete_where_an_option_names_one(tmp_path):
    (tmp_path / "store-dir").mkdir()
    (tmp_path / "store-file").write_text("x")
    got = bash_complete(f"rmqtool info --store {tmp_path}/store-")
    assert got == [f"{tmp_path}/store-dir"]
    got = bash_complete(f"rmqtool info --broker-conf {tmp_path}/store-")
    assert set(got) == {f"{tmp_path}/store-dir", f"{tmp_path}/store-file"}


@pytest.mark.parametrize("path,cmd", PATHS, ids=[p for p, _ in PATHS])
def test_every_command_its_options_and_values_complete_in_bash(path, cmd):
    top = bash_complete("rmqtool ")
    assert path.split()[0] in top
    subs = set(getattr(cmd, "commands", None) or {})
    got = set(bash_complete(f"rmqtool {path} "))
    assert got == subs | visible_options(cmd), path
    for p in cmd.params:
        values = offered_values(cmd, p)
        if values:
            assert bash_complete(f"rmqtool {path} {p.opts[0]} ") == values, (path, p.opts[0])


@pytest.mark.parametrize("path,cmd", PATHS, ids=[p for p, _ in PATHS])
def test_zsh_and_fish_files_name_every_command_option_and_value(path, cmd):
    zsh, fish = ZSH.read_text(), FISH.read_text()
    *group, name = path.split()
    assert f"'{name}:" in zsh and f"-a {name} " in fish, path
    cond = f"'__rmqtool_at {path}'"
    for o in visible_options(cmd):
        assert f"'{o}[" in zsh, (path, o)
        flag = f"-l {o[2:]}" if o.startswith("--") else f"-s {o[1:]}"
        assert f"-n {cond} {flag}" in fish, (path, o)
    for p in cmd.params:
        values = offered_values(cmd, p)
        if values:
            assert "-a '" + " ".join(values) + "'" in fish, (path, p.opts[0])
            assert ":value:(" in zsh


def test_the_files_parse_in_their_shells():
    p = subprocess.run(["bash", "-n", str(BASH)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    zsh, fish = ZSH.read_text(), FISH.read_text()
    # what a parse would catch first, checked without the shells: balanced blocks
    assert zsh.count("case ") == zsh.count("esac") and zsh.count("(( CURRENT == 2 ))") >= 2
    assert fish.count("function ") == sum(1 for line in fish.splitlines() if line == "end")
    if shutil.which("zsh"):
        p = subprocess.run(["zsh", "-n", str(ZSH)], capture_output=True, text=True)
        assert p.returncode == 0, p.stderr
    if shutil.which("fish"):
        p = subprocess.run(["fish", "--no-execute", str(FISH)], capture_output=True, text=True)
        assert p.returncode == 0, p.stderr


def test_fish_offers_the_tiered_subcommands_and_values():
    fish = shutil.which("fish")
    if fish is None:  # the file's contents are checked above in any case; this asks fish itself where it is
        return
    def ask(line: str) -> list[str]:
        p = subprocess.run([fish, "--no-config", "-c", f"source {shlex.quote(str(FISH))}; complete -C {shlex.quote(line)}"],
                           capture_output=True, text=True, timeout=30)
        assert p.returncode == 0, p.stderr
        return [w.split("\t")[0] for w in p.stdout.splitlines()]
    assert ask("rmqtool tiered q") == ["query-key", "queues"]
    assert set(ask("rmqtool dump-commitlog --body ")) == {"none", "utf8", "hex", "base64"}
    assert "--msg-id" in ask("rmqtool get --m") and "--msg-id" not in ask("rmqtool tiered get --m")
