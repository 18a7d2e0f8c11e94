"""Probe: cuBLAS float16 / bfloat16 GEMMs with and without "reduced precision reductions".

    PYTHONPATH=. python3 evidence/gpu/probe_cuda_gemm.py   # on the GPU machine (scripts/gpu/env.sh)

PyTorch lets cuBLAS keep split-K partial sums of a half-precision GEMM in that dtype unless
``torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction`` (and its bf16 twin) is False,
and it is True by default. A partial sum held in float16 is the low-precision accumulator gpuemu is
built to catch. This probe measures, for each setting, (1) the error of ``a @ b`` on a long-K product
against fp64, in output ulps, next to the same product upcast to fp32; (2) gpuemu's verdicts on
``a @ b`` (50 cases, regular and adversarial values, in process on CUDA). The Conformance sweep
runs with the flags off (impls_cuda.ieee_defaults): the op as IEEE arithmetic means it.
"""

from __future__ import annotations

import sys

import torch

import gpuemu

FLAGS = {torch.float16: "allow_fp16_reduced_precision_reduction",
         torch.bfloat16: "allow_bf16_reduced_precision_reduction"}


def ulp_error(out: torch.Tensor, exact: torch.Tensor, dt: torch.dtype) -> float:
    eps = torch.finfo(dt).eps
    scale = exact.abs().clamp_min(torch.finfo(dt).tiny) * eps
    return ((out.double() - exact) / scale).abs().max().item()


def main() -> int:
    if not torch.cuda.is_available():
        print("no CUDA device")
        return 1
    torch.backends.cuda.matmul.allow_tf32 = False
    g = torch.Generator(device="cuda").manual_seed(0)
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    for dt, flag in FLAGS.items():
        if not hasattr(torch.backends.cuda.matmul, flag):
            print(f"{dt}: torch has no {flag}")
            continue
        for m, k, n in ((64, 16384, 64), (256, 4096, 256), (16, 65536, 16)):
            a = (torch.rand(m, k, device="cuda", generator=g) + 0.5).to(dt)
            b = (torch.rand(k, n, device="cuda", generator=g) + 0.5).to(dt)
            exact = a.double() @ b.double()
            row = []
            for allowed in (True, False):
                setattr(torch.backends.cuda.matmul, flag, allowed)
                row.append(ulp_error(a @ b, exact, dt))
            upcast = ulp_error((a.float() @ b.float()).to(dt), exact, dt)
            print(f"{str(dt):15} {m}x{k}x{n}: max error in output ulps - reduced-precision reduction allowed "
                  f"{row[0]:.2f}, off {row[1]:.2f}, upcast to fp32 {upcast:.2f}")
        for allowed in (True, False):
            setattr(torch.backends.cuda.matmul, flag, allowed)
            for strategy in ("regular", "adversarial"):
                r = gpuemu.fuzz_op_in_process("matmul", lambda i: i["a"] @ i["b"], iterations=50,
                                              value_distribution=strategy, dtypes=[str(dt).split(".")[1]],
                                              seed=20261202, device="cuda", diagnose=False)
                worst = max((f.max_error / f.envelope for f in r.failures if f.envelope), default=r.worst_ratio)
                print(f"  gpuemu, {flag}={allowed}, {strategy}: {r.failed}/{r.total} failed, worst {worst:.2f} "
                      f"of the envelope")
    return 0


if __name__ == "__main__":
    sys.exit(main())
