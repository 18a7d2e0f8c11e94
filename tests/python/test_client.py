"""gpuemu.Client against a real gpuemu-daemon (temporary GPUEMU_HOME per test, started by the
client's autostart; the CLI of the same build checks what the daemon stored)."""

from __future__ import annotations

import base64
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from daemon_harness import DAEMON, GPUEMU, Daemon, alive, kill_hard  # noqa: E402

import gpuemu  # noqa: E402
from gpuemu import Client, ConnectError, FuzzResults  # noqa: E402

pytestmark = pytest.mark.skipif(not (os.path.exists(GPUEMU) and os.path.exists(DAEMON)),
                                reason="gpuemu / gpuemu-daemon not built")


@pytest.fixture
def daemon(tmp_path, monkeypatch, request):
    home = tmp_path / "home"
    monkeypatch.setenv("GPUEMU_HOME", str(home))
    monkeypatch.setenv("GPUEMU_DAEMON", DAEMON)
    d = Daemon(home)
    yield d
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        print("---- daemon log ----\n" + d.log())
    try:
        pid = d.pid
    except (FileNotFoundError, json.JSONDecodeError):
        pid = None
    d.stop()
    if pid and alive(pid):
        kill_hard(pid)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):  # noqa: D103
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)


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
    assert results.total == 16 and results.first_failure >= 0  # stopped after the first chunk
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
