"""A worker daemon pushing to a central one (issue 19, docs/scale.md), on one host over loopback tcp:
failures and run summaries reach the central store exactly once, with their exact snapshots (they
replay byte for byte there) and where they came from; pushing them again stores nothing twice; a
record the central daemon refuses is set aside while the rest go through; what was stored before
pushing was on is pushed on request; calibrations travel with their provenance, by sync and by
export/import. The multi-host run (network namespaces, a cut link, restarts) is test_scale_netns.py."""

from __future__ import annotations

import json
import socket
import subprocess
import time
from pathlib import Path

import pytest

from daemon_harness import DAEMON, Daemon, decode_header, encode_frame, shut_down

TOKEN = "a-central-token-of-at-least-16-chars"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(d: Daemon, *args: str) -> None:
    r = subprocess.run([DAEMON, "--home", str(d.home), *args], env=d.env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    d.wait_ready()


def request(d: Daemon, method: str, **params) -> dict:
    h = decode_header(d.raw_request(encode_frame({"v": 1, "method": method, "params": params})))
    assert "error" not in h, h
    return h["result"]


def ids_of(d: Daemon) -> list[str]:
    return [f["id"] for f in d.cli_json("failures", "list")]


@pytest.fixture()
def sites(tmp_path, request):
    """(central, worker, address, token file): a central daemon on a loopback port and a worker
    daemon pushing to it (quick retries, calibration sync every second). The worker's daemon is
    started by the test (`up`) so that a test can store things before pushing is on."""
    tf = tmp_path / "token"
    tf.write_text(TOKEN + "\n")
    address = f"tcp://127.0.0.1:{free_port()}"
    central, worker = Daemon(tmp_path / "central"), Daemon(tmp_path / "worker")
    start(central, "--tcp", address, "--token-file", str(tf))

    def up(*extra: str) -> None:
        start(worker, "--push-to", address, "--push-token-file", str(tf), "--push-retry-max", "0.5",
              "--push-timeout", "5", "--calibration-sync", "1", *extra)

    yield central, worker, address, tf, up
    for d in (worker, central):
        shut_down(d, request, d.home.name)


def test_a_worker_pushes_failures_and_runs_once_with_exact_snapshots(sites):
    central, worker, address, _, up = sites
    up()
    rep = worker.cli_json("fuzz", "softmax", "--kernel", "tail_leak", "-n", "16", "--seed", "5", expect_rc=1)
    assert rep["failure_ids"]
    w = worker.cli_json("push", "wait", "--timeout", "60")
    assert w["drained"] is True, w
    ids = ids_of(worker)
    assert sorted(ids_of(central)) == sorted(ids)
    assert w["status"]["pushed_failures"] == len(ids) and w["status"]["pushed_runs"] == 1
    # the central copy: the same id, its origin, and the exact bytes (it replays from its seed
    # byte-identically and still fails there)
    shown = central.cli_json("failures", "show", ids[0])
    assert shown["pushed_from"]["home"] == str(worker.home)
    repro = central.cli_json("repro", ids[0], expect_rc=1)
    assert repro["regenerated_identical"] is True and repro["still_fails"] is True
    runs = request(central, "runs")["runs"]
    assert len(runs) == 1 and runs[0]["pushed_from"]["home"] == str(worker.home)
    assert sorted(runs[0]["failure_ids"]) == sorted(rep["failure_ids"])
    # Everything pushed again (as a retry after a lost reply would): nothing new is stored.
    again = worker.cli_json("push", "backlog")
    assert again["queued"] == len(ids) + 1
    w = worker.cli_json("push", "wait", "--timeout", "60")
    assert w["drained"] is True and w["status"]["already_present"] == len(ids) + 1
    assert sorted(ids_of(central)) == sorted(ids) and len(request(central, "runs")["runs"]) == 1
    # The same failures found again by the worker are the same records: nothing to push.
    worker.cli_json("fuzz", "softmax", "--kernel", "tail_leak", "-n", "16", "--seed", "5", expect_rc=1)
    assert sorted(ids_of(worker)) == sorted(ids)
    assert worker.cli_json("push", "wait", "--timeout", "60")["drained"] is True
    assert sorted(ids_of(central)) == sorted(ids) and len(request(central, "runs")["runs"]) == 2


def test_what_was_stored_before_pushing_is_pushed_on_request_and_a_refused_record_is_set_aside(sites, tmp_path):
    central, worker, address, _, up = sites
    start(worker)  # not pushing yet
    rep = worker.cli_json("fuzz", "matmul", "--kernel", "dropped_tail_k", "-n", "12", "--seed", "9", expect_rc=1)
    ids = ids_of(worker)
    assert len(ids) >= 5
    assert worker.cli_json("push", "status")["to"] is None
    r = worker.cli("push", "backlog")
    assert r.returncode != 0 and "pushes nowhere" in r.stderr
    # The central daemon holds one of these ids with other content: it must refuse that one.
    exported = tmp_path / "one.jsonl"
    worker.cli("failures", "export", "--jsonl", "-o", str(exported))
    clash = json.loads(exported.read_text().splitlines()[0])
    clash["message"] = "something else entirely"
    exported.write_text(json.dumps(clash) + "\n")
    assert central.cli("failures", "import", str(exported)).returncode == 0
    worker.stop()
    up("--push-batch", "2")  # the backlog takes several pushes
    assert worker.cli_json("push", "status")["pending"] == 0  # stored before: not queued by itself
    q = worker.cli_json("push", "backlog", "--no-runs")
    assert q["queued"] == len(ids)
    w = worker.cli_json("push", "wait", "--timeout", "60")
    assert w["drained"] is True and w["status"]["rejected"] == 1, w
    rejected = worker.cli_json("push", "rejected")
    assert [x["id"] for x in rejected] == [clash["id"]]
    assert "other content" in rejected[0]["why"]
    assert sorted(ids_of(central)) == sorted(ids)  # the rest went through; the clash stayed as it was
    assert central.cli_json("failures", "show", clash["id"])["message"] == "something else entirely"
    # Once the central copy is gone, a retry pushes it.
    central.cli("failures", "rm", clash["id"])
    assert worker.cli_json("push", "retry")["requeued"] == 1
    assert worker.cli_json("push", "wait", "--timeout", "60")["drained"] is True
    assert worker.cli_json("push", "status")["rejected"] == 0
    assert central.cli_json("failures", "show", clash["id"])["message"] != "something else entirely"
    assert rep["failure_ids"]


def test_calibrations_are_shared_with_their_provenance(sites, tmp_path):
    central, worker, address, tf, up = sites
    cal = central.cli_json("calibrate", "softmax", "--dtype", "float32", "--cases", "6", "--seed", "31")
    envelope = cal["results"][0]["envelope"] if "results" in cal else None
    listed = central.cli_json("calibrations", "list")
    assert [(c["op"], c["dtype"]) for c in listed] == [("softmax", "float32")]
    mine = listed[0]
    assert mine["seed"] == 31 and mine["cases"] == 6 and "calibrated_ms" in mine
    if envelope is not None:
        assert mine["envelope"] == envelope
    up()
    deadline = time.time() + 30
    synced = []
    while time.time() < deadline:
        synced = worker.cli_json("calibrations", "list")
        if synced:
            break
        time.sleep(0.2)
    assert len(synced) == 1, worker.cli_json("push", "status")
    s = synced[0]
    assert s["synced_from"] == address
    for k in ("envelope", "seed", "cases", "calibrated_ms", "p95", "gpuemu_version"):
        assert s[k] == mine[k], k
    # the worker judges with it, and its run says so
    rep = worker.cli_json("fuzz", "softmax", "--kernel", "fp32_online", "-n", "4", "--dtype", "float32",
                          "--seed", "2")
    src = rep["envelope"]["float32"]
    assert src["value"] == mine["envelope"] and src["provenance"]["seed"] == 31
    # air-gapped: export from the central daemon, import elsewhere (idempotent; a newer stored one is kept)
    f = tmp_path / "cal.json"
    assert central.cli("calibrations", "export", "-o", str(f)).returncode == 0
    third = Daemon(tmp_path / "third")
    try:
        start(third)
        r = third.cli_json("calibrations", "import", str(f))
        assert r["imported"] == ["softmax/float32"]
        assert third.cli_json("calibrations", "import", str(f))["unchanged"] == ["softmax/float32"]
        got = third.cli_json("calibrations", "list")[0]
        assert got["imported_from"] == str(f) and got["envelope"] == mine["envelope"]
        older = json.loads(f.read_text())
        older["calibrations"][0]["calibrated_ms"] -= 1000
        older["calibrations"][0]["envelope"] = 123.0
        f.write_text(json.dumps(older))
        assert third.cli_json("calibrations", "import", str(f))["kept_newer"] == ["softmax/float32"]
        assert third.cli_json("calibrations", "import", str(f), "--replace")["imported"] == ["softmax/float32"]
        assert third.cli_json("calibrations", "list")[0]["envelope"] == 123.0
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps({"calibrations": [{"op": "softmax", "dtype": "float32", "envelope": -1}]}))
        r = third.cli("calibrations", "import", str(bad))
        assert r.returncode != 0 and "finite and positive" in r.stderr
        bad.write_text("{}")
        r = third.cli("calibrations", "import", str(bad))
        assert r.returncode != 0 and "not a calibrations export" in r.stderr
    finally:
        shut_down(third)


