#!/usr/bin/env python3
"""What the CUDA failures left after the 2026-12-03 fixes are (evidence/gpu/cudnn.md), from the
pickles capture_cuda.py wrote there; no GPU needed (torch 1.13 is enough).

    PYTHONPATH=. python3 evidence/gpu/explain_cuda_rerun3.py DIR [DIR ...]   # explain_cuda_rerun2 is found beside it

- TF32 grouped convolutions under boundary values: for every output the judge rejects (NaN where the
  reference is finite, its own group's window free of any operand TF32 rounds to Inf), whether the window
  over every input channel (what a dense GEMM over several groups reads) holds such an Inf: cuDNN's grouped
  class, reached by TF32's rounding instead of an input Inf.
- conv2d fp16 through cuDNN's non-fused Winograd (winogradForwardData4x4, 3x3 taps, stride 1): the
  convolution as Winograd F(4x4, 3x3) with Lavin and Gray's transforms in fp32, stored in fp16, then + bias,
  against the captured output and judged by the model; beside it the direct fp32 convolution.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Dict

import numpy as np
import torch

from bench.conformance.impls import variants, varied_attrs
from explain_cuda_rerun2 import conv, cuda_out, inputs, load, tf32  # the script beside this one
from gpuemu import inprocess


def case_of(rec: Dict[str, Any]) -> Any:
    row = rec["row"]
    v = next(v for v in variants([row["op"]], [row["dtype"]], "cuda")
             if v.impl.name == row["impl"] and v.style == row["style"])
    return inprocess.replay(row["op"], None, rec["failure"]["seed"], value_distribution=row["strategy"],
                            dtypes=[row["dtype"]], dims=v.impl.dims, vary_attrs=varied_attrs(row["op"]) or None,
                            precision=v.impl.precision)["case"]


def per_group(x: np.ndarray, w: np.ndarray, a: Dict[str, Any]) -> np.ndarray:
    g = a["groups"]
    cg, og = x.shape[1] // g, w.shape[0] // g
    with np.errstate(invalid="ignore", over="ignore"):
        return np.concatenate([conv(x[:, k * cg:(k + 1) * cg], w[k * og:(k + 1) * og], a["stride"], a["padding"],
                                    a["dilation"]) for k in range(g)], 1)


def tf32_grouped(rec: Dict[str, Any]) -> str:
    a = inputs(rec)
    y = cuda_out(rec)
    xt, wt = tf32(a["x"]), tf32(a["weight"])
    exact = per_group(a["x"].double().numpy(), a["weight"].double().numpy(), a)
    inf_x = (~np.isfinite(xt)).astype(np.float64)
    ones = np.ones_like(wt)
    own = per_group(inf_x, ones, a)  # operands TF32 makes non-finite in the output's own window
    dense = conv(inf_x, np.ones((wt.shape[0], xt.shape[1]) + wt.shape[2:]), a["stride"], a["padding"], a["dilation"])
    w_bad = (~np.isfinite(wt)).reshape(wt.shape[0], -1).any(1).reshape((1, -1) + (1,) * (y.ndim - 2))
    rejected = np.isnan(y) & np.isfinite(exact) & (own == 0) & ~w_bad
    other = rejected & (dense > 0)
    return (f"groups {a['groups']}: {int(rejected.sum())} NaN outputs whose own group's window holds no operand TF32 "
            f"makes infinite (reference finite); {int(other.sum())} of them have one in another group's channels of "
            f"their window ({int((~np.isfinite(xt)).sum())} input elements become Inf under TF32, "
            f"{int((~np.isfinite(a['x'].double().numpy())).sum())} were non-finite in fp32)")


BT = np.array([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0], [0, -2, -1, 2, 1, 0],
               [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]], float)
G = np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6], [1 / 24, 1 / 12, 1 / 6],
              [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]])
AT = np.array([[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]], float)


def f16(v: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        return v.astype(np.float32).astype(np.float16).astype(np.float64)


def f32(v: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        return v.astype(np.float32).astype(np.float64)


def winograd_f4x4_3x3(x: np.ndarray, w: np.ndarray, groups: int) -> np.ndarray:
    """Y = A^T [sum_c (G g G^T) . (B^T d B)] A over 6x6 tiles (stride 1, no padding), every step in fp32."""
    n, c, h, wd = x.shape
    o = w.shape[0]
    cg, og = c // groups, o // groups
    ho, wo = h - 2, wd - 2
    th, tw = -(-ho // 4), -(-wo // 4)
    xp = np.zeros((n, c, th * 4 + 2, tw * 4 + 2))
    xp[:, :, :h, :wd] = x
    u = f32(np.einsum("ij,ocjk,lk->ocil", G, w, G))
    out = np.zeros((n, o, th * 4, tw * 4))
    with np.errstate(invalid="ignore", over="ignore"):
        for i in range(th):
            for j in range(tw):
                v = f32(np.einsum("ij,ncjk,lk->ncil", BT, xp[:, :, 4 * i:4 * i + 6, 4 * j:4 * j + 6], BT))
                m = np.zeros((n, o, 6, 6))
                for k in range(groups):
                    m[:, k * og:(k + 1) * og] = np.einsum("ocij,ncij->noij", u[k * og:(k + 1) * og],
                                                          v[:, k * cg:(k + 1) * cg])
                out[:, :, 4 * i:4 * i + 4, 4 * j:4 * j + 4] = f32(np.einsum("ij,nojk,lk->noil", AT, f32(m), AT))
    return out[:, :, :ho, :wo]


def winograd(rec: Dict[str, Any]) -> str:
    a = inputs(rec)
    y = cuda_out(rec).astype(np.float64)
    x, w = a["x"].double().numpy(), a["weight"].double().numpy()
    b = a["bias"].double().numpy().reshape(1, -1, 1, 1) if a.get("bias") is not None else 0.0
    exact = per_group(x, w, a) + b
    emu = f16(f16(winograd_f4x4_3x3(x, w, a["groups"])) + b)
    direct = torch.nn.functional.conv2d(torch.from_numpy(x).float(), torch.from_numpy(w).float(), None,
                                        groups=a["groups"]).double().numpy()
    direct = f16(f16(direct) + b)
    case, eng = case_of(rec), inprocess._engine()
    fin = np.isfinite(y) & np.isfinite(f16(exact)) & np.isfinite(emu)
    big_gpu, big_emu = fin & (np.abs(y - exact) > 64), fin & (np.abs(emu - exact) > 64)
    mis = np.argwhere(np.isinf(y) & np.isfinite(f16(exact)) & np.isfinite(emu))
    patched = y.copy()
    for i in mis:
        patched[tuple(i)] = emu[tuple(i)]
    return ("kernels " + ", ".join(k.split("(")[0].replace("void ", "") for k in rec["kernels"] if "winograd" in k)
            + f"; Winograd F(4x4, 3x3) in fp32 (Lavin and Gray's transforms), stored in fp16, + bias: judged "
            f"'{eng.judge(case, [(emu.astype(np.float16), 'float16')])['message']}'; direct fp32 convolution, "
            f"stored, + bias: '{eng.judge(case, [(direct.astype(np.float16), 'float16')])['message']}'. Finite "
            f"elements off the exact value by more than 64: GPU {int(big_gpu.sum())}, emulation {int(big_emu.sum())}, "
            f"both {int((big_gpu & big_emu).sum())} (largest: GPU {np.abs(y - exact)[fin].max():.6g}, emulation "
            f"{np.abs(emu - exact)[fin].max():.6g}, direct {np.abs(direct - exact)[np.isfinite(direct) & fin].max():.6g}); "
            f"GPU Inf where the emulation is finite: {[(tuple(int(t) for t in i), float(exact[tuple(i)]), float(emu[tuple(i)]), float(y[tuple(i)])) for i in mis]} "
            f"(index, exact, emulation, GPU); the GPU's output with those from the emulation: "
            f"'{eng.judge(case, [(patched.astype(np.float16), 'float16')])['message']}'")


def explain(path: Path) -> str:
    rec = load(path)
    row = rec["row"]
    if "cuda_out" not in rec:
        return rec.get("error", "?")[:100]
    if "TF32" in row["impl"] and rec["attrs"].get("groups", 1) > 1:
        return tf32_grouped(rec)
    if any("winograd" in k for k in rec.get("kernels", [])):
        return winograd(rec)
    return "no explanation here"


def main() -> int:
    for path in sorted({p for d in sys.argv[1:] for p in Path(d).glob("*.pkl")}, key=lambda p: p.name):
        rec = load(path)
        r = rec["row"]
        print(f"{path.name} ({r['impl']} {r['dtype']} {r['strategy']}, seed {r['seed'] - 20261200}, case "
              f"{rec['failure']['index']}; the verdict: {rec['verdict']['message'][:90]}): {explain(path)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
