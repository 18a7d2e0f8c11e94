"""backward=True through ops whose backward op takes the forward's saved output (issue 20): softmax's
and log_softmax's y, flash_attention's out and lse. Under autograd the backward sees the kernel's own
forward output (rounded, with its error) or recomputes it; the backward op's autograd mode judges the
gradients against the exact forward of the inputs the kernel saw, with the saved output's deviation
in the error model (docs/error-model.md). A real daemon on a temp socket (daemon_harness)."""

from __future__ import annotations

import hashlib
import json
import subprocess

import pytest

from daemon_harness import GPUEMU, daemon  # noqa: F401 (the fixture)

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

from gpuemu import Client, _core  # noqa: E402

STRATEGIES = ["regular", "boundary", "special", "adversarial"]


def _softmax(log):
    return F.log_softmax if log else F.softmax


def _running_sum_lowp(t, dim):
    """The sum along ``dim`` accumulated in t's dtype, rounded after every addition (a kernel whose
    accumulator is a bf16 register), as an fp32 tensor with the dim kept."""
    t = t.movedim(dim, -1)
    acc = torch.zeros(t.shape[:-1], dtype=t.dtype)
    for k in range(t.shape[-1]):
        acc = (acc.float() + t[..., k].float()).to(t.dtype)
    return acc.float().unsqueeze(-1).movedim(-1, dim)


class SavesRoundedOutput(torch.autograd.Function):
    """A softmax / log_softmax kernel pair that saves its output as it returns it (rounded to the
    input dtype) and whose backward reads that saved y in fp32: y * (g - sum(g * y)), or
    g - exp(y) * sum(g). ``bug``: "no_sum_term" (softmax: y * g), "lowp_sum" (the row sum
    accumulated in the input dtype, rounded after every addition), "softmax_formula"
    (log_softmax's backward as softmax's)."""

    @staticmethod
    def forward(ctx, x, dim, log, bug):
        y = _softmax(log)(x.float(), dim).to(x.dtype)
        ctx.save_for_backward(y)
        ctx.dim, ctx.log, ctx.bug = dim, log, bug
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        dim, log, bug = ctx.dim, ctx.log, ctx.bug
        gf, yf = g.float(), y.float()
        if log and bug != "softmax_formula":
            s = _running_sum_lowp(g, dim) if bug == "lowp_sum" else gf.sum(dim, keepdim=True)
            dx = gf - torch.exp(yf) * s
        else:
            s = _running_sum_lowp((gf * yf).to(g.dtype), dim) if bug == "lowp_sum" else \
                (gf * yf).sum(dim, keepdim=True)
            dx = yf * gf if bug == "no_sum_term" else yf * (gf - s)
        return dx.to(g.dtype), None, None, None


class RecomputesFromLogits(torch.autograd.Function):
    """Saves the logits; the backward recomputes y from them in fp32 (as a fused kernel that keeps
    no output does)."""

    @staticmethod
    def forward(ctx, x, dim, log):
        ctx.save_for_backward(x)
        ctx.dim, ctx.log = dim, log
        return _softmax(log)(x.float(), dim).to(x.dtype)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        dim, gf = ctx.dim, g.float()
        if ctx.log:
            y = F.log_softmax(x.float(), dim)
            dx = gf - torch.exp(y) * gf.sum(dim, keepdim=True)
        else:
            y = F.softmax(x.float(), dim)
            dx = y * (gf - (gf * y).sum(dim, keepdim=True))
        return dx.to(g.dtype), None, None


def saves_rounded(log, bug=None):
    return lambda i: SavesRoundedOutput.apply(i["x"], i["dim"], log, bug)


def recomputes(log):
    return lambda i: RecomputesFromLogits.apply(i["x"], i["dim"], log)


def torch_native(log):
    return lambda i: _softmax(log)(i["x"], i["dim"])