def test_a_push_to_nowhere_is_a_clear_error_at_start(tmp_path):
    d = Daemon(tmp_path / "w")
    r = subprocess.run([DAEMON, "--home", str(d.home), "--push-to", "central:1234"], env=d.env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "wants an address" in r.stderr
    r = subprocess.run([DAEMON, "--home", str(d.home), "--push-to", "tcp://127.0.0.1:9"], env=d.env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "needs --push-token-file" in r.stderr


def test_an_export_larger_than_one_reply_comes_whole(tmp_path):
    d = Daemon(tmp_path / "big")
    try:
        start(d)
        # 24 float32 failures of 2 x 256 x 300 inputs: about 20 MB of base64, over one reply's 12 MiB
        rep = d.cli_json("fuzz", "matmul", "--kernel", "dropped_tail_k", "-n", "24", "--seed", "4", "--dims",
                         "M=256", "--dims", "N=256", "--dims", "K=300", "--dtype", "float32", "--no-layouts",
                         expect_rc=1)
        n = len(ids_of(d))
        assert n == len(set(rep["failure_ids"])) == 24
        out = tmp_path / "all.jsonl"
        r = d.cli("failures", "export", "--jsonl", "-o", str(out))
        assert r.returncode == 0, r.stderr
        assert out.stat().st_size > 12 << 20  # more than one reply holds: it came in pages
        lines = out.read_text().splitlines()
        assert len(lines) == n and len({json.loads(x)["id"] for x in lines}) == n
    finally:
        shut_down(d)


def test_a_push_over_tls_goes_only_to_the_central_daemon_its_certificate_names(tmp_path):
    certs = Path(__file__).resolve().parents[1] / "data" / "tls"
    tf = tmp_path / "token"
    tf.write_text(TOKEN + "\n")
    port = free_port()
    central, good, bad = Daemon(tmp_path / "c"), Daemon(tmp_path / "good"), Daemon(tmp_path / "bad")
    try:
        start(central, "--tcp", f"tls+tcp://127.0.0.1:{port}", "--tls-cert", str(certs / "localhost.pem"),
              "--tls-key", str(certs / "localhost.key"), "--token-file", str(tf))
        for d, ca in ((good, "localhost.pem"), (bad, "other.pem")):
            start(d, "--push-to", f"tls+tcp://localhost:{port}", "--push-token-file", str(tf),
                  "--push-tls-ca", str(certs / ca), "--push-retry-max", "0.5", "--push-timeout", "5")
            d.cli_json("fuzz", "softmax", "--kernel", "tail_leak", "-n", "6", "--seed", "8", expect_rc=1)
        assert good.cli_json("push", "wait", "--timeout", "60")["drained"] is True
        assert sorted(ids_of(central)) == sorted(ids_of(good))
        # a certificate that does not chain to the worker's CA: nothing leaves, and it says why
        w = bad.cli_json("push", "wait", "--timeout", "3", expect_rc=1)
        assert w["drained"] is False and w["status"]["pending"] > 0
        assert w["status"]["last_error"], w
    finally:
        for d in (good, bad, central):
            shut_down(d)


def test_a_failure_too_large_to_push_is_set_aside_and_does_not_block_the_queue(sites):
    central, worker, address, _, up = sites
    up("--push-max-record-mb", "1")
    big = worker.cli_json("fuzz", "matmul", "--kernel", "dropped_tail_k", "-n", "2", "--seed", "6", "--dims", "M=128",
                          "--dims", "N=128", "--dims", "K=1200", "--dtype", "float32", "--no-layouts",
                          "--no-minimize", expect_rc=1)
    small = worker.cli_json("fuzz", "softmax", "--kernel", "tail_leak", "-n", "8", "--seed", "5", expect_rc=1)
    w = worker.cli_json("push", "wait", "--timeout", "60")
    assert w["drained"] is True and w["status"]["rejected"] == len(big["failure_ids"]) == 2, w
    rejected = worker.cli_json("push", "rejected")
    assert sorted(x["id"] for x in rejected) == sorted(big["failure_ids"])
    assert all("--push-max-record-mb" in x["why"] for x in rejected)
    assert sorted(ids_of(central)) == sorted(small["failure_ids"])
