"""gpuemu ci --shard I/N and gpuemu report merge (issue 19, docs/ci.md "Sharding"), through the real
binaries: each shard runs against a daemon home of its own, as separate CI machines would, and the
union of what the shards judged and stored must be exactly the unsharded run."""

from __future__ import annotations

import json
import subprocess
import textwrap

import pytest

from daemon_harness import DAEMON, GPUEMU, Daemon, daemon  # noqa: F401  (the shared daemon fixture)

CONFIG = textwrap.dedent('''
    [project]
    name = "shards"

    [defaults]
    iterations = 48
    seed = 11

    [[op]]
    name = "softmax"
    kernel = "tail_leak"
    dtypes = ["float32", "float16"]

    [[op]]
    name = "matmul"
    kernel = "fp32_tiled_k32"
    dtypes = ["float32"]

    [[op]]
    name = "matmul"
    kernel = "dropped_tail_k"
    dtypes = ["float32"]
''')


class Home(Daemon):
    def __init__(self, home, **env):
        super().__init__(home)
        self.env["GPUEMU_DAEMON"] = DAEMON
        self.env.update(env)


def stored(home: Home):
    """Every failure the home's daemon stored: (op, kernel, dtype, master seed, case index, max error)."""
    rows = home.cli_json("failures", "list", "--limit", "100000")
    return sorted((r["op"], r["kernel"]["name"], r["dtype"], r["master_seed"], r["index"], r["max_error"]) for r in rows)


@pytest.fixture()
def homes(tmp_path):
    made = []

    def make(name, **env):
        h = Home(tmp_path / name, **env)
        made.append(h)
        return h

    yield make
    for h in made:
        h.stop()


