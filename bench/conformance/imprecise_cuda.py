"""Trusted CUDA kernels that are really imprecise (or really defective): PyTorch 2.11 on an H200.

As imprecise.py does for the CPU kernels: each entry is a failure of the Conformance sweep on CUDA
(bench/conformance/sweep.py --device cuda) that is not a hole in gpuemu's error model, with a
demonstration run on the GPU (``sweep.py --device cuda --evidence``; scripts/gpu/run.sh evidence).
Holes found the same way were fixed in the model instead (docs/error-model.md: convolution's
unfused bias and bias-first accumulator, batch_norm's w·(x − μ), rms_norm's running mean square,
attention's all −Inf rows), and their captured CUDA outputs pass now (bench/conformance/rejudge.py).

Keys are (op, style, dtype) as in imprecise.py, or (op, implementation, style, dtype) where only
one implementation of an op is at fault (SDPA's backends are all "native").
"""

from __future__ import annotations

import math
import subprocess
import sys
from typing import Dict, Tuple

import torch
import torch.nn.functional as F

from imprecise import Imprecision

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
    # correctly aligned", counted as refused) but not v's: seed 2 of the CUDA sweep (docs/gpu.md) crashed it
    # with q contiguous and v at a storage offset of one element.
    **{("flash_attention", SDPA_EFFICIENT, "native", dt): Imprecision(
        "crashes (CUDA error: misaligned address) when v's data pointer is not 16-byte aligned (q's and k's are checked)",
        _sdpa_misaligned("EFFICIENT_ATTENTION", dt, "v")) for dt in ("float16", "bfloat16")},
}


def table_for(torch_version: str) -> Dict[Tuple[str, ...], Imprecision]:
    """The imprecise CUDA implementations shown under `torch_version` (major.minor)."""
    return IMPRECISE_CUDA_TORCH2_11 if torch_version.startswith("2.11") else {}
