"""gpuemu.Client against a real gpuemu-daemon (temporary GPUEMU_HOME per test, started by the
client's autostart; the CLI of the same build checks what the daemon stored)."""

from __future__ import annotations

import base64
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from daemon_harness import DAEMON, GPUEMU, Daemon, alive, daemon, kill_hard  # noqa: F401 (daemon: the fixture)

import gpuemu
from gpuemu import Client, ConnectError, FuzzResults

pytestmark = pytest.mark.skipif(not (os.path.exists(GPUEMU) and os.path.exists(DAEMON)),
                                reason="gpuemu / gpuemu-daemon not built")


# --- kernels -------------------------------------------------------------------------------------

def np_softmax(x, dim=-1):
    """A correct numpy softmax: fp32 math; float16 comes back as float16, bf16 (float32 values
    here) as float32, which the client rounds to bfloat16."""
    x32 = np.asarray(x, dtype=np.float32)
    m = np.max(x32, axis=dim, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)
    e = np.exp(x32 - m)
    out = e / np.sum(e, axis=dim, keepdims=True)
    return out.astype(x.dtype) if x.dtype == np.float16 else out


def buggy_softmax(x, dim=-1):
    return np_softmax(x, dim) * np.float32(1.05)  # a wrong scale: caught on every case


def torch_softmax(x, dim=-1):
    import torch

    return torch.softmax(x.float(), dim=dim).to(x.dtype)


# --- the README quick start ---------------------------------------------------------------------

def test_client_closes_and_works_as_a_context_manager(daemon):
    with Client() as c:
        assert c.ping() is not None and c.hello["version"] == gpuemu.__version__
        pid = c.hello["pid"]
    with pytest.raises(ConnectError, match="closed"):
        c.ping()
    with pytest.raises(ConnectError, match="closed"):
        c.fuzz_op_client_side("softmax", lambda i: np_softmax(i["x"], i["dim"]), iterations=1)
    c.close()  # idempotent
    other = Client()  # the daemon goes on serving
    assert other.hello["pid"] == pid and other.ping() is not None
    other.close()


def test_quick_start_correct_kernel_passes(daemon):
    from gpuemu import Client
    client = Client()
    results = client.fuzz_op_client_side(
        "softmax",
        run_op=lambda inputs: np_softmax(inputs["x"], inputs["dim"]),
        iterations=100,
        value_distribution="adversarial",
    )
    print(f"Passed: {results.passed}/{results.total}")
    assert isinstance(results, FuzzResults)
    assert results.total == 100
    assert results.passed == 100, results.summary()
    assert results.failures == [] and results.elapsed > 0 and results.seed > 0
    assert client.started_daemon  # nothing was running: the client started the daemon


def test_buggy_kernel_caught_with_replayable_failure(daemon):
    client = Client()
    results = client.fuzz_op_client_side("softmax", run_op=lambda inputs: buggy_softmax(inputs["x"], inputs["dim"]),
                                         iterations=8, seed=1234)
    assert results.total == 8 and results.passed < 8
    assert results.seed == 1234
    f = results.failures[0]
    assert f.id and f.seed and f.dtype in ("float32", "float16", "bfloat16")
    assert f.repro == f"gpuemu repro {f.id}"
    assert f.max_error > f.envelope
    assert set(f.shapes) == {"x"} and "dim" in f.attrs and set(f.layout) == {"x"}
    # the kernel's source: the lambda calls buggy_softmax, defined in this file
    assert f.file == __file__ and f.line == buggy_softmax.__code__.co_firstlineno
    snap = base64.b64decode(f.snapshot)
    assert snap[:4] == b"GEMU"
    # the stored bytes are the case regenerated from its seed, byte for byte
    r = daemon.cli_json("repro", f.id, expect_rc=None)
    assert r["regenerated_identical"] is True
    # listed, and replayable here against the same (still buggy) kernel, and a fixed one
    assert f.id in [x["id"] for x in client.failures(op="softmax")]
    again = client.reproduce(f.id, run_op=lambda inputs: buggy_softmax(inputs["x"], inputs["dim"]))
    assert again["regenerated_identical"] is True and again["passed"] is False
    fixed = client.reproduce(f.id, run_op=lambda inputs: np_softmax(inputs["x"], inputs["dim"]))
    assert fixed["passed"] is True, fixed["message"]


def test_fail_fast_and_progress(daemon):
    client = Client()
    seen = []
    results = client.fuzz_op_client_side("softmax", run_op=lambda i: buggy_softmax(i["x"], i["dim"]),
                                         iterations=64, fail_fast=True, progress=lambda d, t: seen.append((d, t)))
    # the kernel reads `dim`: the first chunk is the first case alone (attrs at their defaults), and
    # the run stops after it
    assert results.total == 1 and results.first_failure == 0 and results.varied_attrs == []
    assert seen == [(1, 64)]
    seen.clear()
    results = client.fuzz_op_client_side("softmax", run_op=lambda i: buggy_softmax(i["x"], i["dim"]),
                                         iterations=64, fail_fast=True, progress=lambda d, t: seen.append((d, t)),
                                         vary_attrs=[])
    assert results.total == 16 and results.first_failure >= 0  # stopped after the first chunk of 16
    assert seen == [(16, 64)]


# --- torch on the CPU, dtypes, layouts ----------------------------------------------------------

@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_torch_dtypes_and_real_strides(daemon, dtype):
    torch = pytest.importorskip("torch")
    client = Client()
    seen = {"noncontig": 0, "dtypes": set()}

    def run_op(inputs):
        x = inputs["x"]
        assert isinstance(x, torch.Tensor)
        seen["dtypes"].add(x.dtype)
        if not x.is_contiguous():
            seen["noncontig"] += 1
        return torch_softmax(x, inputs["dim"])

    results = client.fuzz_op_client_side("softmax", run_op=run_op, iterations=24, dtypes=[dtype],
                                         framework="torch", device="cpu", seed=99)
    assert results.passed == results.total == 24, results.summary()
    assert seen["dtypes"] == {getattr(torch, dtype)}  # bfloat16 through its bits, not float32
    assert seen["noncontig"] > 0  # some inputs really are transposed/strided/expanded views


