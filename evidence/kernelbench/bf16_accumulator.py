"""The arithmetic of bench/kernelbench/gpu/candidates/36_add_rms_norm/bug_bf16_accumulator.py on the
CPU, in numpy: h = x + residual in fp32, each 256-wide tile's sum of squares in fp32, the row's
running total rounded to bfloat16 after each tile, then rstd and the output in fp32, rounded once to
the output dtype. Two uses (evidence/kernelbench/cuda.md):

    # as a candidate: gpuemu's verdicts on the CPU, as on the H100
    .venv/bin/python -m gpuemu.kernelbench bench/kernelbench/problems/36_add_rms_norm.py \
        evidence/kernelbench/bf16_accumulator.py --dtype float32 --dtype bfloat16 --cases 30
    # its error in bfloat16 against the problem's own Model run in bfloat16, both against fp64
    .venv/bin/python evidence/kernelbench/bf16_accumulator.py
"""
import numpy as np
import torch
import torch.nn as nn

EXPECT = "fail"
BUG = "low_precision_accumulator"
TILE = 256


def _load(t):
    return np.array(t.detach().float().contiguous().numpy(), dtype=np.float32)


def _to_bf16(a):
    """float32 -> bfloat16 -> float32, round to nearest even, on the bits."""
    b = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    b = (b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000
    return b.astype(np.uint32).view(np.float32)


class ModelNew(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x, residual):
        h = _load(x) + _load(residual)
        w = _load(self.weight)
        n = h.shape[-1]
        total = np.zeros(h.shape[:-1] + (1,), dtype=np.float32)
        for s in range(0, n, TILE):
            t = h[..., s:s + TILE]
            total = _to_bf16(total + (t * t).sum(axis=-1, keepdims=True, dtype=np.float32))
        inv = np.float32(1.0) / np.sqrt(total / np.float32(n) + np.float32(self.eps))
        return torch.from_numpy(np.array(h * inv * w, dtype=np.float32)).to(x.dtype)


def _compare(rows=512, trials=20):
    """The worst |out - ref| / (u_bf16 |ref|) of this kernel and of the problem's Model run in
    bfloat16, on the same bfloat16 inputs (randn at scales 1e-3 to 1e3), against the fp64 value."""
    import importlib.util
    from pathlib import Path
    path = Path(__file__).resolve().parents[2] / "bench/kernelbench/problems/36_add_rms_norm.py"
    spec = importlib.util.spec_from_file_location("problem", path)
    problem = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(problem)
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    model = problem.Model(problem.dim).bfloat16()
    bug = ModelNew(problem.dim)
    bug.weight.data = model.weight.data.float()
    w = model.weight.data.double()
    worst_bug = worst_model = 0.0
    for _ in range(trials):
        scale = 10.0 ** rng.uniform(-3, 3)
        x = (torch.randn(rows, problem.dim) * scale).bfloat16()
        r = (torch.randn(rows, problem.dim) * scale).bfloat16()
        h = x.double() + r.double()
        ref = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * w
        unit = 2.0 ** -8 * ref.abs() + 2.0 ** -133
        with torch.no_grad():
            worst_bug = max(worst_bug, ((bug(x, r).double() - ref).abs() / unit).max().item())
            worst_model = max(worst_model, ((model(x, r).double() - ref).abs() / unit).max().item())
    print(f"worst |out - ref| / (u_bf16 |ref|), {trials} x {rows} rows of {problem.dim}: "
          f"bf16 running total {worst_bug:.2f}; the problem's Model in bfloat16 {worst_model:.2f}")


if __name__ == "__main__":
    _compare()
