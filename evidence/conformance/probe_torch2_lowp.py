#!/usr/bin/env python3
"""Reads the torch 2.11 CPU failures that had no explanation yet (evidence/conformance/torch2.md):
bf16 conv2d/conv1d/bmm/linear/matmul on boundary and regular values, and fp16 F.normalize.

    PYTHONPATH=. python3 evidence/conformance/probe_torch2_lowp.py     # on the GPU machine (torch 2.11), gpuemu installed

Each failing case of the sweep's rows is regenerated from its seed (gpuemu.inprocess.replay, the
same op, dtype, strategy and varied attrs) and put through the same call several ways: the native
kernel as the sweep ran it, the same kernel on contiguous copies of the inputs, the upcast to fp32,
and the upcast with denormals flushed (what a kernel that sets FTZ/DAZ computes). Each line gives the
largest |result - exact| (exact: float64 of the same rounded inputs) and how many outputs are off by
more than 1000x the upcast's largest error, so a reading can tell a layout bug, a flush of
subnormals and a low-precision intermediate apart. Then the candidate demonstrations for
imprecise.py, on inputs chosen to show one mechanism each.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

import gpuemu
from gpuemu.inprocess import replay

torch.set_num_threads(1)
print("torch", torch.__version__, "gpuemu", gpuemu.__version__)
B, H = torch.bfloat16, torch.float16

CALLS = {
    "conv2d": lambda i, cast: F.conv2d(cast(i["x"]), cast(i["weight"]), None if i.get("bias") is None else cast(i["bias"]),
                                       stride=i["stride"], padding=i["padding"], dilation=i["dilation"], groups=i["groups"]),
    "conv1d": lambda i, cast: F.conv1d(cast(i["x"]), cast(i["weight"]), None if i.get("bias") is None else cast(i["bias"]),
                                       stride=i["stride"], padding=i["padding"], dilation=i["dilation"], groups=i["groups"]),
    "bmm": lambda i, cast: torch.bmm(cast(i["a"]), cast(i["b"])),
    "matmul": lambda i, cast: torch.matmul(cast(i["a"]), cast(i["b"])),
    "linear": lambda i, cast: F.linear(cast(i["x"]), cast(i["weight"]), None if i.get("bias") is None else cast(i["bias"])),
    "l2norm": lambda i, cast: F.normalize(cast(i["x"]), p=2.0, dim=i["dim"], eps=i["eps"]),
}

FAILED = [  # (op, dtype, strategy, case seed, vary_attrs) from evidence/conformance/sweeps/sweep_cpu_torch2.jsonl.gz
    ("conv2d", "bfloat16", "regular", 0xdf5e88e06a935ddf, ["dilation", "groups", "padding", "stride"]),
    ("conv2d", "bfloat16", "regular", 0x8e90853e9af78d74, ["dilation", "groups", "padding", "stride"]),
    ("conv1d", "bfloat16", "boundary", 0x5446908c92f36b5a, ["dilation", "groups", "padding", "stride"]),
    ("bmm", "bfloat16", "boundary", 0x3390873716ed5ee6, None),
    ("linear", "bfloat16", "boundary", 0x3390873716ed5ee6, None),
    ("l2norm", "float16", "regular", 0xe5f1193c40e02406, ["dim"]),
]


def read(op: str, dtype: str, strategy: str, seed: int, vary) -> None:
    seen = {}

    def run_op(i):
        seen.update(i)
        return CALLS[op](i, lambda t: t)

    v = replay(op, run_op, case_seed=seed, value_distribution=strategy, dtypes=[dtype], vary_attrs=vary)
    verdict = v.get("verdict") or v
    msg = str(verdict.get("message", verdict))[:160]
    dt = {"bfloat16": B, "float16": H}[dtype]
    exact = CALLS[op](seen, lambda t: t.double() if torch.is_tensor(t) else t)
    fin = torch.isfinite(exact)
    subnormal = {k: int(((t.abs() < torch.finfo(dt).tiny) & (t != 0)).sum()) for k, t in seen.items() if torch.is_tensor(t)}

    def err(out):
        out = out.double()
        return (out - exact).abs()[fin].max().item() if fin.any() else float("nan"), out

    up_err, _ = err(CALLS[op](seen, lambda t: t.float() if torch.is_tensor(t) else t))
    rows = {"native": lambda: CALLS[op](seen, lambda t: t),
            "native, contiguous copies": lambda: CALLS[op](seen, lambda t: t.contiguous() if torch.is_tensor(t) else t),
            "upcast": lambda: CALLS[op](seen, lambda t: t.float() if torch.is_tensor(t) else t)}
    shapes = {k: (tuple(t.shape), tuple(t.stride()), t.storage_offset()) for k, t in seen.items() if torch.is_tensor(t)}
    attrs = {k: t for k, t in seen.items() if not torch.is_tensor(t)}
    print(f"\n{op} {dtype} {strategy} seed {seed:#x}: replay says {msg}\n  inputs {shapes} attrs {attrs}; "
          f"subnormal inputs {subnormal}")
    for name, f in rows.items():
        e, out = err(f())
        far = int(((out - exact).abs() > 1000 * max(up_err, 1e-30))[fin].sum())
        print(f"  {name:28s} max|err| {e:.4g}; outputs > 1000x the upcast's worst: {far} of {int(fin.sum())}")
    torch.set_flush_denormal(True)
    try:
        e, _ = err(CALLS[op](seen, lambda t: t.float() if torch.is_tensor(t) else t))
        print(f"  {'upcast, denormals flushed':28s} max|err| {e:.4g}")
    finally:
        torch.set_flush_denormal(False)


for args in FAILED:
    try:
        read(*args)
    except Exception as ex:  # noqa: BLE001 - a probe: say what broke and go on
        print(f"\n{args[0]} {args[1]} {args[2]}: probe failed: {type(ex).__name__}: {ex}")

print("\ncandidate demonstrations")
x = torch.full((1000,), 60000.0, dtype=H)
print(f"- F.normalize(60000 x 1000) fp16: {F.normalize(x, dim=0)[0].item()} (exact {1 / math.sqrt(1000):.6g}; "
      f"upcast {F.normalize(x.float(), dim=0)[0].item():.6g}); x.norm() in fp16 = {x.norm().item()}")
t = torch.tensor([2.0 ** -24, 2.0 ** -24], dtype=H)
print(f"- F.normalize([2^-24, 2^-24]) fp16: {F.normalize(t, dim=0).tolist()} (exact {1 / math.sqrt(2):.6g}; "
      f"upcast {F.normalize(t.float(), dim=0).tolist()}); norm in fp16 = {t.norm().item()}")
for dt in (B, H):
    a = torch.tensor([[2.0 ** 13, 1.0, -2.0 ** 13]], dtype=dt)
    b = torch.ones(3, 1, dtype=dt)
    print(f"- [2^13, 1, -2^13] @ ones {dt}: {(a @ b).item()} (exact 1; upcast {(a.float() @ b.float()).item()})")
    a = torch.randn(64, 96).to(dt)
    a[5, 7] = -float("inf")
    bb = torch.rand(96, 48).to(dt) + 0.5
    out = a @ bb
    print(f"- a @ b with one -inf in row 5 of a (b > 0) {dt}: row 5 has {int(out[5].isnan().sum())} NaN of 48 "
          f"(exact -inf); upcast {int((a.float() @ bb.float())[5].isnan().sum())} NaN")

print("\nround 2: one mechanism each")
for dt in (B, H):
    a = torch.tensor([[2.0 ** -130 if dt == B else 2.0 ** -20]], dtype=dt)
    b = torch.tensor([[2.0 ** 120 if dt == B else 2.0 ** 10]], dtype=dt)
    ex = a.double() @ b.double()
    print(f"- subnormal x large, 1x1x1 {dt}: a@b {(a @ b).item()} bmm {torch.bmm(a[None], b[None]).item()} "
          f"linear {F.linear(a, b.t()).item()} (exact {ex.item()}; upcast {(a.float() @ b.float()).item()})")
    for m, k, n in ((1, 1, 1), (8, 7, 16), (771, 7, 512)):
        a = torch.full((m, k), 2.0 ** -130 if dt == B else 2.0 ** -20).to(dt)
        b = torch.full((k, n), 2.0 ** 120 if dt == B else 2.0 ** 10).to(dt)
        print(f"  {m}x{k}x{n}: a@b[0,0] {(a @ b)[0, 0].item()} (exact {k * (2.0 ** -10):g})")
    x = torch.full((1, 1, 8), 2.0 ** -130 if dt == B else 2.0 ** -20).to(dt)
    w = torch.full((1, 1, 3), 2.0 ** 120 if dt == B else 2.0 ** 10).to(dt)
    print(f"  conv1d: {F.conv1d(x, w)[0, 0, 0].item()} (exact {3 * 2.0 ** -10:g})")
    x2 = x.reshape(1, 1, 2, 4)
    w2 = w.reshape(1, 1, 1, 3)
    print(f"  conv2d: {F.conv2d(x2, w2)[0, 0, 0, 0].item()} (exact {3 * 2.0 ** -10:g})")
    a = torch.randn(496, 129).to(dt)
    a[5, 3] = float("-inf")
    b = torch.rand(129, 384).to(dt) + 0.5
    out = a @ b
    print(f"- 496x129x384 with one -inf in row 5 {dt}: row 5: {int(out[5].isnan().sum())} NaN, "
          f"{int(out[5].isneginf().sum())} -inf of 384; other rows non-finite {int((~out.isfinite()).sum() - (~out[5].isfinite()).sum())}")
    for cfg in ((1, 64, 31, 7, 64, 5, 4, 3, 1, 2, 4), (2, 7, 64, 5, 3, 2, 3, (1, 2), 0, 2, 1)):
        bsz, cin, hh, ww, cout, kh, kw, st, pd, dl, g = cfg
        torch.manual_seed(1)
        x = torch.randn(bsz, cin, hh, ww).to(dt)
        w = torch.randn(cout, cin // g, kh, kw).to(dt)
        got = F.conv2d(x, w, stride=st, padding=pd, dilation=dl, groups=g).double()
        ex = F.conv2d(x.double(), w.double(), stride=st, padding=pd, dilation=dl, groups=g)
        up = F.conv2d(x.float(), w.float(), stride=st, padding=pd, dilation=dl, groups=g).double()
        print(f"- conv2d {dt} x{tuple(x.shape)} w{tuple(w.shape)} stride {st} pad {pd} dil {dl} groups {g}, randn, "
              f"contiguous: max|got - exact| {(got - ex).abs().max().item():.4g}, largest |got| {got.abs().max().item():.4g} "
              f"(largest |exact| {ex.abs().max().item():.4g}); upcast max err {(up - ex).abs().max().item():.3g}")
