#!/usr/bin/env python3
"""Precision bugs of the kind real kernels make, in low-precision reductions, and how often a case
catches them (issue 21: lines at the limit of the dtype, engine/fuzz/values.cpp).

    .venv/bin/python -m bench.power.lowp_bugs --seeds 3 --cases 100

A float16 or bfloat16 reduction is rounded once more at the end, at u_out * |result|; an fp32-level
loss inside the kernel shows only where that rounding is small next to the accumulated error: on
lines that cancel (sum, mean, cumsum) or whose log-sum-exp is near 0. Each bug below runs under
``fuzz_op_in_process`` with the defaults; the table gives the failing cases per run of ``--cases``.
Run it with two builds (GPUEMU_BIN_DIR and the interpreter whose ``gpuemu`` is the build) to compare
case generators. tests/python/test_detection_margin.py asserts the counts at one seed.
"""

from __future__ import annotations

import argparse
import time

import torch

def _reduced(a, fn):
    x = a["x"]
    d = a["dim"] % x.dim()
    out = fn(x.movedim(d, -1))
    return out.unsqueeze(d) if a.get("keepdim") else out


def sum_partials_lowp(a, block=256):
    """Blocks of 256 summed in fp32, each partial stored in the input dtype (a split reduction's
    buffer), then the partials added in fp32."""

    def f(x):
        xf = x.float()
        parts = [xf[..., i : i + block].sum(-1).to(x.dtype).float() for i in range(0, xf.shape[-1], block)]
        return torch.stack(parts, -1).sum(-1).to(x.dtype)

    return _reduced(a, f)


def sum_pair_preadd(a):
    """Adjacent pairs added in the input dtype (a packed __hadd2), then accumulated in fp32."""

    def f(x):
        n = x.shape[-1]
        even = x[..., : n - n % 2]
        s = (even[..., 0::2] + even[..., 1::2]).float().sum(-1)
        if n % 2:
            s = s + x[..., -1].float()
        return s.to(x.dtype)

    return _reduced(a, f)


def logsumexp_lowp_sum(a):
    """exp(x - max) summed in fp32, the sum stored in the input dtype before the log."""

    def f(x):
        xf = x.float()
        m = xf.amax(-1, keepdim=True)
        m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
        s = torch.exp(xf - m).sum(-1, keepdim=True).to(x.dtype).float()
        return (torch.log(s) + m).squeeze(-1).to(x.dtype)

    return _reduced(a, f)


def _gemm_operands(a):
    """(x, w, bias, out_dtype): the op's product is x @ w (+ bias), batched as the op's inputs are."""
    if "weight" in a:  # linear: x[..., K] weight[N, K]
        return a["x"], a["weight"].t(), a.get("bias"), a["x"].dtype
    return a["a"], a["b"], None, a["a"].dtype


