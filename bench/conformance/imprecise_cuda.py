"""Trusted CUDA kernels that are really imprecise (or really defective): PyTorch 2.11 on an H200.

As imprecise.py does for the CPU kernels: each entry is a failure of the Conformance sweep on CUDA
(bench/conformance/sweep.py --device cuda) that is not a hole in gpuemu's error model, with a
demonstration run on the GPU (``sweep.py --device cuda --evidence``; scripts/gpu/run.sh evidence).
Holes found the same way were fixed in the model instead (docs/error-model.md: convolution's
unfused bias and bias-first accumulator, batch_norm's w·(x − μ), rms_norm's running mean square,
attention's all −Inf rows), and their captured CUDA outputs pass now (bench/conformance/rejudge.py).

Keys are (op, style, dtype) as in imprecise.py, or (op, implementation, style, dtype) where only
one implementation of an op is at fault (SDPA's backends are all "native"); a key that ends in a value
strategy, (op, style, dtype, strategy) or (op, implementation, style, dtype, strategy), lists a defect
that shows under that strategy alone (cuDNN's convolutions under special and boundary values) and
excuses only that strategy's runs (sweep.is_imprecise): the variant stays gated under the others.
"""

from __future__ import annotations

import contextlib
import math
import subprocess
import sys
from typing import Any, Callable, Dict, Iterator, List, Tuple

import torch
import torch.nn.functional as F

from bench.conformance.imprecise import Imprecision

BF16, H = torch.bfloat16, torch.float16
CUDA = "cuda"


def _cumsum_bf16() -> Tuple[str, bool]:
    x = torch.ones(2, 4096, dtype=BF16, device=CUDA)
    got = x.cumsum(-1)[0, -1].item()
    up = x.float().cumsum(-1)[0, -1].item()
    return (f"torch.cumsum over 4096 ones in bfloat16 on CUDA gives {got:g} at the end (exact 4096, which "
            f"bfloat16 holds; the upcast gives {up:g}): the running sum is kept in bfloat16"), got != 4096.0


def _cumsum_fp16() -> Tuple[str, bool]:
    x = torch.ones(2, 4096, dtype=H, device=CUDA)
    got = x.cumsum(-1)[0, -1].item()
    up = x.float().cumsum(-1)[0, -1].item()
    return (f"torch.cumsum over 4096 ones in float16 on CUDA gives {got:g} at the end (exact 4096, which float16 "
            f"holds; the upcast gives {up:g}): the running sum is kept in float16 "
            f"(tensor_kernel_scan_innermost_dim<c10::Half>)"), got != 4096.0 and up == 4096.0

def _logsumexp_bf16() -> Tuple[str, bool]:
    y = torch.tensor([[-0.0006, -8.0, -9.0]], dtype=BF16, device=CUDA)
    got = torch.logsumexp(y, -1).item()
    exact = torch.logsumexp(y.double(), -1).item()
    held = torch.tensor(exact).to(BF16).item()
    up = torch.logsumexp(y.float(), -1).to(BF16).item()
    return (f"logsumexp([-0.0006, -8, -9]) in bfloat16 on CUDA gives {got:.6g} (exact {exact:.6g}, which bfloat16 "
            f"holds to {held:.6g}; the upcast gives {up:.6g}): Σ exp is stored in bfloat16 before the log"), \
        abs(got - exact) > 4 * abs(held - exact) + 1e-5 and up == held


def _logsumexp_fp16() -> Tuple[str, bool]:
    y = torch.tensor([[-0.0006, -8.0, -9.0]], dtype=H, device=CUDA)
    got = torch.logsumexp(y, -1).item()
    exact = torch.logsumexp(y.double(), -1).item()
    held = torch.tensor(exact).to(H).item()
    up = torch.logsumexp(y.float(), -1).to(H).item()
    return (f"logsumexp([-0.0006, -8, -9]) in float16 on CUDA gives {got:.6g} (exact {exact:.6g}, which float16 "
            f"holds to {held:.6g}; the upcast gives {up:.6g}): Σ exp, 1.00046, is stored in float16 (1) before "
            f"the log"), abs(got - exact) > 4 * abs(held - exact) + 1e-5 and up == held


