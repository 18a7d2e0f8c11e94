"""Trusted implementations that are really imprecise: PyTorch 1.13's native bfloat16 CPU kernels.

The Conformance sweep fuzzes every op's PyTorch implementation natively in the case dtype. Where a
native bfloat16 kernel fails, it is either a hole in gpuemu's error model (fixed there, with a term
the arithmetic justifies) or a real imprecision of that kernel: an accumulator, a statistic or an
intermediate kept in bfloat16 where fp32 is what a correct kernel keeps. The cases below are the
second kind. Each carries its evidence as a demonstration on inputs chosen to expose it, measured
when the evidence is printed (``sweep.py --evidence``) and checked by the tests
(tests/python/test_conformance.py), so that a PyTorch that fixes one is noticed. These variants stay
failing: the sweep lists them apart and they do not count against its gate; the same ops upcast to
fp32 (and the fp32 and fp16 variants) pass with zero failures.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional, Tuple

import torch
import torch.nn.functional as F

BF16 = torch.bfloat16
K = 4096  # 4096 ones: a bf16 running sum stops at 256, where 256 + 1 rounds back to 256


@dataclass(frozen=True)
class Imprecision:
    """Why a native kernel fails, and a demonstration: ``demo() -> (what it shows, holds)``."""

    what: str
    demo: Callable[[], Tuple[str, bool]]
    # Where PyTorch picks the kernel by the CPU, what decides it: on a CPU that takes the accurate
    # path the demonstration does not hold, and the same native op must then pass gpuemu's check
    # (tests/python/test_conformance.py checks both ways).
    cpu_dependent: str = ""
    # A class known by the shape of each failure, not by the cell alone: a run is excused only when
    # the row holds every failure it counted and each one satisfies this predicate (over the row's
    # failure record: attrs, message, and per output `failing`, `nonfinite_mismatch`,
    # `nan_where_finite`); any other failure in the same cell stays gated (sweep.is_imprecise).
    only: Optional[Callable[[Dict[str, Any]], bool]] = None


def _close(a: float, b: float, rel: float = 1e-3) -> bool:
    return abs(a - b) <= rel * abs(b)


def _bf16_accumulator(name: str, value: Callable[[], float]) -> Callable[[], Tuple[str, bool]]:
    def demo() -> Tuple[str, bool]:
        got = value()
        return f"{name} of {K} ones in bfloat16 gives {got:g} (exact {K}; upcast to fp32 gives {K})", got == 256.0
    return demo


def _gelu() -> Tuple[str, bool]:
    got = F.gelu(torch.tensor([-3.0], dtype=BF16)).item()
    exact = F.gelu(torch.tensor([-3.0], dtype=torch.float64)).item()
    # Every intermediate rounded to bf16: 1 + erf(-3/sqrt2) cancels in bf16.
    x = torch.linspace(-5, 5, 100001).to(BF16).unique().float()
    e = torch.erf((x * 0.70710678).to(BF16).float()).to(BF16).float()
    emu = ((x * 0.5).to(BF16).float() * (1 + e).to(BF16).float()).to(BF16).float()
    match = (emu == F.gelu(x.to(BF16)).float()).float().mean().item()
    # The error is the imprecision; how closely the emulation explains it depends on the CPU's
    # vector path (99.9% on AVX2 CPUs, 66% on one with AVX512-BF16, gelu(-3) 45% off on both).
    return (f"gelu(-3) = {got:.6g} (exact {exact:.6g}, {abs(got / exact - 1):.0%} off); over the {x.numel()} "
            f"bf16 values in [-5, 5] it equals an every-intermediate-in-bf16 emulation for {match:.1%}"), \
        abs(got / exact - 1) > 0.2


def _row_norm(name: str, fn: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[], Tuple[str, bool]]:
    def demo() -> Tuple[str, bool]:
        x = torch.tensor([100.0, 100.5, 101.0, 99.5] * 256, dtype=BF16)
        got = fn(x).float().flatten()[:4]
        want = fn(x.float()).flatten()[:4]
        implied = (x[:4].float() - got / got.std(unbiased=False) * x[:4].float().std(unbiased=False)).mean().item()
        dev = (got - want).abs().max().item()
        return (f"{name} of the row (100, 100.5, 101, 99.5) x 256 in bfloat16: first outputs "
                f"{[round(v, 3) for v in got.tolist()]}, fp32 statistics give {[round(v, 3) for v in want.tolist()]} "
                f"(a mean near {implied:.2f} instead of 100.25: the statistics are not fp32-accurate)"), dev > 0.1
    return demo


def _l2norm() -> Tuple[str, bool]:
    got = F.normalize(torch.ones(K, 2, dtype=BF16), dim=0)[0, 0].item()
    return f"F.normalize(ones({K}, 2), dim=0) in bfloat16 gives {got:g} (exact 1/64 = 0.015625): the sum of " \
           "squares stops at 256 in a bf16 accumulator", got == 0.0625


def _log_softmax() -> Tuple[str, bool]:
    x = torch.tensor([[10.0, 4.0]], dtype=BF16)
    got = torch.log_softmax(x, -1)[0].tolist()
    exact = torch.log_softmax(x.double(), -1)[0].tolist()
    return (f"log_softmax([10, 4]) in bfloat16 gives {got} (exact [{exact[0]:.6g}, {exact[1]:.6g}]; bf16 holds "
            f"{torch.tensor(exact[0]).to(BF16).item():.6g}): lse = 10.0025 is rounded to bf16 (10) before x - lse"), \
        got[0] == 0.0


def _cross_entropy() -> Tuple[str, bool]:
    x = torch.tensor([[10.0, 4.0]], dtype=BF16)
    got = F.cross_entropy(x, torch.tensor([0])).item()
    exact = math.log1p(math.exp(-6.0))
    same = torch.equal(F.cross_entropy(x, torch.tensor([0]), reduction="none"),
                       F.nll_loss(torch.log_softmax(x, -1), torch.tensor([0]), reduction="none"))
    return (f"cross_entropy([10, 4], target 0) in bfloat16 gives {got:g} (exact {exact:.6g}); it is "
            f"nll(log_softmax) of the bf16 log_softmax above ({'bit for bit' if same else 'not bitwise'})"), \
        got != exact and same


def _batch_norm() -> Tuple[str, bool]:
    # Elements where x * alpha and beta cancel (x_hat * w = 0.2573, b = -0.25), channels-last.
    mean = torch.tensor([0.0712890625] * 3, dtype=BF16)
    var = torch.tensor([0.1806640625] * 3, dtype=BF16)
    w, b = torch.tensor([-0.41015625] * 3, dtype=BF16), torch.tensor([-0.25] * 3, dtype=BF16)
    x = torch.full((2, 5, 3), -0.1953125, dtype=BF16).transpose(1, 2)  # [B, C, S], not contiguous
    got = F.batch_norm(x, mean, var, w, b, training=False, eps=1e-5).flatten()[0].item()
    contig = F.batch_norm(x.contiguous(), mean, var, w, b, training=False, eps=1e-5).flatten()[0].item()
    exact = F.batch_norm(x.double(), mean.double(), var.double(), w.double(), b.double(), training=False,
                         eps=1e-5).flatten()[0].item()
    xw = ((-0.1953125 - 0.0712890625) / math.sqrt(0.1806640625 + 1e-5)) * -0.41015625
    ulp = 2.0 ** (math.floor(math.log2(abs(xw))) - 7)
    return (f"batch_norm of a cancelling element, input not contiguous, in bfloat16 gives {got:g} (exact "
            f"{exact:.6g}; the same input made contiguous gives {contig:g}): an error of {abs(got - exact) / ulp:.2f} "
            f"bf16 ulps of x_hat * w = {xw:.4f}, more than one rounding of any intermediate that size explains"), \
        abs(got - exact) > 0.75 * ulp and abs(contig - exact) < 0.5 * ulp


def _mean(dtype: torch.dtype) -> Callable[[], Tuple[str, bool]]:
    def demo() -> Tuple[str, bool]:
        x = torch.full((1024,), 80.0, dtype=dtype)
        big = torch.mean(x).item()
        g = torch.Generator().manual_seed(1)
        same = 0
        for _ in range(100):
            n = int(torch.randint(2, 3000, (1,), generator=g))
            y = (torch.rand(n, generator=g) * 2 + 0.5).to(dtype)
            same += int(torch.mean(y).item() == (torch.sum(y) / n).to(dtype).item())
        name = "float16" if dtype == torch.float16 else "bfloat16"
        return (f"torch.mean of 1024 x 80 in {name} gives {big:g} (exact 80); on 100 random rows it equals "
                f"sum(x) stored in {name}, divided by n, bit for bit {same}/100 times: the sum is an intermediate "
                f"in the input dtype"), same == 100 and (dtype != torch.float16 or math.isinf(big))
    return demo


def _logsumexp() -> Tuple[str, bool]:
    y = torch.tensor([[-0.0006, -8.0, -9.0]], dtype=BF16)
    got = torch.logsumexp(y, -1).item()
    exact = torch.logsumexp(y.double(), -1).item()
    return (f"logsumexp([-0.0006, -8, -9]) in bfloat16 gives {got:.6g} (exact {exact:.6g}, which bf16 holds to "
            f"{torch.tensor(exact).to(BF16).item():.6g}): 1 + e^-8 + e^-9 is stored in bf16 (1) before the log"), \
        abs(got - exact) > 4 * abs(torch.tensor(exact).to(BF16).item() - exact) + 1e-5


def _bf16_daz(op: str) -> Callable[[], Tuple[str, bool]]:
    """bf16 products on the CPU's blocked (oneDNN) path: subnormal inputs count as zero."""
    def demo() -> Tuple[str, bool]:
        tiny, big = 2.0 ** -130, 2.0 ** 120  # a bf16 subnormal and a normal: the product 2^-10 is normal
        if op in ("conv1d", "conv2d"):
            x = torch.full((1, 1, 8), tiny).to(BF16)
            w = torch.full((1, 1, 3), big).to(BF16)
            if op == "conv2d":
                x, w = x.reshape(1, 1, 2, 4), w.reshape(1, 1, 1, 3)
            got = (F.conv1d(x, w) if op == "conv1d" else F.conv2d(x, w)).flatten()[0].item()
            exact, shape = 3 * 2.0 ** -10, "a 3-tap kernel"
        else:
            a = torch.full((771, 7), tiny).to(BF16)
            b = torch.full((7, 512), big).to(BF16)
            got = {"bmm": lambda: torch.bmm(a[None], b[None])[0], "matmul": lambda: a @ b,
                   "linear": lambda: F.linear(a, b.t())}[op]()[0, 0].item()
            exact, shape = 7 * 2.0 ** -10, "771x7x512"
        one = (torch.tensor([[tiny]], dtype=BF16) @ torch.tensor([[big]], dtype=BF16)).item()
        return (f"{op} in bfloat16 of subnormal x (2^-130) times w (2^120), {shape}: {got:g} (exact {exact:g}; the "
                f"products are normal, 2^-10 each; a 1x1x1 matmul gives {one:g}): subnormal inputs are "
                f"flushed to zero"), got == 0.0 and exact > 0
    return demo


