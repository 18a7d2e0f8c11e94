"""Backward ops (issue 20): softmax_backward, log_softmax_backward, rms_norm_backward, layer_norm_backward,
silu_backward, swiglu_backward, gelu_backward, linear_backward, embedding_backward, rope_backward and
cross_entropy_backward judged like outputs.

Through the real engine (in process) and the real daemon (the public client): PyTorch's own
backward kernels and the fp32 formulas Triton kernels use pass with the defaults; the bug classes
of the issue (a row sum whose last partial tile is not masked, a sum kept in bf16, the other op's
formula, a grad_weight reduction over rows that drops its last partial block of rows or accumulates
in bf16) are caught; torch 1.13's defects on an output in another layout than grad_out's (softmax)
and on a transposed grad_out (gelu, erf form) stay caught. Finite differences and torch's float64
autograd check the references themselves (tests/cpp/ops_a_backward_test.cpp,
tests/python/test_reference_accuracy.py).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import gpuemu
from daemon_harness import daemon  # noqa: F401 (the fixture)

torch.set_num_threads(1)
STRATEGIES = ("regular", "boundary", "adversarial", "special")


def softmax_backward_fp32(i):
    g, y = i["grad_out"].float(), i["y"].float()
    return (y * (g - (g * y).sum(i["dim"], keepdim=True))).to(i["grad_out"].dtype)


def log_softmax_backward_fp32(i):
    g, y = i["grad_out"].float(), i["y"].float()
    return (g - torch.exp(y) * g.sum(i["dim"], keepdim=True)).to(i["grad_out"].dtype)


def softmax_backward_tail_unmasked(i):
    """A Triton-style row kernel with BLOCK = 128 whose sum over the last partial tile reads the
    next row's elements instead of masking them (the rows of a contiguous copy)."""
    dim = i["dim"] % i["grad_out"].dim()
    g = i["grad_out"].float().movedim(dim, -1).contiguous()
    y = i["y"].float().movedim(dim, -1).contiguous()
    n = g.shape[-1]
    pad = (-n) % 128
    flat_g, flat_y = g.reshape(-1), y.reshape(-1)
    rows = flat_g.numel() // max(n, 1)
    s = torch.empty(rows)
    for r in range(rows):
        hi = min((r + 1) * n + pad, flat_g.numel())
        s[r] = (flat_g[r * n:hi] * flat_y[r * n:hi]).sum()
    out = y * (g - s.reshape(g.shape[:-1] + (1,)))
    return out.movedim(-1, dim).to(i["grad_out"].dtype)


def sum_in_low_precision(i):
    """softmax backward with the row sum accumulated in the input dtype."""
    g, y = i["grad_out"], i["y"]
    s = (g * y).cumsum(i["dim"]).narrow(i["dim"], g.shape[i["dim"]] - 1, 1)
    return (y.float() * (g.float() - s.float())).to(g.dtype)


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("op,fn", [("softmax_backward", softmax_backward_fp32),
                                   ("log_softmax_backward", log_softmax_backward_fp32)],
                         ids=["softmax_backward", "log_softmax_backward"])
def test_fp32_backward_formulas_pass_with_the_defaults(op, fn, strategy):
    res = gpuemu.fuzz_op_in_process(op, fn, iterations=30, seed=7, value_distribution=strategy,
                                    vary_attrs=["dim"], diagnose=False)
    assert res.ok, res.summary()


def test_pytorchs_own_backward_kernels_pass_as_autograd_calls_them():
    def softmax(i):
        return torch._softmax_backward_data(i["grad_out"], i["y"].contiguous(), i["dim"], i["y"].dtype)

    def log_softmax(i):
        return torch._log_softmax_backward_data(i["grad_out"], i["y"], i["dim"], i["y"].dtype)

    for op, fn in (("softmax_backward", softmax), ("log_softmax_backward", log_softmax)):
        for strategy in STRATEGIES:
            res = gpuemu.fuzz_op_in_process(op, fn, iterations=20, seed=11, value_distribution=strategy,
                                            dtypes=["float32"], vary_attrs=["dim"], diagnose=False)
            assert res.ok, f"{op} {strategy}: {res.summary()}"


