"""gpuemu failures export / import (issue 19): failures carried between daemons by file, for
air-gapped merges. Import keeps every record's id and bytes, is idempotent (a file imported twice,
or records that came from here, store nothing new), refuses a record that clashes with a stored one
and stores nothing of a file with a bad record."""

from __future__ import annotations

import json
import subprocess

import pytest

from daemon_harness import DAEMON, GPUEMU, Daemon, daemon  # noqa: F401  (the shared daemon fixture)


class Home(Daemon):
    def __init__(self, home):
        super().__init__(home)
        self.env["GPUEMU_DAEMON"] = DAEMON


@pytest.fixture()
def two(tmp_path):
    a, b = Home(tmp_path / "a"), Home(tmp_path / "b")
    yield a, b
    a.stop()
    b.stop()


def records(home):
    r = home.cli("failures", "export")
    assert r.returncode == 0, r.stderr
    return sorted(json.loads(r.stdout)["records"], key=lambda x: x["id"])


def test_failures_travel_by_file_byte_for_byte_and_import_is_idempotent(two, tmp_path):
    a, b = two
    r = a.cli("fuzz", "softmax", "--kernel", "tail_leak", "-n", "8", "--seed", "5", "--json")
    assert r.returncode == 1, r.stderr
    r = a.cli("fuzz", "matmul", "--kernel", "dropped_tail_k", "-n", "4", "--seed", "5", "--json")
    assert r.returncode == 1, r.stderr
    exported = records(a)
    assert len(exported) >= 4
    out = tmp_path / "f.json"
    assert a.cli("failures", "export", "-o", str(out)).returncode == 0
    lines = tmp_path / "f.jsonl"
    assert a.cli("failures", "export", "--jsonl", "-o", str(lines)).returncode == 0
    assert len(lines.read_text().splitlines()) == len(exported)
    got = b.cli_json("failures", "import", str(out))
    assert sorted(got["imported"]) == [x["id"] for x in exported] and got["present"] == []
    # the same ids, metadata and exact input bytes (the snapshot) as where they were found
    assert records(b) == exported
    # a stored failure replays where it was imported, from its snapshot
    rep = b.cli_json("repro", exported[0]["id"], expect_rc=None)
    assert rep["regenerated_identical"] is True and rep["still_fails"] is True, rep
    # again, as JSON Lines, and back into the home they came from: nothing new
    again = b.cli_json("failures", "import", str(lines))
    assert again["imported"] == [] and sorted(again["present"]) == [x["id"] for x in exported]
    home = a.cli_json("failures", "import", str(out))
    assert home["imported"] == [] and len(home["present"]) == len(exported)
    assert records(b) == exported and records(a) == exported


def test_a_bad_or_clashing_record_is_refused_and_nothing_of_its_file_is_stored(two, tmp_path):
    a, b = two
    assert a.cli("fuzz", "softmax", "--kernel", "tail_leak", "-n", "4", "--seed", "5", "--json").returncode == 1
    exported = records(a)
    b_before = len(records(b))

    def try_import(recs, home=b):
        f = tmp_path / "x.jsonl"
        f.write_text("".join(json.dumps(r) + "\n" for r in recs))
        return home.cli("failures", "import", str(f))

    # a record with other content under an id stored here: a conflict, nothing imported
    changed = dict(exported[0], max_error=1.0)
    r = try_import([exported[1], changed], home=a)
    assert r.returncode != 0 and "is stored here with other content" in r.stderr, r.stderr
    for bad, needle in [
        (dict(exported[0], snapshot="not base64!"), "'snapshot' is not base64"),
        (dict(exported[0], snapshot="QUJD"), "its snapshot is not a case"),
        (dict(exported[0], op="matmul"), "its snapshot is a case of softmax, the record says matmul"),
        ({k: v for k, v in exported[0].items() if k != "snapshot"}, "needs string 'id', 'op' and 'snapshot'"),
        (dict(exported[0], created_ms="yesterday"), "'created_ms' must be an integer"),
    ]:
        r = try_import([exported[1], bad])
        assert r.returncode != 0 and needle in r.stderr, (needle, r.stderr)
    r = try_import([exported[1], exported[1]])
    assert r.returncode != 0 and "appears twice" in r.stderr, r.stderr
    f = tmp_path / "garbage.jsonl"
    f.write_text(json.dumps(exported[0]) + "\n{not json\n")
    r = b.cli("failures", "import", str(f))
    assert r.returncode != 0 and "garbage.jsonl:2: not a JSON record" in r.stderr, r.stderr
    assert len(records(b)) == b_before  # nothing of any refused file was stored
    assert records(a) == exported       # and the clashing home kept what it had
