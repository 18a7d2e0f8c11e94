"""Kernels with the signatures they really have (issue 13, "Signatures"): optional inputs pinned
with ``present=`` / ``--with`` / ``--without`` / gpuemu.toml, absent ones handed to ``run_op`` as
``None``, a kernel that raises on an absent input or an attr value it does not handle classified as
such (with the restriction that excludes it), and restrictions checked against the schema."""

from __future__ import annotations

import json
import os
import textwrap

import pytest
import torch
import torch.nn.functional as F

from daemon_harness import DAEMON, GPUEMU, Daemon, daemon  # noqa: F401 (daemon: the fixture)

import gpuemu
from gpuemu import Client, ValidationError

# The signature most Triton layer norms have: weight and bias always given.
def my_ln(x, weight, bias, eps):
    return F.layer_norm(x.float(), (x.shape[-1],), weight.float(), bias.float(), eps).to(x.dtype)


def run_my_ln(i):
    return my_ln(i["x"], i["weight"], i["bias"], i["eps"])


def pytorch_style_ln(i):  # takes weight=None / bias=None as F.layer_norm does
    w = None if i["weight"] is None else i["weight"].float()
    b = None if i["bias"] is None else i["bias"].float()
    return F.layer_norm(i["x"].float(), (i["x"].shape[-1],), w, b, i["eps"]).to(i["x"].dtype)


# --- the client (daemon-orchestrated) -------------------------------------------------------------

def test_absent_optional_inputs_reach_run_op_as_none_and_are_classified(daemon):
    client = Client()
    seen = {"weight": 0, "bias": 0, "cases": 0}

    def spy(i):
        seen["cases"] += 1
        for name in ("weight", "bias"):
            assert name in i, f"{name} missing from run_op's dict"
            seen[name] += i[name] is None
        return run_my_ln(i)

    res = client.fuzz_op_client_side("layer_norm", spy, iterations=48, seed=11, framework="torch")
    assert seen["cases"] == 48 and seen["weight"] > 0 and seen["bias"] > 0
    assert res.failed > 0
    for f in res.failures:  # every failure is the signature, not a numerical verdict
        assert f.bug_class == "absent_input", (f.message, f.diagnosis)
        summary = f.diagnosis["summary"]
        assert "present=" in summary and "--with" in summary, summary
        missing = [n for n in ("weight", "bias") if f"'{n}'" in summary]
        assert missing, summary
        assert all(n not in f.shapes for n in missing)  # it names inputs the case really lacked


def test_present_pins_optional_inputs_and_the_kernel_passes(daemon):
    client = Client()
    res = client.fuzz_op_client_side("layer_norm", run_my_ln, iterations=40, seed=11, framework="torch",
                                     present={"weight": True, "bias": True})
    assert res.ok, res.summary()
    batch = client.get_test_batch("layer_norm", count=24, seed=5, framework="torch",
                                  present={"weight": True, "bias": False})
    assert all(c["inputs"]["weight"] is not None and c["inputs"]["bias"] is None for c in batch)
    assert all("bias" in c["inputs"] for c in batch)
    # The kernel PyTorch's way (None accepted) passes with nothing pinned.
    assert client.fuzz_op_client_side("layer_norm", pytorch_style_ln, iterations=32, seed=11,
                                      framework="torch").ok


def test_get_test_batch_and_submit_output_hand_absent_inputs_as_none(daemon):
    client = Client()
    batch = client.get_test_batch("rms_norm", count=40, seed=3, framework="torch")
    absent = [c for c in batch if c["inputs"]["weight"] is None]
    assert absent and len(absent) < len(batch)
    c = absent[0]
    x = c["inputs"]["x"]
    out = (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + c["attrs"]["eps"])).to(x.dtype)
    assert client.submit_output("rms_norm", c["inputs"], out, c["seed"]).passed


@pytest.mark.parametrize("kwargs, needle", [
    ({"present": {"gamma": True}}, "has no input 'gamma'"),
    ({"present": {"x": False}}, "is required"),
    ({"dims": {"N": 0}}, "must be >= 1"),
    ({"attrs": {"eps": -1.0}}, "out of its range"),
    ({"precision": {"layer_norm": "tf32"}}, "no GEMM operands"),
])
def test_restrictions_outside_the_schema_are_validation_errors(daemon, kwargs, needle):
    client = Client()
    with pytest.raises(ValidationError, match=needle):
        client.fuzz_op_client_side("layer_norm", run_my_ln, iterations=4, seed=1, framework="torch", **kwargs)
    with pytest.raises(ValidationError, match=needle):
        client.get_test_batch("layer_norm", count=2, seed=1, **kwargs)
    with pytest.raises(ValidationError, match=needle):
        gpuemu.fuzz_op_in_process("layer_norm", run_my_ln, iterations=4, seed=1, **kwargs)