def test_torch_1_13s_softmax_backward_on_an_output_in_another_layout_stays_caught():
    if not torch.__version__.startswith("1.13"):
        pytest.skip("the defect was shown on torch 1.13's CPU kernel (evidence/conformance/backward.md)")

    def raw(i):
        return torch._softmax_backward_data(i["grad_out"], i["y"], i["dim"], i["y"].dtype)

    res = gpuemu.fuzz_op_in_process("softmax_backward", raw, iterations=40, seed=20261201,
                                    dtypes=["float32"], vary_attrs=["dim"], diagnose=False)
    assert res.failed > 0
    # Only where y is not contiguous: the same cases pass with y.contiguous() (test above).
    assert all(f.layout.get("y", "contiguous") in ("transposed", "strided") for f in res.failures), res.summary()


@pytest.mark.parametrize("bug,dtype", [(softmax_backward_tail_unmasked, "float32"),
                                       (sum_in_low_precision, "bfloat16")],
                         ids=["tail_unmasked", "sum_in_bf16"])
def test_the_backward_bug_classes_are_caught(bug, dtype):
    res = gpuemu.fuzz_op_in_process("softmax_backward", bug, iterations=40, seed=3, dtypes=[dtype],
                                    diagnose=False)
    assert res.failed > 0


def rms_backward_autograd(i):
    x = i["x"].float().detach().requires_grad_(True)
    w = i["weight"].float().detach().requires_grad_(True)
    (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + i["eps"]) * w).backward(i["grad_out"].float())
    return x.grad.to(i["x"].dtype), w.grad.to(i["weight"].dtype)


def rms_backward_dweight_blocks(drop_tail: bool, acc_dtype=None):
    """Triton-style: grad_x per row with the saved rstd; grad_weight as partial sums over blocks of
    64 rows (each block's sum in fp32, or in acc_dtype), then summed. drop_tail: the last partial
    block is skipped (a grid of R // 64 programs)."""
    def run(i):
        g, x, w = i["grad_out"].float(), i["x"].float(), i["weight"].float()
        rstd = i["rstd"].float()[:, None]
        xh, wg = x * rstd, w * g
        gx = rstd * (wg - xh * (wg * xh).mean(-1, keepdim=True))
        rows = x.shape[0]
        stop = rows // 64 * 64 if drop_tail else rows
        total = torch.zeros(x.shape[1], dtype=acc_dtype or torch.float32)
        for b in range(0, stop, 64):
            part = (g[b:b + 64] * xh[b:b + 64]).sum(0)
            total = (total + part.to(total.dtype)) if acc_dtype else total + part
        return gx.to(i["x"].dtype), total.to(i["weight"].dtype)
    return run


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_rms_norm_backward_through_pytorchs_autograd_passes(strategy):
    res = gpuemu.fuzz_op_in_process("rms_norm_backward", rms_backward_autograd, iterations=30, seed=13,
                                    value_distribution=strategy, diagnose=False)
    assert res.ok, res.summary()
    assert gpuemu.fuzz_op_in_process("rms_norm_backward", rms_backward_dweight_blocks(False), iterations=30,
                                     seed=13, value_distribution=strategy, diagnose=False).ok


def test_a_grad_weight_reduction_that_drops_its_last_row_block_or_sums_in_bf16_is_caught():
    res = gpuemu.fuzz_op_in_process("rms_norm_backward", rms_backward_dweight_blocks(True), iterations=40,
                                    seed=17, dtypes=["float32"], diagnose=False)
    assert res.failed > 0
    # and the failure names grad_weight, not grad_x
    assert all("grad_weight" in f.message and "grad_x'" not in f.message for f in res.failures), res.summary()
    res = gpuemu.fuzz_op_in_process("rms_norm_backward", rms_backward_dweight_blocks(False, torch.bfloat16),
                                    iterations=40, seed=17, dtypes=["bfloat16"], diagnose=False)
    assert res.failed > 0


def swiglu_backward_autograd_fp32(i):
    gate = i["gate"].float().detach().requires_grad_(True)
    up = i["up"].float().detach().requires_grad_(True)
    (torch.nn.functional.silu(gate) * up).backward(i["grad_out"].float())
    return gate.grad.to(i["gate"].dtype), up.grad.to(i["up"].dtype)


def swiglu_backward_forgets_up(i):
    """grad_gate = g * silu'(gate): the factor up of the product rule dropped."""
    g, gate = i["grad_out"].float(), i["gate"].float()
    s = torch.sigmoid(gate)
    return (g * s * (1 + gate * (1 - s))).to(i["gate"].dtype), (g * torch.nn.functional.silu(gate)).to(i["up"].dtype)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_swiglu_backward_through_autograd_in_fp32_passes_and_a_dropped_factor_is_caught(strategy):
    ok = gpuemu.fuzz_op_in_process("swiglu_backward", swiglu_backward_autograd_fp32, iterations=30, seed=19,
                                   value_distribution=strategy, diagnose=False)
    assert ok.ok, ok.summary()
    bad = gpuemu.fuzz_op_in_process("swiglu_backward", swiglu_backward_forgets_up, iterations=30, seed=19,
                                    value_distribution=strategy, diagnose=False)
    assert bad.failed > 0
    assert all("grad_gate" in f.message for f in bad.failures), bad.summary()