def _scaled_mm_fp8() -> Tuple[str, bool]:
    # One row [256, 2^-9 x 31] times ones (K = 32; 2^-9 is e4m3's smallest subnormal): every product is
    # exact in fp32 and so is the sum, 256.060546875; an fp32 accumulator returns it.
    one = torch.ones((), device=CUDA)
    a = torch.full((16, 32), 2.0 ** -9, device=CUDA)
    a[:, 0] = 256.0
    a8 = a.to(torch.float8_e4m3fn)
    b8 = torch.ones(16, 32, device=CUDA).to(torch.float8_e4m3fn).t()
    got = torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.float32)[0, 0].item()
    comp = (a8.float() @ b8.float())[0, 0].item()
    exact = 256.0 + 31 * 2.0 ** -9
    buf = torch.zeros(16 * 32 + 1, device=CUDA).to(torch.float8_e4m3fn)
    shifted = buf[1:].view(16, 32)  # a legal tensor at a storage offset of one element
    try:
        torch._scaled_mm(shifted, b8, scale_a=one, scale_b=one, out_dtype=torch.float32)
        said = "ok"
    except RuntimeError as e:
        said = str(e).splitlines()[0][:120]
    return (f"torch._scaled_mm of one fp8 row [256, 2^-9 x 31] with ones (K = 32, out fp32, scales 1) gives "
            f"{got:.9g} (exact {exact:.9g}, which fp32 holds; the fp32 product of the same fp8 values gives "
            f"{comp:.9g}): the tensor cores' FP8 accumulation keeps too few bits below the largest term to add "
            f"2^-9 to 256; and with the first operand at a storage offset of one element: {said}"), \
        abs(got - exact) >= 0.05 and comp == exact and "CUBLAS_STATUS_NOT_SUPPORTED" in said

def _l2norm_fp16() -> Tuple[str, bool]:
    x = torch.full((1000,), 60000.0, dtype=H, device=CUDA)
    got = F.normalize(x, dim=0)[0].item()
    up = F.normalize(x.float(), dim=0)[0].half().item()
    return (f"F.normalize of 1000 x 60000 in float16 on CUDA gives {got:g} (exact {1 / math.sqrt(1000):.6g}; "
            f"the upcast gives {up:.6g}): the norm, 1.9e6, is held in float16 and overflows"), \
        got == 0.0 and abs(up - 1 / math.sqrt(1000)) < 1e-3


def _cross_entropy_fp16() -> Tuple[str, bool]:
    g = torch.Generator().manual_seed(0)
    lg = torch.randn(4, 25027, generator=g).to(device=CUDA, dtype=H)
    t = torch.tensor([1, 2, 3, 4], device=CUDA)
    got = F.cross_entropy(lg, t, label_smoothing=0.1, reduction="none")
    up = F.cross_entropy(lg.float(), t, label_smoothing=0.1, reduction="none")
    return (f"fp16 cross_entropy(label_smoothing=0.1, reduction='none') over 25,027 standard-normal logits on "
            f"CUDA gives {got.tolist()} (upcast: {[round(v, 4) for v in up.tolist()]}): the smoothing term's "
            f"sum over the classes, about -2.5e5, is held in fp16"), bool(torch.isinf(got).any()) and \
        bool(torch.isfinite(up).all())


def _group_norm(dtype: torch.dtype, values: Tuple[float, ...]):
    def demo() -> Tuple[str, bool]:
        name = str(dtype).replace("torch.", "")
        x = torch.tensor([[values]], dtype=dtype, device=CUDA)  # N = 1, C = 1, one group of 4
        w, b = torch.ones(1, dtype=dtype, device=CUDA), torch.zeros(1, dtype=dtype, device=CUDA)
        got = F.group_norm(x, 1, w, b, eps=1e-5)
        exact = F.group_norm(x.double(), 1, w.double(), b.double(), eps=1e-5)
        up = F.group_norm(x.float(), 1, w.float(), b.float(), eps=1e-5).to(dtype)
        _, mean, rstd = torch.native_group_norm(x, w, b, 1, 1, len(values), 1, 1e-5)
        mu = sum(values) / len(values)
        exact_rstd = 1 / math.sqrt(sum((v - mu) ** 2 for v in values) / len(values) + 1e-5)
        held = str(mean.dtype).replace("torch.", "")

        def fmt(t: torch.Tensor) -> str:
            return "[" + ", ".join(f"{v:.4g}" for v in t.flatten().tolist()) + "]"

        return (f"F.group_norm of one group {[int(v) for v in values]} (weight 1, bias 0) in {name} on CUDA gives "
                f"{fmt(got)} (exact {fmt(exact)}; the upcast gives {fmt(up)}): torch.native_group_norm returns the "
                f"group's mean as {held}, {mean.item():g} (exact {mu:g}), and its rstd as {rstd.item():.6g} (exact "
                f"{exact_rstd:.6g}), and the output is normalised with those"), \
            (got.double() - exact).abs().max().item() > 0.25 and (up.double() - exact).abs().max().item() < 0.01
    return demo