def _either(first: Callable[[], Tuple[str, bool]], second: Callable[[], Tuple[str, bool]]) -> Callable[[], Tuple[str, bool]]:
    """Two mechanisms of which the CPU decides one: the demonstration holds when either shows."""
    def demo() -> Tuple[str, bool]:
        (a, ha), (b, hb) = first(), second()
        return f"{a}; {b}", ha or hb
    return demo


ONEDNN_CONV = ("on CPUs with AVX512-BF16, bf16 convolutions go through oneDNN, which accumulates in fp32 "
               "(4096 ones sum to 4096)")

def _backward_sum_in_bf16(log: bool) -> Callable[[], Tuple[str, bool]]:
    """torch 1.13's bf16 CPU softmax/log_softmax backward stores the row sum (sum g*y, or sum g) in
    bf16 before using it: an emulation that rounds that sum once to bf16, all else fp32, equals its
    output bit for bit on random rows (evidence/conformance/probe_backward_bf16.py)."""
    def demo() -> Tuple[str, bool]:
        if log:
            # S = 1 + 2^-8 rounds to 1 in bf16 (a tie, to even); grad_x[0] = 0.5 - p * S cancels.
            g = torch.tensor([[0.5, 0.5 + 2.0 ** -8]], dtype=BF16)
            y = torch.log(torch.tensor([[0.5, 0.5]], dtype=torch.float64)).to(BF16)
            got = torch._log_softmax_backward_data(g, y, -1, BF16)[0, 0].item()
            gd, yd = g.double(), y.double()
            exact = (gd - torch.exp(yd) * gd.sum(-1, keepdim=True))[0, 0].item()
            up = torch._log_softmax_backward_data(g.float(), y.float(), -1, torch.float32).to(BF16)[0, 0].item()
            what = "log_softmax backward of grad_out [0.5, 0.5 + 2^-8] at y = log([0.5, 0.5])"
        else:
            # s = 0.25 + 0.75 * (1 + 2^-7) = 1.005859375 rounds to 1 + 2^-7 in bf16.
            g = torch.tensor([[1.0, 1.0 + 2.0 ** -7]], dtype=BF16)
            y = torch.tensor([[0.25, 0.75]], dtype=BF16)
            got = torch._softmax_backward_data(g, y, -1, BF16)[0, 0].item()
            gd, yd = g.double(), y.double()
            exact = (yd * (gd - (gd * yd).sum(-1, keepdim=True)))[0, 0].item()
            up = torch._softmax_backward_data(g.float(), y.float(), -1, torch.float32).to(BF16)[0, 0].item()
            what = "softmax backward of grad_out [1, 1 + 2^-7] at y = [0.25, 0.75]"
        held = torch.tensor(exact).to(BF16).item()
        return (f"{what} in bfloat16 gives {got:.6g} (exact {exact:.6g}, which bfloat16 holds to {held:.6g}; "
                f"the upcast gives {up:.6g}): the row sum is stored in bfloat16 before it is used"), \
            abs(got - exact) > 4 * abs(held - exact) + 1e-6 and up == held
    return demo


