"""Replays the TF32 failures a CUDA sweep stored against an emulation of TF32 GEMMs and convolutions
(no GPU): each failing case is regenerated from its seed (gpuemu.inprocess.replay, the model of this
checkout) and judged on the product of its operands rounded to TF32 (10 fraction bits, to nearest
(ties away from zero);
and again with subnormal operands flushed to zero), computed in fp64. evidence/gpu/tf32.md records
that this emulation reproduced the H200's failure messages exactly under the model before the
subnormal floor, and that every one passes under the model since (RN and RN+FTZ alike).

    PYTHONPATH=. .venv/bin/python evidence/gpu/replay_tf32_emulation.py evidence/gpu/conformance/conformance_cuda_seed3.jsonl.gz s3
"""
import gzip
import json
import sys

import torch

from bench.conformance.impls import variants, varied_attrs
from gpuemu import inprocess

def tf32(t, ftz):
    a = t.detach().to(torch.float32).contiguous().clone()
    bits = a.view(torch.int32)
    fin = torch.isfinite(a)
    r = ((bits + 0x1000) & ~0x1FFF)
    out = torch.where(fin, r, bits).view(torch.float32)
    if ftz:
        out = torch.where(a.abs() < 2.0**-126, torch.zeros_like(out)*torch.sign(a), out)
    return out.to(torch.float64)

def make_run(op, ftz):
    import torch.nn.functional as F
    def run(a):
        def T(n): return None if a.get(n) is None else tf32(a[n], ftz)
        if op == 'matmul': y = T('a') @ T('b')
        elif op == 'bmm': y = torch.bmm(T('a'), T('b'))
        elif op == 'linear':
            y = F.linear(T('x'), T('weight'))
            if a.get('bias') is not None: y = y.to(torch.float32).to(torch.float64) + a['bias'].to(torch.float64)
        else:
            kw = {k: a[k] for k in ('stride','padding','dilation','groups') if k in a}
            f = F.conv1d if op=='conv1d' else F.conv2d
            y = f(T('x'), T('weight'), None, **kw)
            if a.get('bias') is not None:
                b = a['bias'].to(torch.float64)
                y = y.to(torch.float32).to(torch.float64) + (b.view(1,-1,1) if op=='conv1d' else b.view(1,-1,1,1))
        return y.to(torch.float32)
    return run

def check(path, label):
    for r in map(json.loads, (gzip.open if path.endswith(".gz") else open)(path, "rt")):
        if '(TF32)' not in r['impl'] or not r['failures']: continue
        v = next(v for v in variants([r['op']],[r['dtype']],'cuda') if v.impl.name==r['impl'] and v.style==r['style'])
        for f in r['failures']:
            res = {}
            for ftz in (False, True):
                vd = inprocess.replay(r['op'], make_run(r['op'], ftz), f['seed'], value_distribution=r['strategy'],
                        dtypes=[r['dtype']], dims=v.impl.dims, vary_attrs=varied_attrs(r['op']) or None, precision=v.impl.precision)
                res[ftz] = vd
            print(f"{label} {r['op']} {r['strategy']} case {f['index']} groups={f['attrs'].get('groups')}\n   GPU : {f['message'][:150]}\n   RN  : {'pass' if res[False]['passed'] else res[False]['message'][:150]}\n   RN+FTZ: {'pass' if res[True]['passed'] else res[True]['message'][:150]}", flush=True)
if __name__ == "__main__":
    check(sys.argv[1], sys.argv[2])