def test_numpy_bfloat16_as_float32_and_dims(daemon):
    client = Client()
    got = []

    def run_op(inputs):
        got.append((inputs["x"].dtype, inputs["x"].shape))
        return np_softmax(inputs["x"], inputs["dim"])

    results = client.fuzz_op_client_side("softmax", run_op=run_op, iterations=6, dtypes=["bfloat16"],
                                         dims={"R": 3, "N": [5, 7]}, attrs={"dim": -1}, layouts=False)
    assert results.passed == 6, results.summary()
    for dt, shape in got:
        assert dt == np.float32 and shape[0] == 3 and shape[1] in (5, 7)


# --- contract checks ----------------------------------------------------------------------------

def test_exception_in_run_op_is_a_failure_with_traceback(daemon):
    client = Client()

    def exploding(inputs):
        raise ValueError("boom in the kernel")

    results = client.fuzz_op_client_side("softmax", run_op=exploding, iterations=3)
    assert results.passed == 0 and len(results.failures) == 3
    f = results.failures[0]
    assert "ValueError: boom in the kernel" in f.traceback
    assert "the kernel raised" in f.message and "boom in the kernel" in f.message
    assert f.id and f.snapshot


def test_input_mutation_detected(daemon):
    client = Client()

    def mutating(inputs):
        x = inputs["x"]
        out = np_softmax(x, inputs["dim"])
        x[...] = 0.0
        return out

    results = client.fuzz_op_client_side("softmax", run_op=mutating, iterations=4, dtypes=["float32"], seed=5)
    assert results.passed == 0
    assert all("input mutated" in f.message for f in results.failures), [f.message for f in results.failures]


def test_output_aliasing_input_and_wrong_shape_are_contract_errors(daemon):
    client = Client()
    r = client.fuzz_op_client_side("softmax", run_op=lambda i: i["x"], iterations=2, dtypes=["float32"])
    assert r.passed == 0 and "aliases an input" in r.failures[0].message
    r = client.fuzz_op_client_side("softmax", run_op=lambda i: np_softmax(i["x"], i["dim"])[..., :1].copy(),
                                   iterations=2, dtypes=["float32"], dims={"N": 4})
    assert r.passed == 0 and "has shape" in r.failures[0].message


def test_check_determinism(daemon):
    client = Client()
    calls = {"n": 0}

    def flaky(inputs):
        calls["n"] += 1
        out = np_softmax(inputs["x"], inputs["dim"])
        return out + np.float32(calls["n"] % 2) * np.float32(1e-7)

    r = client.fuzz_op_client_side("softmax", run_op=flaky, iterations=2, dtypes=["float32"],
                                   check_determinism=True)
    assert r.passed == 0 and "nondeterministic" in r.failures[0].message
    r = client.fuzz_op_client_side("softmax", run_op=lambda i: np_softmax(i["x"], i["dim"]), iterations=2,
                                   dtypes=["float32"], check_determinism=True)
    assert r.passed == 2


# --- daemon-orchestrated ------------------------------------------------------------------------

def test_get_test_batch_submit_output_loop(daemon):
    client = Client()
    cases = client.get_test_batch("softmax", count=6, seed=42)
    assert len(cases) == 6
    for case in cases:
        assert set(case) >= {"seed", "inputs", "attrs", "dtype"}
        out = np_softmax(case["inputs"]["x"], case["attrs"]["dim"])
        v = client.submit_output("softmax", case["inputs"], out, case["seed"])
        assert v.passed, v.message
        assert v.seed == case["seed"]
    bad = client.submit_output("softmax", cases[0]["inputs"], buggy_softmax(cases[0]["inputs"]["x"],
                                                                            cases[0]["attrs"]["dim"]), cases[0]["seed"])
    assert not bad.passed and bad.max_error > 0 and bad.failure_id
    # the same seed gives the same cases
    again = client.get_test_batch("softmax", count=2, seed=42)
    assert [c["seed"] for c in again] == [c["seed"] for c in cases[:2]]
    with pytest.raises(gpuemu.NotFoundError):
        client.submit_output("softmax", {}, out, 12345)


def test_misc_requests(daemon):
    client = Client()
    assert client.ping()["pong"] is True
    assert "submit_outputs" in client.hello["methods"]
    # the Python client writes the wire's version from the C++ header, the daemon answers with it
    assert client.hello["protocol"] == gpuemu._core.PROTOCOL_VERSION == 1
    assert client.request("ping")[0]["pong"] is True
    assert client.stats()["requests"] >= 1
    cal = client.calibrate("softmax", dtypes=["float32"], cases=3, apply=False)
    assert cal["results"][0]["dtype"] == "float32"
    with pytest.raises(gpuemu.UnknownOpError):
        client.get_test_batch("no_such_op", count=1)
    with pytest.raises(gpuemu.NotFoundError):
        client.reproduce("no-such-id")


# --- connecting -----------------------------------------------------------------------------------

def test_autostart_and_reuse(daemon):
    assert not (daemon.home / "run" / "daemon.json").exists()
    c1 = Client(home=str(daemon.home))
    assert c1.started_daemon
    pid = daemon.pid
    c2 = Client(home=str(daemon.home))
    assert not c2.started_daemon and c2.hello["pid"] == pid


def test_daemon_that_cannot_start_is_connect_error(tmp_path, monkeypatch):
    home = tmp_path / "nohome"
    with pytest.raises(ConnectError) as e:
        Client(home=str(home), daemon_path="/bin/false", start_timeout=3)
    assert "/bin/false" in str(e.value)
    monkeypatch.setenv("GPUEMU_DAEMON", str(tmp_path / "does-not-exist"))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    with pytest.raises(ConnectError) as e:
        Client(home=str(home), start_timeout=3)
    assert "does-not-exist" in str(e.value)
    with pytest.raises(ConnectError):
        Client(home=str(home), autostart=False)


# --- client-side diagnosis: the client re-runs its kernel on the engine's probes ----------------

