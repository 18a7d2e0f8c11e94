#!/usr/bin/env python3
"""The one unexplained failure of the sweep under torch 2.11: F.normalize in fp32 (l2norm,
adversarial, strided input). Replays the two failing cases and compares the kernel's row norms with
the exact ones and with a plain sequential fp32 sum of squares (whose relative error is at most
(R-1) u by the standard bound), so the reading can say whether the kernel is worse than any fp32
summation or the model's reduction term is too tight.

    PYTHONPATH=. .venv/bin/python evidence/conformance/probe_l2norm.py
"""
import torch
import torch.nn.functional as F

import gpuemu

torch.set_num_threads(1)
print("torch", torch.__version__)
for seed in (0xbf586355290d061, 0x15549ad5a28305bc):
    box = {}

    def run(a):
        box["x"] = a["x"].clone()
        box["strided"] = a["x"]
        return F.normalize(a["x"], p=2.0, dim=a["dim"], eps=a["eps"])

    res = gpuemu.inprocess.replay("l2norm", run, case_seed=seed, value_distribution="adversarial",
                                  dtypes=["float32"], vary_attrs=["dim"])
    x = box["strided"]
    xs = box["x"]
    exact = xs.double().norm(dim=-1)
    u = 2.0 ** -24
    R = x.shape[-1]
    acc = torch.zeros(xs.shape[:-1], dtype=torch.float32)
    for j in range(xs.shape[-1]):  # a left-to-right fp32 sum of fp32 squares (cumsum accumulates in double on the CPU)
        acc = acc + xs[..., j] * xs[..., j]
    seq = acc.sqrt()
    out = F.normalize(x, dim=-1)
    implied = (xs.double() / out.double()).median(dim=-1).values  # the norm the kernel divided by
    rel = lambda n: ((n.double() - exact) / exact).abs().max().item() / u
    print(f"case {seed:#x}: {tuple(x.shape)} stride {x.stride()}, judged {'pass' if getattr(res, 'ok', False) else 'FAIL'}; "
          f"row-norm error in units of u: kernel (implied) {rel(implied):.1f}, torch.norm fp32 {rel(xs.norm(dim=-1)):.1f}, "
          f"sequential fp32 sum {rel(seq):.1f}, bound (R-1)/2 = {(R - 1) / 2:.0f}; "
          f"|x| range {xs.abs()[xs != 0].min().item():.3g} .. {xs.abs().max().item():.3g}")
