"""The format documents in docs/ and the citations of them in the code.

The citation grammar is stated in docs/README.md: "format \u00a7N.M" (broker-store-format.md or
tiered-index-format.md), "flat-store \u00a7N" (tiered-flat-store.md), "timer \u00a7N" (timer-store-format.md),
"pitfall N" / "pitfalls N, M", and
"flat-store pitfall N". These tests check every .py file under engine/, rmqtool/, tests/, bench/ and scripts/
against the headings that exist, and that docs/architecture.md names every engine subpackage.
(This file spells the section sign as an escape so that it does not cite anything itself.)
"""
from __future__ import annotations

from helpers import REPO
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = REPO
DOCS = ROOT / "docs"
FORMAT_DOCS = ("broker-store-format.md", "tiered-index-format.md")
FLAT_DOC = "tiered-flat-store.md"
TIMER_DOC = "timer-store-format.md"
CODE_DIRS = ("engine", "rmqtool", "tests", "bench", "scripts")
S = "\u00a7"
# The checker's own test vectors are built from pieces, so that this file holds no citation of its own.
PF, SPEC = "pit" + "fall", "sp" + "ec"

# ---------------------------------------------------------------- what the documents define

# "## 5. X", "### 5.7 X", "### 0.1a X", "## Appendix A. X", "### A.1 X" (a lone capital only after "Appendix")
HEADING = re.compile(r"^#{2,6}\s+(?:Appendix\s+([A-Z])|(\d+(?:\.\d+[a-z]?)*|[A-Z](?:\.\d+[a-z]?)+))(?=[.\s])", re.M)
PITFALL_BOLD = re.compile(r"^\*\*Pitfall\s+(\d+[a-z]?)\.\*\*", re.M)
PITFALL_LIST = re.compile(r"^(\d+[a-z]?)\.\s", re.M)


def sections(text: str) -> list[str]:
    """Section numbers of the headings: '## 5. X' -> '5', '### 5.7 X' -> '5.7', '## Appendix A. X' -> 'A'."""
    return [a or b for a, b in HEADING.findall(text)]


def pitfalls(text: str) -> list[str]:
    """Pitfall numbers: '**Pitfall 7.**' paragraphs, or a numbered list under a 'Pitfalls' heading."""
    found = PITFALL_BOLD.findall(text)
    if found:
        return found
    m = re.search(r"^#{2,6}[^\n]*Pitfalls[^\n]*\n(.*?)(?=^#{2}\s|\Z)", text, re.M | re.S)
    return PITFALL_LIST.findall(m.group(1)) if m else []


@dataclass(frozen=True)
class Targets:
    format_sections: frozenset
    format_pitfalls: frozenset
    flat_sections: frozenset | None  # None: docs/tiered-flat-store.md does not exist (yet)
    flat_pitfalls: frozenset | None
    timer_sections: frozenset = frozenset()


def load_targets(docs: Path = DOCS) -> Targets:
    fs, fp = [], []
    for name in FORMAT_DOCS:
        text = (docs / name).read_text(encoding="utf-8")
        fs += sections(text)
        fp += pitfalls(text)
    timer = frozenset(sections((docs / TIMER_DOC).read_text(encoding="utf-8")))
    flat = docs / FLAT_DOC
    if flat.exists():
        text = flat.read_text(encoding="utf-8")
        return Targets(frozenset(fs), frozenset(fp), frozenset(sections(text)), frozenset(pitfalls(text)), timer)
    return Targets(frozenset(fs), frozenset(fp), None, None, timer)


# ---------------------------------------------------------------- the citation grammar

ID = r"(?:\d+|[A-Z])(?:\.\d+[a-z]?)*"
SEP = r"(?:\s*,\s*|\s*/\s*|\s+and\s+|\s+or\s+|-)"
CHAIN_START = re.compile(rf"\b(format|flat-store|timer)\s+{S}({ID})")
CHAIN_NEXT = re.compile(rf"{SEP}{S}({ID})")
HALF_WRITTEN = re.compile(rf"(?:-|\s*/\s*|\s*,\s*)\d+\.\d+(?![.\d])")  # "\u00a74.4-4.5", "\u00a70.2 / 0.3"
PITFALL_AFTER_FLAT = re.compile(r"(?:\s*,\s*|\s+and\s+|\s*/\s*)pitfalls?\b", re.I)
PITFALL_REF = re.compile(r"\b(flat-store\s+)?(pitfalls?)\s+(\d+[a-z]?)((?:(?:\s*,\s*|\s+and\s+|\s*/\s*)\d+[a-z]?\b)*)",
                         re.I)
