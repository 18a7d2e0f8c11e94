"""Replays the CUDA sweep's backward failures (torch 2.11 on the H200, evidence/gpu/backward/conformance_cuda_backward.jsonl.gz)
here, on the CPU, with emulations of what the CUDA kernels might compute, and prints each emulation's verdict
beside the one the GPU's output got: an emulation that reproduces every failure message exactly (the count of
elements over the envelope, the worst error, the value there) computes what the GPU computed on those cases.

    GPUEMU_BIN_DIR=build/bin .venv/bin/python evidence/gpu/replay_cuda_backward.py [ROWS.jsonl[.gz]]

evidence/gpu/backward.md has the output (backward/replay_cuda_backward.txt.gz) and what it shows.
"""

from __future__ import annotations

import gzip
import json
import sys
from typing import Any, Callable, Dict

import torch
import torch.nn.functional as F

import gpuemu.inprocess as ip

Args = Dict[str, Any]


# softmax_backward: grad_in = y * (g - sum(g * y)) along dim.
def softmax_fp32(a: Args) -> torch.Tensor:
    """fp32 throughout, one rounding at the end (the upcast rows, which pass)."""
    g, y, dim = a["grad_out"].float(), a["y"].float(), a["dim"]
    return (y * (g - (g * y).sum(dim, keepdim=True))).to(a["grad_out"].dtype)


def softmax_sum_lowp(a: Args) -> torch.Tensor:
    """The row sum stored in the input dtype (torch 1.13's CPU kernel, imprecise.py)."""
    g, y, dim, dt = a["grad_out"].float(), a["y"].float(), a["dim"], a["grad_out"].dtype
    s = (g * y).sum(dim, keepdim=True).to(dt).float()
    return (g * y - y * s).to(dt)


def softmax_gy_lowp(a: Args) -> torch.Tensor:
    """g * y materialised in the input dtype (rounded), then g*y - y * sum(g*y) in fp32."""
    gy, y, dim, dt = (a["grad_out"] * a["y"]).float(), a["y"].float(), a["dim"], a["grad_out"].dtype
    return (gy - y * gy.sum(dim, keepdim=True)).to(dt)


# swiglu_backward: autograd through F.silu(gate) * up.
def swiglu_fp32(a: Args) -> Any:
    g, gate, up, dt = a["grad_out"].float(), a["gate"].float(), a["up"].float(), a["grad_out"].dtype
    s = torch.sigmoid(gate)
    return (g * up * s * (1 + gate * (1 - s))).to(dt), (g * gate * s).to(dt)


def swiglu_intermediates_lowp(a: Args) -> Any:
    """Every tensor autograd materialises in the input dtype: silu(gate) saved by the forward,
    grad_out * up and grad_out * silu(gate) (mul's backward), then silu's backward in fp32 math."""
    g, gate, up = a["grad_out"], a["gate"], a["up"]
    silu = F.silu(gate.float()).to(gate.dtype)
    grad_silu = g * up                      # rounded to the dtype (may overflow to Inf in fp16)
    grad_up = g * silu
    s = torch.sigmoid(gate.float())
    grad_gate = (grad_silu.float() * s * (1 + gate.float() * (1 - s))).to(gate.dtype)
    return grad_gate, grad_up


# embedding_backward: grad_weight[i] = the sum of grad_out's rows whose index is i.
def embedding_fp32(a: Args) -> torch.Tensor:
    """Every row's sum in fp32, rounded once (the upcast rows, which pass)."""
    g = a["grad_out"].reshape(-1, a["grad_out"].shape[-1])
    w = torch.zeros(a["num_weights"], g.shape[-1], dtype=torch.float32)
    return w.index_add_(0, a["indices"].reshape(-1), g.float()).to(g.dtype)


def embedding_sequential_lowp(a: Args) -> torch.Tensor:
    """Each position added in turn into a grad_weight held in the dtype (torch 1.13's CPU kernel)."""
    g = a["grad_out"].reshape(-1, a["grad_out"].shape[-1])
    w = torch.zeros(a["num_weights"], g.shape[-1], dtype=torch.float32)
    for p, i in enumerate(a["indices"].reshape(-1).tolist()):
        w[i] = (w[i] + g[p].float()).to(g.dtype).float()
    return w.to(g.dtype)


def embedding_warp_batches_lowp(a: Args, batch: int = 32) -> torch.Tensor:
    """The positions taken in batches of 32 (a warp's), each batch's sum per row in fp32, then added
    into a grad_weight held in the dtype: read, add in fp32, store rounded (embedding_backward_feature_kernel,
    which torch's CUDA backend runs for up to 3,072 positions)."""
    g = a["grad_out"].reshape(-1, a["grad_out"].shape[-1])
    idx = a["indices"].reshape(-1)
    w = torch.zeros(a["num_weights"], g.shape[-1], dtype=torch.float32)
    for b0 in range(0, idx.numel(), batch):
        part = torch.zeros_like(w).index_add_(0, idx[b0:b0 + batch], g[b0:b0 + batch].float())
        for i in idx[b0:b0 + batch].unique().tolist():
            w[i] = (w[i] + part[i]).to(g.dtype).float()
    return w.to(g.dtype)


EMULATIONS: Dict[str, Dict[str, Callable[[Args], Any]]] = {
    "softmax_backward": {"fp32 throughout": softmax_fp32, "row sum in the dtype": softmax_sum_lowp,
                         "g*y in the dtype": softmax_gy_lowp},
    "swiglu_backward": {"fp32 throughout": swiglu_fp32, "intermediates in the dtype": swiglu_intermediates_lowp},
    "embedding_backward": {"fp32 throughout": embedding_fp32, "each position into the dtype": embedding_sequential_lowp,
                           "warp batches of 32 into the dtype": embedding_warp_batches_lowp},
}


def main() -> int:
    path = sys.argv[1] if len(sys.argv) > 1 else "evidence/gpu/backward/conformance_cuda_backward.jsonl.gz"
    rows = [json.loads(line) for line in (gzip.open if path.endswith(".gz") else open)(path, "rt")]
    reproduced: Dict[str, int] = {}
    shown = 0
    for row in rows:
        if not row["failed"] or row["op"] not in EMULATIONS:
            continue
        for f in row["failures"]:
            shown += 1
            print(f"{row['op']} [{row['style']}] {row['dtype']} {row['strategy']} case {f['index']}")
            print(f"    CUDA ({row['torch']}): {f['message']}")
            for name, fn in EMULATIONS[row["op"]].items():
                v = ip.replay(row["op"], fn, case_seed=f["seed"], value_distribution=row["strategy"],
                              dtypes=[row["dtype"]], vary_attrs=["dim"] if row["op"] == "softmax_backward" else None)
                same = (not v["passed"]) and v.get("message") == f["message"]
                reproduced[name] = reproduced.get(name, 0) + same
                print(f"    {name:28s} {'the same message' if same else ('passes' if v['passed'] else v.get('message'))}")
    print(f"\n{shown} failing cases replayed; failure messages reproduced exactly, by emulation: " +
          ", ".join(f"{k} {v}" for k, v in reproduced.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