def _silu_backward_bf16(swiglu: bool) -> Callable[[], Tuple[str, bool]]:
    """torch 1.13's bf16 CPU silu backward rounds every intermediate to bf16 (exp(-x), 1 + exp(-x),
    s, 1 - s, x(1 - s), 1 + x(1 - s), the products): that emulation equals its output bit for bit
    (evidence/conformance/probe_backward_bf16.py); 1 - s cancels. swiglu's autograd backward is
    silu_backward(grad_out * up in bf16, gate) bit for bit."""
    def demo() -> Tuple[str, bool]:
        x = torch.tensor([-1.28125, 6.0], dtype=BF16)
        g = torch.ones(2, dtype=BF16)
        if swiglu:
            gate = x.clone().requires_grad_(True)
            up = torch.ones(2, dtype=BF16, requires_grad=True)
            (F.silu(gate) * up).backward(g)
            got = gate.grad.double().tolist()
            what = "autograd through F.silu(gate) * up (up = 1) at gate = [-1.28125, 6]"
        else:
            got = torch.ops.aten.silu_backward(g, x).double().tolist()
            what = "torch.ops.aten.silu_backward at x = [-1.28125, 6] (grad 1)"
        xd = x.double()
        sd = torch.sigmoid(xd)
        exact = (sd * (1 + xd * (1 - sd))).tolist()
        held = [torch.tensor(e).to(BF16).item() for e in exact]
        up32 = torch.ops.aten.silu_backward(g.float(), x.float()).to(BF16).double().tolist()
        return (f"{what} in bfloat16 gives {got} (exact [{exact[0]:.6g}, {exact[1]:.6g}], which bfloat16 holds as "
                f"{held}; the upcast gives {up32}): every intermediate of s * (1 + x * (1 - s)) is rounded to "
                f"bfloat16, and 1 - s cancels"), got[0] == 0.0 and up32 == held and got[1] != held[1]
    return demo