_MISALIGNED = r"""
import torch, torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
dt = getattr(torch, "{dtype}")
buf = torch.randn(1 * 2 * 256 * 64 + 1, device="cuda").to(dt)
shifted = buf[1:].view(1, 2, 256, 64)  # a storage offset of one element: not 16-byte aligned
q, k, v = (torch.randn(1, 2, 256, 64, device="cuda", dtype=dt) for _ in range(3))
{operand} = shifted
try:
    with sdpa_kernel([SDPBackend.{backend}]):
        F.scaled_dot_product_attention(q, k, v)
    torch.cuda.synchronize()
    print("ok")
except Exception as e:
    print(type(e).__name__, str(e).splitlines()[0])
"""


def _sdpa_misaligned(backend: str, dtype: str, operand: str = "q"):
    def demo() -> Tuple[str, bool]:
        # In a process of its own: the crash leaves its CUDA context unusable.
        r = subprocess.run([sys.executable, "-c", _MISALIGNED.format(backend=backend, dtype=dtype, operand=operand)],
                           capture_output=True, text=True, timeout=300)
        said = (r.stdout.strip().splitlines() or [r.stderr.strip()[-200:]])[-1]
        return (f"F.scaled_dot_product_attention [{backend}] in {dtype} with {operand} at a storage offset of one "
                f"element (a legal strided tensor): {said}. The kernel does not check the alignment it assumes, and "
                f"the error leaves the process's CUDA context broken (every later call fails)"), \
            "misaligned address" in said
    return demo


# cuDNN's convolutions (evidence/gpu/cudnn.md): two defects that show under one value strategy
# each, listed by keys that end in it (sweep.is_imprecise), so that the same variants stay gated under the
# strategies they pass.

@contextlib.contextmanager
def _cudnn_tf32(on: bool) -> Iterator[None]:
    saved = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = on
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32 = saved


# (x's shape, w's shape, keyword arguments, where x holds +Inf): every Inf is in the last group's input
# channels, so the exact outputs of the other groups are finite. The first conv2d one is the probe of
# evidence/gpu/probe_cuda_rerun2.py; the others have the shapes of failing sweep cases (seeds 2 and 3).
_GROUPED: Dict[int, Tuple[Tuple[Tuple[int, ...], Tuple[int, ...], Dict[str, Any], Tuple[Tuple[int, ...], ...]], ...]] = {
    2: (((3, 16, 31, 64), (8, 4, 2, 5), {"stride": 2, "padding": (0, 3), "groups": 4}, ((0, 12, 10, 20),)),
        ((6, 15, 35, 25), (9, 5, 4, 1), {"stride": 2, "padding": 1, "groups": 3}, ((0, 12, 10, 10), (3, 14, 20, 3))),
        ((8, 9, 4, 5), (9, 3, 4, 2), {"stride": (2, 1), "padding": (1, 0), "groups": 3}, ((0, 7, 1, 2), (5, 8, 2, 0)))),
    1: (((3, 16, 64), (8, 4, 5), {"stride": 2, "padding": 3, "groups": 4}, ((0, 12, 20),)),
        ((8, 32, 99), (8, 8, 5), {"padding": 2, "groups": 4}, ((0, 28, 50), (4, 31, 7))),
        ((8, 128, 72), (8, 32, 5), {"groups": 4}, ((0, 100, 30), (7, 127, 3))),
        ((5, 8, 129), (8, 2, 7), {"stride": 3, "padding": 4, "groups": 4}, ((0, 6, 40), (2, 7, 100))),
        ((8, 32, 99), (8, 8, 5), {"padding": 2, "groups": 4},
         tuple((b, c, t) for b in range(8) for c in range(24, 32) for t in range(0, 99, 7)))),
}