def test_present_must_be_a_dict_of_bools(daemon):
    with pytest.raises(ValidationError, match="present"):
        Client().get_test_batch("layer_norm", count=1, seed=1, present={"weight": "yes"})


def test_vary_attrs_draws_attrs_the_client_would_otherwise_keep_at_their_defaults(daemon):
    """An attention kernel with a causal-mask bug passes when causal stays False (its default, what
    `vary_attrs=[]` keeps); vary_attrs draws it from the schema's values, in fuzz_op_client_side and
    get_test_batch; and a default run draws it too, because the kernel reads `causal`."""

    def causal_off_by_one(i):  # j < i instead of j <= i: row 0 attends nothing (NaN)
        q, k, v = i["q"].float(), i["k"].float(), i["v"].float()
        s = (q @ k.transpose(-1, -2)) * (i["scale"] or q.shape[-1] ** -0.5)
        if i["causal"]:
            lq, lk = s.shape[-2:]
            s = s.masked_fill(torch.ones(lq, lk, dtype=torch.bool).triu(0), float("-inf"))
        return (torch.softmax(s, -1) @ v).to(i["q"].dtype)

    client = Client()
    kw = dict(iterations=12, seed=7, framework="torch", dims={"Lq": [8, 40], "Lk": [8, 40], "D": [16], "H": [2],
                                                              "Hkv": [2], "B": [1]})
    assert client.fuzz_op_client_side("flash_attention", causal_off_by_one, vary_attrs=[], **kw).ok
    res = client.fuzz_op_client_side("flash_attention", causal_off_by_one, vary_attrs=["causal"], **kw)
    assert not res.ok
    assert all(f.attrs["causal"] for f in res.failures)
    auto = client.fuzz_op_client_side("flash_attention", causal_off_by_one, **kw)
    assert not auto.ok and "causal" in auto.varied_attrs
    assert all(f.attrs["causal"] for f in auto.failures)
    batch = client.get_test_batch("flash_attention", count=16, seed=3, vary_attrs=["causal"], dims=kw["dims"])
    assert {c["attrs"]["causal"] for c in batch} == {False, True}
    assert {c["attrs"]["causal"] for c in client.get_test_batch("flash_attention", count=16, seed=3,
                                                                 dims=kw["dims"])} == {False}
    with pytest.raises(ValidationError, match="vary_attrs"):
        client.get_test_batch("flash_attention", count=1, seed=1, vary_attrs="causal")
    with pytest.raises(ValidationError, match="has no attr 'nope'"):
        client.get_test_batch("flash_attention", count=1, seed=1, vary_attrs=["nope"])


# --- in process ------------------------------------------------------------------------------------

def test_in_process_classifies_absent_inputs_with_probes():
    res = gpuemu.fuzz_op_in_process("layer_norm", run_my_ln, iterations=40, seed=11)
    assert res.failed > 0
    diagnosed = [f for f in res.failures if f.bug_class != "not_diagnosed"]
    assert diagnosed and all(f.bug_class == "absent_input" for f in res.failures), \
        [(f.bug_class, f.message) for f in res.failures]
    # The first failures were probed: re-run with the input given, which ran.
    assert any("ran without an error" in " ".join(f.diagnosis.get("evidence", [])) for f in res.failures)
    assert gpuemu.fuzz_op_in_process("layer_norm", run_my_ln, iterations=40, seed=11,
                                     present={"weight": True, "bias": True}).ok


def conv_groups_one_only(i):
    if i["groups"] != 1:
        raise NotImplementedError("this kernel has no grouped path")
    return F.conv1d(i["x"].float(), i["weight"].float(),
                    None if i["bias"] is None else i["bias"].float(), stride=tuple(i["stride"]),
                    padding=tuple(i["padding"]), dilation=tuple(i["dilation"]), groups=1).to(i["x"].dtype)


def test_an_attr_value_the_kernel_does_not_handle_is_unsupported_attr():
    res = gpuemu.fuzz_op_in_process("conv1d", conv_groups_one_only, iterations=30, seed=4, dtypes=["float32"],
                                    vary_attrs=["groups"])
    assert res.failed > 0
    for f in res.failures:
        assert f.bug_class == "unsupported_attr", (f.message, f.diagnosis)
        assert "groups=" in f.diagnosis["summary"] and "--attr groups=1" in f.diagnosis["summary"]
    assert gpuemu.fuzz_op_in_process("conv1d", conv_groups_one_only, iterations=30, seed=4,
                                     dtypes=["float32"], attrs={"groups": 1}).ok