def gelu_backward_autograd_fp32(i):
    # grad_out made contiguous: torch 1.13's CPU erf-form kernel is wrong for a transposed grad_out
    # against a contiguous x (test below, evidence/conformance/backward.md).
    x = i["x"].float().detach().requires_grad_(True)
    torch.nn.functional.gelu(x, approximate=i["approximate"]).backward(i["grad_out"].float().contiguous())
    return x.grad.to(i["x"].dtype)


def gelu_backward_tanh_derivative_for_erf(i):
    """The tanh approximation's derivative whatever `approximate` says (erf cases are wrong)."""
    x = i["x"].float().detach().requires_grad_(True)
    torch.nn.functional.gelu(x, approximate="tanh").backward(i["grad_out"].float())
    return x.grad.to(i["x"].dtype)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_gelu_backward_through_autograd_in_fp32_passes_and_the_other_forms_derivative_is_caught(strategy):
    ok = gpuemu.fuzz_op_in_process("gelu_backward", gelu_backward_autograd_fp32, iterations=30, seed=23,
                                   value_distribution=strategy, vary_attrs=["approximate"], diagnose=False)
    assert ok.ok, ok.summary()
    bad = gpuemu.fuzz_op_in_process("gelu_backward", gelu_backward_tanh_derivative_for_erf, iterations=30, seed=23,
                                    value_distribution=strategy, dtypes=["float32"], diagnose=False)
    assert bad.failed > 0, bad.summary()


def linear_backward_autograd_fp32(i):
    x = i["x"].float().detach().requires_grad_(True)
    w = i["weight"].float().detach().requires_grad_(True)
    b = torch.zeros(w.shape[0], requires_grad=True)
    torch.nn.functional.linear(x, w, b).backward(i["grad_out"].float())
    dt = i["x"].dtype
    return x.grad.to(dt), w.grad.to(dt), b.grad.to(dt)


def linear_backward_bias_drops_last_rows(i):
    """grad_bias summed over the rows in blocks of 64, the partial last block lost."""
    gx, gw, _ = linear_backward_autograd_fp32(i)
    g = i["grad_out"].float()
    m = g.shape[0] // 64 * 64
    return gx, gw, g[:m].sum(0).to(i["x"].dtype)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_linear_backward_through_autograd_in_fp32_passes_and_a_dropped_row_block_of_grad_bias_is_caught(strategy):
    ok = gpuemu.fuzz_op_in_process("linear_backward", linear_backward_autograd_fp32, iterations=30, seed=29,
                                   value_distribution=strategy, diagnose=False)
    assert ok.ok, ok.summary()
    bad = gpuemu.fuzz_op_in_process("linear_backward", linear_backward_bias_drops_last_rows, iterations=30, seed=29,
                                    value_distribution=strategy, dims={"M": [1, 63, 65, 200]}, diagnose=False)
    assert bad.failed > 0, bad.summary()
    assert all("grad_bias" in f.message for f in bad.failures), bad.summary()


def layer_norm_backward_autograd_fp32(i):
    """PyTorch's autograd through F.layer_norm in fp32 (upcast, gradients cast back): its forward
    recomputes mean and rstd (Welford), its backward is torch's CPU kernel."""
    x = i["x"].float().detach().requires_grad_(True)
    w = i["weight"].float().detach().requires_grad_(True) if i["weight"] is not None else None
    b = torch.zeros_like(w, requires_grad=True) if w is not None else None
    torch.nn.functional.layer_norm(x, [x.shape[-1]], w, b, i["eps"]).backward(i["grad_out"].float())
    if w is None:
        return x.grad.to(i["x"].dtype)
    return x.grad.to(i["x"].dtype), w.grad.to(i["weight"].dtype), b.grad.to(i["weight"].dtype)