def gemm_partials_lowp(a, block=None, splits=None):
    """x @ w with K cut into blocks (of `block`, or `splits` equal slices), each block's product
    accumulated in fp32 and stored in the input dtype, the partials then added in fp32: a split-K
    reduction's buffer in the low dtype (cuBLAS's "reduced precision reduction"), or a tiled kernel's
    ``acc += tl.dot(a, b).to(x.dtype)``."""
    x, w, bias, dt = _gemm_operands(a)
    k = x.shape[-1]
    step = block or max(1, -(-k // splits))
    acc = None
    for i in range(0, k, step):
        part = (x[..., i : i + step].float() @ w[..., i : i + step, :].float()).to(dt).float()
        acc = part if acc is None else acc + part
    if acc is None:
        acc = torch.zeros(x.shape[:-1] + w.shape[-1:])
    if bias is not None:
        acc = acc + bias.float()
    return acc.to(dt)


def gemm_blocks_lowp(a):
    return gemm_partials_lowp(a, block=64)


def gemm_splitk2_lowp(a):
    return gemm_partials_lowp(a, splits=2)


def upcast(op):
    def run(a):
        if op in ("matmul", "bmm", "linear"):
            x, w, bias, dt = _gemm_operands(a)
            y = x.float() @ w.float()
            return (y + bias.float() if bias is not None else y).to(dt)
        x = a["x"].float()
        if op == "cumsum":
            return torch.cumsum(x, a["dim"]).to(a["x"].dtype)
        fn = {"sum": torch.sum, "mean": torch.mean, "logsumexp": torch.logsumexp}[op]
        return fn(x, a["dim"], keepdim=a["keepdim"]).to(a["x"].dtype)

    return run


def logsumexp_running_loop(a):
    """A single-thread fp32 loop: the row max, then exp(x - max) added one at a time in fp32."""

    def f(x):
        xf = x.float()
        m = xf.amax(-1, keepdim=True)
        m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
        t = torch.exp(xf - m)
        s = torch.zeros(t.shape[:-1], dtype=torch.float32)
        for k in range(t.shape[-1]):
            s = s + t[..., k]
        return (torch.log(s) + m.squeeze(-1)).to(x.dtype)

    return _reduced(a, f)


def cumsum_lowp_carry(a, block=256):
    """A blocked scan: each block of 256 scanned in fp32, the carry into the next block kept in the
    input dtype."""
    x = a["x"]
    d = a["dim"] % x.dim()
    xm = x.movedim(d, -1).float()
    outs, carry = [], torch.zeros(xm.shape[:-1])
    for i in range(0, xm.shape[-1], block):
        blk = xm[..., i : i + block].cumsum(-1) + carry.unsqueeze(-1)
        outs.append(blk)
        carry = blk[..., -1].to(x.dtype).float()
    y = torch.cat(outs, -1) if outs else xm
    return y.to(x.dtype).movedim(-1, d)


BUGS = {
    "sum partials stored in the input dtype (blocks of 256)": ("sum", sum_partials_lowp),
    "sum pairs pre-added in the input dtype (__hadd2)": ("sum", sum_pair_preadd),
    "logsumexp sum of exps stored in the input dtype": ("logsumexp", logsumexp_lowp_sum),
    "cumsum carry between blocks kept in the input dtype": ("cumsum", cumsum_lowp_carry),
    "matmul partials of K-blocks of 64 stored in the input dtype": ("matmul", gemm_blocks_lowp),
    "matmul split-K in 2, partials in the input dtype": ("matmul", gemm_splitk2_lowp),
    "linear split-K in 2, partials in the input dtype": ("linear", gemm_splitk2_lowp),
    "bmm split-K in 2, partials in the input dtype": ("bmm", gemm_splitk2_lowp),
}


def main() -> int:
    import gpuemu

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=3, help="master seeds 1..N")
    ap.add_argument("--cases", type=int, default=100)
    ap.add_argument("--dtypes", nargs="+", default=["bfloat16", "float16"])
    ap.add_argument("--only", nargs="+", default=None, help="the bugs whose op is one of these")
    args = ap.parse_args()
    torch.set_num_threads(1)
    print("| bug | dtype | failing cases per run (master seeds 1..%d) | first failure |" % args.seeds)
    print("|---|---|---|---|")
    for name, (op, fn) in BUGS.items():
        if args.only and op not in args.only:
            continue
        for dt in args.dtypes:
            fails, firsts = [], []
            for seed in range(1, args.seeds + 1):
                r = gpuemu.fuzz_op_in_process(op, fn, iterations=args.cases, seed=seed, dtypes=[dt], diagnose=False)
                fails.append(f"{r.failed}/{r.total}")
                firsts.append(str(r.first_failure))
            print(f"| {name} | {dt} | {', '.join(fails)} | {', '.join(firsts)} |", flush=True)
    return 0


if __name__ == "__main__":
    t0 = time.perf_counter()
    status = main()
    print(f"\n{time.perf_counter() - t0:.0f} s")
    raise SystemExit(status)
