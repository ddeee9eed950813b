"""One located-problem type (engine.findings.Finding) for every verification: inspect-index --verify, verify-cq and
doctor print their problems in the same shape under "findings" on one damaged store, with the exit codes kept."""
from __future__ import annotations

import json

from engine.broker.layout import list_index_files
from engine.findings import ERROR, INFO, WARNING, Finding
from helpers import SEG_GEOM, cli, put, sample_messages

KEYS = {"kind", "severity", "file", "offset", "problem", "brokerWill"}


def _damaged(tmp_path):
    """A store with an index file zero-filled and the size of one consume-queue unit changed."""
    store = tmp_path / "s"
    put(store, sample_messages(90), tmp_path)
    index = list_index_files(store / "index")[1]
    index.write_bytes(bytes(index.stat().st_size))
    topic = sorted(p.name for p in (store / "consumequeue").iterdir())[0]
    cq = store / "consumequeue" / topic / "0" / "00000000000000000000"
    data = bytearray(cq.read_bytes())
    data[8:12] = (int.from_bytes(data[8:12], "big") + 1).to_bytes(4, "big")   # unit 0's size
    cq.write_bytes(bytes(data))
    return store, index, topic


def _shape(findings: list[dict], extra: set = frozenset()) -> None:
    assert findings
    for f in findings:
        assert set(f) == KEYS | extra
        assert f["severity"] in (ERROR, WARNING, INFO) and f["kind"] and f["problem"] and f["brokerWill"]
        assert f["offset"] is None or f["offset"] >= 0


def test_every_verify_prints_one_shape(tmp_path):
    store, index, topic = _damaged(tmp_path)
    r = cli("inspect-index", "--store", str(store), "--verify", "--json", *SEG_GEOM, code=3)
    bad = [json.loads(line)["verify"] for line in r.stdout.splitlines() if not json.loads(line)["verify"]["ok"]]
    assert [v["file"] for v in bad] == [index.name]
    _shape(bad[0]["findings"])
    assert {(f["kind"], f["file"]) for f in bad[0]["findings"]} == {("index-structure", f"index/{index.name}")}

    r = cli("verify-cq", "--store", str(store), "--json", code=3)
    rep = json.loads(r.stdout)
    _shape(rep["findings"])
    assert rep["problemCount"] == len(rep["findings"]) == 1
    assert (rep["findings"][0]["kind"], rep["findings"][0]["file"], rep["findings"][0]["offset"]) == (
        "cq-unit", f"consumequeue/{topic}/0", 0)

    r = cli("doctor", "--store", str(store), "--json", *SEG_GEOM, code=None)
    assert r.exit_code in (0, 3)
    doc = json.loads(r.stdout)
    _shape(doc["findings"], {"fix"})
    assert (r.exit_code == 3) == any(f["severity"] == ERROR for f in doc["findings"])


def test_a_finding_is_one_type():
    f = Finding("cq-unit", ERROR, "consumequeue/T/0", 40, "a problem", "what the broker does")
    assert set(f.as_dict()) == KEYS and f.fix is None
    assert f.line() == "consumequeue/T/0: offset 40: a problem"
    assert Finding("k", INFO, "index", None, "p", "w").line() == "index: p"


def test_index_findings_name_the_bytes(tmp_path):
    """An item's problem is located at the item (header + 4 x slots + 20 x its number, as the broker puts it), a
    header field's at the field."""
    store = tmp_path / "s"
    put(store, sample_messages(90), tmp_path)
    index = list_index_files(store / "index")[0]
    data = bytearray(index.read_bytes())
    item1 = 40 + 4 * 16 + 20                      # SEG_GEOM: 16 hash slots
    phy = int.from_bytes(data[item1 + 4:item1 + 12], "big")
    data[item1 + 4:item1 + 12] = (phy + 1).to_bytes(8, "big")
    index.write_bytes(bytes(data))
    r = cli("inspect-index", "--store", str(store), "--verify", "--json", *SEG_GEOM, code=3)
    bad = [json.loads(line)["verify"] for line in r.stdout.splitlines() if not json.loads(line)["verify"]["ok"]]
    assert [v["file"] for v in bad] == [index.name]
    got = {(f["kind"], f["offset"]) for f in bad[0]["findings"]}
    assert ("index-item", item1) in got and ("index-structure", 16) in got   # item 1, header beginPhyOffset
    assert all(f["file"] == f"index/{index.name}" for f in bad[0]["findings"])