BARE = re.compile(rf"{S}({ID})?(?:{SEP}{S}(?:{ID})?)*")
STRAY = re.compile(rf"\b(?:the\s+{SPEC}\b|{SPEC}'s\b|{SPEC}\s*{S}|{SPEC}\s*\(?\s*sections?\b|{SPEC}\s+\d)", re.I)


@dataclass(frozen=True)
class Problem:
    path: str
    line: int
    text: str
    why: str

    def key(self) -> tuple[str, str]:
        return (self.path, self.text)


def check_text(text: str, path: str, targets: Targets) -> list[Problem]:
    """Every citation problem in one file's text."""
    out: list[Problem] = []

    def line_of(pos: int) -> int:
        return text.count("\n", 0, pos) + 1

    def add(start: int, end: int, why: str) -> None:
        out.append(Problem(path, line_of(start), text[start:end], why))

    claimed: set[int] = set()
    for m in CHAIN_START.finditer(text):
        family, ids, end = m.group(1), [m.group(2)], m.end()
        claimed.add(m.start(2) - 1)
        while (n := CHAIN_NEXT.match(text, end)) is not None:
            ids.append(n.group(1))
            claimed.add(n.start(1) - 1)
            end = n.end()
        if HALF_WRITTEN.match(text, end):
            add(m.start(), HALF_WRITTEN.match(text, end).end(), f"every section in a list carries its own {S}")
        known = {"format": targets.format_sections, "timer": targets.timer_sections}.get(family,
                                                                                         targets.flat_sections)
        if family == "flat-store" and PITFALL_AFTER_FLAT.match(text, end):
            add(m.start(), PITFALL_AFTER_FLAT.match(text, end).end(),
                "a flat-store pitfall is cited as 'flat-store pitfall N'; a bare 'pitfall N' means the format docs")
        if known is None:
            add(m.start(), end, f"docs/{FLAT_DOC} does not exist")
            continue
        for i in ids:
            if i not in known:
                add(m.start(), end, f"{family} {S}{i} is not a section of the docs")
    for m in BARE.finditer(text):
        if m.start() not in claimed:
            add(m.start(), m.end(), f"a bare {S} reference: say which document ('format {S}N.M' or 'flat-store {S}N')")
    for m in PITFALL_REF.finditer(text):
        flat, word, first, rest = m.group(1), m.group(2), m.group(3), m.group(4)
        nums = [first] + re.findall(r"\d+[a-z]?", rest)
        if rest and word.lower() == "pitfall":
            add(m.start(), m.end(), "a list of pitfalls is written 'pitfalls N, M'")
        known = targets.flat_pitfalls if flat else targets.format_pitfalls
        if known is None:
            add(m.start(), m.end(), f"docs/{FLAT_DOC} does not exist")
            continue
        for n in nums:
            if n not in known:
                add(m.start(), m.end(), f"{'flat-store ' if flat else ''}pitfall {n} does not exist in the docs")
    for m in STRAY.finditer(text):
        add(m.start(), m.end(), "cites the old outside spec; cite the docs ('format " + S + "N.M')")
    return out


def code_files() -> list[Path]:
    return sorted(p for d in CODE_DIRS for p in (ROOT / d).rglob("*.py") if "__pycache__" not in p.parts)


def problems_in_code(targets: Targets) -> list[Problem]:
    out = []
    for p in code_files():
        out += check_text(p.read_text(encoding="utf-8"), str(p.relative_to(ROOT)), targets)
    return out


# Citations found in main in files other workstreams own (path, text as flagged). The docs workstream's report
# lists the change for each; once they are applied this list must be emptied: a stale entry fails the test, so it
# cannot be forgotten.
KNOWN_EXCEPTIONS: list[tuple[str, str]] = []

# ---------------------------------------------------------------- tests

TARGETS = load_targets()


