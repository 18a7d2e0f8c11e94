"""The pytest plugin, run by a real pytest (pytester) against a real daemon."""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from daemon_harness import DAEMON, GPUEMU, Daemon

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.skipif(not (os.path.exists(GPUEMU) and os.path.exists(DAEMON)),
                                reason="gpuemu / gpuemu-daemon not built")

KERNELS = '''
import numpy as np
import pytest

def good_softmax(x):
    x = np.asarray(x, dtype=np.float32)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)

def tail_bug_softmax(x):
    x = np.asarray(x, dtype=np.float32)
    n = x.shape[-1]
    b = n // 64 * 64 if n > 64 else n
    out = np.zeros_like(x)
    e = np.exp(x[..., :b] - x[..., :b].max(axis=-1, keepdims=True))
    out[..., :b] = e / e.sum(axis=-1, keepdims=True)
    return out

@pytest.mark.gpuemu("softmax", iterations=12, dtypes=["float32"], seed=3)
def test_good(gpuemu_fuzz):
    r = gpuemu_fuzz(lambda inputs: good_softmax(inputs["x"]))
    assert r.passed == r.total == 12

@pytest.mark.gpuemu("softmax", iterations=12, dtypes=["float32"], seed=3)
def test_buggy(gpuemu_fuzz):
    gpuemu_fuzz(lambda inputs: tail_bug_softmax(inputs["x"]))

def test_unmarked(gpuemu_fuzz):
    gpuemu_fuzz(lambda inputs: good_softmax(inputs["x"]))
'''


CONFTEST = 'pytest_plugins = ["gpuemu.pytest_plugin"]\n'


def test_marker_fixture_failures_and_junit(pytester, tmp_path, monkeypatch):
    d = Daemon(tmp_path / "home")
    monkeypatch.setenv("GPUEMU_HOME", str(d.home))
    monkeypatch.setenv("GPUEMU_BIN_DIR", str(Path(GPUEMU).parent))
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_kernels=KERNELS)
    junit = tmp_path / "junit.xml"
    try:
        result = pytester.runpytest_subprocess("-q", f"--junitxml={junit}", "-p", "no:cacheprovider")
    finally:
        d.stop()
    result.assert_outcomes(passed=1, failed=1, errors=1)
    out = result.stdout.str()
    assert "gpuemu: softmax:" in out and "cases failed (master seed 3)" in out
    assert "repro: gpuemu repro f" in out and "x=[" in out
    cases = {c.get("name"): c for c in ET.parse(junit).getroot().iter("testcase")}
    props = {p.get("name"): p.get("value") for p in cases["test_buggy"].iter("property")}
    assert props["gpuemu_op"] == "softmax" and props["gpuemu_seed"] == "3"
    assert props["gpuemu_repro"].startswith("gpuemu repro f")
    assert cases["test_buggy"].find("failure") is not None
    assert cases["test_good"].find("failure") is None


def test_command_line_overrides_iterations(pytester, tmp_path, monkeypatch):
    d = Daemon(tmp_path / "home")
    monkeypatch.setenv("GPUEMU_HOME", str(d.home))
    monkeypatch.setenv("GPUEMU_BIN_DIR", str(Path(GPUEMU).parent))
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_kernels=KERNELS.replace("assert r.passed == r.total == 12", "assert r.total == 5"))
    try:
        result = pytester.runpytest_subprocess("-q", "--gpuemu-iterations", "5", "-k", "good", "-p", "no:cacheprovider")
    finally:
        d.stop()
    result.assert_outcomes(passed=1)


TORCH_OP_KERNELS = '''
import pytest, torch, gpuemu

def add_rms(x, residual, weight):
    h = x + residual
    return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * weight

class AddRmsNorm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(64, generator=torch.Generator().manual_seed(0)))

    def forward(self, x, residual):
        return add_rms(x, residual, self.weight)

MODULE = AddRmsNorm()
OP = gpuemu.torch_op("add_rms_norm_plugin", reference=MODULE, example_inputs=(torch.randn(4, 64), torch.randn(4, 64)))
W = MODULE.weight.detach()

@pytest.mark.gpuemu(OP, iterations=10, dtypes=["float32"], seed=3, framework="torch")
def test_good(gpuemu_fuzz):
    r = gpuemu_fuzz(lambda i: add_rms(i["x"].float(), i["residual"].float(), W))
    assert r.passed == r.total == 10

@pytest.mark.gpuemu(OP, iterations=10, dtypes=["float32"], seed=3, framework="torch")
def test_forgets_the_residual(gpuemu_fuzz):
    gpuemu_fuzz(lambda i: add_rms(i["x"].float(), 0 * i["residual"].float(), W))
'''


def test_a_torch_op_as_the_marker(pytester, tmp_path, monkeypatch):
    """An op made from PyTorch code in the test module goes in the marker as an op name does."""
    d = Daemon(tmp_path / "home")
    monkeypatch.setenv("GPUEMU_HOME", str(d.home))
    monkeypatch.setenv("GPUEMU_BIN_DIR", str(Path(GPUEMU).parent))
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_torch_kernels=TORCH_OP_KERNELS)
    junit = tmp_path / "junit.xml"
    try:
        result = pytester.runpytest_subprocess("-q", f"--junitxml={junit}", "-p", "no:cacheprovider")
    finally:
        d.stop()
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    assert "gpuemu: add_rms_norm_plugin: 10 of 10 cases failed (master seed 3)" in out, out
    cases = {c.get("name"): c for c in ET.parse(junit).getroot().iter("testcase")}
    props = {p.get("name"): p.get("value") for p in cases["test_forgets_the_residual"].iter("property")}
    assert props["gpuemu_op"] == "add_rms_norm_plugin" and props["gpuemu_total"] == "10"
