"""What TF32 GEMMs and convolutions do with fp32 subnormal operands (CUDA only).

Under a declared TF32 policy gpuemu models an operand's conversion as a relative error (u_op =
2^-10 of its magnitude). Below fp32's smallest normal (2^-126) the conversion's error is absolute:
TF32 keeps fp32's exponent range with 10 fraction bits, so its subnormal spacing is 2^-136 and a
rounding conversion is off by at most 2^-137, while hardware that flushes subnormal operands to zero
is off by the whole operand (< 2^-126). Seeds 2 and 3 of the CUDA sweep found cuBLAS and cuDNN TF32
results that lost a product 2^-149 * 2^127 (evidence/gpu/tf32.md), which either behaviour explains.

Each probe is a GEMM of 256x64 by 64x256 (shapes cuBLAS and cuDNN run on tensor cores) whose output
[0, 0] is a dot product with a single nonzero product a*b (every other term 0), run with TF32 on (torch.backends.cuda.matmul.allow_tf32 / cudnn.allow_tf32) and off, through torch.mm
(cuBLAS) and F.conv1d (cuDNN). Operands that TF32 represents exactly as subnormals (2^-127,
1.5 * 2^-130, 2^-136) tell rounding from flushing: a rounding conversion keeps them, a flushing one
gives 0. One line per probe: the exact product, what came back, and the reading.

    python3 evidence/gpu/probe_tf32_subnormal.py
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

# (a, b, note): a is the subnormal operand, b a large normal one, a * b the exact product
PROBES = [
    (2.0 ** -127, 2.0 ** 100, "2^-127: a TF32 subnormal (512 * 2^-136)"),
    (1.5 * 2.0 ** -130, 2.0 ** 110, "1.5 * 2^-130: a TF32 subnormal (96 * 2^-136)"),
    (2.0 ** -136, 2.0 ** 120, "2^-136: TF32's smallest subnormal"),
    (2.0 ** -149, 2.0 ** 127, "2^-149: below half of TF32's smallest subnormal"),
    (2.0 ** -126, 2.0 ** 100, "2^-126: fp32's smallest normal (control)"),
]


def run(path: str, a: float, b: float, tf32: bool) -> float:
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    x = torch.zeros(256, 64, dtype=torch.float32)
    w = torch.zeros(64, 256, dtype=torch.float32)
    x[0, 5], w[5, 0] = a, b
    x, w = x.cuda(), w.cuda()
    if path == "cuBLAS mm":
        out = torch.mm(x, w)[0, 0]
    else:  # x's rows as 256 positions of 64 channels, w as 256 filters of width 1
        out = F.conv1d(x.t().contiguous().view(1, 64, 256), w.t().contiguous().view(256, 64, 1))[0, 0, 0]
    torch.cuda.synchronize()
    return float(out.item())


def main() -> int:
    assert torch.cuda.is_available(), "needs a CUDA device"
    print(f"# {torch.cuda.get_device_name()} torch {torch.__version__} cuda {torch.version.cuda} "
          f"cudnn {torch.backends.cudnn.version()}")
    for path in ("cuBLAS mm", "cuDNN conv1d"):
        for a, b, note in PROBES:
            exact = a * b
            for tf32 in (False, True):
                got = run(path, a, b, tf32)
                if got == exact:
                    what = "exact (operand kept)"
                elif got == 0.0:
                    what = "0 (operand flushed or rounded away)"
                else:
                    what = f"off by {abs(got - exact) / exact:.3g} of the product"
                print(f"{path:13} tf32={'on ' if tf32 else 'off'} a={a:.6g} ({note}) b=2^{int(math.log2(b))}: "
                      f"exact {exact:.6g}, got {got:.6g}: {what}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