def _grouped_conv_inf(dim: int, dtype: torch.dtype, tf32: bool = False):
    def demo() -> Tuple[str, bool]:
        conv = F.conv2d if dim == 2 else F.conv1d
        name = "float32 under TF32" if tf32 else str(dtype).replace("torch.", "")
        shown, cells = False, []
        for n, (xs, ws, kw, infs) in enumerate(_GROUPED[dim]):
            g = torch.Generator().manual_seed(n)
            x = torch.randn(xs, generator=g).to(dtype)
            w = torch.randn(ws, generator=g).to(dtype)
            for i in infs:
                x[i] = float("inf")
            groups, per = kw["groups"], ws[0] // kw["groups"]
            exact = conv(x.double(), w.double(), None, **kw)[:, : per * (groups - 1)]

            def nan_per_group(on: bool) -> list:
                with _cudnn_tf32(on):
                    y = conv(x.to(CUDA), w.to(CUDA), None, **kw).float().cpu()
                return [int(torch.isnan(y[:, gi * per:(gi + 1) * per]).sum()) for gi in range(groups)]

            got = nan_per_group(tf32)
            here = sum(got[:-1]) > 0 and bool(torch.isfinite(exact).all())
            shown |= here
            cell = f"{conv.__name__} x{list(xs)} w{list(ws)} {kw}, {len(infs)} Inf: NaN per group {got}"
            if tf32:
                cell += f" (TF32 off: {nan_per_group(False)})"
            cells.append(cell)
        return (f"cuDNN's grouped {conv.__name__} in {name} on CUDA, inputs finite except Inf in the last group's "
                f"channels (the other groups' exact outputs finite, their fp64 convolution on the CPU has no NaN): "
                + "; ".join(cells) + ". NaN in another group's outputs: the kernel runs several groups as one dense "
                "GEMM, the weight zero outside each group's block, and 0 x Inf = NaN"), shown
    return demo


def _conv1d_fp16_negative_overflow() -> Tuple[str, bool]:
    # evidence/gpu/probe_cuda_rerun2.py's probe 5: every input 256, weights +-256, 3 channels x 5 taps (+-983,040).
    x = torch.full((8, 95, 3), 256.0, dtype=H, device=CUDA).transpose(1, 2)
    w = torch.full((64, 3, 15), 256.0, dtype=H, device=CUDA)[:, :, ::3]
    w[32:] = -256.0
    bias = torch.full((64,), 0.5, dtype=H, device=CUDA)
    y = F.conv1d(x, w, bias, dilation=3)
    plain = F.conv1d(x.contiguous(), w.contiguous(), bias, dilation=3)
    torch.backends.cudnn.enabled = False
    try:
        off = F.conv1d(x, w, bias, dilation=3)
    finally:
        torch.backends.cudnn.enabled = True
    pos, neg = y[:, :32].float(), y[:, 32:].float()
    # seed 3's case: one input -Inf (groups 1, Cin 2, L 1, padding 1)
    g = torch.Generator().manual_seed(0)
    xi = torch.randn(2, 2, 1, generator=g).to(H)
    xi[0, 0, 0] = float("-inf")
    wi, bi = torch.randn(8, 2, 3, generator=g).to(H), torch.randn(8, generator=g).to(H)
    yi = F.conv1d(xi.to(CUDA), wi.to(CUDA), bi.to(CUDA), padding=1).float().cpu()
    ref = F.conv1d(xi.double(), wi.double(), bi.double(), padding=1)
    minus = ref == float("-inf")
    return (f"cuDNN F.conv1d in float16 on CUDA, every input 256 against weights +256 / -256 (3 channels x 5 taps, "
            f"x transposed, weight strided, dilation 3, bias 0.5; exact +-983,040.5, past fp16's 65,504): positive "
            f"outputs {sorted(set(pos.flatten().tolist()))}, negative outputs {sorted(set(neg.flatten().tolist()))} "
            f"(contiguous operands: {sorted(set(plain[:, 32:].float().flatten().tolist()))}; cuDNN off: "
            f"{sorted(set(off[:, 32:].float().flatten().tolist()))}): a convolution below -65,504 comes out as 0, "
            f"then + bias, instead of -Inf. An input -Inf (seed 3's case: groups 1, Cin 2, L 1, padding 1): "
            f"{int(minus.sum())} outputs are exactly -Inf, the GPU gives {yi[minus].tolist()} there (those channels' "
            f"biases: {bi.float()[minus[0].any(-1)].tolist()})"), \
        bool(torch.isinf(pos).all() and (pos > 0).all() and (neg == 0.5).all() and (off[:, 32:] == float("-inf")).all())