def layer_norm_backward_triton(bug=None, acc_dtype=None):
    """Triton-style, with the saved mean and rstd: grad_x per row, (w*g - (x_hat*c1 + c2)) * rstd;
    grad_weight and grad_bias as partial sums over blocks of 64 rows (in fp32, or in acc_dtype),
    then summed. bug: "tail" skips the last partial block (a grid of R // 64 programs),
    "projection" forgets - x_hat * c1, "mean" forgets - c2."""
    def run(i):
        g, x = i["grad_out"].float(), i["x"].float()
        w = i["weight"].float() if i["weight"] is not None else None
        xh = (x - i["mean"].float()[:, None]) * i["rstd"].float()[:, None]
        wg = g * w if w is not None else g
        n = x.shape[-1]
        c1 = (xh * wg).sum(-1, keepdim=True) / n if bug != "projection" else 0.0
        c2 = wg.sum(-1, keepdim=True) / n if bug != "mean" else 0.0
        gx = ((wg - (xh * c1 + c2)) * i["rstd"].float()[:, None]).to(i["x"].dtype)
        if w is None:
            return gx
        rows = x.shape[0]
        stop = rows // 64 * 64 if bug == "tail" else rows
        acc = acc_dtype or torch.float32
        tw, tb = torch.zeros(n, dtype=acc), torch.zeros(n, dtype=acc)
        for b in range(0, stop, 64):
            tw = tw + (g[b:b + 64] * xh[b:b + 64]).sum(0).to(acc)
            tb = tb + g[b:b + 64].sum(0).to(acc)
        dt = i["weight"].dtype
        return gx, tw.to(dt), tb.to(dt)
    return run


def layer_norm_backward_native_fp32(i):
    """torch.ops.aten.native_layer_norm_backward (what autograd calls) in fp32 with the saved stats."""
    x, w = i["x"].float(), i["weight"].float() if i["weight"] is not None else None
    mask = [True, w is not None, w is not None]
    gx, gw, gb = torch.ops.aten.native_layer_norm_backward(
        i["grad_out"].float(), x, [x.shape[-1]], i["mean"].float()[:, None], i["rstd"].float()[:, None], w,
        torch.zeros_like(w) if w is not None else None, mask)
    if w is None:
        return gx.to(i["x"].dtype)
    return gx.to(i["x"].dtype), gw.to(i["weight"].dtype), gb.to(i["weight"].dtype)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_layer_norm_backward_cases_hold_the_mean_and_rstd_of_their_x(strategy):
    # The saved statistics are x's, as a forward kernel stores them: the fp64 mean and
    # 1/sqrt(var + eps) of each row of the case's x (in whatever layout), rounded once to fp32
    # (to the last bit where fp64 resolves them).
    from gpuemu import _core
    from gpuemu.inprocess import case_inputs

    for c in _core.Engine().cases("layer_norm_backward", 5, 12, strategy=strategy):
        i = case_inputs(c, "torch")
        assert i["mean"].dtype == torch.float32 and i["rstd"].dtype == torch.float32
        x = i["x"].double()
        finite = torch.isfinite(x).all(-1) & (x.abs().amax(-1) < 1e300)
        mean = x.mean(-1)
        rstd = torch.rsqrt(((x - mean[:, None]) ** 2).mean(-1) + i["eps"])
        # fp64 sums of rows of 1e36-sized values cancelling are themselves off by about 1e-16 of
        # mean|x| (a corrected two-pass and torch's pairwise sum differ there): equal up to that
        slack = 1e-14 * x.abs().mean(-1)[finite]
        got, want = i["mean"][finite].double(), mean[finite].float().double()
        assert ((got - want).abs() <= torch.maximum(slack, 2.0 ** -23 * want.abs())).all(), c.seed
        close = (i["rstd"][finite].double() - rstd[finite].float().double()).abs() <= \
            2.0 ** -23 * rstd[finite].abs()  # the fp64 variance's own last bits may round the other way
        assert close.all(), c.seed


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_layer_norm_backward_through_pytorchs_autograd_and_the_triton_formula_passes(strategy):
    for fn in (layer_norm_backward_autograd_fp32, layer_norm_backward_triton(), layer_norm_backward_native_fp32):
        res = gpuemu.fuzz_op_in_process("layer_norm_backward", fn, iterations=30, seed=31, value_distribution=strategy,
                                        diagnose=False)
        assert res.ok, (fn, res.summary())