def _matmul_grad_b_bf16() -> float:
    a = torch.ones(K, 1, dtype=BF16, requires_grad=True)
    b = torch.ones(1, 1, dtype=BF16, requires_grad=True)
    (a @ b).backward(torch.ones(K, 1, dtype=BF16))
    return b.grad.item()


def _sdpa_grad_v_bf16() -> float:
    """grad_v of torch 1.13's SDPA (_scaled_dot_product_attention_math) over 4096 queries and one
    key (every P = 1, grad_out = ones): dV = P^T dO, a dot product of 4096 ones."""
    q = torch.zeros(1, 1, K, 1, dtype=BF16, requires_grad=True)
    k = torch.zeros(1, 1, 1, 1, dtype=BF16, requires_grad=True)
    v = torch.zeros(1, 1, 1, 1, dtype=BF16, requires_grad=True)
    out, _ = torch._scaled_dot_product_attention_math(q, k, v, None, 0.0, False, False)
    out.backward(torch.ones_like(out))
    return v.grad.item()


def _gelu_backward_bf16() -> Tuple[str, bool]:
    """torch 1.13's bf16 CPU gelu backward, tanh form, rounds every intermediate of
    0.5(1 + t) + 0.5x(1 - t^2) k(1 + 3c x^2) to bf16 (constants included): that emulation equals
    its output bit for bit (evidence/conformance/probe_backward_bf16.py), and 1 - t^2 cancels. Its erf
    form does the same on its scalar path (an x in another layout than grad_out's: cdf + x * pdf
    cancels near x = -0.75), and is the fp32 kernel on the upcast inputs where both are contiguous."""
    x = torch.tensor([-0.75, -3.0], dtype=BF16)
    g = torch.ones(2, dtype=BF16)
    got = torch.ops.aten.gelu_backward(g, x, approximate="tanh").double().tolist()
    exact = torch.ops.aten.gelu_backward(g.double(), x.double(), approximate="tanh").tolist()
    held = [torch.tensor(e).to(BF16).item() for e in exact]
    up32 = torch.ops.aten.gelu_backward(g.float(), x.float(), approximate="tanh").to(BF16).double().tolist()
    return (f"torch.ops.aten.gelu_backward(approximate='tanh') at x = [-0.75, -3] (grad 1) in bfloat16 gives {got} "
            f"(exact [{exact[0]:.6g}, {exact[1]:.6g}], which bfloat16 holds as {held}; the upcast gives {up32}): "
            f"every intermediate rounded to bfloat16, and 1 - t^2 cancels"), \
        got[0] == 0.0 and up32 == held and not _close(got[1], held[1], 0.1)


def _linear_backward_bf16() -> Tuple[str, bool]:
    """torch 1.13's bf16 linear backward: its GEMMs accumulate in bf16 where one operand is a vector
    (grad_x of a [1, 4096] grad_out against weight [4096, 1]; grad_weight of grad_out [4096, 1]
    against x [4096, 1]); grad_bias = grad_out.sum(0) does not."""
    def grads(m: int, k: int, n: int) -> Tuple[float, float, float]:
        x = torch.ones(m, k, dtype=BF16, requires_grad=True)
        w = torch.ones(n, k, dtype=BF16, requires_grad=True)
        b = torch.zeros(n, dtype=BF16, requires_grad=True)
        F.linear(x, w, b).backward(torch.ones(m, n, dtype=BF16))
        return x.grad.float().max().item(), w.grad.float().max().item(), b.grad.float().max().item()
    gx = grads(1, 1, K)[0]
    _, gw, gb = grads(K, 1, 1)
    return (f"autograd through F.linear in bfloat16, all ones: grad_x over {K} products gives {gx:g}, grad_weight over "
            f"{K} rows {gw:g} (exact {K}; upcast to fp32 gives {K}), grad_bias over the same rows {gb:g}"), \
        gx == 256.0 and gw == 256.0 and gb == K