def _conv2d_fp16_negative_overflow() -> Tuple[str, bool]:
    # Master seed 5's conv2d boundary case 14 (evidence/gpu/probe_conv2d_fp16_boundary.py): cuDNN ran it as an NHWC
    # sm80_xmma_fprop_implicit_gemm_indexed_wo_smem_f16f16_f16f32_f32 (after nchwToNhwc), which gave
    # fp16(0 + bias) for all 2,205 of its elements whose convolution is below -65,504 and +Inf for all
    # 2,196 above +65,504. Here its geometry (x 3x38x6x64, w 8x38x3x1, stride (1, 2), padding (1, 0),
    # dilation (1, 3)) with every input 256 against weights +256 / -256 (exact +-7,471,104.5), and a
    # small 3-channel convolution, which cuDNN runs in NCHW (correct there) and in channels_last.
    def run(x: torch.Tensor, w: torch.Tensor, **kw: Any) -> Tuple[List[float], List[float], List[float]]:
        bias = torch.full((w.shape[0],), 0.5, dtype=H, device=CUDA)
        half = w.shape[0] // 2
        w[half:] = -256.0
        y = F.conv2d(x, w, bias, **kw).float()
        torch.backends.cudnn.enabled = False
        try:
            off = F.conv2d(x, w, bias, **kw).float()
        finally:
            torch.backends.cudnn.enabled = True
        values = lambda t: sorted(set(t.flatten().tolist()))  # noqa: E731
        return values(y[:, :half]), values(y[:, half:]), values(off[:, half:])

    seed5 = run(torch.full((3, 38, 6, 64), 256.0, dtype=H, device=CUDA),
                torch.full((8, 38, 3, 1), 256.0, dtype=H, device=CUDA), stride=(1, 2), padding=(1, 0), dilation=(1, 3))
    small = torch.full((2, 3, 31, 16), 256.0, dtype=H, device=CUDA), torch.full((64, 3, 5, 1), 256.0, dtype=H, device=CUDA)
    nchw = run(*small, stride=(1, 2), dilation=(3, 1))
    cl = run(*(t.to(memory_format=torch.channels_last) for t in small), stride=(1, 2), dilation=(3, 1))
    return (f"cuDNN F.conv2d in float16 on CUDA, bias 0.5, every input 256 against weights +256 / -256 (past fp16's "
            f"65,504): at seed 5's geometry (x 3x38x6x64, w 8x38x3x1, stride (1, 2), padding (1, 0), dilation (1, 3); "
            f"exact +-7,471,104.5) positive outputs {seed5[0]}, negative outputs {seed5[1]} (cuDNN off: {seed5[2]}); "
            f"a 3-channel 5x1 convolution (exact +-983,040.5) in NCHW: {nchw[0]}, {nchw[1]}, in channels_last: "
            f"{cl[0]}, {cl[1]} (cuDNN off: {cl[2]}): where cuDNN picks its NHWC kernel, a convolution below -65,504 "
            f"comes out as 0, then + bias, instead of -Inf (conv1d's class, in 2-D)"), \
        bool(seed5[0] == [float("inf")] and seed5[1] == [0.5] and seed5[2] == [float("-inf")])


def grouped_nan_only(failure: Dict[str, Any]) -> bool:
    """A failure of the grouped class and of nothing else: a grouped case (groups > 1) whose every
    failing element, in every output, is NaN where the reference is finite. Under boundary values
    TF32 rounds an operand near fp32's largest value to Inf, and cuDNN's grouped kernel spreads it to
    other groups as 0 x Inf; a finite error over the envelope (the subnormal floor's class) or an
    Inf where the reference is finite in the same run is not of that shape and stays gated. Rows
    written before the sweep recorded the per-output counts (2026-12-04) never match."""
    outputs = failure.get("outputs") or []
    return ((failure.get("attrs") or {}).get("groups", 1) > 1 and bool(outputs)
            and any(o.get("failing") for o in outputs)
            and all(o.get("failing") == o.get("nan_where_finite") for o in outputs))