def test_every_citation_in_the_code_points_at_an_existing_section():
    found = problems_in_code(TARGETS)
    allowance = Counter(KNOWN_EXCEPTIONS)
    unexpected = []
    for p in found:
        if allowance[p.key()] > 0:
            allowance[p.key()] -= 1
        else:
            unexpected.append(p)
    assert not unexpected, "\n".join(f"{p.path}:{p.line}: {p.text!r}: {p.why}" for p in unexpected)
    stale = Counter(KNOWN_EXCEPTIONS) - Counter(p.key() for p in found)
    assert not stale, f"fixed, remove from KNOWN_EXCEPTIONS: {sorted(stale)}"


def test_the_checker_catches_bad_citations():
    t = Targets(frozenset({"2", "2.7", "4.4", "4.5", "9.2", "9.7", "A.1"}), frozenset({"3", "23", "24"}),
                None, None)

    def whys(text: str) -> list[str]:
        return [p.why for p in check_text(text, "x.py", t)]

    good = (f"(format {S}2.7 step 7) format {S}4.4, {S}4.5 format {S}9.2-{S}9.7 format {S}A.1 "
            f"(format {S}2.7 / {PF} 3) {PF}s 23, 24 {PF.title()} 23: {PF}s 3 and 24")
    assert whys(good) == []
    assert any("bare" in w for w in whys(f"checked ({S}2.7)"))
    assert any("bare" in w for w in whys(f"(format {S}2.7, see {S}4.4)"))
    assert any("not a section" in w for w in whys(f"format {S}5.9"))
    assert any("not a section" in w for w in whys(f"format {S}4.4, {S}4.6"))
    assert any("own " + S in w for w in whys(f"format {S}4.4-4.5"))
    assert any("own " + S in w for w in whys(f"format {S}2.7 / 4.4"))
    assert any("does not exist" in w for w in whys(f"{PF} 41"))
    assert any("'pitfalls N, M'" in w for w in whys(f"{PF} 23, 24"))
    assert any("tiered-flat-store.md" in w for w in whys(f"flat-store {S}3"))
    assert any("tiered-flat-store.md" in w for w in whys(f"flat-store {PF} 3"))
    for stray in (f"{SPEC} {S}5.7", f"{SPEC.title()} 9.5 says", f"{SPEC} section 9", f"the {SPEC} (section 9)",
                  f"the {SPEC}'s example"):
        assert any("outside spec" in w for w in whys(stray)), stray
    flat = Targets(t.format_sections, t.format_pitfalls, frozenset({"3", "6"}), frozenset({"9"}))
    assert [p.why for p in check_text(f"flat-store {S}6 flat-store {PF} 9 flat-store {S}3", "x.py", flat)] == []
    assert any("flat-store pitfall N" in p.why for p in check_text(f"(flat-store {S}6, {PF} 9)", "x.py", flat))
    assert any("not a section" in p.why for p in check_text(f"flat-store {S}11", "x.py", flat))
    timer = Targets(t.format_sections, t.format_pitfalls, None, None, frozenset({"2", "7"}))
    assert [p.why for p in check_text(f"(timer {S}2, {S}7) timer {S}7", "x.py", timer)] == []
    assert any("not a section" in p.why for p in check_text(f"timer {S}12", "x.py", timer))
    assert any("bare" in p.why for p in check_text(f"(timer {S}2, see {S}7)", "x.py", timer))


# Section numbers the code has cited since the format spec was written; the docs keep every one of them.
SPEC_SECTIONS = (
    "0 0.1 0.1a 0.2 0.3 1 1.2 2 2.1 2.2 2.3 2.4 2.5 2.6 2.7 2.8 2.9 2.10 2.11 3 3.1 3.2 3.3 4 4.1 4.2 4.3 4.4 4.5 "
    "4.6 5 5.1 5.2 5.3 5.4 5.5 5.6 5.7 5.8 6 7 7.1 7.2 7.3 7.4 7.5 7.6 7.7 7.8 8 8.1 8.2 8.3 8.4 9 9.1 9.2 9.3 9.4 "
    "9.5 9.6 9.7 9.8 9.9 10 A A.1 A.2 A.3 A.4"
).split()