def _embedding_backward_lowp(dtype: torch.dtype, stop: float) -> Callable[[], Tuple[str, bool]]:
    """torch 1.13's CPU embedding backward accumulates grad_weight in its own dtype: 4096 ones at one
    row stop where the running sum + 1 rounds back (bf16 256, fp16 2048)."""
    def demo() -> Tuple[str, bool]:
        w = torch.zeros(1, 1, dtype=dtype, requires_grad=True)
        F.embedding(torch.zeros(K, dtype=torch.long), w).backward(torch.ones(K, 1, dtype=dtype))
        got = w.grad.item()
        return (f"autograd through F.embedding, {K} positions of index 0 with grad 1, in {str(dtype)[6:]}: "
                f"grad_weight[0] = {got:g} (exact {K}; upcast to fp32 gives {K})"), got == stop
    return demo


def _layer_norm_backward_bf16() -> Tuple[str, bool]:
    """torch 1.13's CPU layer_norm backward in bf16: the forward saves mean and rstd in bf16 (the
    backward kernel takes them in x's dtype), and grad_weight and grad_bias are accumulated in bf16."""
    x = torch.tensor([[256.0, 258.0]], dtype=BF16, requires_grad=True)
    F.layer_norm(x, [2], None, None, 1e-5).backward(torch.tensor([[1.0, 0.0]], dtype=BF16))
    gx = x.grad[0, 0].item()
    mean = torch.ops.aten.native_layer_norm(x.detach(), [2], None, None, 1e-5)[1].item()
    xd = x.detach().double().requires_grad_(True)
    F.layer_norm(xd, [2], None, None, 1e-5).backward(torch.tensor([[1.0, 0.0]], dtype=torch.float64))
    exact = xd.grad[0, 0].item()
    w = torch.ones(1, dtype=BF16, requires_grad=True)
    b = torch.zeros(1, dtype=BF16, requires_grad=True)
    F.layer_norm(torch.arange(2 * K, dtype=torch.float32).reshape(K, 2)[:, :1].to(BF16), [1], w, b, 1e-5).backward(
        torch.ones(K, 1, dtype=BF16))
    gb = b.grad.item()
    return (f"autograd through F.layer_norm in bf16: x = [256, 258], grad_out = [1, 0] gives grad_x[0] = {gx:.4g} "
            f"(exact {exact:.3g}; the saved mean is {mean:g} for 257, bf16's rounding); {K} rows of grad_out 1 "
            f"give grad_bias {gb:g} (exact {K}; upcast to fp32 gives {K})"), abs(gx) > 0.1 and gb == 256.0