def _softmax_backward_gy(dtype: torch.dtype) -> Callable[[], Tuple[str, bool]]:
    """torch._softmax_backward_data in fp16/bf16 on CUDA materialises grad * output in the input dtype
    (rounded) and computes g*y - y * sum(g*y) from it in fp32: where g ≈ sum(g*y) the rounding of g*y
    is all that is left. Emulated on the CPU, that formula reproduces the failure messages of the CUDA
    sweep case for case (evidence/gpu/replay_cuda_backward.py, evidence/gpu/backward.md);
    here, elementwise against the kernel."""
    def demo() -> Tuple[str, bool]:
        gen = torch.Generator(device="cpu").manual_seed(20261203)
        x = torch.randn(64, 1000, generator=gen)
        y = torch.softmax(x, -1).to(dtype).to(CUDA)
        g = torch.randn(64, 1000, generator=gen).to(dtype).to(CUDA)
        got = torch._softmax_backward_data(g, y, -1, dtype)
        gy = (g * y).float()
        emu_gy = (gy - y.float() * gy.sum(-1, keepdim=True)).to(dtype)
        emu_fp32 = (y.float() * (g.float() - (g.float() * y.float()).sum(-1, keepdim=True))).to(dtype)
        m_gy = (got == emu_gy).float().mean().item()
        m_fp32 = (got == emu_fp32).float().mean().item()
        name = "bfloat16" if dtype == BF16 else "float16"
        return (f"torch._softmax_backward_data on CUDA in {name}, 64 rows of 1000: {100 * m_gy:.2f}% of the elements "
                f"equal an emulation that rounds g*y to {name} before g*y - y*sum(g*y), {100 * m_fp32:.2f}% one in fp32 "
                f"throughout"), m_gy >= 0.99 and m_fp32 <= m_gy - 0.02
    return demo


def _swiglu_backward_fp16_overflow() -> Tuple[str, bool]:
    """Autograd through F.silu(gate) * up materialises grad_out * up in fp16: 300 * 300 overflows to Inf
    before silu'(-10) ≈ -4.09e-4 would bring grad_gate back to about -36.8."""
    gate = torch.tensor([-10.0], dtype=H, device=CUDA, requires_grad=True)
    up = torch.tensor([300.0], dtype=H, device=CUDA, requires_grad=True)
    (F.silu(gate) * up).backward(torch.tensor([300.0], dtype=H, device=CUDA))
    got = gate.grad.item()
    s = 1.0 / (1.0 + math.exp(10.0))
    exact = 300.0 * 300.0 * s * (1.0 - 10.0 * (1.0 - s))
    return (f"autograd through F.silu(gate) * up in float16 on CUDA: grad_gate at gate=-10, up=300, grad_out=300 is "
            f"{got} (exact {exact:.4g}): grad_out * up is held in float16 and overflows"), math.isinf(got) and abs(exact) < 65504


def _swiglu_backward_bf16_underflow() -> Tuple[str, bool]:
    """Autograd through F.silu(gate) * up saves silu(gate) in bf16: silu(-100) ≈ -3.7e-42 is below
    bf16's smallest subnormal and becomes -0, so grad_up = grad_out * silu(gate) is -0 for any grad_out."""
    gate = torch.tensor([-100.0], dtype=BF16, device=CUDA, requires_grad=True)
    up = torch.tensor([1.0], dtype=BF16, device=CUDA, requires_grad=True)
    (F.silu(gate) * up).backward(torch.tensor([3.0e38], dtype=BF16, device=CUDA))
    got = up.grad.item()
    g = torch.tensor([3.0e38], dtype=BF16).item()
    exact = g * (-100.0 / (1.0 + math.exp(100.0)))
    return (f"autograd through F.silu(gate) * up in bfloat16 on CUDA: grad_up at gate=-100, grad_out={g:.4g} is {got} "
            f"(exact {exact:.4g}): silu(gate) is saved in bfloat16, where it underflows to -0"), got == 0.0 and exact != 0.0


