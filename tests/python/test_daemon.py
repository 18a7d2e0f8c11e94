"""The daemon end to end: a real gpuemu-daemon on a temporary GPUEMU_HOME with its own LMDB store,
driven through the real `gpuemu` CLI (and raw frames through `gpuemu daemon raw`)."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import textwrap
import time
from pathlib import Path

import pytest

from daemon_harness import DAEMON, GPUEMU, Daemon, alive, daemon, decode_header, encode_frame, kill_hard, wait_gone  # noqa: F401,E501 (daemon: the fixture)

pytestmark = pytest.mark.skipif(not (os.path.exists(GPUEMU) and os.path.exists(DAEMON)),
                                reason="gpuemu / gpuemu-daemon not built")

REPO = Path(__file__).resolve().parents[2]


def test_status_start_stop_and_private_socket(daemon):
    r = daemon.cli("daemon", "status", "--json")
    assert r.returncode == 1 and json.loads(r.stdout)["running"] is False
    s = daemon.start()
    assert s["started"] is True
    st = daemon.cli_json("daemon", "status")
    for key in ("pid", "socket", "version", "uptime_s"):
        assert key in st
    assert st["socket"] == str(daemon.socket)
    assert st["pid"] == daemon.pid
    assert stat.S_IMODE(os.stat(daemon.socket).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(daemon.home / "run").st_mode) == 0o700
    # start again: nothing to do
    assert daemon.cli_json("daemon", "start")["started"] is False
    pid = daemon.pid
    stopped = daemon.cli_json("daemon", "stop")
    assert stopped["stopped"] is True and not alive(pid)
    assert not daemon.socket.exists()
    assert "stopped" in daemon.log()
    assert daemon.cli("daemon", "logs", "-n", "3").returncode == 0


def test_two_daemons_refused_on_one_home(daemon):
    daemon.start()
    r = subprocess.run([DAEMON, "--home", str(daemon.home)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 3
    assert f"pid {daemon.pid}" in r.stderr and "already serves" in r.stderr
    r = subprocess.run([DAEMON, "--home", str(daemon.home), "--foreground"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 3
    assert daemon.cli("daemon", "status").returncode == 0  # the first one is untouched


def test_fuzz_stores_failures_and_repro_is_byte_exact(daemon):
    r = daemon.cli("fuzz", "softmax", "--kernel", "tail_leak", "--seed", "7", "-n", "40", "--json")
    assert r.returncode == 1, r.stderr
    report = json.loads(r.stdout)
    assert report["failed"] > 0 and len(report["failure_ids"]) == report["failed"]
    first = report["failures"][0]
    assert first["repro"] == "gpuemu repro " + first["id"]
    assert first["diagnosis"]["bug_class"] == "tail_mask"
    listed = daemon.cli_json("failures", "list")
    assert {f["id"] for f in listed} == set(report["failure_ids"])
    for item in listed:
        for key in ("id", "op", "seed", "dtype"):
            assert key in item
        assert item["op"] == "softmax"
    # repro: replays from the stored bytes and regenerates from the seed
    rep = daemon.cli_json("repro", first["id"], expect_rc=1)
    assert rep["passed"] is False and rep["regenerated_identical"] is True
    assert rep["seed"] == first["seed"]
    shown = daemon.cli_json("failures", "show", first["id"])
    assert shown["seed"] == first["seed"] and shown["kernel"] == {"kind": "builtin", "name": "tail_leak"}
    assert shown["options"]["distribution"] == "adversarial"
    for key in ("shapes", "strides", "layouts", "attrs", "dtype", "dims", "distribution", "diagnosis", "verdict",
                "gpuemu_version", "schema_version", "sub_seed_path", "master_seed", "client", "created_ms"):
        assert key in shown, key
    # minimize: stored as a new failure that replays byte-exactly too
    m = daemon.cli_json("minimize", first["id"])
    assert "N=129" in m["summary"] and m["minimized_id"]
    rep2 = daemon.cli_json("repro", m["minimized_id"], expect_rc=1)
    assert rep2["regenerated_identical"] is True and rep2["passed"] is False
    # export carries the exact bytes; rm removes one failure and only that one
    exported = json.loads(daemon.cli("failures", "export").stdout)
    assert exported["format"] == "gpuemu-failures" and len(exported["records"]) == len(listed) + 1
    assert all(rec["snapshot"] for rec in exported["records"])
    assert daemon.cli_json("failures", "rm", first["id"])["deleted"] == [first["id"]]
    r = daemon.cli("repro", first["id"])
    assert r.returncode == 2 and "not_found" not in r.stdout and first["id"] in r.stderr
    assert len(daemon.cli_json("failures", "list")) == len(listed)


def test_correct_control_passes_and_exit_codes(daemon):
    r = daemon.cli("fuzz", "softmax", "--kernel", "fp32_online", "--seed", "3", "-n", "20")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "PASSED 20/20" in r.stdout
    assert daemon.cli_json("failures", "list") == []
    r = daemon.cli("fuzz", "no_such_op", "--kernel", "x", "-n", "2")
    assert r.returncode == 2 and r.stderr.startswith("gpuemu: error:") and r.stderr.count("\n") == 1
    r = daemon.cli("fuzz", "softmax", "--kernel", "no_such_kernel", "-n", "2")
    assert r.returncode == 2 and "tail_leak" in r.stderr
    r = daemon.cli("fuzz", "softmax", "-n", "2")
    assert r.returncode == 2 and "--script" in r.stderr


KERNELS = textwrap.dedent('''
    import numpy as np

    def softmax(inputs):
        x = inputs["x"].astype(np.float32)
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    def softmax_unmasked_tail(inputs):
        x = inputs["x"].astype(np.float32)
        n = x.shape[-1]
        b = max(64, n // 64 * 64) if n > 64 else n
        e = np.exp(x[..., :b] - x[..., :b].max(axis=-1, keepdims=True))
        out = np.zeros_like(x)
        out[..., :b] = e / e.sum(axis=-1, keepdims=True)
        return out

    def raises(inputs):
        raise RuntimeError("kernel exploded")

    def torch_softmax(inputs):
        import torch
        x = inputs["x"]
        assert isinstance(x, torch.Tensor)
        return torch.softmax(x.float(), dim=-1).to(x.dtype)
''')


def test_script_kernels(daemon, tmp_path):
    k = tmp_path / "kernels.py"
    k.write_text(KERNELS)
    r = daemon.cli("fuzz", "softmax", "--script", f"{k}:softmax", "--dtype", "float32", "-n", "15", "--seed", "1")
    assert r.returncode == 0, r.stdout + r.stderr
    rep = daemon.cli_json("fuzz", "softmax", "--script", f"{k}:softmax_unmasked_tail", "--dtype", "float32",
                          "-n", "25", "--seed", "1", expect_rc=1)
    assert rep["failed"] > 0
    f = rep["failures"][0]
    assert f["diagnosis"]["bug_class"] == "tail_mask"
    assert rep["kernel"]["kind"] == "script" and rep["kernel"]["file"] == str(k)
    again = daemon.cli_json("repro", f["id"], expect_rc=1)
    assert again["passed"] is False and again["regenerated_identical"] is True
    rep = daemon.cli_json("fuzz", "softmax", "--script", f"{k}:raises", "-n", "3", "--seed", "1", expect_rc=1)
    assert rep["failed"] == 3 and "kernel exploded" in rep["failures"][0]["message"]
    r = daemon.cli("fuzz", "softmax", "--script", f"{k}:missing", "-n", "3")
    assert r.returncode == 2 and "missing" in r.stderr
    r = daemon.cli("fuzz", "softmax", "--script", f"{tmp_path}/nope.py:f", "-n", "3")
    assert r.returncode == 2 and "nope.py" in r.stderr


def test_script_kernel_with_torch_bfloat16(daemon, tmp_path):
    pytest.importorskip("torch")
    k = tmp_path / "kernels.py"
    k.write_text(KERNELS)
    r = daemon.cli("fuzz", "softmax", "--script", f"{k}:torch_softmax", "--framework", "torch", "--dtype", "bfloat16",
                   "--dtype", "float16", "-n", "12", "--seed", "5")
    assert r.returncode == 0, r.stdout + r.stderr


def test_sigterm_lets_in_flight_requests_finish(daemon):
    daemon.start()
    pid = daemon.pid
    run = subprocess.Popen([GPUEMU, "fuzz", "softmax", "--kernel", "fp32_online", "-n", "60", "--seed", "2", "--json"],
                           env=daemon.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60  # SIGTERM once the run is in flight (observed, not slept for)
    while json.loads(daemon.cli("daemon", "status", "--json").stdout)["in_flight"] < 1:
        assert time.time() < deadline and run.poll() is None, "the run never showed as in flight"
        time.sleep(0.01)
    os.kill(pid, signal.SIGTERM)
    out, err = run.communicate(timeout=120)
    assert run.returncode == 0, err
    assert json.loads(out)["total"] == 60
    assert wait_gone(pid, 60)
    assert "draining" in daemon.log() and "stopped" in daemon.log()


def test_bad_frames_get_errors_and_the_daemon_keeps_serving(daemon):
    daemon.start()
    cases = [
        b"garbage that is not a frame",
        b"GEMU" + (10**6).to_bytes(4, "little") + b"{}",
        encode_frame({"v": 1, "method": "no_such_method"}),
        encode_frame({"v": 99, "method": "ping"}),
        encode_frame({"v": 1}),
        encode_frame({"v": 1, "method": "fuzz", "params": []}),
        encode_frame({"v": 1, "method": "fuzz", "params": {"op": "softmax", "kernel": {"kind": "builtin", "name": "tail_leak"},
                                                          "iterations": -5}}),
        encode_frame({"v": 1, "method": "failures", "params": {"action": "get", "id": "f0000000000000000"}}),
        encode_frame({"v": 1, "method": "submit_outputs", "params": {"op": "softmax", "items": [{"case": {"seed": 1}}]}},
                     [("items/0/outputs/0", "float32", [4, 4], [4, 1], 0, b"\0" * 8)]),  # view past its storage
        encode_frame({"v": 1, "method": "get_test_batch", "params": {"op": "softmax", "count": 10**9}}),
        # unknown ops and dtypes, negative and huge dims, a tensor whose bytes do not match its shape
        encode_frame({"v": 1, "method": "get_test_batch", "params": {"op": "no_such_op", "count": 1}}),
        encode_frame({"v": 1, "method": "get_test_batch", "params": {"op": "softmax", "count": 1,
                                                                    "options": {"dtypes": ["float13"]}}}),
        encode_frame({"v": 1, "method": "get_test_batch", "params": {"op": "softmax", "count": 1,
                                                                    "options": {"dims": {"N": [-4]}}}}),
        encode_frame({"v": 1, "method": "get_test_batch", "params": {"op": "softmax", "count": 1,
                                                                    "options": {"dims": {"N": [2**62]}}}}),
        encode_frame({"v": 1, "method": "validate", "params": {"op": "softmax"}},
                     [("inputs/x", "float32", [2**40, 2**40], [2**40, 1], 0, b"\0" * 64)]),
        encode_frame({"v": 1, "method": "validate", "params": {"op": "softmax"}},
                     [("inputs/x", "float99", [2], [1], 0, b"\0" * 8)]),
    ]
    texts = b"GEMU" + (40).to_bytes(4, "little") + b'{"v":1,"method":"ping","tensors":[{"key":1}]}'
    cases.append(texts)
    codes = []
    for payload in cases:
        h = decode_header(daemon.raw_request(payload))
        assert h["ok"] is False, h
        codes.append(h["error"]["code"])
    assert {"protocol_error", "invalid_argument", "not_found", "unknown_op"} <= set(codes), codes
    assert daemon.cli("daemon", "status").returncode == 0
    assert daemon.cli_json("daemon", "status")["errors"] >= len(codes)


def test_headers_follow_the_protocol_schema(daemon):
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((REPO / "schemas" / "protocol.schema.json").read_text())
    daemon.start()
    requests = [
        {"v": 1, "method": "hello", "params": {"client": "test"}},
        {"v": 1, "method": "ping"},
        {"v": 1, "method": "stats"},
        {"v": 1, "method": "list_ops"},
        {"v": 1, "method": "describe_op", "params": {"op": "softmax"}},
        {"v": 1, "method": "get_test_batch", "params": {"op": "softmax", "count": 2, "seed": 1}},
        {"v": 1, "method": "failures", "params": {"action": "list"}},
        {"v": 1, "method": "failures", "params": {"action": "get", "id": "nope"}},
    ]
    for req in requests:
        jsonschema.validate(req, schema)
        reply = daemon.raw_request(encode_frame(req))
        h = decode_header(reply)
        jsonschema.validate(h, schema)
    hello = decode_header(daemon.raw_request(encode_frame(requests[0])))["result"]
    assert hello["protocol"] == 1 and "fuzz.script" in hello["capabilities"]
    batch = decode_header(daemon.raw_request(encode_frame(requests[5])))
    assert [t["key"] for t in batch["tensors"]] == ["cases/0/x", "cases/1/x"]
    assert all(t["data_offset"] % 64 == 0 for t in batch["tensors"])


NVCC = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "bin" / "nvcc"
SAXPY = """
extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
"""
SAXPY_HEAVIER = """
extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    float acc = y[i];
    #pragma unroll
    for (int k = 0; k < 16; ++k) acc = a * x[(i + k * 97) % n] + acc * 0.5f;
    y[i] = acc;
  }
}
"""


@pytest.mark.skipif(not NVCC.exists(), reason="no nvcc")
def test_lint_baselines_live_in_the_daemon_store(daemon, tmp_path):
    k = tmp_path / "saxpy.cu"
    k.write_text(SAXPY)
    r = daemon.cli("lint", str(k), "--arch", "sm_90", "--save-baseline-tag", "main", "--json")
    assert r.returncode == 0, r.stderr
    listed = decode_header(daemon.raw_request(encode_frame({"v": 1, "method": "baselines", "params": {"action": "list"}})))
    assert listed["result"]["baselines"] == ["main"]
    r = daemon.cli("lint", str(k), "--arch", "sm_90", "--baseline-tag", "main", "--json")
    assert r.returncode == 0, r.stderr
    k.write_text(SAXPY_HEAVIER)
    r = daemon.cli("lint", str(k), "--arch", "sm_90", "--baseline-tag", "main", "--json")
    assert r.returncode == 1, r.stdout + r.stderr  # the instruction count grew past the policy
    r = daemon.cli("lint", str(k), "--arch", "sm_90", "--baseline-tag", "nope")
    assert r.returncode == 2 and "nope" in r.stderr


def test_coverage_names_what_was_never_exercised(daemon, tmp_path):
    r = daemon.cli("fuzz", "softmax", "--kernel", "fp32_online", "-n", "25", "--seed", "4", "--strategy", "special")
    assert r.returncode == 0, r.stderr
    cov = daemon.cli_json("coverage", "--codecov", str(tmp_path / "cc.json"))
    assert [o["op"] for o in cov] == ["softmax"]
    soft = cov[0]
    assert soft["cases"] == 25 and soft["runs"] == 1
    assert "distribution regular" in soft["missing"] and "distribution special" not in soft["missing"]
    assert soft["counts"]["distributions"] == {"special": 25}
    assert 0 < soft["percent"] < 100 and soft["exercised"] < soft["total"]
    codecov = json.loads((tmp_path / "cc.json").read_text())["coverage"]["schemas/ops/softmax.json"]
    assert len(codecov) == soft["total"] and sum(1 for v in codecov.values() if v > 0) == soft["exercised"]
    everything = daemon.cli_json("coverage", "--all")
    assert len(everything) > 30 and any(o["op"] == "matmul" and o["percent"] == 0 for o in everything)
    r = daemon.cli("coverage", "--op", "sofmax")
    assert r.returncode == 2 and "softmax" in r.stderr
