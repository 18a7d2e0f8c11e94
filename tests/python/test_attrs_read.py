"""Attrs drawn when the kernel reads them (issue 47): with default arguments, an attr ``run_op``
reads from its inputs is varied over the schema's values after the first case, an attr it never
reads stays at its default, pinned attrs stay pinned, ``vary_attrs`` keeps its meaning, and the
run reports which attrs were varied. Client-side runs against a real daemon (temporary
GPUEMU_HOME), in-process runs, and the pytest plugin; real torch on the CPU."""

from __future__ import annotations

import json
import os
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
torch.set_num_threads(1)

from daemon_harness import DAEMON, GPUEMU, Daemon, daemon  # noqa: E402,F401 (daemon: the fixture)

import gpuemu  # noqa: E402
from gpuemu import Client  # noqa: E402
from gpuemu.inprocess import _ReadTracking  # noqa: E402

pytest_plugins = ["pytester"]
needs_daemon = pytest.mark.skipif(not (os.path.exists(GPUEMU) and os.path.exists(DAEMON)),
                                  reason="gpuemu / gpuemu-daemon not built")
F32 = torch.float32
SEED = 20261129


def rope(x, theta=10000.0, style="half", offset=0, use_offset=True):
    """Rotary embedding in fp32 (HF rotate_half or GPT-J interleaved pairs), stored in x's dtype.
    ``use_offset=False`` is the decode bug: it takes the offset and starts positions at 0."""
    _b, l, _h, d = x.shape
    inv = 1.0 / (float(theta) ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    pos = torch.arange(l, dtype=torch.float64) + (float(offset) if use_offset else 0.0)
    ang = (pos[:, None] * inv[None, :]).to(F32)
    cos, sin = torch.cos(ang)[None, :, None, :], torch.sin(ang)[None, :, None, :]
    t = x.to(F32)
    x1, x2 = (t[..., 0::2], t[..., 1::2]) if style == "interleaved" else (t[..., : d // 2], t[..., d // 2:])
    o1, o2 = x1 * cos - x2 * sin, x2 * cos + x1 * sin
    out = torch.empty(x.shape, dtype=F32)
    if style == "interleaved":
        out[..., 0::2], out[..., 1::2] = o1, o2
    else:
        out[..., : d // 2], out[..., d // 2:] = o1, o2
    return out.to(x.dtype)


def rope_ignores_offset(inputs):  # the RoPE offset bug: handed the offset, positions from 0
    return rope(inputs["x"], inputs["theta"], inputs["style"], inputs["offset"], use_offset=False)


def rope_correct(inputs):
    return rope(inputs["x"], inputs["theta"], inputs["style"], inputs["offset"])


def rope_defaults_only(inputs):  # supports only theta=1e4, half pairs, offset 0, and reads none
    return rope(inputs["x"])


def attention(inputs, bottom_right=False):
    """softmax(q k^T scale) v in fp32; causal top-left (SDPA, the schema's) or, the bug,
    bottom-right aligned (key j <= i + Lk - Lq, FlashAttention-2's), which differ when Lq != Lk."""
    q, k, v = (inputs[n].to(F32) for n in ("q", "k", "v"))
    lq, lk, d = q.shape[-2], k.shape[-2], q.shape[-1]
    if k.shape[1] != q.shape[1]:
        rep = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    scale = inputs["scale"] if inputs["scale"] is not None else d ** -0.5
    s = (q @ k.transpose(-1, -2)) * scale
    if inputs["causal"]:
        shift = lk - lq if bottom_right else 0
        mask = torch.arange(lk)[None, :] > torch.arange(lq)[:, None] + shift
        s = s.masked_fill(mask, float("-inf"))
    return (torch.softmax(s, dim=-1) @ v).to(inputs["q"].dtype)


def attention_bottom_right(inputs):
    return attention(inputs, bottom_right=True)


# --- the read-tracking mapping -------------------------------------------------------------------


def test_read_tracking_records_what_the_kernel_reads():
    def reads(f):
        seen: set = set()
        f(_ReadTracking({"x": 1, "dim": -1, "keepdim": False}, ["dim", "keepdim"], seen))
        return seen

    assert reads(lambda i: i["x"]) == set()
    assert reads(lambda i: i["dim"]) == {"dim"}
    assert reads(lambda i: i.get("keepdim")) == {"keepdim"}
    assert reads(lambda i: "dim" in i and len(i)) == set()  # presence is not a read
    assert reads(lambda i: (lambda x, dim, keepdim: 0)(**i)) == {"dim", "keepdim"}
    assert reads(lambda i: dict(i)) == {"dim", "keepdim"}
    assert reads(lambda i: {**i}) == {"dim", "keepdim"}
    assert reads(lambda i: [v for _k, v in i.items()]) == {"dim", "keepdim"}
    assert reads(lambda i: i.copy()) == {"dim", "keepdim"}


# --- in-process -----------------------------------------------------------------------------------


def test_in_process_rope_offset_bug_is_caught_with_default_arguments():
    r = gpuemu.fuzz_op_in_process("rope", rope_ignores_offset, iterations=100, seed=SEED, diagnose=False)
    assert not r.ok and r.failures, r.summary()
    assert r.varied_attrs == ["offset", "style", "theta"]
    assert all(f.attrs["offset"] != 0 for f in r.failures)
    assert "vary_attrs=['offset', 'style', 'theta']" in r.failures[0].repro
    assert "attrs varied: offset, style, theta" in r.summary()
    # the repro's options regenerate the failing case exactly: it fails again, at its attrs
    f = r.failures[0]
    again = gpuemu.inprocess.replay("rope", rope_ignores_offset, case_seed=f.seed, dtypes=None,
                                    vary_attrs=["offset", "style", "theta"])
    assert not again["passed"] and again["inputs"]["offset"] == f.attrs["offset"]
    # the first case is drawn before any read is seen: every attr at its default
    first = gpuemu.inprocess.replay("rope", None, case_seed=__import__("gpuemu.rng").rng.case_seed(SEED, 0))["case"]
    assert dict(first.attrs) == {"offset": 0, "style": "half", "theta": 10000.0}


def test_in_process_causal_alignment_bug_is_caught_with_default_arguments():
    r = gpuemu.fuzz_op_in_process("flash_attention", attention_bottom_right, iterations=100, seed=SEED,
                                  diagnose=False)
    assert not r.ok, r.summary()
    assert r.varied_attrs == ["causal", "scale"]  # enable_gqa is not read: Hkv == H throughout
    assert all(f.attrs["causal"] and f.dims["Lq"] != f.dims["Lk"] for f in r.failures)
    ok = gpuemu.fuzz_op_in_process("flash_attention", attention, iterations=100, seed=SEED, diagnose=False)
    assert ok.ok, ok.summary()


def test_in_process_kernel_never_reading_an_attr_is_not_flagged_for_it():
    r = gpuemu.fuzz_op_in_process("rope", rope_defaults_only, iterations=100, seed=SEED, diagnose=False)
    assert r.ok and r.total == 100, r.summary()
    assert r.varied_attrs == []
    assert "attrs varied" not in r.summary()


def test_in_process_pinned_and_explicit_attrs():
    pinned = gpuemu.fuzz_op_in_process("rope", rope_ignores_offset, iterations=60, seed=SEED, diagnose=False,
                                       attrs={"offset": 0})
    assert pinned.ok and pinned.varied_attrs == ["style", "theta"], pinned.summary()
    none = gpuemu.fuzz_op_in_process("rope", rope_ignores_offset, iterations=60, seed=SEED, diagnose=False,
                                     vary_attrs=[])
    assert none.ok and none.varied_attrs == [], none.summary()
    named = gpuemu.fuzz_op_in_process("rope", rope_defaults_only, iterations=60, seed=SEED, diagnose=False,
                                      vary_attrs=["offset"])
    assert not named.ok and named.varied_attrs == ["offset"]  # named: varied, read or not
    assert named.first_failure <= 5  # ... from the first case on


# --- client-side, against a real daemon ----------------------------------------------------------


def _repro(d: Daemon, fid: str) -> dict:
    """`gpuemu repro ID --json` (exit 1: a client kernel's failure is not replayed by the daemon)."""
    out = subprocess.run([GPUEMU, "repro", fid, "--json"], env=d.env, capture_output=True, text=True, timeout=120)
    assert out.returncode in (0, 1) and out.stdout, out.stderr
    return json.loads(out.stdout)


@needs_daemon
def test_client_rope_offset_bug_is_caught_with_default_arguments(daemon):
    client = Client()
    r = client.fuzz_op_client_side("rope", rope_ignores_offset, framework="torch", seed=SEED)
    assert not r.ok and r.failures, r.summary()
    assert r.total == 100 and r.varied_attrs == ["offset", "style", "theta"]
    assert all(f.attrs["offset"] != 0 for f in r.failures)
    # the same cases as in process: the chunks switch at the same case
    inproc = gpuemu.fuzz_op_in_process("rope", rope_ignores_offset, iterations=100, seed=SEED, diagnose=False)
    assert [f.index for f in r.failures] == [f.index for f in inproc.failures]
    # every stored failure carries the options its case was drawn with: `gpuemu repro` replays it
    f = r.failures[0]
    meta = client.failure(f.id)
    assert meta["options"]["vary_attrs"] == ["offset", "style", "theta"]
    rep = _repro(daemon, f.id)
    assert rep["regenerated_identical"] is True, rep  # drawn again from its seed and options: the same bytes
    again = gpuemu.inprocess.replay("rope", rope_ignores_offset, case_seed=f.seed, vary_attrs=["offset", "style", "theta"])
    assert not again["passed"] and again["inputs"]["offset"] == f.attrs["offset"]
    good = client.fuzz_op_client_side("rope", rope_correct, framework="torch", seed=SEED)
    assert good.ok and good.varied_attrs == ["offset", "style", "theta"], good.summary()


@needs_daemon
def test_client_causal_alignment_bug_is_caught_with_default_arguments(daemon):
    client = Client()
    r = client.fuzz_op_client_side("flash_attention", attention_bottom_right, framework="torch", seed=SEED,
                                   diagnose_limit=0)
    assert not r.ok, r.summary()
    assert r.varied_attrs == ["causal", "scale"]
    assert all(f.attrs["causal"] and f.dims["Lq"] != f.dims["Lk"] for f in r.failures)
    good = client.fuzz_op_client_side("flash_attention", attention, framework="torch", seed=SEED,
                                      diagnose_limit=0)
    assert good.ok, good.summary()


@needs_daemon
def test_client_kernel_never_reading_an_attr_is_not_flagged_and_pins_hold(daemon):
    client = Client()
    r = client.fuzz_op_client_side("rope", rope_defaults_only, framework="torch", seed=SEED)
    assert r.ok and r.total == 100 and r.varied_attrs == [], r.summary()
    pinned = client.fuzz_op_client_side("rope", rope_ignores_offset, framework="torch", seed=SEED,
                                        iterations=60, attrs={"offset": 0})
    assert pinned.ok and pinned.varied_attrs == ["style", "theta"], pinned.summary()
    none = client.fuzz_op_client_side("rope", rope_ignores_offset, framework="torch", seed=SEED,
                                      iterations=60, vary_attrs=[])
    assert none.ok and none.varied_attrs == [], none.summary()
    named = client.fuzz_op_client_side("rope", rope_defaults_only, framework="torch", seed=SEED,
                                       iterations=60, vary_attrs=["offset"])
    assert not named.ok and named.varied_attrs == ["offset"]


@needs_daemon
def test_client_diagnoses_a_varied_case_as_drawn(daemon):
    """The failures of a varied chunk are diagnosed here on the case the daemon drew (with its
    varied attrs), not on the same seed drawn at the defaults (where the bug does not show)."""
    client = Client()
    r = client.fuzz_op_client_side("rope", rope_ignores_offset, framework="torch", seed=SEED, iterations=40)
    diagnosed = [f for f in r.failures if f.diagnosis.get("bug_class") not in (None, "", "not_diagnosed")]
    assert diagnosed, r.summary()
    assert any("client" in " ".join(f.diagnosis.get("evidence", [])) for f in diagnosed)


PLUGIN_KERNELS = '''
import sys
import pytest
sys.path.insert(0, %r)
from test_attrs_read import rope_ignores_offset, rope_defaults_only

@pytest.mark.gpuemu("rope", iterations=40, seed=%d, framework="torch")
def test_offset_bug(gpuemu_fuzz):
    gpuemu_fuzz(rope_ignores_offset)

@pytest.mark.gpuemu("rope", iterations=40, seed=%d, framework="torch")
def test_defaults_only(gpuemu_fuzz):
    r = gpuemu_fuzz(rope_defaults_only)
    assert r.varied_attrs == []
''' % (str(Path(__file__).parent), SEED, SEED)


@needs_daemon
def test_pytest_plugin_varies_the_attrs_read(pytester, tmp_path, monkeypatch):
    d = Daemon(tmp_path / "home")
    monkeypatch.setenv("GPUEMU_HOME", str(d.home))
    monkeypatch.setenv("GPUEMU_DAEMON", DAEMON)
    pytester.makeconftest('pytest_plugins = ["gpuemu.pytest_plugin"]\n')
    pytester.makepyfile(test_plugin=PLUGIN_KERNELS)
    junit = tmp_path / "junit.xml"
    try:
        result = pytester.runpytest_subprocess("-q", f"--junitxml={junit}", "-p", "no:cacheprovider",
                                               "test_plugin.py")
    finally:
        d.stop()
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    assert f"(master seed {SEED}; attrs varied: offset, style, theta)" in out, out
    cases = {c.get("name"): c for c in ET.parse(junit).getroot().iter("testcase")}
    props = {n: {p.get("name"): p.get("value") for p in c.iter("property")} for n, c in cases.items()}
    assert props["test_offset_bug"]["gpuemu_varied_attrs"] == "offset,style,theta"
    assert props["test_defaults_only"]["gpuemu_varied_attrs"] == ""


@needs_daemon
def test_client_backward_varies_only_the_attrs_run_op_reads(daemon):
    """backward=True: the gradients' run draws the attrs run_op reads, as the forward's (the
    autograd wrapper's own pass over the inputs is not a read): a softmax over the last dim only,
    which never reads dim, passes both runs; one that reads dim has it varied in both."""
    client = Client()
    last_only = client.fuzz_op_client_side("softmax", lambda i: torch.softmax(i["x"].double(), dim=-1).to(i["x"].dtype), framework="torch",
                                           seed=SEED, iterations=40, dtypes=["float32"], backward=True)
    assert last_only.ok, last_only.summary()
    assert last_only.varied_attrs == [] and last_only.gradients.varied_attrs == []
    reads = client.fuzz_op_client_side("softmax", lambda i: torch.softmax(i["x"].double(), dim=i["dim"]).to(i["x"].dtype), framework="torch",
                                       seed=SEED, iterations=40, dtypes=["float32"], backward=True)
    assert reads.ok, reads.summary()
    assert reads.varied_attrs == ["dim"] and reads.gradients.varied_attrs == ["dim"]