def _embedding_backward_lowp(dtype: torch.dtype) -> Callable[[], Tuple[str, bool]]:
    """Autograd through F.embedding on CUDA accumulates grad_weight in its own dtype: 3,000 positions
    of index 0, the first with grad 256 and the others 0.01 (rounded to the dtype), sum to the exact
    value's rounding in fp32 and in the upcast, and come out many units in the last place away
    natively (the kernel PyTorch runs for up to 3,072 positions adds each warp's batch of 32, 0.32,
    into grad_weight held in the dtype, where 256 + 0.32 rounds back down in bf16; grad 0.1 at every
    position came out only 2 bf16 units off on the H200). The same with 4,000 positions (the
    sort-based kernel) is shown beside it."""

    def demo() -> Tuple[str, bool]:
        parts, off = [], 0.0
        for k in (3000, 4000):
            g = torch.full((k, 1), 0.01, dtype=dtype, device=CUDA)
            g[0, 0] = 256.0
            w = torch.zeros(1, 1, dtype=dtype, device=CUDA, requires_grad=True)
            F.embedding(torch.zeros(k, dtype=torch.long, device=CUDA), w).backward(g)
            got = w.grad.item()
            exact = g.double().sum().item()
            rounded = torch.tensor(exact, dtype=dtype).item()
            wu = torch.zeros(1, 1, dtype=torch.float32, device=CUDA, requires_grad=True)
            F.embedding(torch.zeros(k, dtype=torch.long, device=CUDA), wu).backward(g.float())
            ulp = abs(torch.tensor(rounded, dtype=dtype).view(torch.int16).item() + 1)
            ulp = torch.tensor([ulp], dtype=torch.int16).view(dtype).item() - rounded
            parts.append(f"{k} positions: {got} (exact {exact:.6g}, {rounded} in {str(dtype)[6:]}; the upcast gives "
                         f"{torch.tensor(wu.grad.item(), dtype=dtype).item()})")
            if k == 3000:
                off = abs(got - rounded) / abs(ulp)
        return (f"autograd through F.embedding on CUDA, index 0 with grad 256 then 0.01 in {str(dtype)[6:]}: " + "; ".join(parts) +
                f": grad_weight is accumulated in {str(dtype)[6:]} ({off:.0f} units in the last place off at 3,000)"), off > 2

    return demo


def _both(first, second):
    def demo() -> Tuple[str, bool]:
        a, b = first(), second()
        return a[0] + "; and " + b[0], a[1] and b[1]
    return demo


SDPA_FLASH = "F.scaled_dot_product_attention [flash backend]"
SDPA_EFFICIENT = "F.scaled_dot_product_attention [efficient backend]"