def torch_upcast(log):
    return lambda i: _softmax(log)(i["x"].float(), i["dim"]).to(i["x"].dtype)


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_torch_autograd_through_softmax_passes_every_case(daemon, log, strategy):
    op = "log_softmax" if log else "softmax"
    with Client() as c:
        # torch's own kernels in fp32 (torch 1.13 has no fp16 softmax on the CPU; its bf16 backward
        # stores the row sum in bf16, bench/conformance/imprecise.py), and the upcast in every dtype.
        for run_op, dtypes in ((torch_native(log), ["float32"]),
                               (torch_upcast(log), ["float32", "float16", "bfloat16"])):
            r = c.fuzz_op_client_side(op, run_op, iterations=40, dtypes=dtypes, seed=21,
                                      value_distribution=strategy, vary_attrs=["dim"], backward=True)
            assert r.ok, str(r)
            g = r.gradients
            assert g.op == f"{op}_backward" and g.total == 40 and g.passed == 40, str(g)


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_functions_that_save_the_rounded_output_or_recompute_it_pass(daemon, log, strategy):
    op = "log_softmax" if log else "softmax"
    with Client() as c:
        for run_op in (saves_rounded(log), recomputes(log)):
            r = c.fuzz_op_client_side(op, run_op, iterations=48, dtypes=["float32", "float16", "bfloat16"],
                                      seed=23, value_distribution=strategy, backward=True)
            assert r.ok, str(r)
            assert r.gradients.total == 48 and r.gradients.passed == 48, str(r.gradients)


@pytest.mark.parametrize("log,bug", [(False, "no_sum_term"), (False, "lowp_sum"),
                                     (True, "lowp_sum"), (True, "softmax_formula")])
def test_buggy_backwards_of_the_saved_output_are_caught(daemon, log, bug):
    op = "log_softmax" if log else "softmax"
    dtypes = ["bfloat16"] if bug == "lowp_sum" else ["float32", "bfloat16"]
    with Client() as c:
        r = c.fuzz_op_client_side(op, saves_rounded(log, bug), iterations=48, dtypes=dtypes, seed=29,
                                  value_distribution="adversarial", backward=True, diagnose_limit=0)
    assert r.forward.failed == 0, "the forward is correct"
    assert r.gradients.failed > 0, f"{bug}: {r.gradients}"
    assert r.failed == r.gradients.failed
    assert all("elements over the envelope" in f.message for f in r.gradients.failures)


# sha256 (first 16 hex digits) of `gpuemu cases OP --seed S --count 24 --strategy ST --vary-attr ...
# --json` (dims, attrs, dtype, layouts, strides, offsets and every input's digest) printed by the
# tree before the autograd mode (bf4804b): the direct backward ops' cases must stay byte for byte.
DIRECT_CASES_BEFORE = {
    ("softmax_backward", 1, "regular"): "a4aed7f7b24e37b6",
    ("softmax_backward", 1, "boundary"): "43bd87e5c53c9f60",
    ("softmax_backward", 1, "special"): "1eb51493e7c2c335",
    ("softmax_backward", 1, "adversarial"): "6969cc34f83c0818",
    ("softmax_backward", 20, "regular"): "add2227066b06c88",
    ("softmax_backward", 20, "boundary"): "41ad5ce8ba9e09ae",
    ("softmax_backward", 20, "special"): "40ffb9963cd6f77d",
    ("softmax_backward", 20, "adversarial"): "a637b22a4c72fb9c",
    ("log_softmax_backward", 1, "regular"): "7f4b2473036e9948",
    ("log_softmax_backward", 1, "boundary"): "1c0a208739e12dd3",
    ("log_softmax_backward", 1, "special"): "f50943365995877b",
    ("log_softmax_backward", 1, "adversarial"): "390551934faf47dd",
    ("log_softmax_backward", 20, "regular"): "8e6fb1eb9b2c1ec5",
    ("log_softmax_backward", 20, "boundary"): "676e9486daeda0a3",
    ("log_softmax_backward", 20, "special"): "7b5975b63862db3b",
    ("log_softmax_backward", 20, "adversarial"): "e4e149a02f62d2f2",
    ("flash_attention_backward", 1, "regular"): "bf092270abd12f74",
    ("flash_attention_backward", 1, "boundary"): "eb068d3befc7c201",
    ("flash_attention_backward", 1, "special"): "94c02d439079ac68",
    ("flash_attention_backward", 1, "adversarial"): "73a96b11b76275c0",
    ("flash_attention_backward", 20, "regular"): "f34117e93f01b371",
    ("flash_attention_backward", 20, "boundary"): "33a80f58d9182899",
    ("flash_attention_backward", 20, "special"): "e2fbb32473ef0e46",
    ("flash_attention_backward", 20, "adversarial"): "8822bfe24968cba7",
}