def tail_tile_softmax(x, dim=-1):
    """Buggy: BLOCK=128 tiles, and the last partial tile is padded with 0 instead of -inf, so the
    padding leaks into the max and the denominator (rows that are a multiple of 128 are right)."""
    x32 = np.moveaxis(np.asarray(x, dtype=np.float32), dim, -1)
    n = x32.shape[-1]
    padded = np.zeros(x32.shape[:-1] + (-(-n // 128) * 128,), dtype=np.float32)
    padded[..., :n] = x32
    m = padded.max(axis=-1, keepdims=True)
    e = np.exp(padded - m)
    return np.moveaxis(e[..., :n] / e.sum(axis=-1, keepdims=True), -1, dim)


def contiguous_only_softmax(x, dim=-1):
    """Buggy: reads its input's storage as if it were contiguous and unit-offset (a kernel handed
    x.data_ptr() without the strides)."""
    if not x.flags.c_contiguous:
        root = x
        while isinstance(root.base, np.ndarray):
            root = root.base
        flat = np.ascontiguousarray(root).reshape(-1).view(np.uint8).view(x.dtype)  # the whole storage
        x = np.resize(flat, x.size).reshape(x.shape)
    return np_softmax(x, dim)


@pytest.mark.parametrize("kernel,layouts,bug_class", [
    (tail_tile_softmax, False, "tail_mask"),
    (contiguous_only_softmax, True, "stride_assumption"),
])
def test_client_side_failures_are_diagnosed_by_probes_run_here(daemon, kernel, layouts, bug_class):
    client = Client()
    results = client.fuzz_op_client_side("softmax", run_op=lambda i: kernel(i["x"], i["dim"]), iterations=16,
                                         dtypes=["float32"], seed=11, layouts=layouts, attrs={"dim": -1})
    assert results.failures, results.summary()
    first = results.failures[0]
    assert first.bug_class == bug_class, first.describe()
    assert "probes re-ran the kernel in the client (gpuemu-python)" in first.diagnosis["evidence"]
    assert all(f.id and f.snapshot for f in results.failures)
    # the first three failures are diagnosed here (as the engine's diagnose_limit); later ones
    # keep the daemon's static diagnosis
    here = [f for f in results.failures if "probes re-ran the kernel in the client (gpuemu-python)"
            in f.diagnosis.get("evidence", [])]
    assert 1 <= len(here) <= 3
    # the stored failure carries the diagnosis (the CLI reads it from the daemon's store)
    shown = daemon.cli_json("failures", "show", first.id)
    assert shown["diagnosis"]["bug_class"] == bug_class, shown["diagnosis"]
    # one run recorded per batch, holding every failure's id
    runs = client.request("runs", {"op": "softmax"})[0]["runs"]
    assert sum(r["total"] for r in runs) == results.total
    assert sorted(i for r in runs for i in r["failure_ids"]) == sorted(f.id for f in results.failures)


def test_diagnose_limit_zero_keeps_the_daemon_diagnosis(daemon):
    client = Client()
    r = client.fuzz_op_client_side("softmax", run_op=lambda i: tail_tile_softmax(i["x"], i["dim"]), iterations=4,
                                   dtypes=["float32"], seed=11, layouts=False, diagnose_limit=0)
    assert r.failures and all("probes re-ran the kernel in the client (gpuemu-python)"
                              not in f.diagnosis.get("evidence", []) for f in r.failures)


def test_submit_outputs_item_diagnosis_is_stored_and_validated(daemon):
    client = Client()
    case = client.get_test_batch("softmax", count=1, seed=3, dtypes=["float32"])[0]
    held = client._cases[("softmax", case["seed"])]
    item, tensors = client._run_item("softmax", lambda _a: buggy_softmax(case["inputs"]["x"], case["attrs"]["dim"]),
                                     held[0], held[2], 0, False, None)
    params = {"op": "softmax", "options": held[1], "items": [item], "store": True, "hold_for_diagnosis": True}
    res, _ = client.request("submit_outputs", params, tensors)
    assert res["held"] is True and "failure_id" not in res["results"][0]
    item["diagnosis"] = {"bug_class": "missing_scale", "summary": "from the client", "evidence": ["e1"]}
    res, _ = client.request("submit_outputs", params, tensors)
    assert "held" not in res and res["results"][0]["diagnosis"]["bug_class"] == "missing_scale"
    stored = client.failure(res["results"][0]["failure_id"])
    assert stored["diagnosis"] == {"bug_class": "missing_scale", "summary": "from the client", "evidence": ["e1"]}
    item["diagnosis"] = {"summary": "no class"}
    with pytest.raises(gpuemu.ValidationError, match="bug_class"):
        client.request("submit_outputs", params, tensors)


# --- round trips of a client-side run (issue 16) --------------------------------------------------

class _Recorder:
    """The requests a real Client makes (method, param keys, tensors sent), forwarded as they are."""

    def __init__(self, client):
        self.calls = []
        self._request = client.request

        def request(method, params=None, tensors=(), timeout=None):
            self.calls.append((method, dict(params or {}), len(list(tensors))))
            return self._request(method, params, tensors, timeout)

        client.request = request

    def methods(self):
        return [m for m, _, _ in self.calls]


def test_a_passing_client_side_run_makes_one_request_per_chunk(daemon):
    client = Client()
    rec = _Recorder(client)
    r = client.fuzz_op_client_side("softmax", run_op=lambda i: np_softmax(i["x"], i["dim"]), iterations=64,
                                   dtypes=["float32"], seed=5, vary_attrs=[])
    assert r.passed == 64, r.summary()
    # 4 chunks of 16: one get_test_batch, then each submit_outputs brings the next chunk back
    assert rec.methods() == ["get_test_batch"] + ["submit_outputs"] * 4, rec.methods()
    assert [c[1].get("next", {}).get("start_index") for c in rec.calls[1:]] == [16, 32, 48, None]
    # the chunks that came with a verdict are the cases get_test_batch gives at those indices
    runs = client.request("runs", {"op": "softmax"})[0]["runs"]
    assert sorted(x["first_index"] for x in runs) == [0, 16, 32, 48] and sum(x["total"] for x in runs) == 64
    plain = client.get_test_batch("softmax", count=64, seed=5, dtypes=["float32"])
    again = Client()
    seen = []
    again_rec = _Recorder(again)
    again.fuzz_op_client_side("softmax", run_op=lambda i: seen.append(i["x"].tobytes()) or np_softmax(i["x"], i["dim"]),
                              iterations=64, dtypes=["float32"], seed=5, vary_attrs=[])
    assert seen == [c["inputs"]["x"].tobytes() for c in plain]
    assert again_rec.methods().count("get_test_batch") == 1
    # By default the kernel's read of `dim` varies it: the first case alone (every attr at its
    # default), then chunks of 16 drawn under vary_attrs=["dim"], still one request a chunk
    rec.calls.clear()
    r = client.fuzz_op_client_side("softmax", run_op=lambda i: np_softmax(i["x"], i["dim"]), iterations=64,
                                   dtypes=["float32"], seed=5)
    assert r.passed == 64 and r.varied_attrs == ["dim"], r.summary()
    assert rec.methods() == ["get_test_batch"] + ["submit_outputs"] * 5, rec.methods()
    assert [len(c[1]["items"]) for c in rec.calls[1:]] == [1, 16, 16, 16, 15]
    assert [c[1].get("next", {}).get("start_index") for c in rec.calls[1:]] == [1, 17, 33, 49, None]
    assert rec.calls[1][1]["next"]["options"]["vary_attrs"] == ["dim"]


def test_a_failing_client_side_run_sends_no_tensor_twice_and_asks_nothing_per_failure(daemon):
    client = Client()
    rec = _Recorder(client)
    r = client.fuzz_op_client_side("softmax", run_op=lambda i: buggy_softmax(i["x"], i["dim"]), iterations=32,
                                   dtypes=["float32"], seed=7, layouts=False, vary_attrs=[])
    assert r.passed == 0 and len(r.failures) == 32
    # chunk 1 is held for the client's diagnoses, then finished by its id alone, with no tensors; the
    # finishing request brings chunk 2 (the budget of 3 diagnoses is spent in chunk 1)
    assert rec.methods() == ["get_test_batch", "submit_outputs", "submit_outputs", "submit_outputs"], rec.methods()
    (_, first, n1), (_, finish, n2) = rec.calls[1], rec.calls[2]
    assert first["hold_by_id"] and n1 > 0
    assert finish["held_id"].startswith("held-") and "items" not in finish and n2 == 0
    assert [d["item"] for d in finish["diagnoses"]] == [0, 1, 2]
    # every failure has its snapshot from the verdict (no `failures get`), and it is the stored one
    assert all(f.snapshot for f in r.failures) and "snapshot" not in r.failures[0].verdict
    assert client.failure(r.failures[5].id, snapshot=True)["snapshot"] == r.failures[5].snapshot
    here = [f for f in r.failures if "probes re-ran the kernel in the client (gpuemu-python)"
            in f.diagnosis.get("evidence", [])]
    assert len(here) == 3 and {f.index for f in here} == {0, 1, 2}
    assert daemon.cli_json("failures", "show", here[0].id)["diagnosis"] == here[0].diagnosis
    # a held id is finished once: the second time it is gone (and the run it belonged to is over)
    with pytest.raises(gpuemu.NotFoundError, match="submit the items again"):
        client.request("submit_outputs", {**{k: v for k, v in finish.items() if k != "run_id"}, "diagnoses": []})
    with pytest.raises(gpuemu.NotFoundError, match="no client-side run"):
        client.request("submit_outputs", {**finish, "diagnoses": []})


def test_a_client_side_run_keeps_its_books_in_the_daemon_as_the_engine_does_in_process(daemon):
    """One fuzz run (FuzzRun): the daemon's books of a client-side run are those the engine keeps
    for the same kernel in process (counts, first failure, worst case), its diagnosis budget names
    the failures the client diagnoses, and a finished run is closed."""
    kernel = lambda i: tail_tile_softmax(i["x"], i["dim"])  # noqa: E731
    client = Client()
    rec = _Recorder(client)
    r = client.fuzz_op_client_side("softmax", run_op=kernel, iterations=40, dtypes=["float32"], seed=11,
                                   framework="numpy", diagnose_limit=2)
    here = gpuemu.inprocess.fuzz_op_in_process("softmax", kernel, iterations=40, dtypes=["float32"], seed=11,
                                               framework="numpy", diagnose=False)
    assert 0 < r.passed < r.total == 40
    assert (r.total, r.passed, r.first_failure, r.worst_index) == \
        (here.total, here.passed, here.first_failure, here.worst_index)
    assert r.worst_ratio == pytest.approx(here.worst_ratio)
    assert [f.index for f in r.failures] == [f.index for f in here.failures]
    # get_test_batch opened the run; every submission named it; the budget of 2 went to the first
    # two failures of the run, and only to them
    opened = rec.calls[0][1]
    assert opened["run"] == {"iterations": 40, "fail_fast": False, "diagnose_limit": 2}
    run_ids = {c[1].get("run_id") for c in rec.calls[1:] if "held_id" not in c[1]}
    assert len(run_ids) == 1 and next(iter(run_ids)).startswith("run-")
    diagnosed = [f.index for f in r.failures
                 if "probes re-ran the kernel in the client (gpuemu-python)" in f.diagnosis.get("evidence", [])]
    assert diagnosed == [f.index for f in r.failures][:2]
    # the run is over: a later submission naming it is refused
    batch = client.get_test_batch("softmax", count=1, seed=11, dtypes=["float32"])
    held = client._cases[("softmax", batch[0]["seed"])]
    item, t = client._run_item("softmax", lambda a: np_softmax(a["x"], a["dim"]), held[0], held[2], 0, False, None)
    with pytest.raises(gpuemu.NotFoundError, match="no client-side run"):
        client.request("submit_outputs", {"op": "softmax", "options": held[1], "items": [item],
                                          "run_id": next(iter(run_ids))}, t)


def test_a_client_side_run_stops_where_fail_fast_says_and_refuses_other_options(daemon):
    client = Client()
    rec = _Recorder(client)
    r = client.fuzz_op_client_side("softmax", run_op=lambda i: buggy_softmax(i["x"], i["dim"]), iterations=64,
                                   dtypes=["float32"], seed=7, fail_fast=True, diagnose_limit=0, vary_attrs=[])
    # the first chunk is judged whole, then the daemon's run says done: no second chunk is asked for
    assert r.total == 16 and r.first_failure == 0 and len(r.failures) == 16
    assert rec.methods() == ["get_test_batch", "submit_outputs"]
    assert "next" in rec.calls[1][1]  # asked for, but not handed out by the reply that closed the run
    # a run fuzzes one op under one set of options
    opened = client._fetch_batch("softmax", {"dtypes": ["float32"]}, 3, 0, 1, "numpy", None,
                                 run={"iterations": 5})
    rid = opened.run_id
    case, inputs = opened.cases[0]
    item, t = client._run_item("softmax", lambda a: np_softmax(a["x"], a["dim"]), case, inputs, 0, False, None)
    with pytest.raises(gpuemu.ValidationError, match="other options"):
        client.request("submit_outputs", {"op": "softmax", "options": {"dtypes": ["float16"]}, "items": [item],
                                          "run_id": rid}, t)
    res, _ = client.request("submit_outputs", {"op": "softmax", "options": {"dtypes": ["float32"]},
                                               "items": [item], "run_id": rid}, t)
    assert res["run"]["total"] == 1 and res["run"]["passed"] == 1 and res["run"]["done"] is False
    with pytest.raises(gpuemu.ValidationError, match="iterations"):
        client._fetch_batch("softmax", {"dtypes": ["float32"]}, 3, 0, 1, "numpy", None, run={"iterations": 0})


def test_held_submission_by_id_is_checked(daemon):
    client = Client()
    case = client.get_test_batch("softmax", count=2, seed=3, dtypes=["float32"])
    items, tensors = [], []
    for i, c in enumerate(case):
        held = client._cases[("softmax", c["seed"])]
        item, t = client._run_item("softmax", lambda a: buggy_softmax(a["x"], a["dim"]), held[0], held[2], i,
                                   False, None)
        items.append(item)
        tensors += t
    params = {"op": "softmax", "options": held[1], "items": items, "store": True, "hold_for_diagnosis": True,
              "hold_by_id": True}
    res, _ = client.request("submit_outputs", params, tensors)
    assert res["held"] is True and res["held_id"] and all("failure_id" not in x for x in res["results"])
    finish = {"op": "softmax", "options": held[1], "store": True, "held_id": res["held_id"]}
    with pytest.raises(gpuemu.ValidationError, match="not 'items'"):
        client.request("submit_outputs", {**finish, "items": items})
    with pytest.raises(gpuemu.ValidationError, match="names item 2 of a submission of 2"):
        client.request("submit_outputs", {**finish, "diagnoses": [{"item": 2, "diagnosis": {"bug_class": "x"}}]})
    with pytest.raises(gpuemu.ValidationError, match="bug_class"):
        client.request("submit_outputs", {**finish, "diagnoses": [{"item": 0, "diagnosis": {"summary": "x"}}]})
    with pytest.raises(gpuemu.ValidationError, match="other options"):
        client.request("submit_outputs", {**finish, "options": {**held[1], "layouts": not held[1].get("layouts")},
                                          "diagnoses": []})
    with pytest.raises(gpuemu.NotFoundError):
        client.request("submit_outputs", {**finish, "held_id": "held-999999", "diagnoses": []})
    # a refused finish keeps the submission held: a good one stores it, with the diagnosis given
    mine = {"bug_class": "missing_scale", "summary": "from the client", "evidence": ["e1"]}
    done, tens = client.request("submit_outputs", {**finish, "diagnoses": [{"item": 1, "diagnosis": mine}],
                                                   "snapshots": True})
    assert "held" not in done and [x["passed"] for x in done["results"]] == [False, False]
    assert done["results"][1]["diagnosis"] == mine and done["results"][0]["diagnosis"] != mine
    assert client.failure(done["results"][1]["failure_id"])["diagnosis"] == mine
    # the snapshots come back as bytes: those `failures get` returns in base64
    assert sorted(tens) == ["snapshots/0", "snapshots/1"]
    for i in (0, 1):
        d, shape, strides, offset, storage = tens[f"snapshots/{i}"]
        assert d == "uint8" and strides == [1] and offset == 0 and shape == [storage.size] and storage.size > 1000
        stored = client.failure(done["results"][i]["failure_id"], snapshot=True)["snapshot"]
        assert base64.b64encode(storage.tobytes()).decode() == stored
    runs = client.request("runs", {"op": "softmax"})[0]["runs"]
    assert len(runs) == 1 and runs[0]["total"] == 2 and runs[0]["passed"] == 0


@pytest.mark.parametrize("framework,dtype", [("numpy", "float32"), ("numpy", "bfloat16"), ("torch", "float32")])
def test_inputs_a_kernel_left_alone_are_not_sent_back_and_a_written_one_is(daemon, framework, dtype):
    """The mutation check without the round trip of every input: an input the kernel did not
    write goes back to the daemon only when it differs from what came (numpy float32 and torch
    float32 are handed the received storage itself; numpy bfloat16 gets decoded float32 copies)."""
    client = Client()
    rec = _Recorder(client)

    def kernel(i):
        x = i["x"]
        return np_softmax(np.asarray(x), i["dim"]) if framework == "numpy" else x.softmax(i["dim"])

    r = client.fuzz_op_client_side("softmax", run_op=kernel, iterations=32, dtypes=[dtype], seed=5,
                                   framework=framework, vary_attrs=[])
    assert r.passed == 32, r.summary()
    subs = [(p, n) for m, p, n in rec.calls if m == "submit_outputs"]
    assert [n for _, n in subs] == [len(p["items"]) for p, _ in subs] == [16, 16], subs  # outputs only

    rec.calls.clear()
    seen = []

    def writes_into_case_5(i):
        out = kernel(i)
        seen.append(1)
        if len(seen) == 6:  # the sixth case: index 5
            i["x"][..., 0] = 7.0
        return out

    r = client.fuzz_op_client_side("softmax", run_op=writes_into_case_5, iterations=32, dtypes=[dtype], seed=5,
                                   framework=framework, vary_attrs=[])
    assert [f.index for f in r.failures] == [5] and r.passed == 31, r.summary()
    assert r.failures[0].message.startswith("input mutated: the kernel wrote into 'x'"), r.failures[0].message
    subs = [n for m, _, n in rec.calls if m == "submit_outputs"]
    assert subs[0] == 17 and subs[1:] == [16], subs  # the written input went back, no other


def test_determinism_check_runs_again_on_pristine_inputs_without_asking_the_daemon(daemon):
    client = Client()
    rec = _Recorder(client)

    def scribbler(inputs):  # writes into its input after computing: the second run must not see it
        out = np_softmax(inputs["x"], inputs["dim"])
        inputs["x"][...] = 0
        return out

    r = client.fuzz_op_client_side("softmax", run_op=scribbler, iterations=20, dtypes=["float32"], seed=2,
                                   check_determinism=True, layouts=False)
    assert rec.methods().count("get_test_batch") == 1, rec.methods()
    # deterministic on pristine inputs, so the verdict is the mutation of the first run's inputs
    assert r.passed == 0 and all(f.message.startswith("input mutated") for f in r.failures), r.failures[0].message


# --- replaying a failure byte-exact: from its snapshot and from its seed -------------------------

def _frame_tensors(frame: bytes):
    from gpuemu._script_runner import decode_frame

    header, tensors = decode_frame(bytearray(frame))
    return header, {k: (d, bytes(v)) for k, (d, v) in tensors.items()}


def test_failure_replays_byte_exact_from_snapshot_and_from_seed(daemon):
    client = Client()
    results = client.fuzz_op_client_side("softmax", run_op=lambda i: buggy_softmax(i["x"], i["dim"]),
                                         iterations=4, seed=77, dtypes=["bfloat16"], diagnose_limit=0)
    f = results.failures[0]
    _, snap = _frame_tensors(base64.b64decode(f.snapshot))
    assert set(snap) == {"inputs/x"}
    desc, stored = snap["inputs/x"]
    assert desc["dtype"] == "bfloat16" and desc["shape"] == f.shapes["x"]
    # from the seed, through the daemon: the same bytes and view
    again = client.get_test_batch("softmax", count=1, seed=results.seed, start_index=f.index, dtypes=["bfloat16"])[0]
    assert again["seed"] == f.seed
    c = again["_case"]["inputs"]["x"]
    held = client._cases[("softmax", f.seed)][2]["x"]
    assert held.storage.tobytes() == stored
    assert [held.shape, held.strides, held.offset] == [desc["shape"], desc["strides"], desc["offset"]]
    assert c["shape"] == desc["shape"]
    # from the seed alone, in process (no daemon): the same bytes again
    regenerated = gpuemu.inprocess.replay("softmax", None, case_seed=f.seed, dtypes=["bfloat16"])
    dt, shape, strides, offset, storage = regenerated["case"].snapshot()["x"]
    assert bytes(storage) == stored and [list(shape), list(strides), offset] == [desc["shape"], desc["strides"],
                                                                                  desc["offset"]]
    # and the buggy kernel on the snapshot's inputs still fails, the fixed one passes
    assert client.reproduce(f.id, run_op=lambda i: buggy_softmax(i["x"], i["dim"]))["passed"] is False
    assert client.reproduce(f.id, run_op=lambda i: np_softmax(i["x"], i["dim"]))["passed"] is True


# --- torch inputs with their real strides, zero copy ----------------------------------------------

def test_torch_inputs_are_really_non_contiguous_views_of_the_received_storage(daemon):
    torch = pytest.importorskip("torch")
    client = Client()
    cases = client.get_test_batch("softmax", count=40, seed=5, dtypes=["float32"], framework="torch")
    kinds = set()
    for case in cases:
        x = case["inputs"]["x"]
        wire = case["_case"]["inputs"]["x"]
        held = client._cases[("softmax", case["seed"])][2]["x"]
        assert list(x.stride()) == held.strides and x.storage_offset() == held.offset
        # zero copy: the tensor's storage is the received buffer
        assert x.untyped_storage().data_ptr() == held.storage.ctypes.data if hasattr(x, "untyped_storage") \
            else x.storage().data_ptr() == held.storage.ctypes.data
        if wire["layout"] != "contiguous" and x.numel() > 1:
            kinds.add(wire["layout"])
            if wire["layout"] in ("transposed", "strided", "expanded"):
                assert not x.is_contiguous(), (wire, x.stride())
        v = client.submit_output("softmax", case["inputs"], torch_softmax(x, case["attrs"]["dim"]), case["seed"])
        assert v.passed, v.message
    assert kinds & {"transposed", "strided", "expanded"}, kinds


# --- minimize, lint, timeouts, connecting ---------------------------------------------------------

def test_minimize_through_the_client(daemon):
    client = Client()
    # a client-side kernel: minimized here, by the in-process engine re-running run_op
    r = client.fuzz_op_client_side("softmax", run_op=lambda i: tail_tile_softmax(i["x"], i["dim"]), iterations=4,
                                   dtypes=["float32"], seed=11, layouts=False, diagnose_limit=0)
    f = r.failures[0]
    m = client.minimize(f.id, run_op=lambda i: tail_tile_softmax(i["x"], i["dim"]), max_evaluations=60)
    assert m["id"] == f.id and m["summary"] and m["evaluations"] > 0
    assert m["dims"]["N"] <= f.dims["N"] and m["dims"]["N"] % 128 != 0, m
    # without run_op the daemon refuses: it cannot run a client's kernel
    with pytest.raises(gpuemu.ValidationError, match="client-side kernel"):
        client.minimize(f.id)
    # a built-in kernel's failure is minimized by the daemon, and the result stored
    rep, _ = client.request("fuzz", {"op": "softmax", "kernel": {"kind": "builtin", "name": "tail_leak"},
                                     "iterations": 8, "seed": 3, "minimize": False,
                                     "options": {"dtypes": ["float32"], "layouts": False}})
    fid = rep["failures"][0]["id"]
    m = client.minimize(fid, max_evaluations=60)
    assert m["minimized_id"] and m["summary"]
    assert client.failure(m["minimized_id"])["minimized_from"] == fid


def test_lint_through_the_client(daemon):
    client = Client()
    cubin = Path(__file__).resolve().parents[1] / "data" / "lint" / "recorded" / "basic_sm90.cubin"
    rep = client.lint(cubin)
    assert "failed" in rep and rep["failed"] in (True, False)
    assert json.dumps(rep)  # plain JSON
    with pytest.raises(gpuemu.GpuemuError):
        client.lint("/no/such/kernel.cu")


def test_request_over_the_client_timeout_is_timeout_error(daemon, tmp_path):
    script = tmp_path / "slow.py"
    script.write_text("import time\n\ndef slow(inputs):\n    time.sleep(1.5)\n    return inputs['x']\n")
    client = Client(timeout=0.3)
    with pytest.raises(gpuemu.TimeoutError) as e:
        client.request("fuzz", {"op": "softmax", "iterations": 1, "seed": 1, "minimize": False,
                                "kernel": {"kind": "script", "script": str(script), "function": "slow"}})
    assert isinstance(e.value, TimeoutError)  # also the builtin
    assert Client().ping()["pong"] is True  # the daemon is fine; a new client connects at once


def test_daemon_binary_that_is_not_executable_is_connect_error(tmp_path):
    bogus = tmp_path / "gpuemu-daemon"
    bogus.write_text("not a program")
    with pytest.raises(ConnectError) as e:
        Client(home=str(tmp_path / "h"), daemon_path=str(bogus), start_timeout=3)
    assert str(bogus) in str(e.value)


# --- frameworks that are not installed ------------------------------------------------------------

@pytest.mark.parametrize("framework", ["cupy", "jax", "tensorflow"])
def test_missing_framework_is_a_clear_validation_error(daemon, framework):
    import importlib.util

    if importlib.util.find_spec(framework) is not None:
        pytest.skip(f"{framework} is installed here")
    client = Client()
    with pytest.raises(gpuemu.ValidationError, match=f"framework '{framework}' needs the Python package"):
        client.fuzz_op_client_side("softmax", run_op=lambda i: i["x"], iterations=1, framework=framework)
    with pytest.raises(gpuemu.ValidationError, match=framework):
        client.get_test_batch("softmax", count=1, framework=framework)


# --- script-based: ops registered in gpuemu.toml -------------------------------------------------

PROJECT_KERNELS = '''
import numpy as np

def softmax(inputs):
    x = inputs["x"].astype(np.float32)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)

def softmax_tail(inputs):
    # Buggy: BLOCK=128 and the last partial tile is padded with 0 instead of -inf.
    x = inputs["x"].astype(np.float32)
    n = x.shape[-1]
    p = np.zeros(x.shape[:-1] + (-(-n // 128) * 128,), np.float32)
    p[..., :n] = x
    e = np.exp(p - p.max(axis=-1, keepdims=True))
    return e[..., :n] / e.sum(axis=-1, keepdims=True)
'''

PROJECT_TOML = '''
[project]
name = "demo"

[defaults]
iterations = 6
seed = 7
dtypes = ["float32"]

[[op]]
name = "softmax"
script = "kernels/k.py:softmax"
attrs = { dim = -1 }

[[op]]
name = "softmax"
script = "kernels/k.py:softmax_tail"
attrs = { dim = -1 }
layouts = false

[[op]]
name = "rms_norm"
kernel = "fp32"
'''


def test_run_registered_runs_the_scripts_of_gpuemu_toml(daemon, tmp_path, monkeypatch):
    proj = tmp_path / "proj"
    (proj / "kernels").mkdir(parents=True)
    (proj / "kernels" / "k.py").write_text(PROJECT_KERNELS)
    (proj / "gpuemu.toml").write_text(PROJECT_TOML)
    (proj / "sub").mkdir()
    monkeypatch.chdir(proj / "sub")  # found from a subdirectory, as `gpuemu ci` finds it
    client = Client()
    ok = client.run_registered("softmax", kernel="softmax")
    assert isinstance(ok, FuzzResults) and ok.total == 6 and ok.passed == 6, ok.summary()
    assert ok.seed == 7
    bad = client.run_registered("softmax", kernel="k.py:softmax_tail", iterations=10, seed=21)
    assert bad.total == 10 and bad.passed < 10 and bad.seed == 21
    f = bad.failures[0]
    assert f.id and f.repro == f"gpuemu repro {f.id}" and f.snapshot
    assert f.file == str(proj / "kernels" / "k.py")
    assert f.bug_class == "tail_mask", f.describe()  # the daemon re-ran the script on its probes
    assert daemon.cli_json("repro", f.id, expect_rc=None)["regenerated_identical"] is True
    with pytest.raises(gpuemu.ValidationError, match="registered 2 times"):
        client.run_registered("softmax")
    with pytest.raises(gpuemu.NotFoundError, match="no \\[\\[op\\]\\] registers 'matmul'"):
        client.run_registered("matmul")
    (tmp_path / "bad.toml").write_text('[[op]]\nname = "softmax"\nscript = "k.py:f"\ncolour = 1\n')
    with pytest.raises(gpuemu.ValidationError, match="unknown key 'colour'"):
        client.run_registered("softmax", config=tmp_path / "bad.toml")


def test_kernel_identity_follows_a_lambda_to_its_function(tmp_path):
    """Where editors put a failure: the def of the function run_op calls, directly or through a
    module (gpuemu.client._kernel_identity)."""
    from gpuemu.client import _kernel_identity

    mod = tmp_path / "kernels_for_identity.py"
    mod.write_text("import numpy as np\n\n\ndef softmax(x):\n    return x\n")
    sys.path.insert(0, str(tmp_path))
    try:
        import kernels_for_identity as kernels
    finally:
        sys.path.remove(str(tmp_path))
    via_module = _kernel_identity(lambda inputs: kernels.softmax(inputs["x"]))
    assert via_module == {"kind": "client", "name": "softmax", "file": str(mod), "line": 4}
    direct = _kernel_identity(kernels.softmax)
    assert direct == via_module
    here = _kernel_identity(lambda inputs: inputs["x"])
    assert here["name"].endswith("<lambda>") and here["file"] == __file__


def test_kept_cases_judge_as_regenerated_ones(daemon, tmp_path, monkeypatch):
    """The daemon keeps the cases get_test_batch hands out, with references computed while the
    kernel runs (daemon/server/case_cache.hpp). The verdicts must be the ones of a daemon that
    regenerates every case (GPUEMU_CASE_CACHE_MB=0), and submissions must actually use the kept
    cases."""
    def buggy(i):  # right on most cases, 3% too large on rows longer than 64
        x = i["x"].astype(np.float64)
        e = np.exp(x - x.max(axis=i["dim"], keepdims=True))
        y = e / e.sum(axis=i["dim"], keepdims=True)
        if x.shape[-1] > 64:
            y = y * 1.03
        return y.astype(i["x"].dtype)

    def runs(client):
        out = []
        seen = []  # every input the kernel got: prefetched chunks hold the regenerated bytes

        def fn(i):
            seen.append(i["x"].tobytes())
            return buggy(i)

        r = client.fuzz_op_client_side("softmax", fn, iterations=40, seed=1234, dtypes=["float32", "float16"])
        out.append((r.total, r.passed, r.worst_ratio,
                    sorted((f.index, f.max_error, f.message) for f in r.failures)))
        out.append(seen)
        batch = client.get_test_batch("softmax", count=6, seed=99, dtypes=["float32"])
        for case in batch:
            v = client.submit_output("softmax", case["inputs"], buggy(dict(case["inputs"], **case["attrs"])),
                                     case["seed"])
            out.append((case["index"], v.passed, v.max_error))
        return out

    kept = Client(home=str(daemon.home))
    with_cache = runs(kept)
    stats = kept.request("stats")[0]["case_cache"]
    assert stats["hits"] >= 46, stats  # every submitted case was found kept
    assert stats["limit_bytes"] == 512 << 20
    kept.request("shutdown")

    other_home = tmp_path / "no-cache"
    monkeypatch.setenv("GPUEMU_CASE_CACHE_MB", "0")
    monkeypatch.setenv("GPUEMU_HOME", str(other_home))
    regenerated = Client(home=str(other_home))
    try:
        without = runs(regenerated)
        off = regenerated.request("stats")[0]["case_cache"]
        assert off["limit_bytes"] == 0 and off["hits"] == 0, off
    finally:
        regenerated.request("shutdown")
    assert len(with_cache[1]) >= 40  # the cases, then the probes of the diagnoses made here
    assert any(not r[1] for r in with_cache[2:]), "the bug must fail some single submissions"
    assert with_cache[0][1] < with_cache[0][0], "the bug must fail some fuzzed cases"
    assert with_cache == without


def test_prefetched_cases_are_made_ahead_and_handed_out_as_generated(daemon):
    client = Client()
    first = client.get_test_batch("softmax", count=4, seed=21, dtypes=["float32"])
    # get_test_batch's prefetch: the daemon makes the next cases on its background thread
    res, _ = client.request("get_test_batch", {"op": "softmax", "count": 4, "seed": 21, "prefetch": 8,
                                               "options": client._options(["float32"], "adversarial", None, None,
                                                                          True, None, None, None)})
    deadline = time.time() + 30
    while client.stats()["case_cache"]["cases"] < 12 and time.time() < deadline:
        time.sleep(0.02)
    cache = client.stats()["case_cache"]
    assert cache["cases"] == 12, cache
    later = client.get_test_batch("softmax", count=8, seed=21, dtypes=["float32"], start_index=4)
    after = client.stats()["case_cache"]
    assert after["cases"] == 12 and after["misses"] == cache["misses"], after  # served from what was made
    # the same cases a daemon that makes none ahead hands out, byte for byte
    fresh = Client(home=str(daemon.home) + "-fresh")
    try:
        plain = fresh.get_test_batch("softmax", count=12, seed=21, dtypes=["float32"])
    finally:
        fresh.request("shutdown")
    assert [c["seed"] for c in first + later] == [c["seed"] for c in plain]
    assert [c["inputs"]["x"].tobytes() for c in first + later] == [c["inputs"]["x"].tobytes() for c in plain]
    assert res["cases"][0]["seed"] == first[0]["seed"]
    with pytest.raises(gpuemu.ValidationError, match="prefetch"):
        client.request("get_test_batch", {"op": "softmax", "count": 1, "prefetch": 10 ** 9})


def test_a_batch_carries_digests_unless_asked_not_to(daemon):
    """`digests: false` (what fuzz_op_client_side asks): the same cases and bytes, without the
    FNV-1a of every input byte that `gpuemu cases` prints (docs/tensor-layout.md)."""
    client = Client()
    base = {"op": "matmul", "count": 3, "seed": 4, "options": {"distribution": "adversarial"}}
    with_d, t1 = client.request("get_test_batch", base)
    without, t2 = client.request("get_test_batch", {**base, "digests": False})
    assert all(set(i) >= {"digest", "dtype", "shape", "strides"} for c in with_d["cases"] for i in c["inputs"].values())
    assert all("digest" not in i for c in without["cases"] for i in c["inputs"].values())
    strip = [{**c, "inputs": {k: {f: v for f, v in i.items() if f != "digest"} for k, i in c["inputs"].items()}}
             for c in with_d["cases"]]
    assert strip == without["cases"]
    assert {k: v[4].tobytes() for k, v in t1.items()} == {k: v[4].tobytes() for k, v in t2.items()}
    with pytest.raises(gpuemu.ValidationError, match="digests"):
        client.request("get_test_batch", {**base, "digests": "no"})