def test_format_docs_keep_every_section_and_pitfall_number_once():
    found = []
    for name in FORMAT_DOCS:
        found += sections((DOCS / name).read_text(encoding="utf-8"))
    assert len(found) == len(set(found)), sorted(k for k, v in Counter(found).items() if v > 1)
    assert set(SPEC_SECTIONS) <= set(found), sorted(set(SPEC_SECTIONS) - set(found))
    tiered = sections((DOCS / "tiered-index-format.md").read_text(encoding="utf-8"))
    assert all(s.split(".")[0] == "9" for s in tiered)
    pits = [pitfalls((DOCS / name).read_text(encoding="utf-8")) for name in FORMAT_DOCS]
    assert pits[0] == [str(n) for n in range(1, 7)] + ["6a"] + [str(n) for n in range(7, 33)]
    assert pits[1] == [str(n) for n in range(33, 41)]


@pytest.mark.parametrize("name", FORMAT_DOCS + ("architecture.md",))
def test_cross_references_inside_the_docs_exist(name):
    text = (DOCS / name).read_text(encoding="utf-8")
    bad = []
    for m in re.finditer(rf"(flat-store\s+)?{S}({ID})", text):
        if not m.group(1) and m.group(2) not in TARGETS.format_sections:
            bad.append(f"{name}:{text.count(chr(10), 0, m.start()) + 1}: {S}{m.group(2)}")
    for m in re.finditer(r"\bpitfalls?\s+(\d+[a-z]?)((?:(?:\s*,\s*|\s+and\s+|\s+to\s+)\d+[a-z]?\b)*)", text, re.I):
        for n in [m.group(1)] + re.findall(r"\d+[a-z]?", m.group(2)):
            if n not in TARGETS.format_pitfalls:
                bad.append(f"{name}: pitfall {n}")
    assert not bad, bad


def test_architecture_names_every_engine_subpackage():
    text = (DOCS / "architecture.md").read_text(encoding="utf-8")
    packages = sorted(str(p.parent.relative_to(ROOT)) for p in (ROOT / "engine").rglob("__init__.py")
                      if p.parent != ROOT / "engine")
    assert "engine/java" in packages and "engine/broker" in packages  # the walk found the real tree
    missing = [p for p in packages if p not in text and p.replace("/", ".") not in text]
    assert not missing, f"docs/architecture.md does not mention {missing}"


def test_docs_readme_lists_every_document():
    text = (DOCS / "README.md").read_text(encoding="utf-8")
    for p in sorted(DOCS.glob("*.md")):
        if p.name != "README.md":
            assert f"({p.name})" in text, p.name
    for name in FORMAT_DOCS + (FLAT_DOC, TIMER_DOC, "architecture.md"):
        assert f"({name})" in text, name


def test_timer_doc_has_the_sections_the_code_cites():
    found = sections((DOCS / TIMER_DOC).read_text(encoding="utf-8"))
    assert found == [str(n) for n in range(1, 12)], found
    cited = set()
    for p in code_files():
        cited |= set(re.findall(rf"\btimer {S}(\d+)", p.read_text(encoding="utf-8")))
    assert cited and cited <= set(found), cited - set(found)


def test_performance_page_states_every_memory_constant_as_the_code_has_it():
    """docs/performance.md lists the constants that bound the long-running commands' memory: each must exist
    with the value the page gives, and each name the page's first table cites must be one of them."""
    import importlib

    text = (DOCS / "performance.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `((?:engine|rmqtool)\.[\w.]+)\.([A-Z_]+)` \| ([^|]+) \|$", text, re.M)
    assert len(rows) >= 15, rows
    units = {"MiB": 1 << 20, "KiB": 1 << 10}
    for module, name, value in rows:
        number, _, unit = value.strip().partition(" ")
        want = int(number) * units.get(unit, 1)
        assert unit in ("", *units), (name, value)
        got = getattr(importlib.import_module(module), name)
        assert got == want, f"docs/performance.md gives {module}.{name} = {value.strip()}, the code {got}"
    listed = {name for _, name, _ in rows} | {f"{m.rsplit('.', 1)[-1]}.{n}" for m, n, _ in rows}
    cited = set()
    for line in text.split("The constants, where")[0].splitlines():
        if line.startswith("| `") and line.count("|") == 4:
            cited |= set(re.findall(r"`([\w.]+)`", line.rsplit("|", 2)[1]))
    assert cited and cited <= listed, cited - listed
