"""The trusted implementations that exist only on CUDA (PyTorch 2.x on the GPU machine), added to
impls.py's table by ``variants(device="cuda")``: SDPA's flash, memory-efficient and math backends,
F.rms_norm, PyTorch's fp8 dtypes and torch._scaled_mm, and the TF32 GEMMs and convolutions under
the ``tf32`` precision policy they need (docs/error-model.md, "Precision policies").

The sweep runs every implementation of impls.py on CUDA with TF32 off (matmul and cuDNN), so that
an fp32 op is judged as fp32; the TF32 variants here turn it on around each call and declare the
policy. PyTorch's other defaults stay as they are (reduced-precision reductions in bf16/fp16 GEMMs
included): what users get is what is judged.
"""

from __future__ import annotations

import contextlib
from typing import Any, Dict, Iterator, Tuple

import torch
import torch.nn.functional as F

from bench.conformance.impls import Args, Impl, TORCH_DTYPES, _conv_kwargs

HALF = ("float16", "bfloat16")


def ieee_defaults() -> None:
    """TF32 off for matmuls and cuDNN: what an fp32 op means; and fp32 accumulation in cuBLAS's
    fp16/bf16 GEMMs (torch allows "reduced precision reductions" by default: split-K partial sums
    kept in the low dtype, an accumulator gpuemu rightly flags; evidence/gpu/probe_cuda_gemm.py shows both).
    Called once per sweep process."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    for flag in ("allow_fp16_reduced_precision_reduction", "allow_bf16_reduced_precision_reduction"):
        if hasattr(torch.backends.cuda.matmul, flag):
            setattr(torch.backends.cuda.matmul, flag, False)


@contextlib.contextmanager
def tf32() -> Iterator[None]:
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def _sdpa_backend(name: str):
    """() -> the context that restricts SDPA to one backend (torch.nn.attention, PyTorch >= 2.3)."""

    def context() -> Any:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        backend = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
                   "math": SDPBackend.MATH}[name]
        return sdpa_kernel([backend])

    return context


def sdpa(a: Args) -> torch.Tensor:
    return F.scaled_dot_product_attention(a["q"], a["k"], a["v"], is_causal=bool(a["causal"]), scale=a["scale"],
                                          enable_gqa=bool(a["enable_gqa"]))


def rms_norm_torch(a: Args) -> torch.Tensor:
    x = a["x"]
    return F.rms_norm(x, (x.shape[-1],), a["weight"], a["eps"])


def fp8_quantize_torch(a: Args) -> torch.Tensor:
    return (a["x"].float() / a["scale"].float()).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)


def scaled_mm(a: Args) -> torch.Tensor:
    # cuBLASLt wants a row-major and b column-major: b's transpose made contiguous, transposed back.
    b = a["b"].t().contiguous().t()
    return torch._scaled_mm(a["a"].contiguous(), b, scale_a=a["scale_a"].float(), scale_b=a["scale_b"].float(),
                            out_dtype=TORCH_DTYPES[a["out_dtype"]])


# Flash attention's kernels take head sizes that are multiples of 8, up to 256.
HEAD_DIMS = {"D": [8, 16, 24, 32, 40, 64, 72, 80, 96, 128, 136, 160, 192, 256]}
MULTIPLES_OF_16 = {"K": [16, 32, 48, 64, 128, 144, 256, 512, 1024, 2048, 4096],
                   "N": [16, 32, 48, 64, 128, 144, 256, 512, 1024]}
GEMM_TF32: Dict[str, str] = {"gemm": "tf32"}
CONV_TF32: Dict[str, str] = {"conv": "tf32"}


def _tf32_of(op: str, name: str, fn: Any, precision: Dict[str, str]) -> Impl:
    return Impl(op, name + " (TF32)", fn, ("native",), ("float32",), precision=precision, flags=tf32)


CUDA_IMPLS: Tuple[Impl, ...] = (
    Impl("flash_attention", "F.scaled_dot_product_attention [flash backend]", sdpa, ("native",), HALF,
         dims=HEAD_DIMS, flags=_sdpa_backend("flash")),
    Impl("flash_attention", "F.scaled_dot_product_attention [efficient backend]", sdpa, ("native",),
         flags=_sdpa_backend("efficient")),
    Impl("flash_attention", "F.scaled_dot_product_attention [math backend]", sdpa, ("native",),
         flags=_sdpa_backend("math")),
    Impl("rms_norm", "F.rms_norm", rms_norm_torch),
    Impl("fp8_quantize", "clamp(x / scale).to(torch.float8_e4m3fn)", fp8_quantize_torch, ("native",)),
    Impl("scaled_fp8_matmul", "torch._scaled_mm", scaled_mm, ("native",), ("float8_e4m3fn",),
         dims=MULTIPLES_OF_16),
    _tf32_of("matmul", "a @ b", lambda a: a["a"] @ a["b"], GEMM_TF32),
    _tf32_of("bmm", "torch.bmm", lambda a: torch.bmm(a["a"], a["b"]), GEMM_TF32),
    _tf32_of("linear", "F.linear", lambda a: F.linear(a["x"], a["weight"], a["bias"]), GEMM_TF32),
    _tf32_of("conv1d", "F.conv1d", lambda a: F.conv1d(a["x"], a["weight"], a["bias"], **_conv_kwargs(a)), CONV_TF32),
    _tf32_of("conv2d", "F.conv2d", lambda a: F.conv2d(a["x"], a["weight"], a["bias"], **_conv_kwargs(a)), CONV_TF32),
)
