#!/usr/bin/env python3
"""The formulation mutants bench/power/formulations.py lists as invisible in float16, on every
finite float16 input: the worst normalised error any input gives each, against the envelope.

    .venv/bin/python evidence/power/formulations/fp16_exhaustive.py

Each mutant is computed as formulations.py computes it (the input upcast, fp32 math, the output
rounded once to float16); the reference and its bounds are the catalogue's (gpuemu._core.reference
with bounds=True); the error is the verdict's (engine/fuzz/verdict.cpp, ErrorScale): |out - ref| /
(u_out |ref| + u_fp32 c_acc + u_in c_in + tiny), tiny the smallest normal where |ref| is within
reach of the subnormal range (|ref| <= min_normal + 4 bound), else the subnormal spacing. The
envelope is the shipped one of (op, float16).
"""

from __future__ import annotations

import sys

import numpy as np
import torch

import gpuemu
from gpuemu import _core

U32, U16, MIN_NORMAL, MIN_SUB = 2.0 ** -24, 2.0 ** -11, 2.0 ** -14, 2.0 ** -24


def all_finite_float16() -> np.ndarray:
    bits = np.arange(0, 1 << 16, dtype=np.uint32).astype(np.uint16)
    x = bits.view(np.float16)
    return x[np.isfinite(x)].astype(np.float64)


def errors(op: str, x: np.ndarray, out: np.ndarray, attrs) -> float:
    (_, ref, _, c_acc, c_in), = _core.reference(op, {"x": (x.reshape(1, -1).astype(np.float16), "float16")}, attrs, "float16",
                                                bounds=True)
    ref, c_acc, c_in = ref.ravel(), c_acc.ravel(), c_in.ravel()
    bound = U16 * np.abs(ref) + U32 * c_acc + U16 * c_in
    tiny = np.where(np.abs(ref) <= MIN_NORMAL + 4 * bound, MIN_NORMAL, MIN_SUB)
    keep = np.isfinite(ref) & np.isfinite(out)
    return float((np.abs(out - ref)[keep] / (bound + tiny)[keep]).max())


def main() -> int:
    x = all_finite_float16()
    xt = torch.from_numpy(x).to(torch.float16).float()
    rows = []
    s = torch.sigmoid(-xt)
    mutants = {
        ("sigmoid", "one_minus", ()): (1.0 - s),
        ("tanh", "two_sigmoid", ()): 2.0 * torch.sigmoid(2.0 * xt) - 1.0,
    }
    for beta in (0.5, 1.0, 2.0):
        bx = xt * beta
        mutants[("softplus", "log_one_plus_exp", (("beta", beta), ("threshold", 20.0)))] = torch.where(
            bx > 20.0, xt, torch.log(1.0 + torch.exp(bx)) / beta)
    for (op, name, attrs), y in mutants.items():
        out = y.to(torch.float16).double().numpy()
        worst = errors(op, x, out, dict(attrs))
        env = _core.Engine().envelope(op, "float16")
        rows.append((f"{op}.{name}", dict(attrs), worst, env))
        print(f"{op}.{name} {dict(attrs) or ''}: worst error over {x.size} finite float16 inputs {worst:.3g} "
              f"(envelope {env:g})")
    return 0 if all(w <= e for _, _, w, e in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