def _cases_json(op, seed, strategy, *extra):
    vary = ["--vary-attr", "causal", "--vary-attr", "enable_gqa", "--vary-attr", "scale"] \
        if op == "flash_attention_backward" else ["--vary-attr", "dim"]
    out = subprocess.run([GPUEMU, "cases", op, "--seed", str(seed), "--count", "24", "--strategy", strategy,
                          *vary, *extra, "--json"], capture_output=True, text=True, check=True).stdout
    return out


def test_direct_cases_of_the_backward_ops_are_unchanged_byte_for_byte():
    for (op, seed, strategy), want in DIRECT_CASES_BEFORE.items():
        got = hashlib.sha256(_cases_json(op, seed, strategy).encode()).hexdigest()[:16]
        assert got == want, f"{op} seed {seed} {strategy}: the direct cases changed"


def test_the_autograd_mode_adds_the_logits_or_drops_out_and_lse_and_changes_nothing_else():
    for op in ("softmax_backward", "log_softmax_backward"):
        plain = json.loads(_cases_json(op, 3, "special"))
        pinned = json.loads(_cases_json(op, 3, "special", "--with", "x"))
        for p, q in zip(plain, pinned):
            assert set(p["inputs"]) == {"grad_out", "y"} and set(q["inputs"]) == {"grad_out", "y", "x"}
            assert p["inputs"]["grad_out"] == q["inputs"]["grad_out"]
            assert (p["dims"], p["attrs"], p["dtype"]) == (q["dims"], q["attrs"], q["dtype"])
    plain = json.loads(_cases_json("flash_attention_backward", 3, "adversarial"))
    dropped = json.loads(_cases_json("flash_attention_backward", 3, "adversarial", "--without", "out",
                                     "--without", "lse"))
    for p, q in zip(plain, dropped):
        assert set(q["inputs"]) == {"grad_out", "q", "k", "v"}
        assert {k: v for k, v in p["inputs"].items() if k not in ("out", "lse")} == q["inputs"]


def test_the_saved_y_is_the_forward_of_the_pinned_logits():
    # With x pinned, the case's y is softmax(x) (or log_softmax) in fp64, rounded once to float32.
    e = _core.Engine()
    for op, f in (("softmax_backward", torch.softmax), ("log_softmax_backward", torch.log_softmax)):
        for case in e.cases(op, seed=9, count=6, dtypes=["float32"], strategy="adversarial", vary_attrs=["dim"],
                            present={"x": True}):
            inputs = case.inputs()
            x, y = (torch.from_numpy(inputs[n][0].copy()) for n in ("x", "y"))
            want = f(x.double(), case.attrs["dim"])
            # to within the last place of y, and what the fp64 forwards' own rounding of x - lse
            # leaves where log_softmax's y cancels to near 0 (they round in different orders)
            err = (y.double() - want).abs()
            assert bool((err <= 2.0 ** -23 * want.abs() + 2.0 ** -50 * x.double().abs() + 2.0 ** -149).all()), op


# ---- flash_attention: the saved out and lse are the kernel's own (flash_attention_backward's
# cases drop them in autograd's mode).

def _attn_scores(q, k, scale, causal):
    s = (q @ k.transpose(-1, -2)) * scale
    if causal:
        lq, lk = s.shape[-2], s.shape[-1]
        keep = torch.ones(lq, lk, dtype=torch.bool).tril()
        s = s.masked_fill(~keep, float("-inf"))
    return s