IMPRECISE: Dict[Tuple[str, str, str], Imprecision] = {
    ("matmul", "native", "bfloat16"): Imprecision(
        "accumulates in bf16", _bf16_accumulator(
            "a @ b", lambda: (torch.ones(1, K, dtype=BF16) @ torch.ones(K, 1, dtype=BF16)).item())),
    ("bmm", "native", "bfloat16"): Imprecision(
        "accumulates in bf16", _bf16_accumulator(
            "torch.bmm", lambda: torch.bmm(torch.ones(1, 1, K, dtype=BF16), torch.ones(1, K, 1, dtype=BF16)).item())),
    ("linear", "native", "bfloat16"): Imprecision(
        "accumulates in bf16 when x or weight is not contiguous; on oneDNN's path, flushes subnormal inputs",
        _either(_bf16_accumulator(
            "F.linear with a transposed weight", lambda: F.linear(
                torch.ones(1, K, dtype=BF16), torch.ones(K, 2, dtype=BF16).t())[0, 0].item()), _bf16_daz("linear")),
        cpu_dependent="on CPUs with AVX512-BF16, F.linear in bf16 goes through oneDNN's GEMM, which "
                      "accumulates in fp32 (4096 ones sum to 4096)"),
    ("conv1d", "native", "bfloat16"): Imprecision(
        "accumulates in bf16; on oneDNN's path, flushes subnormal inputs", _either(_bf16_accumulator(
            "F.conv1d", lambda: F.conv1d(torch.ones(1, 1, K, dtype=BF16), torch.ones(1, 1, K, dtype=BF16)).item()),
            _bf16_daz("conv1d")),
        cpu_dependent=ONEDNN_CONV),
    ("conv2d", "native", "bfloat16"): Imprecision(
        "accumulates in bf16; on oneDNN's path, flushes subnormal inputs", _either(_bf16_accumulator(
            "F.conv2d", lambda: F.conv2d(torch.ones(1, 1, 64, 64, dtype=BF16),
                                         torch.ones(1, 1, 64, 64, dtype=BF16)).item()), _bf16_daz("conv2d")),
        cpu_dependent=ONEDNN_CONV),
    ("gelu", "native", "bfloat16"): Imprecision("computes in bf16 (1 + erf cancels)", _gelu),
    ("geglu", "native", "bfloat16"): Imprecision("its F.gelu computes in bf16 (as gelu)", _gelu),
    ("layer_norm", "native", "bfloat16"): Imprecision(
        "statistics not fp32-accurate", _row_norm("F.layer_norm", lambda x: F.layer_norm(x[None], (x.numel(),)))),
    ("group_norm", "native", "bfloat16"): Imprecision(
        "statistics not fp32-accurate", _row_norm("F.group_norm", lambda x: F.group_norm(x.view(1, 1, -1), 1))),
    ("l2norm", "native", "bfloat16"): Imprecision("accumulates the sum of squares in bf16 off the last dim", _l2norm),
    ("log_softmax", "native", "bfloat16"): Imprecision("lse rounded to bf16 before x - lse", _log_softmax),
    ("cross_entropy", "native", "bfloat16"): Imprecision("the bf16 log_softmax above", _cross_entropy),
    ("batch_norm", "native", "bfloat16"): Imprecision("more than one bf16 rounding of x_hat * w", _batch_norm),
    ("mean", "native", "float16"): Imprecision(
        "stores the sum in float16 before dividing, where it overflows (the rounding alone is accepted: c_in)",
        _mean(torch.float16)),
    ("logsumexp", "native", "bfloat16"): Imprecision("stores the sum of exp in bf16 before the log", _logsumexp),
    # 2026-12-03: the backward ops (evidence/conformance/backward.md)
    ("softmax_backward", "native", "bfloat16"): Imprecision("the row sum sum(g * y) is stored in bf16",
                                                            _backward_sum_in_bf16(False)),
    ("log_softmax_backward", "native", "bfloat16"): Imprecision("the row sum sum(g) is stored in bf16",
                                                                _backward_sum_in_bf16(True)),
    ("silu_backward", "native", "bfloat16"): Imprecision("every intermediate of the derivative rounded to bf16",
                                                         _silu_backward_bf16(False)),
    ("swiglu_backward", "native", "bfloat16"): Imprecision(
        "autograd's silu backward rounds every intermediate of the derivative to bf16", _silu_backward_bf16(True)),
    ("embedding_backward", "native", "bfloat16"): Imprecision(
        "grad_weight accumulated in bf16", _embedding_backward_lowp(BF16, 256.0)),
    ("embedding_backward", "native", "float16"): Imprecision(
        "grad_weight accumulated in fp16", _embedding_backward_lowp(torch.float16, 2048.0)),
    ("gelu_backward", "native", "bfloat16"): Imprecision(
        "every intermediate of the derivative rounded to bf16 (the tanh form; the erf form on its scalar path)",
        _gelu_backward_bf16),
    ("linear_backward", "native", "bfloat16"): Imprecision(
        "autograd's backward GEMMs accumulate in bf16 (grad_x, grad_weight; matrix-vector shapes)", _linear_backward_bf16),
    ("layer_norm_backward", "native", "bfloat16"): Imprecision(
        "mean and rstd saved in bf16 (the backward takes them in x's dtype); grad_weight and grad_bias accumulated "
        "in bf16", _layer_norm_backward_bf16),
    ("flash_attention_backward", "native", "bfloat16"): Imprecision(
        "autograd through torch 1.13's bf16 SDPA (the math composition in bf16): its backward GEMMs accumulate in "
        "bf16 (grad_v = P^T @ grad_out over the queries: shown), and every intermediate (scores, P, softmax "
        "backward's row sum, as softmax_backward's) is held in bf16: grad_q -46.25 for -351.7 at scale 1",
        _bf16_accumulator("grad_v of SDPA over 4096 queries and one key (P = 1, grad_out = ones)",
                          lambda: _sdpa_grad_v_bf16())),
    ("matmul_backward", "native", "bfloat16"): Imprecision(
        "autograd's backward GEMM accumulates in bf16 (grad_b = a^T @ grad_out)", _bf16_accumulator(
            "grad_b of a @ b (a = ones(4096, 1), b = ones(1, 1), grad_out = ones)", lambda: _matmul_grad_b_bf16())),
}


# ---------------------------------------------------------------------------------------------
# PyTorch 2.11's CPU kernels (measured on the GPU machine's CPU: evidence/conformance/
# probe_torch2_imprecise.py and probe_torch2_extra.py, output beside them). Its bf16
# GEMMs and convolutions accumulate in fp32 (4096 ones sum to 4096) and are not listed: their
# failures under `boundary` and `special` stay open until shown.

def _spacing(exact: float, dtype: torch.dtype) -> float:
    mant = {torch.float16: 10, torch.bfloat16: 7, torch.float32: 23}[dtype]
    e = math.floor(math.log2(abs(exact))) if exact else -14
    return 2.0 ** (e - mant)


def _gelu_inf(dtype: torch.dtype) -> Callable[[], Tuple[str, bool]]:
    def demo() -> Tuple[str, bool]:
        x = torch.tensor([float("inf")] + [1.0] * 15, dtype=dtype)
        got = F.gelu(x)[0].item()
        one = F.gelu(torch.tensor([float("inf")], dtype=dtype)).item()
        tanh = F.gelu(x, approximate="tanh")[0].item()
        return (f"F.gelu(+inf) in a {dtype} tensor of 16 (the vectorized path) gives {got} (exact +inf; a "
                f"tensor of one gives {one}, the tanh form {tanh})"), math.isnan(got)
    return demo


