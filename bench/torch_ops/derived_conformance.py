#!/usr/bin/env python3
"""The Conformance sweep's trusted implementations judged by the derived bound instead of the
hand-derived one: does the automatic error model admit every correct kernel?

    .venv/bin/python -m bench.torch_ops.derived_conformance --cases 30 --seeds 1 --out evidence/torch_ops/derived_conformance
    .venv/bin/python -m bench.torch_ops.derived_conformance --ops softmax --strategies adversarial --cases 10

Each catalogue op of catalogue_bounds.OPS becomes an op with the catalogue's own schema (its dims,
inputs, attrs and value recipes) whose reference is that PyTorch formulation evaluated by
gpuemu.torch_ops.evaluate (c_acc and c_in derived op by op, plus the measuring stick, as
gpuemu.torch_op's references are). Every implementation of bench/conformance/impls.py for the op
(PyTorch's own in the case dtype and upcast, compositions, single-thread loops) is fuzzed against
it with ``gpuemu.fuzz_op_in_process``, in every dtype, under each strategy. A failure of one of
them is a hole in the derived model (or that implementation's own imprecision: imprecise.py lists
the PyTorch 1.13 kernels shown to be, which do not count).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np
import torch

import gpuemu
from gpuemu import _core
from gpuemu.torch_ops._bounds import evaluate

from bench.torch_ops.catalogue_bounds import OPS, TDT

MASTER_SEED_BASE = 20261201


class DerivedOp:
    """A catalogue op's schema with a derived reference: what gpuemu.fuzz_op_in_process takes."""

    def __init__(self, op: str, stick: bool = True) -> None:
        self.catalogue_op = op
        self.name = f"derived_{op}"
        schema = {k: v for k, v in gpuemu.op_schema(op).items() if k != "source_file"}
        schema["name"] = self.name
        schema["reference"] = f"torch:{self.name}"
        self.schema = schema
        self.fn = OPS[op]
        self.stick = stick

    def reference(self, inputs, attrs, dims, dtype):
        tdt = TDT[dtype]
        args = dict(attrs)
        for spec in self.schema["inputs"]:
            a = inputs.get(spec["name"])
            if a is None:
                args[spec["name"]] = None
                continue
            t = torch.from_numpy(np.ascontiguousarray(a))
            args[spec["name"]] = t.to(tdt) if t.is_floating_point() else t
        out = evaluate(self.fn, [args], case_dtype=tdt)
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        res = []
        for o in outs:
            v = o.v.numpy().astype(np.float64)
            e = o.e.numpy().copy()
            if self.stick and o.v.is_floating_point():
                e = e + self._stick(args, tdt, v)
            res.append((v, e, o.i.numpy().copy()))
        return res

    def _stick(self, args, tdt, v):
        from gpuemu import round_to

        best = np.zeros_like(v)
        for run_dt in {tdt, torch.float32}:
            try:
                with torch.no_grad():
                    r = self.fn({k: (x.to(run_dt) if isinstance(x, torch.Tensor) and x.is_floating_point() else x)
                                 for k, x in args.items()})
            except Exception:
                continue
            got = r.detach().to(torch.float64).numpy()
            if got.shape != v.shape:
                continue
            with np.errstate(invalid="ignore"):
                d = np.abs(got - round_to(v, str(run_dt).replace("torch.", "")))
            overflowed = ~np.isfinite(got) & np.isfinite(v)
            best = np.maximum(best, np.where(overflowed, 1e39, np.where(np.isfinite(d), d, 0.0) / 2.0 ** -24))
        return best

    def engine(self, base: Any) -> Any:
        from gpuemu.inprocess import _INPUT_NAMES

        _INPUT_NAMES[self.name] = tuple(i["name"] for i in self.schema["inputs"])
        return base.with_op(json.dumps(self.schema), f"<derived {self.catalogue_op}>", self.reference, 2.0)


def main(argv: Optional[List[str]] = None) -> int:
    from bench.conformance.impls import variants, varied_attrs
    from bench.conformance.imprecise import IMPRECISE

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", nargs="*", default=sorted(OPS))
    ap.add_argument("--dtypes", nargs="*")
    ap.add_argument("--strategies", nargs="*", default=["regular", "boundary", "adversarial"])
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--cases", type=int, default=30)
    ap.add_argument("--no-stick", action="store_true", help="the derived terms alone")
    ap.add_argument("--out")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    rows: List[Dict[str, Any]] = []
    t0 = time.perf_counter()
    for op in a.ops:
        dop = DerivedOp(op, stick=not a.no_stick)
        for var in variants([op], a.dtypes):
            for strat in a.strategies:
                for s in range(1, a.seeds + 1):
                    seed = MASTER_SEED_BASE + s
                    try:
                        res = gpuemu.fuzz_op_in_process(dop, var.run_op(), iterations=a.cases, seed=seed,
                                                        dtypes=[var.dtype], value_distribution=strat,
                                                        vary_attrs=varied_attrs(op) or None, diagnose=False)
                    except Exception as exc:
                        rows.append({"op": op, "impl": var.impl.name, "style": var.style, "dtype": var.dtype,
                                     "strategy": strat, "seed": seed, "error": f"{type(exc).__name__}: {exc}"})
                        print(f"ERROR {op} {var.impl.name} {var.dtype} {strat}: {exc}", file=sys.stderr)
                        continue
                    imprecise = (op, var.style, var.dtype) in IMPRECISE
                    failed = [f for f in res.failures if not f.traceback or "not implemented" not in f.traceback]
                    rows.append({"op": op, "impl": var.impl.name, "style": var.style, "dtype": var.dtype,
                                 "strategy": strat, "seed": seed, "cases": res.total, "failed": len(failed),
                                 "worst_ratio": res.worst_ratio, "imprecise": imprecise,
                                 "first": failed[0].describe() if failed else None})
                    mark = "imprecise" if imprecise else ("FAIL" if failed else "ok")
                    print(f"{mark} {op} {var.impl.name} [{var.style}] {var.dtype} {strat}: {len(failed)}/{res.total}, "
                          f"worst {res.worst_ratio:.3g} ({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
                    if failed and not imprecise:
                        print("   " + failed[0].describe().replace("\n", "\n   "), file=sys.stderr)
    bad = [r for r in rows if r.get("failed") and not r.get("imprecise")]
    errs = [r for r in rows if "error" in r]
    print(f"{len(rows)} runs, {sum(r.get('cases', 0) for r in rows)} cases, {len(bad)} runs failed outside the "
          f"imprecise list, {len(errs)} errors, {time.perf_counter() - t0:.0f} s")
    if a.out:
        out = Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        cmd = "python -m bench.torch_ops.derived_conformance " + " ".join(argv if argv is not None else sys.argv[1:])
        with open(out / "runs.jsonl", "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
        (out / "command.txt").write_text(cmd + "\n")
    return 1 if bad or errs else 0


if __name__ == "__main__":
    sys.exit(main())