@pytest.mark.parametrize("bug,acc,dtypes,names", [
    ("tail", None, ["float32", "bfloat16"], ("grad_weight", "grad_bias")),
    (None, torch.bfloat16, ["float32", "bfloat16"], ("grad_weight", "grad_bias")),
    ("projection", None, ["float32", "float16", "bfloat16"], ("grad_x",)),
    ("mean", None, ["float32", "float16", "bfloat16"], ("grad_x",)),
])
def test_layer_norm_backward_bug_classes_are_caught_and_the_failure_names_the_gradient(bug, acc, dtypes, names):
    # A grad_weight/grad_bias row reduction that drops its tail block of rows or accumulates in bf16;
    # a grad_x without the projection term or the mean term. Rows across the 64-row blocks.
    for dt in dtypes:
        res = gpuemu.fuzz_op_in_process("layer_norm_backward", layer_norm_backward_triton(bug, acc), iterations=40,
                                        seed=19, dtypes=[dt], dims={"R": [1, 63, 65, 200, 300]},
                                        present={"weight": True}, diagnose=False)
        assert res.failed > 0, (bug, acc, dt, res.summary())
        others = [n for n in ("grad_x", "grad_weight", "grad_bias") if n not in names]
        for f in res.failures:
            assert any(f"'{n}'" in f.message for n in names), f.message
            assert not any(f"'{n}'" in f.message for n in others), f.message


def embedding_backward_autograd_fp32(i):
    g = i["grad_out"].float()
    w = torch.zeros(i["num_weights"], g.shape[-1], requires_grad=True)
    torch.nn.functional.embedding(i["indices"], w).backward(g)
    return w.grad.to(i["grad_out"].dtype)


def embedding_backward_last_write_wins(i):
    """grad_weight[idx] = g, a store where an atomic add belongs: repeated indices lose updates."""
    g = i["grad_out"].float()
    w = torch.zeros(i["num_weights"], g.shape[-1])
    w[i["indices"].flatten()] = g.reshape(-1, g.shape[-1])
    return w.to(i["grad_out"].dtype)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_embedding_backward_through_autograd_in_fp32_passes_and_lost_updates_are_caught(strategy):
    ok = gpuemu.fuzz_op_in_process("embedding_backward", embedding_backward_autograd_fp32, iterations=30, seed=31,
                                   value_distribution=strategy, diagnose=False)
    assert ok.ok, ok.summary()
    bad = gpuemu.fuzz_op_in_process("embedding_backward", embedding_backward_last_write_wins, iterations=30, seed=31,
                                    value_distribution=strategy, diagnose=False)
    assert bad.failed > 0, bad.summary()


def cross_entropy_backward_autograd_fp32(i):
    """PyTorch's autograd through F.cross_entropy on fp32 logits, the gradient cast back."""
    x = i["logits"].float().detach().requires_grad_(True)
    torch.nn.functional.cross_entropy(x, i["target"], ignore_index=i["ignore_index"], reduction=i["reduction"],
                                      label_smoothing=i["label_smoothing"]).backward(i["grad_out"].float())
    return x.grad.to(i["logits"].dtype)


def cross_entropy_backward_mean_over_all_rows(i):
    """The fused kernel's formula with 'mean' dividing by N, ignored rows counted: the ignore_counted bug."""
    x = i["logits"].float()
    t = i["target"]
    keep = t != i["ignore_index"]
    s, C = i["label_smoothing"], x.shape[-1]
    q = torch.full_like(x, s / C)
    q[keep.nonzero()[:, 0], t[keep]] += 1.0 - s
    k = i["grad_out"].float() / (x.shape[0] if i["reduction"] == "mean" else 1.0)
    return (k * (torch.softmax(x, -1) - q) * keep[:, None]).to(i["logits"].dtype)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_cross_entropy_backward_through_autograd_in_fp32_passes_and_a_mean_over_ignored_rows_is_caught(strategy):
    ok = gpuemu.fuzz_op_in_process("cross_entropy_backward", cross_entropy_backward_autograd_fp32, iterations=30,
                                   seed=37, value_distribution=strategy, diagnose=False,
                                   vary_attrs=["ignore_index", "reduction", "label_smoothing"])
    assert ok.ok, ok.summary()
    if strategy == "regular":
        return  # regular values draw no ignored target: the bug below has nothing to miscount there
    bad = gpuemu.fuzz_op_in_process("cross_entropy_backward", cross_entropy_backward_mean_over_all_rows,
                                    iterations=30, seed=37, value_distribution=strategy, diagnose=False,
                                    attrs={"reduction": "mean"}, dtypes=["float32"])
    assert bad.failed > 0, bad.summary()


def cross_entropy_backward_native_autograd(i):
    """PyTorch's autograd through F.cross_entropy in the case dtype itself (bf16 natively: the
    decomposition stores log_softmax and the gradient of log p in bf16)."""
    x = i["logits"].detach().requires_grad_(True)
    torch.nn.functional.cross_entropy(x, i["target"], ignore_index=i["ignore_index"], reduction=i["reduction"],
                                      label_smoothing=i["label_smoothing"]).backward(i["grad_out"])
    return x.grad