def test_a_real_bug_stays_a_numerical_failure_when_inputs_are_pinned():
    def ln_bias_twice(i):
        return run_my_ln(i) + i["bias"]  # a real bug: the bias added twice

    res = gpuemu.fuzz_op_in_process("layer_norm", ln_bias_twice, iterations=10, seed=2,
                                    present={"weight": True, "bias": True})
    assert res.failed > 0 and all(f.bug_class not in ("absent_input", "kernel_error") for f in res.failures)


# --- the CLI and gpuemu.toml ---------------------------------------------------------------------------

def _cases(daemon, *args):
    return daemon.cli_json("cases", *args)


def test_cli_with_and_without_restrict_what_is_generated(daemon):
    both = _cases(daemon, "layer_norm", "--seed", "7", "--count", "24", "--with", "weight,bias")
    assert all(set(c["inputs"]) == {"x", "weight", "bias"} for c in both)
    nobias = _cases(daemon, "layer_norm", "--seed", "7", "--count", "24", "--without", "bias", "--with", "weight")
    assert all(set(c["inputs"]) == {"x", "weight"} for c in nobias)
    free = _cases(daemon, "layer_norm", "--seed", "7", "--count", "24")
    assert any(set(c["inputs"]) != {"x", "weight", "bias"} for c in free)
    # Pinning one input leaves every other draw of the case as it was.
    for a, b in zip(both, free):
        assert a["dims"] == b["dims"] and a["inputs"]["x"]["digest"] == b["inputs"]["x"]["digest"]


@pytest.mark.parametrize("args, needle", [
    (["--dims", "N=0"], "must be >= 1"),
    (["--with", "gamma"], "has no input 'gamma'"),
    (["--without", "x"], "is required"),
    (["--with", "bias", "--without", "bias"], "both --with and --without"),
    (["--attr", "eps=-1"], "out of its range"),
    (["--precision", "tf32"], "no GEMM operands"),
    (["--precision", "matmul=fp4"], "unknown policy"),
])
def test_cli_restrictions_outside_the_schema_exit_2(daemon, args, needle):
    for cmd in (["cases", "layer_norm", "--seed", "1"], ["fuzz", "layer_norm", "--kernel", "fp32_welford",
                                                          "--seed", "1", "-n", "3", "--no-daemon"]):
        r = daemon.cli(*cmd, *args)
        assert r.returncode == 2, (cmd, args, r.stdout, r.stderr)
        assert needle in r.stderr, r.stderr


def test_cli_fuzz_dims_zero_through_the_daemon_is_an_error_not_a_pass(daemon):
    r = daemon.cli("fuzz", "softmax", "--kernel", "fp32_two_pass", "--dims", "N=0", "--seed", "1", "-n", "5")
    assert r.returncode == 2 and "must be >= 1" in r.stderr, (r.stdout, r.stderr)
    assert "PASSED" not in r.stdout


def test_gpuemu_toml_with_and_without(daemon, tmp_path, monkeypatch):
    (tmp_path / "ln.py").write_text(textwrap.dedent("""
        import torch.nn.functional as F

        def my_ln(inputs):
            x = inputs["x"]
            return F.layer_norm(x.float(), (x.shape[-1],), inputs["weight"].float(), inputs["bias"].float(),
                                inputs["eps"]).to(x.dtype)
    """))
    (tmp_path / "gpuemu.toml").write_text(textwrap.dedent("""
        [[op]]
        name = "layer_norm"
        script = "ln.py:my_ln"
        framework = "torch"
        iterations = 24
        seed = 5
        with = ["weight", "bias"]
    """))
    monkeypatch.chdir(tmp_path)
    res = Client().run_registered("layer_norm")
    assert res.ok, res.summary()
    r = daemon.cli("ci", "--json")
    assert r.returncode == 0, r.stderr
    (tmp_path / "gpuemu.toml").write_text((tmp_path / "gpuemu.toml").read_text().replace(
        'with = ["weight", "bias"]', 'with = ["weight"]\nwithout = ["weight"]'))
    r = daemon.cli("ci", "--json")
    assert r.returncode == 2 and "both 'with' and 'without'" in r.stderr, (r.stdout, r.stderr)