def test_the_union_of_the_shards_is_the_unsharded_run(homes, tmp_path):
    cfg = tmp_path / "gpuemu.toml"
    cfg.write_text(CONFIG)
    whole = homes("whole")
    r = whole.cli("ci", "--config", str(cfg), "--json")
    assert r.returncode == 1, r.stderr
    full = json.loads(r.stdout)
    assert "shard" not in full and [x["cases"] for x in full["results"]] == [48, 48, 48, 48]
    docs, found = [], []
    for i in range(3):
        h = homes(f"shard{i}")
        r = h.cli("ci", "--config", str(cfg), "--json", "--shard", f"{i}/3")
        doc = json.loads(r.stdout)
        assert r.returncode == (1 if doc["summary"]["failed"] else 0), r.stderr
        assert doc["shard"]["index"] == i and doc["shard"]["count"] == 3
        docs.append(doc)
        found += stored(h)
        (tmp_path / f"s{i}.json").write_text(r.stdout)
    # every shard computed the same plan, and each holds some of the 12 pieces (3 per unit: 48
    # cases, pieces of at least 16)
    assert len({d["shard"]["plan"] for d in docs}) == 1
    assert sum(d["shard"]["pieces"] for d in docs) == 12 and min(d["shard"]["pieces"] for d in docs) >= 1
    # the pieces of each [[op]] x dtype tile its 48 cases exactly once
    by_unit = {}
    for d in docs:
        for x in d["results"]:
            by_unit.setdefault((x["kernel"], x["dtype"]), []).append(tuple(x["cases_range"]))
            assert x["cases"] == x["cases_range"][1] - x["cases_range"][0]
    assert len(by_unit) == 4
    for ranges in by_unit.values():
        covered = sorted(c for a, b in ranges for c in range(a, b))
        assert covered == list(range(48)) and len(ranges) == 3, ranges
    # the same cases, the same verdicts: every failing case the unsharded run stored, and no other
    assert sorted(found) == stored(whole) and len(found) > 20
    for unit in ("builtin:tail_leak", "builtin:fp32_tiled_k32", "builtin:dropped_tail_k"):
        assert sum(x["failed_cases"] for d in docs for x in d["results"] if x["kernel"] == unit) == \
            sum(x["failed_cases"] for x in full["results"] if x["kernel"] == unit)
    # merged: one report of the whole run, in the plan's order, exit 1 as the unsharded run's
    files = [str(tmp_path / f"s{i}.json") for i in range(3)]
    m = subprocess.run([GPUEMU, "report", "merge", *files, "--format", "json"], capture_output=True, text=True)
    assert m.returncode == 1, m.stderr
    merged = json.loads(m.stdout)
    assert "shard" not in merged and merged["merged"]["shards"] == 3
    assert sum(x["cases"] for x in merged["results"]) == 192
    assert merged["summary"]["total"] == 12 and merged["summary"]["failed"] == \
        sum(d["summary"]["failed"] for d in docs)
    # [[op]] entries as the file lists them, then dtype, then the first case
    entry = {"builtin:tail_leak": 0, "builtin:fp32_tiled_k32": 1, "builtin:dropped_tail_k": 2}
    starts = [(entry[x["kernel"]], x["dtype"], x["cases_range"][0]) for x in merged["results"]]
    assert starts == sorted(starts) and len(set(starts)) == 12
    junit = subprocess.run([GPUEMU, "report", "merge", *files, "--format", "junit"], capture_output=True, text=True)
    assert junit.returncode == 1 and junit.stdout.count("<testcase") == 12
    # a shard missing, or given twice, or of another plan: a clear error (exit 2)
    bad = subprocess.run([GPUEMU, "report", "merge", *files[:2]], capture_output=True, text=True)
    assert bad.returncode == 2 and "shards missing of 3: 2" in bad.stderr, bad.stderr
    bad = subprocess.run([GPUEMU, "report", "merge", files[0], files[0], files[1]], capture_output=True, text=True)
    assert bad.returncode == 2 and "shard 0 appears twice" in bad.stderr, bad.stderr
    other = json.loads((tmp_path / "s2.json").read_text())
    other["shard"]["plan"] = "0" * 16
    (tmp_path / "other.json").write_text(json.dumps(other))
    bad = subprocess.run([GPUEMU, "report", "merge", *files[:2], str(tmp_path / "other.json")],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "a shard of another run" in bad.stderr, bad.stderr


@pytest.mark.parametrize("env, count, expect", [
    ({"GPUEMU_SHARD_INDEX": "2", "GPUEMU_SHARD_COUNT": "3"}, None, 2),  # a GitHub Actions matrix
    ({"SLURM_ARRAY_TASK_ID": "2", "SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_COUNT": "3"}, None, 1),
    ({"SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_TASK_COUNT": "3"}, None, 0),
    ({"JOB_COMPLETION_INDEX": "1"}, "3", 1),  # a Kubernetes indexed Job
])
def test_shard_auto_reads_the_engines_environment(homes, tmp_path, env, count, expect):
    cfg = tmp_path / "gpuemu.toml"
    cfg.write_text(CONFIG.replace("iterations = 48", "iterations = 32"))
    h = homes("auto", **env)
    args = ["ci", "--config", str(cfg), "--json", "--shard", "auto"] + (["--shard-count", count] if count else [])
    doc = json.loads(h.cli(*args).stdout)
    assert doc["shard"]["index"] == expect and doc["shard"]["count"] == 3
    same = json.loads(homes("explicit").cli("ci", "--config", str(cfg), "--json", "--shard", f"{expect}/3").stdout)
    assert [x["name"] for x in doc["results"]] == [x["name"] for x in same["results"]]


@pytest.mark.parametrize("args, env, needle", [
    (["--shard", "auto"], {"JOB_COMPLETION_INDEX": "1"}, "--shard-count"),
    (["--shard", "auto"], {}, "found no shard in the environment"),
    (["--shard", "3/3"], {}, "shard index 3 is not in [0, 3)"),
    (["--shard", "1-3"], {}, "I/N"),
    (["--shard", "1/3", "--shard-count", "4"], {}, "disagree"),
    (["--shard-count", "4"], {}, "--shard-count needs --shard auto"),
])
def test_bad_shards_are_clear_errors(homes, tmp_path, args, env, needle):
    cfg = tmp_path / "gpuemu.toml"
    cfg.write_text(CONFIG)
    r = homes("bad", **env).cli("ci", "--config", str(cfg), *args)
    assert r.returncode == 2 and needle in r.stderr, r.stderr


def test_a_sharded_run_needs_a_seed_every_shard_shares(homes, tmp_path):
    cfg = tmp_path / "gpuemu.toml"
    cfg.write_text(CONFIG.replace("seed = 11\n", "").replace("iterations = 48", "iterations = 16"))
    h = homes("seedless")
    r = h.cli("ci", "--config", str(cfg), "--shard", "0/2")
    assert r.returncode == 2 and "needs the same seed on every shard" in r.stderr, r.stderr
    a = json.loads(h.cli("ci", "--config", str(cfg), "--json", "--shard", "0/2", "--seed", "5").stdout)
    assert {x["seed"] for x in a["results"]} == {5}