def _lse_rounded(op: str, dtype: torch.dtype) -> Callable[[], Tuple[str, bool]]:
    def demo() -> Tuple[str, bool]:
        x = torch.tensor([[10.0, 4.0]], dtype=dtype)
        if op == "cross_entropy":
            got = F.cross_entropy(x, torch.tensor([0])).item()
            exact = math.log1p(math.exp(-6.0))
            up = F.cross_entropy(x.float(), torch.tensor([0])).to(dtype).item()
        else:
            got = torch.log_softmax(x, -1)[0, 0].item()
            exact = -math.log1p(math.exp(-6.0))
            up = torch.log_softmax(x.float(), -1)[0, 0].to(dtype).item()
        ulp = _spacing(exact, dtype)
        return (f"{op}([10, 4]) in {dtype} gives {got:.6g} (exact {exact:.6g}, {abs(got - exact) / ulp:.0f} "
                f"{dtype} spacings off; upcast to fp32 and back: {up:.6g})"), \
            abs(got - exact) > 20 * ulp and abs(up - exact) <= ulp
    return demo


def _logsumexp_sum(dtype: torch.dtype) -> Callable[[], Tuple[str, bool]]:
    def demo() -> Tuple[str, bool]:
        y = torch.tensor([[-0.0006, -8.0, -9.0]], dtype=dtype)
        got = torch.logsumexp(y, -1).item()
        exact = torch.logsumexp(y.double(), -1).item()
        held = torch.tensor(exact).to(dtype).item()
        return (f"logsumexp([-0.0006, -8, -9]) in {dtype} gives {got:.6g} (exact {exact:.6g}, which {dtype} "
                f"holds to {held:.6g}): 1 + e^-8 + e^-9 is stored in the input dtype before the log"), \
            abs(got - exact) > 4 * abs(held - exact) + 1e-5
    return demo


def _smoothing_overflow() -> Tuple[str, bool]:
    g = torch.Generator().manual_seed(0)
    lg = torch.randn(4, 25027, generator=g)
    t = torch.tensor([1, 2, 3, 4])
    got = F.cross_entropy(lg.half(), t, label_smoothing=0.1).item()
    up = F.cross_entropy(lg.half().float(), t, label_smoothing=0.1).item()
    return (f"fp16 cross_entropy(label_smoothing=0.1) over 25,027 standard-normal logits gives {got} "
            f"(upcast: {up:.6g}): the smoothing term's sum over the classes is held in fp16"), math.isinf(got)


def _batch_norm_cancel(dtype: torch.dtype) -> Callable[[], Tuple[str, bool]]:
    def demo() -> Tuple[str, bool]:
        mean = torch.tensor([0.0712890625] * 3, dtype=dtype)
        var = torch.tensor([0.1806640625] * 3, dtype=dtype)
        w, b = torch.tensor([-0.41015625] * 3, dtype=dtype), torch.tensor([-0.25] * 3, dtype=dtype)
        x = torch.full((2, 5, 3), -0.1953125, dtype=dtype).transpose(1, 2)
        got = F.batch_norm(x, mean, var, w, b, training=False, eps=1e-5).flatten()[0].item()
        exact = F.batch_norm(x.double(), mean.double(), var.double(), w.double(), b.double(), training=False,
                             eps=1e-5).flatten()[0].item()
        ulp = _spacing(exact, dtype)
        return (f"batch_norm of a cancelling element, input not contiguous, in {dtype} gives {got:.6g} "
                f"(exact {exact:.6g}: {abs(got - exact) / ulp:.0f} spacings of the result)"), abs(got - exact) > 4 * ulp
    return demo


def _bf16_gemm_inf_leak() -> Tuple[str, bool]:
    torch.manual_seed(0)
    a = torch.randn(496, 129).to(BF16)
    a[5, 3] = float("-inf")
    b = torch.rand(129, 384).to(BF16) + 0.5
    out = a @ b
    leaked = int((~out.isfinite()).sum() - (~out[5].isfinite()).sum())
    return (f"bfloat16 a @ b (496x129 @ 129x384, b > 0) with one -inf in row 5 of a: row 5 is -inf (exact), and "
            f"{leaked} outputs of rows that hold no infinity are non-finite too (float16 and the upcast: 0)"), leaked > 0


def _bf16_dilated_conv2d() -> Tuple[str, bool]:
    torch.manual_seed(1)
    x = torch.randn(1, 64, 31, 7).to(BF16)
    w = torch.randn(64, 16, 5, 4).to(BF16)
    kw = dict(stride=3, padding=1, dilation=2, groups=4)
    got = F.conv2d(x, w, **kw).double()
    exact = F.conv2d(x.double(), w.double(), **kw)
    up = F.conv2d(x.float(), w.float(), **kw).double()
    err, uerr = (got - exact).abs().max().item(), (up - exact).abs().max().item()
    return (f"conv2d in bfloat16 of contiguous randn x[1,64,31,7], w[64,16,5,4], stride 3, padding 1, "
            f"dilation 2, groups 4: largest error {err:.3g} with outputs up to {exact.abs().max().item():.3g} "
            f"(the upcast: {uerr:.2g}; float16: rounding only): wrong results, not rounding"), err > 1.0 and uerr < 1e-3


