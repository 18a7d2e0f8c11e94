#!/usr/bin/env python3
"""Master seed 5's conv2d fp16 boundary case (evidence/gpu/cudnn.md, "Negative overflow"): which step
makes cuDNN's fp16 convolution give 65504 where the exact value is -5,135.

    PYTHONPATH=. python3 evidence/gpu/probe_conv2d_fp16_boundary.py CAPTURE.pkl [--device cuda]

CAPTURE.pkl is capture_cuda.py's record of the case (its exact input snapshot, the CUDA output, the
kernels). With --device cuda (the GPU machine) the same inputs run again under one change at a
time: cuDNN's settings, the memory format, the bias apart, the inputs upcast to fp32 (TF32 off)
and cast back; each line gives the verdict's worst ratio, the failing elements and the kernels.
Without it (any machine), the failing elements are read against the arithmetic: for each, the
exact value, the sums of its positive and of its negative products, and the largest magnitude a
running sum over (cin, kh, kw) reaches, in fp64 and with each product rounded to fp16.
"""

from __future__ import annotations

import argparse
import pickle
import sys
from typing import Any, Dict, List

import numpy as np
import torch
import torch.nn.functional as F

FP16_MAX = 65504.0


def tensors(rec: Dict[str, Any]) -> Dict[str, torch.Tensor]:
    """The snapshot's inputs as CPU tensors with their exact bytes, shapes and strides."""
    out = {}
    for name, (dtype, shape, strides, offset, data) in rec["snapshot"].items():
        np_dtype = {"float16": np.float16, "float32": np.float32, "bfloat16": np.uint16,
                    "float64": np.float64, "int64": np.int64, "int32": np.int32}[dtype]
        flat = np.frombuffer(data, dtype=np_dtype).copy()
        t = torch.from_numpy(flat)
        if dtype == "bfloat16":
            t = t.view(torch.bfloat16)
        out[name] = torch.as_strided(t, tuple(shape), tuple(strides), offset)
    return out


def conv_args(rec: Dict[str, Any]) -> Dict[str, Any]:
    a = rec["attrs"]
    return {k: (tuple(a[k]) if isinstance(a.get(k), list) else a[k])
            for k in ("stride", "padding", "dilation", "groups") if k in a}


def exact(x: torch.Tensor, w: torch.Tensor, b: Any, kw: Dict[str, Any]) -> torch.Tensor:
    return F.conv2d(x.double(), w.double(), None if b is None else b.double(), **kw)


def on_cuda(rec: Dict[str, Any]) -> None:
    from bench.conformance.capture_cuda import cudnn_setting, kernels_of

    ins = tensors(rec)
    x, w, b = ins["x"], ins["weight"], ins.get("bias")
    kw = conv_args(rec)
    ref = exact(x, w, b, kw)
    print(f"x {tuple(x.shape)} strides {x.stride()}, weight {tuple(w.shape)} strides {w.stride()}, "
          f"bias {None if b is None else tuple(b.shape)}, {kw}")
    print(f"captured kernels: {rec.get('kernels')}")
    print(f"captured verdict: {rec.get('verdict')}")

    def report(label: str, fn: Any) -> None:
        try:
            y = fn()
            torch.cuda.synchronize()
            yd = y.double().cpu()
            bad = ~torch.isclose(yd, ref, rtol=2e-2, atol=1.0) | ~torch.isfinite(yd)
            worst = (yd - ref).abs().max().item()
            i = int((yd - ref).abs().argmax())
            print(f"{label:<44} mismatches {int(bad.sum()):5d}  worst |diff| {worst:10.4g} "
                  f"(got {yd.flatten()[i].item():.6g}, exact {ref.flatten()[i].item():.6g})  kernels {kernels_of(fn)}")
        except Exception as e:  # noqa: BLE001
            print(f"{label:<44} raised {type(e).__name__}: {str(e)[:160]}")

    xc, wc = x.cuda(), w.cuda()
    bc = None if b is None else b.cuda()
    report("as the sweep ran it", lambda: F.conv2d(xc, wc, bc, **kw))
    for setting in ("deterministic", "benchmark", "cudnn_off"):
        with cudnn_setting(setting):
            report(f"cuDNN {setting}", lambda: F.conv2d(xc, wc, bc, **kw))
    report("contiguous operands", lambda: F.conv2d(xc.contiguous(), wc.contiguous(), bc, **kw))
    report("channels_last", lambda: F.conv2d(xc.to(memory_format=torch.channels_last),
                                             wc.to(memory_format=torch.channels_last), bc, **kw))
    report("no bias, then + bias in fp16", lambda: F.conv2d(xc, wc, None, **kw) + (0 if bc is None else bc.view(1, -1, 1, 1)))
    report("no bias, in fp32 (TF32 off) then + bias", lambda: (F.conv2d(xc.float(), wc.float(), None, **kw)
                                                                + (0 if bc is None else bc.float().view(1, -1, 1, 1))))
    report("upcast to fp32 (TF32 off), cast to fp16", lambda: F.conv2d(xc.float(), wc.float(),
                                                                       None if bc is None else bc.float(), **kw).half())


