"""One run of the power measurement: the cases of one master seed for one (op, dtype), each computed
once by the mutable control for the whole k grid and judged against one fp64 reference.

A run's record holds, per case, the worst normalised error and the verdict at every k (k = 1 is
the unmutated control), so the curve, the detection rates and the margins are all computed from
the same cases (report.py).
"""

from __future__ import annotations

import math
import time
import traceback
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import torch

from bench.power.kernel import MutableKernel
from bench.power.rounding import Mutation

TORCH_OUT = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
WORK_BUDGET = 1 << 23  # elements of one intermediate over the k slices evaluated together


def output_arrays(t: torch.Tensor, dtype: str) -> List[Tuple[np.ndarray, str]]:
    """One (array, dtype name) per k slice of an output [k, ...], stored in the output dtype the
    way a kernel's store rounds (to nearest even)."""
    if dtype in ("float32", "float16"):
        arr = t.to(TORCH_OUT[dtype]).contiguous().numpy()
    elif dtype == "bfloat16":
        arr = t.to(torch.bfloat16).contiguous().view(torch.int16).numpy().view(np.uint16)
    elif dtype.startswith("float8"):
        from gpuemu.dtypes import to_bits

        arr = to_bits(t.double().numpy(), dtype)
    elif dtype == "int64":
        arr = t.to(torch.int64).contiguous().numpy()
    else:
        raise TypeError(f"no conversion to {dtype}")
    return [(np.array(arr[i], copy=True, order="C"), dtype) for i in range(arr.shape[0])]  # 0-d stays 0-d


def grid_outputs(kernel: MutableKernel, args: Dict[str, Any], ks: Sequence[int],
                 sites: Optional[Sequence[str]] = None, reached: Optional[set] = None
                 ) -> Iterator[Tuple[int, List[Tuple[np.ndarray, str]]]]:
    """(index in ks, that k's outputs as [(array, dtype)]) for every k of the grid, computed in
    chunks of k that keep the chunk's slices x the kernel's working size (or its output size, once
    the first k has shown it) under WORK_BUDGET elements. ``reached`` collects the sites the kernel
    called."""
    work = max(1, kernel.work_elements(args))
    start, per_chunk = 0, 1  # the first k alone: its outputs size the chunks
    with torch.no_grad():
        while start < len(ks):
            chunk = ks[start:start + per_chunk]
            mut = Mutation(chunk, sites)
            outs = [(mut.slices(t), dtype) for t, dtype in kernel.fn(dict(args), mut)]
            if reached is not None:
                reached |= mut.seen
            per_k = [output_arrays(t, dtype) for t, dtype in outs]
            for i in range(len(chunk)):
                yield start + i, [arrays[i] for arrays in per_k]
            out_elems = sum(int(t[0].numel()) for t, _ in outs)
            start += len(chunk)
            per_chunk = max(1, WORK_BUDGET // max(work, out_elems))
            del outs, per_k


def grid_candidates(kernel: MutableKernel, args: Dict[str, Any], ks: Sequence[int],
                    sites: Optional[Sequence[str]] = None) -> Tuple[List[List[Tuple[np.ndarray, str]]], set]:
    """Every k's outputs at once ([candidate][output] = (array, dtype)) and the sites reached."""
    reached: set = set()
    cands = [outputs for _, outputs in grid_outputs(kernel, args, ks, sites, reached)]
    return cands, reached


def _error(v: Dict[str, Any]) -> float:
    e = v.get("max_error")
    return math.inf if e == "inf" or e is None else float(e)


def measure_run(op: str, dtype: str, seed: int, cases: int, ks: Sequence[int],
                sites: Optional[Sequence[str]] = None, strategy: str = "adversarial",
                engine: Any = None) -> Dict[str, Any]:
    """Cases 0..cases-1 of master seed ``seed`` (as ``gpuemu fuzz --seed`` draws them: layouts on,
    the attrs with schema values varied, the shipped envelopes), each judged at every k."""
    import gpuemu
    from bench.conformance.impls import varied_attrs
    from gpuemu.inprocess import case_inputs
    from bench.power.mutants import KERNELS

    if 1 not in ks:
        raise ValueError("the grid must hold k = 1 (the unmutated control)")
    eng = engine if engine is not None else gpuemu._core.Engine()
    kernel = KERNELS[op]
    vary = varied_attrs(op) or None
    t0 = time.perf_counter()
    errors: List[List[float]] = []
    failed: List[List[bool]] = []
    shapes: List[Dict[str, Any]] = []
    problems: List[str] = []
    envelope = None
    seen: set = set()
    for i in range(cases):
        case = eng.cases(op, seed, 1, dtypes=[dtype], strategy=strategy, vary_attrs=vary, layouts=True,
                         start=i)[0]
        judge = eng.case_judge(case)  # the fp64 reference, once for the whole grid
        verdicts: List[Dict[str, Any]] = []
        try:
            for _j, outputs in grid_outputs(kernel, case_inputs(case, "torch"), ks, sites, seen):
                verdicts.append(judge.judge(outputs))
        except Exception:  # a harness defect: recorded, never counted as a catch
            problems.append(f"case {i} (seed {case.seed}): {traceback.format_exc(limit=3)}")
            continue
        finally:
            del judge
        envelope = verdicts[0]["envelope"]
        errors.append([_error(v) for v in verdicts])
        failed.append([not v["passed"] for v in verdicts])
        shapes.append({"index": i, "dims": case.dims, "attrs": case.attrs,
                       "layouts": {k: v for k, v in case.layouts.items() if v != "contiguous"}})
    return {"op": op, "dtype": dtype, "seed": seed, "strategy": strategy, "ks": list(ks),
            "sites": sorted(sites) if sites is not None else sorted(kernel.sites), "sites_reached": sorted(seen),
            "cases": len(errors), "envelope": envelope, "errors": errors, "failed": failed, "case_info": shapes,
            "problems": problems, "seconds": round(time.perf_counter() - t0, 2)}
