"""Load (issue 15), the quick slice: 8 client processes against one daemon at once, each with
its own connection and its own mix of correct and buggy kernels; every client must get exactly
its own verdicts (none lost, duplicated or swapped), and the store must hold exactly the failures
they expect. The full benchmark (8 and 32 clients x hundreds of cases, latency percentiles,
daemon memory, valgrind/heaptrack) is bench/load/load.py; this test drives the same worker and
checks, and shows that the checks catch swapped, lost and duplicated verdicts and foreign
failures in the store."""

from __future__ import annotations

import copy
import os

from daemon_harness import DAEMON, GPUEMU, Daemon, daemon  # noqa: F401 (daemon: the fixture)

from bench.load import load

CLIENTS, CASES, FUZZ = 8, 24, 6


def _first(report, pred):
    return next(i for i, e in enumerate(report["cases"]) if pred(e))


def test_concurrent_clients_get_exactly_their_own_verdicts(daemon: Daemon):
    assert os.access(GPUEMU, os.X_OK) and os.access(DAEMON, os.X_OK), \
        f"{GPUEMU} / {DAEMON} missing: build first (make build) or set GPUEMU_BIN_DIR"
    daemon.start()
    home = str(daemon.home)
    ph = load.run_phase(home, CLIENTS, CASES, batch=4, fuzz_cases=FUZZ, dims=load.TINY_DIMS, salt=1, timeout=120)
    assert ph["errors"] == [], "\n".join(ph["errors"][:40])
    n = ph["counts"]
    assert n["verdicts"] == CLIENTS * CASES and n["fuzz_cases"] == CLIENTS * FUZZ
    assert n["lost"] == n["duplicated"] == n["misrouted"] == n["wrong"] == 0
    assert n["expected_pass"] > 30 and n["expected_fail"] > 30  # a real mix of correct and buggy
    assert len({r["pid"] for r in ph["reports"]}) == CLIENTS  # separate processes
    assert {r["daemon_pid"] for r in ph["reports"]} == {daemon.pid}  # one daemon

    # The store holds exactly the failures the clients expect (read through the CLI too).
    expected = ph["expected_failures"]
    fuzz_fails = (CLIENTS // 2) * FUZZ  # odd clients fuzz a buggy softmax
    assert len(expected) == n["expected_fail"] + fuzz_fails
    stored = daemon.cli_json("failures", "list")
    assert load.check_store(stored, expected) == []
    assert len(stored) == len(expected)

    # The checks fail when anything is off. Verdicts swapped between two clients:
    reps = copy.deepcopy(ph["reports"])
    a, b = reps[0]["cases"], reps[1]["cases"]
    i, j = _first(reps[0], lambda e: not e["buggy"]), _first(reps[1], lambda e: e["buggy"])
    a[i]["verdicts"], b[j]["verdicts"] = b[j]["verdicts"], a[i]["verdicts"]
    bad = load.check_reports(reps, CLIENTS, CASES, FUZZ, salt=1)
    assert bad["counts"]["misrouted"] == 2 and bad["counts"]["wrong"] == 2, bad["errors"]
    # two clients' whole reports exchanged (each sees the other's verdicts, all right for it):
    reps = copy.deepcopy(ph["reports"])
    reps[2]["cases"], reps[3]["cases"] = reps[3]["cases"], reps[2]["cases"]
    assert load.check_reports(reps, CLIENTS, CASES, FUZZ, salt=1)["errors"]
    # a verdict lost, one duplicated, a client's report missing:
    reps = copy.deepcopy(ph["reports"])
    reps[4]["cases"][5]["verdicts"] = []
    reps[5]["cases"][6]["verdicts"].append(dict(reps[5]["cases"][6]["verdicts"][0]))
    bad = load.check_reports(reps, CLIENTS, CASES, FUZZ, salt=1)
    assert bad["counts"]["lost"] == 1 and bad["counts"]["duplicated"] == 1, bad["errors"]
    assert load.check_reports(ph["reports"][:-1], CLIENTS, CASES, FUZZ, salt=1)["counts"]["lost"] >= CASES
    # the store: a failure attributed to another client, one missing, one nobody expects:
    foreign = copy.deepcopy(stored)
    k = next(x for x in foreign if "_c000_" in x["kernel"]["name"])
    k["kernel"]["name"] = k["kernel"]["name"].replace("_c000_", "_c001_")
    assert load.check_store(foreign, expected)
    assert load.check_store(stored[1:], expected)
    extra = dict(stored[0], id="f-not-ours")
    assert load.check_store(stored + [extra], expected)