def _expand_kv(q, k, v):
    h, hkv = q.shape[-3], k.shape[-3]
    if h == hkv:
        return k, v
    return k.repeat_interleave(h // hkv, dim=-3), v.repeat_interleave(h // hkv, dim=-3)


def _scale(i):
    return i["scale"] if i.get("scale") is not None else 1.0 / (i["q"].shape[-1] ** 0.5)


def attention_fp32(i):
    """softmax(q k^T scale [causal]) v in fp32 (GQA by repeat_interleave: its backward sums each
    group), cast back once: autograd's backward recomputes nothing and keeps fp32 P and out."""
    dt = i["q"].dtype
    q, k, v = i["q"].float(), i["k"].float(), i["v"].float()
    k, v = _expand_kv(q, k, v)
    p = torch.softmax(_attn_scores(q, k, _scale(i), i["causal"]), -1)
    return (p @ v).to(dt)


class FlashSavesOutAndLse(torch.autograd.Function):
    """FlashAttention-2's pair in fp32: the forward rounds P = exp(s - m) to the input dtype before
    P V, saves out (in the input dtype) and the natural-log lse (fp32); the backward recomputes
    P = exp(s - lse) and uses D = rowsum(dO * out) of the saved out. ``bug``: "dq_missing_scale"."""

    @staticmethod
    def forward(ctx, q, k, v, scale, causal, bug):
        dt = q.dtype
        qf, kf, vf = q.float(), k.float(), v.float()
        ke, ve = _expand_kv(qf, kf, vf)
        s = _attn_scores(qf, ke, scale, causal)
        m = s.amax(-1, keepdim=True)
        e = torch.exp(s - m)
        l = e.sum(-1, keepdim=True)
        out = ((e.to(dt).float() @ ve) / l).to(dt)
        lse = (m + torch.log(l)).squeeze(-1)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.scale, ctx.causal, ctx.bug = scale, causal, bug
        return out

    @staticmethod
    def backward(ctx, g):
        q, k, v, out, lse = ctx.saved_tensors
        dt, scale = q.dtype, ctx.scale
        qf, kf, vf, gf, of = q.float(), k.float(), v.float(), g.float(), out.float()
        ke, ve = _expand_kv(qf, kf, vf)
        p = torch.exp(_attn_scores(qf, ke, scale, ctx.causal) - lse.unsqueeze(-1))
        dv = p.transpose(-1, -2) @ gf
        dp = gf @ ve.transpose(-1, -2)
        d = (gf * of).sum(-1, keepdim=True)
        ds = p * (dp - d)
        dq = ds @ ke if ctx.bug == "dq_missing_scale" else (ds @ ke) * scale
        dk = (ds.transpose(-1, -2) @ qf) * scale
        h, hkv = q.shape[-3], k.shape[-3]
        if h != hkv:  # the group's sum
            dk = dk.unflatten(-3, (hkv, h // hkv)).sum(-3)
            dv = dv.unflatten(-3, (hkv, h // hkv)).sum(-3)
        return dq.to(dt), dk.to(dt), dv.to(dt), None, None, None


def flash_saves(bug=None):
    return lambda i: FlashSavesOutAndLse.apply(i["q"], i["k"], i["v"], _scale(i), i["causal"], bug)


ATTN_DIMS = {"Lq": [1, 7, 65], "Lk": [1, 9, 70], "D": [8, 16], "B": [1], "H": [2, 4], "Hkv": [1, 2]}


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_attention_through_autograd_passes_causal_and_gqa(daemon, strategy):
    with Client() as c:
        for run_op, dtypes in ((attention_fp32, ["float32", "float16", "bfloat16"]),
                               (flash_saves(), ["float32", "float16", "bfloat16"])):
            r = c.fuzz_op_client_side("flash_attention", run_op, iterations=30, dtypes=dtypes, seed=31,
                                      value_distribution=strategy, dims=ATTN_DIMS,
                                      vary_attrs=["causal", "enable_gqa", "scale"], backward=True)
            assert r.ok, str(r)
            g = r.gradients
            assert g.op == "flash_attention_backward" and g.total == 30 and g.passed == 30, str(g)


def test_attention_backward_missing_the_scale_on_dq_is_caught_by_name(daemon):
    with Client() as c:
        r = c.fuzz_op_client_side("flash_attention", flash_saves("dq_missing_scale"), iterations=16,
                                  dtypes=["float32", "bfloat16"], seed=33, dims=ATTN_DIMS,
                                  vary_attrs=["causal", "enable_gqa"], backward=True, diagnose_limit=0)
    assert r.forward.failed == 0, "the forward is correct"
    assert r.gradients.failed > 0 and r.failed == r.gradients.failed
    assert all("grad_q" in f.tensors for f in r.failures)
    assert all("grad_q" in f.message for f in r.gradients.failures), [f.message for f in r.gradients.failures]