def _fp16_norm_in_fp16() -> Tuple[str, bool]:
    x = torch.full((1000,), 60000.0, dtype=torch.float16)
    over = F.normalize(x, dim=0)[0].item()
    t = torch.tensor([2.0 ** -24, 2.0 ** -24], dtype=torch.float16)
    small = F.normalize(t, dim=0)[0].item()
    return (f"F.normalize in float16 divides by a norm held in float16: 60000 x 1000 gives {over:g} (exact "
            f"{1 / math.sqrt(1000):.6g}: the norm overflows to inf), [2^-24, 2^-24] gives {small:g} (exact "
            f"{1 / math.sqrt(2):.6g}: the norm rounds in float16's subnormal range); the upcast gives both"), \
        over == 0.0 and abs(small - 1 / math.sqrt(2)) > 0.1


H = torch.float16
IMPRECISE_TORCH2_11: Dict[Tuple[str, str, str], Imprecision] = {
    **{(op, style, dt_name): Imprecision("F.gelu(+inf) is NaN in the vectorized path (the tanh form and one "
                                         "element give +inf)", _gelu_inf(dt))
       for op in ("gelu", "geglu") for style in ("native", "upcast")
       for dt_name, dt in (("float32", torch.float32), ("float16", H), ("bfloat16", BF16))
       if not (style == "upcast" and dt_name == "float32")},
    ("log_softmax", "native", "bfloat16"): Imprecision("lse rounded to bf16 before x - lse",
                                                       _lse_rounded("log_softmax", BF16)),
    ("log_softmax", "native", "float16"): Imprecision("lse rounded before x - lse", _lse_rounded("log_softmax", H)),
    ("cross_entropy", "native", "bfloat16"): Imprecision("its log_softmax's lse rounded to bf16",
                                                         _lse_rounded("cross_entropy", BF16)),
    ("cross_entropy", "native", "float16"): Imprecision(
        "its log_softmax's lse rounded to fp16; with label smoothing the sum over the classes overflows fp16",
        lambda: (lambda a, b: (a[0] + "; " + b[0], a[1] and b[1]))(_lse_rounded("cross_entropy", H)(),
                                                                    _smoothing_overflow())),
    ("logsumexp", "native", "bfloat16"): Imprecision("stores the sum of exp in bf16 before the log", _logsumexp_sum(BF16)),
    ("logsumexp", "native", "float16"): Imprecision("stores the sum of exp in fp16 before the log", _logsumexp_sum(H)),
    ("batch_norm", "native", "bfloat16"): Imprecision("more than one bf16 rounding of x_hat * w", _batch_norm_cancel(BF16)),
    ("batch_norm", "native", "float16"): Imprecision("more than one fp16 rounding of x_hat * w", _batch_norm_cancel(H)),
    # evidence/conformance/probe_torch2_lowp.py and its .txt (2026-12-02)
    **{(op, "native", "bfloat16"): Imprecision(
        "bf16 GEMM on the blocked CPU path flushes subnormal inputs and leaks a -inf into other rows",
        (lambda d: lambda: (lambda a, b: (a[0] + "; " + b[0], a[1] and b[1]))(d(), _bf16_gemm_inf_leak()))(_bf16_daz(op)),
        cpu_dependent="oneDNN's bf16 kernels (AVX512-BF16 / AMX CPUs); small shapes take another path")
       for op in ("bmm", "matmul", "linear")},
    ("conv1d", "native", "bfloat16"): Imprecision("bf16 convolution flushes subnormal inputs", _bf16_daz("conv1d"),
                                                  cpu_dependent="oneDNN's bf16 kernels (AVX512-BF16 / AMX CPUs)"),
    ("conv2d", "native", "bfloat16"): Imprecision(
        "bf16 dilated convolution computes wrong values; subnormal inputs are flushed",
        lambda: (lambda a, b: (a[0] + "; " + b[0], a[1] and b[1]))(_bf16_dilated_conv2d(), _bf16_daz("conv2d")()),
        cpu_dependent="oneDNN's bf16 kernels (AVX512-BF16 / AMX CPUs)"),
    ("l2norm", "native", "float16"): Imprecision("the norm is held in fp16 (x.norm() in the input dtype)",
                                                 _fp16_norm_in_fp16),
}


def table_for(torch_version: str) -> Dict[Tuple[str, str, str], Imprecision]:
    """The imprecise CPU implementations shown under `torch_version` (major.minor): each table's
    evidence is that torch's, and a variant is excused only under the torch it was shown on."""
    if torch_version.startswith("1.13"):
        return IMPRECISE
    if torch_version.startswith("2.11"):
        return IMPRECISE_TORCH2_11
    return {}


def evidence(torch_version: str = torch.__version__) -> Dict[Tuple[str, str, str], Tuple[str, bool]]:
    """Each imprecise variant's demonstration under this process's torch, measured now."""
    torch.set_num_threads(1)
    return {k: v.demo() for k, v in table_for(torch_version).items()}