def _ce_none_fused(i, k_rows):
    """k_i * (softmax(x) - q) in fp32 per row with the row scales ``k_rows`` ([N] fp32), 0 on ignored rows
    unless ``k_rows`` says otherwise (a fused 'none' kernel's formula)."""
    x = i["logits"].float()
    t = i["target"]
    keep = t != i["ignore_index"]
    s, C = i["label_smoothing"], x.shape[-1]
    q = torch.full_like(x, s / C)
    rows = keep.nonzero()[:, 0]
    q[rows, t[rows]] += 1.0 - s
    return k_rows[:, None] * (torch.softmax(x, -1) - q), keep


def cross_entropy_backward_none_sum_of_grads(i):
    """Bug: every row scaled by grad_out.sum() (the per-row upstream gradient reduced as a scalar)."""
    g = i["grad_out"].float()
    out, keep = _ce_none_fused(i, g.sum().expand(g.shape))
    return (out * keep[:, None]).to(i["logits"].dtype)


def cross_entropy_backward_none_first_grad(i):
    """Bug: every row scaled by grad_out[0] (a scalar kernel's load of the upstream gradient)."""
    g = i["grad_out"].float()
    out, keep = _ce_none_fused(i, g[0].expand(g.shape))
    return (out * keep[:, None]).to(i["logits"].dtype)


def cross_entropy_backward_none_ignored_live(i):
    """Bug: ignored rows not zeroed: they get grad_out[i] * (softmax(x) - s / C)."""
    out, _keep = _ce_none_fused(i, i["grad_out"].float())
    return out.to(i["logits"].dtype)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_cross_entropy_backward_none_through_autograd_passes(strategy):
    # Reduction 'none' (one upstream gradient per row): torch's autograd natively in fp32 and bf16
    # and upcast from fp16 and bf16, 200 cases each, ignore_index and label_smoothing varied.
    common = dict(seed=41, value_distribution=strategy, diagnose=False, attrs={"reduction": "none"},
                  vary_attrs=["ignore_index", "label_smoothing"])
    runs = [gpuemu.fuzz_op_in_process("cross_entropy_backward", cross_entropy_backward_native_autograd, iterations=200,
                                      dtypes=["float32"], **common),
            gpuemu.fuzz_op_in_process("cross_entropy_backward", cross_entropy_backward_native_autograd, iterations=100,
                                      dtypes=["bfloat16"], **common),
            gpuemu.fuzz_op_in_process("cross_entropy_backward", cross_entropy_backward_autograd_fp32, iterations=200,
                                      dtypes=["float16", "bfloat16"], **common)]
    for r in runs:
        assert r.ok and r.failed == 0, r.summary()
    assert sum(r.total for r in runs) == 500


@pytest.mark.parametrize("bug", [cross_entropy_backward_none_sum_of_grads, cross_entropy_backward_none_first_grad,
                                 cross_entropy_backward_none_ignored_live])
@pytest.mark.parametrize("strategy", ["adversarial", "boundary"])
def test_cross_entropy_backward_none_bugs_are_caught(bug, strategy):
    bad = gpuemu.fuzz_op_in_process("cross_entropy_backward", bug, iterations=30, seed=43, value_distribution=strategy,
                                    diagnose=False, attrs={"reduction": "none"},
                                    vary_attrs=["ignore_index", "label_smoothing"])
    assert bad.failed > 0, bad.summary()


