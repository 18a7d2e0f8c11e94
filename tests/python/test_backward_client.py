"""fuzz_op_client_side(..., backward=True) against a real daemon: the forward is judged, then the op's
backward op feeds the kernel's autograd a fuzzed grad_out and judges every input gradient (issue 20)."""

from __future__ import annotations

import pytest

from daemon_harness import daemon  # noqa: F401 (the fixture)

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import gpuemu  # noqa: E402
from gpuemu import Client  # noqa: E402

# The kernels bench/gpu/backward_client.py runs on a GPU, run here on the CPU: a hand-written SiLU
# whose backward forgets x·s·(1 − s) (the sigmoid_only bug class), a cross_entropy whose 'mean'
# backward counts ignored rows, and F.cross_entropy with the case's attrs.
from bench.gpu.backward_client import CrossEntropyMeanOverAllRows, SiluSigmoidOnly, cross_entropy  # noqa: E402


class SiluCorrect(torch.autograd.Function):
    """The same by hand, correct: g·s·(1 + x·(1 − s)) in fp32."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return F.silu(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        xf = x.float()
        s = torch.sigmoid(xf)
        return (g.float() * s * (1 + xf * (1 - s))).to(g.dtype)


def silu_correct(inputs):
    return SiluCorrect.apply(inputs["x"])


def silu_sigmoid_only(inputs):
    return SiluSigmoidOnly.apply(inputs["x"])


def test_a_correct_autograd_function_passes_forward_and_gradients(daemon):
    with Client() as c:
        r = c.fuzz_op_client_side("silu", silu_correct, iterations=24, dtypes=["float32"], seed=3, backward=True)
    assert r.ok, str(r)
    assert r.op == "silu" and r.total == 24
    assert r.gradients is not None and r.gradients.op == "silu_backward" and r.gradients.total == 24
    assert r.gradients.passed == 24
    assert "gradients: silu_backward: 24/24 passed" in r.summary()


def test_a_wrong_backward_is_caught_and_the_failure_names_the_gradient(daemon):
    with Client() as c:
        r = c.fuzz_op_client_side("silu", silu_sigmoid_only, iterations=16, dtypes=["float32"], seed=3,
                                  backward=True)
    assert r.forward.failed == 0, "the forward is correct"
    assert not r.ok and not r
    assert r.failed == r.gradients.failed > 0, "a case fails with its gradient"
    g = r.gradients
    assert g is not None and g.failed > 0
    assert g.op == "silu_backward" and "gradients: silu_backward: " in r.summary()
    assert all("elements over the envelope" in f.message for f in g.failures)  # silu_backward's one output, grad_x


def test_torch_autograd_through_two_inputs_passes(daemon):
    with Client() as c:
        r = c.fuzz_op_client_side("swiglu", lambda i: F.silu(i["gate"]) * i["up"], iterations=16,
                                  dtypes=["float32"], seed=5, backward=True)
        m = c.fuzz_op_client_side("matmul", lambda i: i["a"] @ i["b"], iterations=12, dtypes=["float32"],
                                  seed=5, backward=True)
    assert r.ok, str(r)
    assert r.gradients.total == 16
    assert m.ok, str(m)
    assert m.gradients.op == "matmul_backward" and m.gradients.total == 12


def test_a_gradient_autograd_never_reaches_is_judged_as_zeros(daemon):
    # The kernel detaches b: autograd gives a no gradient; zeros are judged, and fail.
    with Client() as c:
        r = c.fuzz_op_client_side("matmul", lambda i: i["a"].detach() @ i["b"], iterations=8,
                                  dtypes=["float32"], seed=5, backward=True)
    assert r.forward.failed == 0 and r.gradients.failed > 0 and r.failed == r.gradients.failed
    assert all("grad_a" in f.tensors for f in r.failures), [f.tensors for f in r.failures]
    assert any("grad_a" in f.message for f in r.gradients.failures), [f.message for f in r.gradients.failures]


def test_ops_without_a_backward_op_or_autograd_are_refused_with_the_reason(daemon):
    # (softmax, log_softmax and flash_attention, whose backward ops take the forward's saved output,
    # run in their backward op's autograd mode: test_backward_saved_output.py)
    with Client() as c:
        with pytest.raises(gpuemu.ValidationError, match="no backward op"):
            c.fuzz_op_client_side("cumsum", lambda i: torch.cumsum(i["x"], i["dim"]), iterations=2, backward=True)
        with pytest.raises(gpuemu.ValidationError, match="framework='torch'"):
            c.fuzz_op_client_side("silu", lambda i: i["x"], iterations=2, framework="numpy", backward=True)


def torch_layer_norm(i):
    return F.layer_norm(i["x"], [i["x"].shape[-1]], i["weight"], i["bias"], i["eps"])


class LayerNormByHand(torch.autograd.Function):
    """A layer norm whose forward saves the fp32 mean and rstd and whose backward is the Triton
    tutorial's, in fp32; ``bug``: "projection" forgets - x_hat * mean(w*g*x_hat) in grad_x,
    "bias_tail" sums grad_bias over blocks of 64 rows and drops the last partial block."""

    @staticmethod
    def forward(ctx, x, w, b, eps, bug):
        xf = x.float()
        mean = xf.mean(-1, keepdim=True)
        rstd = torch.rsqrt(((xf - mean) ** 2).mean(-1, keepdim=True) + eps)
        y = (xf - mean) * rstd
        if w is not None:
            y = y * w.float()
        if b is not None:
            y = y + b.float()
        ctx.save_for_backward(x, w, mean, rstd)
        ctx.bug, ctx.has_b = bug, b is not None
        return y.to(x.dtype)

    @staticmethod
    def backward(ctx, g):
        x, w, mean, rstd = ctx.saved_tensors
        n = x.shape[-1]
        gf = g.float().reshape(-1, n)
        xh = ((x.float() - mean) * rstd).reshape(-1, n)
        r = rstd.reshape(-1, 1)
        wg = gf * w.float() if w is not None else gf
        c1 = (xh * wg).sum(-1, keepdim=True) / n
        c2 = wg.sum(-1, keepdim=True) / n
        gx = (wg - (c2 if ctx.bug == "projection" else xh * c1 + c2)) * r
        gw = (gf * xh).sum(0).to(w.dtype) if w is not None else None
        gb = None
        if ctx.has_b:
            rows = gf.shape[0] // 64 * 64 if ctx.bug == "bias_tail" else gf.shape[0]
            gb = torch.zeros(n)
            for s in range(0, rows, 64):
                gb = gb + gf[s:s + 64].sum(0)
            gb = gb.to(g.dtype)
        return gx.reshape(x.shape).to(x.dtype), gw, gb, None, None


def layer_norm_by_hand(bug=None):
    return lambda i: LayerNormByHand.apply(i["x"], i["weight"], i["bias"], i["eps"], bug)


@pytest.mark.parametrize("strategy", ["adversarial", "regular"])
def test_layer_norm_through_torch_autograd_passes_its_saved_statistics_left_to_the_forward(daemon, strategy):
    # layer_norm_backward takes the saved mean and rstd; the kernel's own forward recomputes them,
    # which the backward op's model covers: torch's F.layer_norm through autograd in fp32 passes.
    with Client() as c:
        r = c.fuzz_op_client_side("layer_norm", torch_layer_norm, iterations=60, dtypes=["float32"], seed=7,
                                  value_distribution=strategy, backward=True)
        h = c.fuzz_op_client_side("layer_norm", layer_norm_by_hand(), iterations=30, dtypes=["float32"], seed=7,
                                  value_distribution=strategy, backward=True)
    assert r.ok, str(r)
    assert r.gradients.op == "layer_norm_backward" and r.gradients.total == 60 and r.gradients.passed == 60
    assert h.ok, str(h)


def test_a_layer_norm_backward_missing_its_projection_or_dropping_grad_bias_tail_is_caught_by_name(daemon):
    with Client() as c:
        p = c.fuzz_op_client_side("layer_norm", layer_norm_by_hand("projection"), iterations=24, dtypes=["float32"],
                                  seed=11, backward=True, present={"weight": True})
        t = c.fuzz_op_client_side("layer_norm", layer_norm_by_hand("bias_tail"), iterations=24, dtypes=["float32"],
                                  seed=11, backward=True, present={"weight": True, "bias": True})
    assert p.forward.failed == 0 and t.forward.failed == 0, "the forwards are correct"
    assert p.failed == p.gradients.failed and t.failed == t.gradients.failed
    assert {x for f in p.failures for x in f.tensors} == {"grad_x"}
    assert {x for f in t.failures for x in f.tensors} == {"grad_bias"}
    assert p.gradients.failed > 0 and t.gradients.failed > 0
    for f in p.gradients.failures:  # three outputs (a weight): the message names the one that failed
        assert "'grad_x'" in f.message and "'grad_weight'" not in f.message and "'grad_bias'" not in f.message, \
            f.message
    for f in t.gradients.failures:
        assert "'grad_bias'" in f.message and "'grad_x'" not in f.message and "'grad_weight'" not in f.message, f.message


def test_rms_norm_through_autograd_passes_with_its_saved_rstd_left_to_the_forward(daemon):
    def rms(i):
        x = i["x"]
        y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + i["eps"])
        return y * i["weight"] if i["weight"] is not None else y

    with Client() as c:
        r = c.fuzz_op_client_side("rms_norm", rms, iterations=30, dtypes=["float32"], seed=7, backward=True)
    assert r.ok, str(r)
    assert r.gradients.op == "rms_norm_backward" and r.gradients.passed == 30


class SiluRacyBackward(torch.autograd.Function):
    """A correct SiLU backward whose result depends on the run, as an atomics-based reduction's may:
    a perturbation far inside the envelope that only check_determinism can see."""

    calls = 0

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return F.silu(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        s = torch.sigmoid(x)
        SiluRacyBackward.calls += 1
        out = g * s * (1 + x * (1 - s))
        if SiluRacyBackward.calls % 2:  # every other run: the last bit of one element moves
            out = out.clone()
            flat = out.view(-1) if out.is_contiguous() else out.reshape(-1)
            if flat.numel():
                flat[0] = torch.nextafter(flat[0], torch.tensor(float("inf")))
            out = flat.view_as(out)
        return out


def test_check_determinism_covers_the_gradients(daemon):
    with Client() as c:
        steady = c.fuzz_op_client_side("silu", silu_correct, iterations=6, dtypes=["float32"], seed=3,
                                       backward=True, check_determinism=True)
        racy = c.fuzz_op_client_side("silu", lambda i: SiluRacyBackward.apply(i["x"]), iterations=6,
                                     dtypes=["float32"], seed=3, backward=True, check_determinism=True)
    assert steady.ok, str(steady)
    assert racy.forward.failed == 0, "the forward is deterministic"
    assert racy.gradients.failed > 0
    assert any("nondeterministic" in f.message for f in racy.gradients.failures), \
        [f.message for f in racy.gradients.failures]


def test_gradients_through_get_test_batch_and_submit_output(daemon):
    # The batch interface by hand: matmul_backward's cases carry a, b and grad_out; autograd's
    # gradients go back in the op's output order. A wrong grad_b (computed from grad_a) fails.
    with Client() as c:
        cases = c.get_test_batch("matmul_backward", count=4, seed=11, dtypes=["float32"], framework="torch")
        verdicts, wrong = [], []
        for case in cases:
            x = case["inputs"]
            a = x["a"].detach().requires_grad_(True)
            b = x["b"].detach().requires_grad_(True)
            (a @ b).backward(x["grad_out"])
            verdicts.append(c.submit_output("matmul_backward", case["inputs"], (a.grad, b.grad), case["seed"]))
            bad_b = a.grad.t() @ x["grad_out"]  # grad_b from grad_a instead of a
            wrong.append(c.submit_output("matmul_backward", case["inputs"], (a.grad, bad_b), case["seed"]))
    assert all(v.passed for v in verdicts), [v.message for v in verdicts]
    assert not any(v.passed for v in wrong), [v.message for v in wrong]


def test_gelu_through_autograd_and_the_backward_ops_it_cannot_drive(daemon):
    def gelu(i):
        return F.gelu(i["x"], approximate=i["approximate"])

    with Client() as c:
        r = c.fuzz_op_client_side("gelu", gelu, iterations=12, dtypes=["float32"], seed=7,
                                  vary_attrs=["approximate"], layouts=False, backward=True)
        assert r.ok, str(r)
        assert r.gradients.op == "gelu_backward" and r.gradients.total == 12
        # With layouts, torch 1.13's erf-form gelu backward reads garbage when grad_out is transposed
        # against a contiguous x (evidence/conformance/backward.md): through autograd too, and the
        # diagnosis names the layout.
        laid = c.fuzz_op_client_side("gelu", gelu, iterations=12, dtypes=["float32"], seed=7,
                                     vary_attrs=["approximate"], backward=True)
        if torch.__version__.startswith("1.13"):
            assert laid.forward.failed == 0 and laid.gradients.failed > 0 and laid.failed > 0
            f = laid.gradients.failures[0]
            assert f.attrs["approximate"] == "none" and f.layout["grad_out"] != "contiguous"
            assert f.bug_class == "stride_assumption", f.describe()
        # rope_backward's and embedding_backward's cases carry no x / weight (their gradients do not
        # depend on them).
        with pytest.raises(gpuemu.ValidationError, match="do not carry rope's x"):
            c.fuzz_op_client_side("rope", lambda i: i["x"], iterations=2, backward=True)
        with pytest.raises(gpuemu.ValidationError, match="do not carry embedding's weight"):
            c.fuzz_op_client_side("embedding", lambda i: i["weight"][i["indices"]], iterations=2, backward=True)
        # linear_backward judges grad_bias and its cases carry no bias: an optional input whose
        # gradient does not depend on its value, so a leaf of zeros stands for it; unless the
        # kernel takes no bias (present= pins it absent), which is refused with the reason.
        lin = c.fuzz_op_client_side("linear", lambda i: F.linear(i["x"], i["weight"], i["bias"]), iterations=8,
                                    dtypes=["float32"], seed=7, backward=True)
        assert lin.ok, str(lin)
        assert lin.gradients.op == "linear_backward" and lin.gradients.passed == 8
        with pytest.raises(gpuemu.ValidationError, match="judges the gradient of linear's 'bias', which present= pins"):
            c.fuzz_op_client_side("linear", lambda i: F.linear(i["x"], i["weight"]), iterations=2, backward=True,
                                  present={"bias": False})


def test_cross_entropy_through_autograd_judges_the_logits_gradient(daemon):
    # The scalar loss's gradient: cross_entropy_backward's cases (reduction mean and sum) fed to
    # F.cross_entropy's autograd; a backward that counts ignored rows in 'mean' is caught on grad_logits.
    with Client() as c:
        ok = c.fuzz_op_client_side("cross_entropy", lambda i: cross_entropy(i, i["logits"]), iterations=30,
                                   dtypes=["float32"], seed=5, backward=True)
        bad = c.fuzz_op_client_side(
            "cross_entropy", lambda i: CrossEntropyMeanOverAllRows.apply(
                i["logits"], i["target"], i.get("ignore_index", -100), i.get("label_smoothing", 0.0))
            if i.get("reduction", "mean") == "mean" else cross_entropy(i, i["logits"]),
            iterations=30, dtypes=["float32"], seed=5, backward=True)
    assert ok.ok, str(ok)
    assert ok.gradients is not None and ok.gradients.op == "cross_entropy_backward" and ok.gradients.passed == 30
    assert bad.forward.failed == 0 and bad.gradients is not None and bad.gradients.failed > 0, str(bad)
    assert bad.failed == bad.gradients.failed


class CrossEntropyNoneFirstGrad(torch.autograd.Function):
    """cross_entropy (reduction 'none') whose backward scales every row by grad_out[0]."""

    @staticmethod
    def forward(ctx, x, t, ignore_index, smoothing):
        ctx.save_for_backward(x, t)
        ctx.ignore_index, ctx.smoothing = ignore_index, smoothing
        return F.cross_entropy(x, t, ignore_index=ignore_index, reduction="none", label_smoothing=smoothing)

    @staticmethod
    def backward(ctx, g):
        x, t = ctx.saved_tensors
        keep = t != ctx.ignore_index
        s, C = ctx.smoothing, x.shape[-1]
        q = torch.full_like(x, s / C, dtype=torch.float32)
        rows = keep.nonzero()[:, 0]
        q[rows, t[rows]] += 1.0 - s
        k = g.float()[0]
        return (k * (torch.softmax(x.float(), -1) - q) * keep[:, None]).to(x.dtype), None, None, None


def test_cross_entropy_none_through_autograd_judges_the_logits_gradient(daemon):
    # Reduction 'none': the forward's output is [N], and cross_entropy_backward's cases give autograd
    # a grad_out of shape [N] (one per row); a backward that scales every row by grad_out[0] is caught.
    with Client() as c:
        ok = c.fuzz_op_client_side("cross_entropy", lambda i: cross_entropy(i, i["logits"]), iterations=30,
                                   dtypes=["float32"], seed=6, backward=True, attrs={"reduction": "none"},
                                   vary_attrs=["ignore_index", "label_smoothing"])
        bad = c.fuzz_op_client_side(
            "cross_entropy", lambda i: CrossEntropyNoneFirstGrad.apply(
                i["logits"], i["target"], i.get("ignore_index", -100), i.get("label_smoothing", 0.0)),
            iterations=30, dtypes=["float32"], seed=6, backward=True, attrs={"reduction": "none"},
            vary_attrs=["ignore_index", "label_smoothing"])
    assert ok.ok, str(ok)
    assert ok.gradients is not None and ok.gradients.op == "cross_entropy_backward" and ok.gradients.passed == 30
    shapes = {tuple(f.shapes.get("grad_out", ())) for f in bad.gradients.failures} if bad.gradients else set()
    assert bad.forward.failed == 0 and bad.gradients is not None and bad.gradients.failed > 0, str(bad)
    assert bad.failed == bad.gradients.failed
    assert all(len(s) == 1 for s in shapes), shapes  # the failing cases' grad_out is [N]


# --- A case is one case (issue 47): under backward=True a case fails when its output or any of its
# gradients fails, and passed / failed / failures say so; each failure names the tensors that failed.

from bench.gpu.backward_client import SoftmaxNoRowSum  # noqa: E402


def softmax_no_row_sum(i):
    return SoftmaxNoRowSum.apply(i["x"], i["dim"])


def test_a_softmax_backward_missing_its_row_sum_fails_its_cases_in_failed_and_failures(daemon):
    with Client() as c:
        r = c.fuzz_op_client_side("softmax", softmax_no_row_sum, iterations=40, dtypes=["float32"], seed=1,
                                  backward=True)
    assert r.total == 40, "total is the cases asked for"
    assert r.forward.failed == 0 and r.forward.total == 40, "the forward is correct"
    assert r.gradients.failed > 30
    assert r.failed == r.gradients.failed and r.passed == 40 - r.gradients.failed and not r.ok
    assert len(r.failures) == r.failed
    assert all(f.tensors == ["grad_x"] for f in r.failures), [f.tensors for f in r.failures]
    assert r.first_failure == r.gradients.first_failure
    assert f"softmax: {r.passed}/40 passed" in r.summary() and "failed: grad_x" in r.summary()


def test_a_correct_softmax_autograd_counts_no_failure(daemon):
    with Client() as c:
        r = c.fuzz_op_client_side("softmax", lambda i: torch.softmax(i["x"], i["dim"]), iterations=24,
                                  dtypes=["float32"], seed=1, backward=True)
    assert r.ok and r.failed == 0 and r.passed == r.total == 24 and r.failures == [], str(r)


def test_a_forward_only_bug_still_fails_and_a_case_failing_both_ways_counts_once(daemon):
    # softmax scaled by 1.01: its forward fails every case; its gradient y·(g − Σg·y) scaled too
    # fails the cases where the error shows there.
    with Client() as c:
        r = c.fuzz_op_client_side("softmax", lambda i: torch.softmax(i["x"], i["dim"]) * 1.01, iterations=12,
                                  dtypes=["float32"], seed=1, backward=True)
    assert r.forward.failed == 12 and r.failed == 12 and r.total == 12 and len(r.failures) == 12
    assert all(f.tensors[0] == "out" for f in r.failures), [f.tensors for f in r.failures]
    both = [f for f in r.failures if "grad_x" in f.tensors]
    assert len(both) == r.gradients.failed > 0, "a case failing in its output and its gradient is one failure"
    assert all("gradients (" in f.message for f in both)


def test_the_report_joins_a_backward_run_into_one_count_of_cases(daemon):
    import json

    with Client() as c:
        r = c.fuzz_op_client_side("softmax", softmax_no_row_sum, iterations=20, dtypes=["float32"], seed=1,
                                  backward=True)
    assert r.failed > 0
    doc = json.loads(daemon.cli("report", "--op", "softmax", "--format", "json", "--runs", "daemon").stdout)
    fwd = [x for x in doc["daemon_runs"] if x["op"] == "softmax"]
    grads = [x for x in doc["daemon_runs"] if x["op"] == "softmax_backward"]
    assert fwd and grads, doc["daemon_runs"]
    assert sum(x["total"] for x in fwd) == 20
    assert sum(x["failed"] for x in fwd) == r.failed, fwd  # not "0 failed"
    assert sum(x["forward"]["passed"] for x in fwd) == 20
    assert sum(x["gradients"]["failed"] for x in fwd) == r.gradients.failed
    assert all(x["part_of"]["part"] == "gradients" and x["part_of"]["op"] == "softmax" for x in grads)
    rate = next(p for p in doc["pass_rates"] if p["op"] == "softmax")
    assert rate["cases"] == 20 and rate["passed"] == r.passed, doc["pass_rates"]
    text = daemon.cli("report", "--op", "softmax", "--runs", "daemon").stdout
    assert f"forward 20/20" not in text  # per chunk
    assert "gradients softmax_backward" in text and "backward run" in text, text