IMPRECISE_CUDA_TORCH2_11: Dict[Tuple[str, ...], Imprecision] = {
    ("cumsum", "native", "bfloat16"): Imprecision("the running sum is kept in bf16", _cumsum_bf16),
    ("cumsum", "native", "float16"): Imprecision("the running sum is kept in fp16", _cumsum_fp16),
    ("logsumexp", "native", "bfloat16"): Imprecision("stores the sum of exp in bf16 before the log",
                                                     _logsumexp_bf16),
    ("logsumexp", "native", "float16"): Imprecision("stores the sum of exp in fp16 before the log",
                                                    _logsumexp_fp16),
    ("l2norm", "native", "float16"): Imprecision("the norm is held in fp16", _l2norm_fp16),
    ("cross_entropy", "native", "float16"): Imprecision(
        "with label smoothing the sum over the classes overflows fp16", _cross_entropy_fp16),
    ("group_norm", "native", "float16"): Imprecision(
        "the group's mean and rstd are held in fp16", _group_norm(H, (1000.0, 1001.0, 1001.0, 1001.0))),
    ("group_norm", "native", "bfloat16"): Imprecision(
        "the group's mean and rstd are held in bf16", _group_norm(BF16, (1000.0, 1004.0, 1004.0, 1004.0))),
    ("scaled_fp8_matmul", "native", "float8_e4m3fn"): Imprecision(
        "cuBLASLt's FP8 GEMM accumulates with too few bits (and refuses operands not 16-byte aligned)",
        _scaled_mm_fp8),
    **{("flash_attention", SDPA_FLASH, "native", dt): Imprecision(
        "crashes (CUDA error: misaligned address) on inputs whose data pointer is not 16-byte aligned",
        _sdpa_misaligned("FLASH_ATTENTION", dt)) for dt in ("float16", "bfloat16")},
    ("flash_attention", SDPA_EFFICIENT, "native", "float32"): Imprecision(
        "crashes (CUDA error: misaligned address) on inputs whose data pointer is not 16-byte aligned",
        _sdpa_misaligned("EFFICIENT_ATTENTION", "float32")),
    # In fp16/bf16 the efficient backend checks q's and k's alignment (a clean "p.query_ptr is not
    # correctly aligned", counted as refused) but not v's: seed 2 of the CUDA sweep (evidence/gpu/sdpa.md) crashed it
    # with q contiguous and v at a storage offset of one element.
    **{("flash_attention", SDPA_EFFICIENT, "native", dt): Imprecision(
        "crashes (CUDA error: misaligned address) when v's data pointer is not 16-byte aligned (q's and k's are checked)",
        _sdpa_misaligned("EFFICIENT_ATTENTION", dt, "v")) for dt in ("float16", "bfloat16")},
    # cuDNN: the strategy is part of the key (the same variants pass every other strategy and stay gated).
    **{(op, "native", dt, "special"): Imprecision(
        "cuDNN's grouped convolution reads other groups' inputs: an Inf there meets a zero weight and gives NaN",
        _grouped_conv_inf(dim, dtype)) for op, dim in (("conv1d", 1), ("conv2d", 2)) for dt, dtype in
        (("float16", H), ("bfloat16", BF16)) if (op, dt) != ("conv1d", "float16")},
    ("conv1d", "native", "float16", "special"): Imprecision(
        "cuDNN's grouped convolution reads other groups' inputs (an Inf there meets a zero weight: NaN), and a "
        "convolution below -65504 (an input -Inf) comes out as 0 + bias",
        _both(_grouped_conv_inf(1, H), _conv1d_fp16_negative_overflow)),
    ("conv1d", "native", "float16", "boundary"): Imprecision(
        "cuDNN's fp16 convolution returns 0 (+ bias) for a convolution below -65504 instead of -Inf",
        _conv1d_fp16_negative_overflow),
    ("conv2d", "native", "float16", "boundary"): Imprecision(
        "cuDNN's fp16 convolution returns 0 (+ bias) for a convolution below -65504 instead of -Inf",
        _conv2d_fp16_negative_overflow),
    # Backward ops (issue 20; evidence/gpu/backward.md): the CUDA sweep's failures replayed on the
    # CPU with these emulations give the same messages (evidence/gpu/replay_cuda_backward.py).
    **{("softmax_backward", "native", dt): Imprecision(
        "grad * output is materialised in the input dtype before g*y - y * sum(g*y)", _softmax_backward_gy(dtype))
       for dt, dtype in (("float16", H), ("bfloat16", BF16))},
    ("swiglu_backward", "native", "float16"): Imprecision(
        "autograd through F.silu(gate) * up holds its intermediates in fp16 (grad_out * up overflows)",
        _swiglu_backward_fp16_overflow),
    ("swiglu_backward", "native", "bfloat16"): Imprecision(
        "autograd through F.silu(gate) * up holds its intermediates in bf16 (the saved silu(gate) underflows)",
        _swiglu_backward_bf16_underflow),
    **{("embedding_backward", "native", dt): Imprecision(
        "autograd through F.embedding accumulates grad_weight in the input dtype", _embedding_backward_lowp(dtype))
       for dt, dtype in (("float16", H), ("bfloat16", BF16))},
    **{(op, f"F.{op} (TF32)", "native", "float32", "special"): Imprecision(
        "cuDNN's grouped TF32 convolution reads other groups' inputs: an Inf there meets a zero weight and gives NaN",
        _grouped_conv_inf(dim, torch.float32, tf32=True)) for op, dim in (("conv1d", 1), ("conv2d", 2))},
    # Under boundary values the same class shows where TF32 rounds an operand to Inf; the cell also
    # holds the subnormal floor's checks, so only failures of the grouped NaN shape are excused.
    **{(op, f"F.{op} (TF32)", "native", "float32", "boundary"): Imprecision(
        "cuDNN's grouped TF32 convolution reads other groups' inputs: an operand TF32 rounds to Inf meets a zero "
        "weight and gives NaN (only failures that are NaN where the reference is finite, in grouped cases)",
        _grouped_conv_inf(dim, torch.float32, tf32=True), only=grouped_nan_only) for op, dim in (("conv1d", 1), ("conv2d", 2))},
}


def table_for(torch_version: str) -> Dict[Tuple[str, ...], Imprecision]:
    """The imprecise CUDA implementations shown under `torch_version` (major.minor)."""
    return IMPRECISE_CUDA_TORCH2_11 if torch_version.startswith("2.11") else {}