def _rope_fp32(x, i):
    d = x.shape[-1]
    inv_freq = 1.0 / (i["theta"] ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    t = torch.arange(x.shape[1], dtype=torch.float32) + float(i["offset"])
    ang = torch.outer(t, inv_freq)
    c, s = ang.cos()[None, :, None, :], ang.sin()[None, :, None, :]
    x1, x2 = (x[..., 0::2], x[..., 1::2]) if i["style"] == "interleaved" else (x[..., : d // 2], x[..., d // 2:])
    o1, o2 = x1 * c - x2 * s, x2 * c + x1 * s
    return torch.stack((o1, o2), -1).flatten(-2) if i["style"] == "interleaved" else torch.cat((o1, o2), -1)


def rope_backward_autograd_fp32(i):
    g = i["grad_out"].float()
    x = torch.zeros(g.shape, requires_grad=True)
    _rope_fp32(x, i).backward(g)
    return x.grad.to(i["grad_out"].dtype)


def rope_backward_forward_rotation(i):
    """The forward rotation applied to the gradient (turns by +phi where -phi belongs)."""
    return _rope_fp32(i["grad_out"].float(), i).to(i["grad_out"].dtype)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_rope_backward_through_autograd_in_fp32_passes_and_the_forward_rotation_is_caught(strategy):
    ok = gpuemu.fuzz_op_in_process("rope_backward", rope_backward_autograd_fp32, iterations=30, seed=37,
                                   value_distribution=strategy, vary_attrs=["style", "offset", "theta"], diagnose=False)
    assert ok.ok, ok.summary()
    bad = gpuemu.fuzz_op_in_process("rope_backward", rope_backward_forward_rotation, iterations=30, seed=37,
                                    value_distribution=strategy, vary_attrs=["style", "offset", "theta"], diagnose=False)
    assert bad.failed > 0, bad.summary()


def _attn_expand(i, x):
    h, hkv = i["q"].shape[-3], x.shape[-3]
    return x.repeat_interleave(h // hkv, dim=-3) if h != hkv else x


def flash_attention_backward_autograd_fp32(i):
    """Autograd through softmax(q k^T * scale [+ causal mask]) v in fp32 (GQA by repeat_interleave)."""
    dt = i["q"].dtype
    q, k, v = (i[n].detach().float().requires_grad_(True) for n in ("q", "k", "v"))
    d = q.shape[-1]
    sc = i["scale"] if i["scale"] is not None else d ** -0.5
    s = q @ _attn_expand(i, k).transpose(-1, -2) * sc
    if i["causal"]:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
    (torch.softmax(s, -1) @ _attn_expand(i, v)).backward(i["grad_out"].float())
    return q.grad.to(dt), k.grad.to(dt), v.grad.to(dt)


def flash_attention_backward_fa2(i, d_from_out=True, dq_scaled=True, lse_base2=False):
    """FA2's formulas with the saved out and lse in fp32; the bug switches: D = rowsum(dO) without
    out, dq without the scale, the lse read as the Triton tutorial's base-2 one (m + log2 l)."""
    dt = i["q"].dtype
    q, k, v, g, o, lse = (i[n].float() for n in ("q", "k", "v", "grad_out", "out", "lse"))
    sc = i["scale"] if i["scale"] is not None else q.shape[-1] ** -0.5
    kk, vv = _attn_expand(i, k), _attn_expand(i, v)
    s = q @ kk.transpose(-1, -2) * sc
    if i["causal"]:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
    p = torch.exp2(s * 1.4426950408889634 - lse[..., None]) if lse_base2 else torch.exp(s - lse[..., None])
    dv = p.transpose(-1, -2) @ g
    dd = (g * o).sum(-1, keepdim=True) if d_from_out else g.sum(-1, keepdim=True)
    ds = p * (g @ vv.transpose(-1, -2) - dd)
    dq = ds @ kk * (sc if dq_scaled else 1.0)
    dk = ds.transpose(-1, -2) @ q * sc
    grp = q.shape[-3] // k.shape[-3]
    if grp > 1:
        dk, dv = dk.unflatten(-3, (k.shape[-3], grp)).sum(-3), dv.unflatten(-3, (k.shape[-3], grp)).sum(-3)
    return dq.to(dt), dk.to(dt), dv.to(dt)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_flash_attention_backward_through_autograd_and_fa2s_formulas_in_fp32_passes(strategy):
    for fn in (flash_attention_backward_autograd_fp32, flash_attention_backward_fa2):
        ok = gpuemu.fuzz_op_in_process("flash_attention_backward", fn, iterations=25, seed=41,
                                       value_distribution=strategy, vary_attrs=["causal", "scale", "enable_gqa"],
                                       diagnose=False)
        assert ok.ok, (fn.__name__, ok.summary())


@pytest.mark.parametrize("bug,grad", [
    (lambda i: flash_attention_backward_fa2(i, d_from_out=False), None),
    (lambda i: flash_attention_backward_fa2(i, dq_scaled=False), "grad_q"),
    # the lse read as base 2 where the op's is natural log: P off by a factor e^(0.44 lse)
    (lambda i: flash_attention_backward_fa2(i, lse_base2=True), None),
])
def test_flash_attention_backward_bug_classes_are_caught(bug, grad):
    bad = gpuemu.fuzz_op_in_process("flash_attention_backward", bug, iterations=25, seed=43,
                                    vary_attrs=["causal", "scale", "enable_gqa"], diagnose=False)
    assert bad.failed > 0, bad.summary()
    if grad:
        assert all(grad in f.message for f in bad.failures), bad.summary()


def test_flash_attention_backward_saved_out_and_lse_are_the_forwards(daemon):
    # The cases' out and lse are the fp64 forward of their q, k, v, rounded once (out to the case
    # dtype, lse to fp32, natural log): the reference forward of each case gives them back to that
    # rounding. (backward=True on flash_attention runs flash_attention_backward's autograd mode, the
    # cases without out and lse: test_backward_saved_output.py.)
    daemon.start()
    with gpuemu.Client() as c:
        batch = c.get_test_batch("flash_attention_backward", count=8, seed=47, value_distribution="regular",
                                 layouts=False, framework="numpy", vary_attrs=["causal", "scale", "enable_gqa"])
    assert len(batch) == 8
    for case in batch:
        x, a = case["inputs"], case["attrs"]
        ref_out = gpuemu.reference("flash_attention", {"q": x["q"], "k": x["k"], "v": x["v"]}, causal=a["causal"],
                                   scale=a["scale"], enable_gqa=a["enable_gqa"])
        out = np.asarray(x["out"], dtype=np.float64)
        # one rounding: half an ulp, or half the subnormal spacing below the smallest normal
        u, sub = {"float32": (2.0 ** -24, 2.0 ** -150), "float16": (2.0 ** -11, 2.0 ** -25),
                  "bfloat16": (2.0 ** -8, 2.0 ** -134)}[case["dtype"]]
        bad = np.abs(out - ref_out) > u * np.abs(ref_out) + sub
        assert not bad.any(), (case["dtype"], out[bad][:5], ref_out[bad][:5])
        q, k = np.asarray(x["q"], np.float64), np.asarray(x["k"], np.float64)
        h, hkv, d = q.shape[1], k.shape[1], q.shape[-1]
        kk = np.repeat(k, h // hkv, axis=1)
        sc = a["scale"] if a["scale"] is not None else d ** -0.5
        s = q @ np.swapaxes(kk, -1, -2) * sc
        if a["causal"]:
            s = np.where(np.triu(np.ones(s.shape[-2:], bool), 1), -np.inf, s)
        m = s.max(-1, keepdims=True)
        lse = (m + np.log(np.exp(s - m).sum(-1, keepdims=True)))[..., 0]
        got = np.asarray(x["lse"], dtype=np.float64)
        assert np.all(np.abs(got - lse) <= 2.0 ** -24 * np.abs(lse) + 1e-30)


def test_torch_1_13s_gelu_backward_on_a_transposed_grad_out_stays_caught():
    if not torch.__version__.startswith("1.13"):
        pytest.skip("the defect was shown on torch 1.13's CPU kernel (evidence/conformance/backward.md)")

    def raw(i):
        return torch.ops.aten.gelu_backward(i["grad_out"], i["x"], approximate=i["approximate"])

    res = gpuemu.fuzz_op_in_process("gelu_backward", raw, iterations=60, seed=23, dtypes=["float32"],
                                    attrs={"approximate": "none"}, diagnose=False)
    assert res.failed > 0
    # Only a transposed grad_out against an x in another layout; the same cases pass with
    # grad_out.contiguous() (the test above).
    assert all(f.layout.get("grad_out") == "transposed" and f.layout.get("x", "contiguous") != "transposed"
               for f in res.failures), res.summary()


def test_a_backward_op_through_the_daemon(daemon):
    # The CLI against a real daemon: the built-in buggy kernels are caught with their seed and repro,
    # the control passes; and the public client's cases hold a softmax output as y.
    daemon.start()
    for kernel, bad in (("fp32_tiled", False), ("tail_leak", True), ("wrong_formula", True)):
        rep = daemon.cli_json("fuzz", "softmax_backward", "--kernel", kernel, "-n", "60", "--seed", "5",
                              expect_rc=1 if bad else 0)
        assert (rep["failed"] > 0) == bad, (kernel, rep["failed"])
    with gpuemu.Client() as c:
        batch = c.get_test_batch("softmax_backward", count=6, seed=9, value_distribution="regular",
                                 layouts=False, framework="torch")
        for case in batch:
            y = case["inputs"]["y"].double()
            dim = case["attrs"]["dim"]
            assert (y >= 0).all()
            # each line along dim sums to 1, to the dtype's rounding of its elements
            assert torch.allclose(y.sum(dim), torch.ones(()).double(), atol=1e-2), case["dtype"]
            out = softmax_backward_fp32(case["inputs"] | {"dim": dim})
            assert c.submit_output("softmax_backward", case["inputs"], out, case["seed"]).passed