def on_cpu(rec: Dict[str, Any]) -> None:
    ins = tensors(rec)
    x, w, b = ins["x"], ins["weight"], ins.get("bias")
    kw = conv_args(rec)
    ref = exact(x, w, b, kw)
    first = rec["cuda_out"][0]  # capture_cuda's outputs: [(array, dtype name)]
    got = torch.from_numpy(np.asarray(first[0] if isinstance(first, (list, tuple)) else first).astype(np.float64))
    got = got.reshape(ref.shape)
    conv = exact(x, w, None, kw)  # the convolution alone, before the bias
    print(f"x {tuple(x.shape)}, weight {tuple(w.shape)}, bias {None if b is None else tuple(b.shape)}, {kw}")
    print(f"kernels: {rec.get('kernels')}")
    print(f"verdict: {rec.get('verdict')}")
    print(f"|x| max {x.double().abs().max().item():.6g}, |w| max {w.double().abs().max().item():.6g}")
    diff = (got - ref).abs()
    bad = (diff > 0.02 * ref.abs() + 1.0) | ~torch.isfinite(got)
    idx = bad.nonzero().tolist()
    print(f"{len(idx)} elements off; got values {sorted(set(got[bad].tolist()))[:8]}")
    # The products one output element sums: unfold the padded input.
    stride, pad, dil = kw.get("stride", (1, 1)), kw.get("padding", (0, 0)), kw.get("dilation", (1, 1))
    groups = kw.get("groups", 1)
    xs = F.pad(x.double(), (pad[1], pad[1], pad[0], pad[0]))
    cout, cin_g, kh, kwid = w.shape
    rows: List[str] = []
    for n, co, oh, ow in idx[:12]:
        g = co // (cout // groups)
        prods = []
        for ci in range(cin_g):
            for i in range(kh):
                for j in range(kwid):
                    xv = xs[n, g * cin_g + ci, oh * stride[0] + i * dil[0], ow * stride[1] + j * dil[1]].item()
                    prods.append(xv * w[co, ci, i, j].double().item())
        p = np.array(prods)
        run = np.cumsum(p)
        p16 = p.astype(np.float16).astype(np.float64)  # each product rounded to fp16 (overflow: Inf)
        run16 = np.cumsum(p16)
        bias = 0.0 if b is None else b[co].double().item()
        rows.append(f"  [{n},{co},{oh},{ow}] exact {ref[n, co, oh, ow].item():.6g} got {got[n, co, oh, ow].item():.6g} "
                    f"bias {bias:.6g}, convolution {conv[n, co, oh, ow].item():.6g}; sum+ {p[p > 0].sum():.6g} sum- {p[p < 0].sum():.6g}; "
                    f"largest |running sum| {np.abs(run).max():.6g}; products past fp16 {int((np.abs(p) > FP16_MAX).sum())} "
                    f"of {p.size}; fp16-rounded products' sum {run16[-1]:.6g}")
    print("\n".join(rows))
    # Every failing element against the convolution's range: which of them overflow fp16 before the
    # bias (and by which sign), and does the GPU's value equal the bias alone (0 + bias)?
    bias_of = (torch.zeros(ref.shape[1], dtype=torch.float64) if b is None else b.double())[torch.tensor([i[1] for i in idx])]
    cv = torch.tensor([conv[tuple(i)].item() for i in idx])
    gv = torch.tensor([got[tuple(i)].item() for i in idx])
    print(f"failing elements: {len(idx)}; convolution < -65504: {int((cv < -FP16_MAX).sum())}, > 65504: "
          f"{int((cv > FP16_MAX).sum())}; GPU value == fp16(0 + bias): "
          f"{int((gv == bias_of.half().double()).sum())}")
    neg = conv < -FP16_MAX - 16  # past fp16's range below, before the bias
    bias_full = (torch.zeros(ref.shape[1], dtype=torch.float64) if b is None else b.double()).view(1, -1, 1, 1).expand_as(ref)
    as_bias = got == bias_full.half().double()
    print(f"every element whose convolution is below -65504 ({int(neg.sum())}): the GPU gives 0 + bias in "
          f"{int((neg & as_bias).sum())}, -Inf in {int((neg & (got == -float('inf'))).sum())}; elements above "
          f"+65504 ({int((conv > FP16_MAX + 16).sum())}): +Inf in {int(((conv > FP16_MAX + 16) & (got == float('inf'))).sum())}")


class NumpyCompatUnpickler(pickle.Unpickler):
    """Reads numpy 2's pickles (the GPU machine's) under numpy 1 (numpy._core was numpy.core)."""

    def find_class(self, module: str, name: str) -> Any:
        if module.startswith("numpy._core"):
            module = "numpy.core" + module[len("numpy._core"):]
        return super().find_class(module, name)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("capture", help="capture_cuda.py's pickle of the case")
    ap.add_argument("--device", default="cpu")
    a = ap.parse_args()
    with open(a.capture, "rb") as f:
        rec = NumpyCompatUnpickler(f).load()
    if a.device == "cuda":
        from bench.conformance.impls_cuda import ieee_defaults

        ieee_defaults()
        on_cuda(rec)
    else:
        on_cpu(rec)
    return 0


if __name__ == "__main__":
    sys.exit(main())
