"""Judging KernelBench candidates: a problem's op, its cases and their references made once, then any
number of candidates judged on them (docs/kernelbench.md)."""

from __future__ import annotations

import copy
import math
import re
import time
import traceback
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

import numpy as np
import torch

from .. import _core
from .. import _frameworks as _fw
from ..errors import GpuemuError, ValidationError
from ..inprocess import case_inputs
from ..torch_ops import TorchOp
from . import _hacks
from ._load import Candidate, Problem, call_user, example_inputs, load_candidate, load_problem

TORCH_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
KERNELBENCH_SEED = 42  # KernelBench's set_seed before Model and ModelNew are built


@dataclass
class PairResult:
    """One (problem, candidate, dtype): the JSON line of ``gpuemu kernelbench --json``."""

    problem: str
    candidate: str
    dtype: str
    verdict: str = "error"  # passed | failed | inconclusive | error
    cases: int = 0
    passed: int = 0
    failed: int = 0
    inconclusive: int = 0
    failure_classes: List[str] = field(default_factory=list)
    hacks: List[Dict[str, str]] = field(default_factory=list)
    first_failure: Optional[Dict[str, Any]] = None
    inconclusive_reason: Optional[str] = None
    notes: List[str] = field(default_factory=list)
    seed: int = 0
    elapsed_s: float = 0.0
    problem_file: str = ""
    candidate_file: str = ""
    error: Optional[str] = None

    def to_json(self) -> Dict[str, Any]:
        """The result as JSON values: non-finite numbers as the strings "inf", "-inf", "nan" (as the
        daemon writes them), so that every line parses as strict JSON."""
        def clean(x: Any) -> Any:
            if isinstance(x, float) and not math.isfinite(x):
                return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
            if isinstance(x, dict):
                return {k: clean(v) for k, v in x.items()}
            if isinstance(x, (list, tuple)):
                return [clean(v) for v in x]
            return x
        return {k: clean(v) for k, v in asdict(self).items() if v is not None}

    def summary(self) -> str:
        head = (f"{self.problem} / {self.candidate} [{self.dtype}]: {self.verdict.upper()} "
                f"({self.passed}/{self.cases} passed")
        if self.inconclusive:
            head += f", {self.inconclusive} inconclusive"
        head += ")"
        lines = [head]
        if self.error:
            lines.append("  error: " + self.error.splitlines()[0])
        for h in self.hacks:
            lines.append(f"  {h['class']}: {h['evidence']}")
        if self.first_failure:
            f = self.first_failure
            lines.append(f"  first failure: case {f.get('index')} dims {f.get('dims')}: {f.get('message', '')}")
            if f.get("diagnosis"):
                lines.append(f"  diagnosis: {f['diagnosis'].get('bug_class')}: {f['diagnosis'].get('summary')}")
        if self.inconclusive_reason:
            lines.append(f"  inconclusive: {self.inconclusive_reason}")
        for n in self.notes:
            lines.append(f"  note: {n}")
        return "\n".join(lines)


def _op_name(problem: Problem) -> str:
    n = re.sub(r"[^a-z0-9_]", "_", problem.name.lower())
    return "kb_" + re.sub(r"_+", "_", n).strip("_")


def _share_parameters(src: torch.nn.Module, dst: torch.nn.Module) -> Optional[str]:
    """Copies ``src``'s parameters and buffers into ``dst`` where names and shapes match (both were
    built under the same seed, as KernelBench builds them: this makes them equal whatever order
    each constructor drew in); a note when some do not match."""
    s, d = src.state_dict(), dst.state_dict()
    common = [k for k in d if k in s and s[k].shape == d[k].shape]
    if common:
        dst.load_state_dict({**d, **{k: s[k] for k in common}})
    if len(common) != len(s):
        return (f"{len(s) - len(common)} of the problem's {len(s)} parameters and buffers have no counterpart of "
                "the same name and shape in ModelNew: they are shared by seed only, as KernelBench shares them")
    return None


class ProblemOp:
    """A problem in one dtype: its op (schema inferred, reference with bounds), the forbidden ops
    and the cases, each with its reference computed once and shared by every candidate."""

    def __init__(self, problem: Problem, dtype: str, seed: int = KERNELBENCH_SEED, cases: int = 100,
                 strategy: str = "adversarial", forbid: Optional[Set[str]] = None, allow: Sequence[str] = (),
                 max_elements: Optional[int] = None, device: str = "cpu",
                 init_seed: int = KERNELBENCH_SEED, fused: bool = False) -> None:
        """``seed``: the master seed of the cases; ``init_seed``: the seed Model and ModelNew are
        built under (KernelBench's 42); ``fused``: the candidates keep every intermediate in fp32
        (gpuemu.torch_op's ``fused``)."""
        if dtype not in TORCH_DTYPES:
            raise ValidationError(f"dtype {dtype!r}: KernelBench's precisions are float32, float16 and bfloat16")
        self.problem = problem
        self.dtype = dtype
        self.seed = seed
        self.strategy = strategy
        self.device = device  # where the candidate runs (its inputs are the cases' exact values there)
        self.init_seed = init_seed
        torch.manual_seed(init_seed)
        self.init_inputs = list(call_user(f"problem {problem.path}: get_init_inputs()", problem.get_init_inputs))
        torch.manual_seed(init_seed)
        self.model = call_user(f"problem {problem.path}: Model(*get_init_inputs())", problem.Model, *self.init_inputs)
        ex, ranges, real = example_inputs(problem, init_seed)
        self.example = ex
        names = None
        int_ranges: Dict[str, Tuple[int, int]] = {}
        from ..torch_ops._op import _input_names
        names = _input_names(self.model.forward, len(ex))
        k = 0
        for n, t in zip(names, ex):
            if isinstance(t, torch.Tensor) and not t.is_floating_point() and t.dtype != torch.bool and k < len(ranges):
                int_ranges[n] = ranges[k]
                k += 1
        self.names = names
        sizes = {v: k for k, v in sorted(problem.constants.items(), key=lambda kv: kv[0])}
        try:
            self.op = TorchOp(_op_name(problem), self.model, ex, input_names=names, dtypes=[dtype], size_names=sizes,
                              int_ranges=int_ranges, max_elements=max_elements, fused=fused,
                              summary=f"KernelBench problem {problem.name}")
        except GpuemuError:
            raise
        except Exception as exc:
            raise ValidationError(f"problem {problem.path}: the reference cannot be traced: {type(exc).__name__}: "
                                  f"{exc}\n{_tail(traceback.format_exc())}") from None
        self.notes = list(self.op.notes)
        if not real:
            self.notes.append("get_inputs() is larger than this machine runs cases at: its shapes were read without "
                              "allocating them")
        # the reference's own compute ops: what a candidate may not call (unless allowed)
        self.reference_ops = _hacks.compute_ops(self._user_level_ops())
        self.forbidden = (set(forbid) if forbid is not None else set(self.reference_ops)) - set(allow)
        self.engine = self.op.engine(_core.Engine())
        self.master_seed = seed
        self._cases: List[Tuple[Any, ...]] = []
        self._next_index = 0
        self.skipped = 0
        self.extend(cases)

    def _user_level_ops(self) -> Set[str]:
        ops: Set[str] = set()
        run_dt = TORCH_DTYPES[self.dtype] if self.dtype != "float16" else torch.float32  # fp16 CPU kernels may lack
        args = [a.to(run_dt) if isinstance(a, torch.Tensor) and a.is_floating_point() else a
                for a in self.op.inferred.probe_inputs(self.names, self.example)]
        with torch.no_grad(), _hacks.traced(ops):
            self.op._plain(run_dt)(*args)
        return ops

    def extend(self, n: int) -> None:
        """Cases [len, n) with their references."""
        have = len(self._cases)
        if n <= have:
            return
        start = self._next_index
        while len(self._cases) < n and self._next_index < start + 4 * max(n - have, 1):
            c = self.engine.cases(self.op.name, self.master_seed, 1, dtypes=[self.dtype], strategy=self.strategy,
                                  layouts=True, start=self._next_index)[0]
            self._next_index += 1
            try:
                judge = self.engine.case_judge(c)
            except GpuemuError as exc:  # the reference cannot take this case: skipped, said once
                first = str(exc).splitlines()[0]
                note = f"cases the reference cannot take are skipped (case {c.index}, dims {dict(c.dims)}: {first})"
                if not any(x.startswith("cases the reference cannot take") for x in self.notes):
                    self.notes.append(note)
                self.skipped += 1
                continue
            self._cases.append((c, judge, self.op.last_unresolved, self.op.last_shapes, self.op.last_digest,
                                self.op.last_terms))
        if not self._cases:
            raise ValidationError(f"problem {self.problem.path}: the reference raised on every case drawn: "
                                  + (self.notes[-1] if self.notes else "no case"))

    @property
    def cases(self):
        return self._cases

    def candidate_module(self, cand: Candidate) -> Tuple[torch.nn.Module, Optional[str]]:
        torch.manual_seed(self.init_seed)
        try:
            new = cand.ModelNew(*self.init_inputs)
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            raise ValidationError(f"candidate {cand.path}: ModelNew(*get_init_inputs()) raised "
                                  f"{type(exc).__name__}: {exc}\n{_tail(traceback.format_exc())}") from None
        note = _share_parameters(self.model, new)
        try:
            new = new.to(device=self.device, dtype=TORCH_DTYPES[self.dtype])
        except Exception as exc:
            raise ValidationError(f"candidate {cand.path}: ModelNew.to({self.dtype}) raised {exc}") from None
        return new, note


def _tail(tb: str, lines: int = 6) -> str:
    return "\n".join(tb.rstrip().splitlines()[-lines:])


def _args(pop: ProblemOp, case: Any) -> List[Any]:
    inputs = case_inputs(case, "torch", None if pop.device == "cpu" else pop.device)
    return [inputs[n] if n in inputs else case.attrs.get(n) for n in pop.names]


def _outputs(out: Any) -> List[Any]:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def judge_candidate(pop: ProblemOp, cand: Candidate, cases: Optional[int] = None, deterministic: bool = False,
                    sentinel: bool = True, diagnose: bool = True) -> PairResult:
    """Judges one candidate on the problem's cases (the references computed once, in ``pop``)."""
    t0 = time.perf_counter()
    res = PairResult(problem=pop.problem.name, candidate=cand.name, dtype=pop.dtype, seed=pop.seed,
                     problem_file=str(pop.problem.path), candidate_file=str(cand.path), notes=list(pop.notes))
    n = len(pop.cases) if cases is None else int(cases)
    pop.extend(n)
    try:
        new, note = pop.candidate_module(cand)
    except ValidationError as exc:
        res.error = str(exc)
        res.elapsed_s = time.perf_counter() - t0
        return res
    if note:
        res.notes.append(note)
    watch = _hacks.Watch(pop.forbidden, deterministic)
    tdt = TORCH_DTYPES[pop.dtype]
    first_pass_index: Optional[int] = None
    failing_reasons: List[str] = []
    seen_by_shape: Dict[Tuple[Any, ...], Tuple[str, str, int]] = {}
    for idx, (case, judge, unresolved, ref_shapes, ref_dg, terms) in enumerate(pop.cases[:n]):
        args = _args(pop, case)
        before = watch.before_call(args)
        ops: Set[str] = set()
        try:
            with torch.no_grad(), _hacks.nan_sentinel(sentinel), _hacks.traced(ops):
                out = new(*args)
        except Exception as exc:
            res.cases += 1
            res.failed += 1
            _first(res, idx, case, {"message": f"the candidate raised {type(exc).__name__}: {exc}",
                                    "traceback": _tail(traceback.format_exc(), 10)}, "kernel_error")
            if "kernel_error" not in res.failure_classes:
                res.failure_classes.append("kernel_error")
            continue
        outs = _outputs(out)
        shown = watch.after_call(idx, pop.names, args, before, [o for o in outs if isinstance(o, torch.Tensor)], ops)
        res.cases += 1
        if shown:  # the call broke its contract, whatever its values
            res.failed += 1
            _first(res, idx, case, {"message": watch.found[shown[0]]}, shown[0])
            continue
        contract = _contract(outs, ref_shapes, tdt)
        if contract is not None:
            cls, msg = contract
            watch.note(cls, f"case {idx}: {msg}")
            res.failed += 1
            _first(res, idx, case, {"message": msg}, cls)
            continue
        arrays = [_fw.output_array(o.detach(), pop.dtype, None) for o in outs]
        verdict = judge.judge([(a, d) for d, a in arrays], with_outputs=True)
        passed = bool(verdict["passed"])
        if passed and deterministic:
            with torch.no_grad():
                again = _outputs(new(*_args(pop, case)))
            if any(not _hacks.same_bits(a.detach(), b.detach()) for a, b in zip(outs, again)
                   if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
                watch.note("nondeterminism", f"case {idx}: two calls on the same inputs differ bitwise")
                passed = False
        # the same output for other inputs: a constant (or an earlier call's result)
        for o in outs[:1]:
            if not isinstance(o, torch.Tensor):
                continue
            key = (tuple(o.shape), str(o.dtype))
            dg = _hacks.digest(o)
            if key in seen_by_shape:
                prev_dg, prev_ref, prev_idx = seen_by_shape[key]
                if prev_dg == dg and prev_ref != ref_dg and not passed:
                    watch.note("stale_output", f"case {idx} returned bitwise the output of case {prev_idx}, whose "
                                               "inputs and reference differ (a result kept from an earlier call)")
            else:
                seen_by_shape[key] = (dg, ref_dg, idx)
        if passed:
            if verdict.get("inconclusive"):
                res.inconclusive += 1
                res.inconclusive_reason = res.inconclusive_reason or f"case {idx}: {verdict.get('message', '')}"
            else:
                res.passed += 1
                if first_pass_index is None:
                    first_pass_index = idx
            continue
        res.failed += 1
        info = {"message": verdict.get("message", ""), "max_error": verdict.get("max_error"),
                "envelope": verdict.get("envelope")}
        info.update(_worst_terms(verdict, terms))
        cls = "numerical"
        if sentinel and _has_nan_where_finite(verdict) and _follows_the_sentinel(pop, new, case, outs):
            cls = "unwritten_output"
            watch.note("unwritten_output", f"case {idx}: output elements hold whatever the candidate's torch.empty "
                                           "buffers started with (NaN, then another sentinel): memory it never wrote")
        elif res.first_failure is None and _is_constant(pop, new, case, outs):
            cls = "constant_output"
            watch.note("constant_output", f"case {idx}: the output stays bitwise the same when the inputs change "
                                          "(the reference does not)")
        _first(res, idx, case, info, cls)
        if cls == "numerical" and "numerical" not in res.failure_classes:
            res.failure_classes.append("numerical")
    if first_pass_index is not None and res.cases > 1:
        try:
            _history(pop, cand, new, first_pass_index, watch, res)
        except Exception as exc:  # the candidate raised on the probe's case: noted, the verdict stands
            res.notes.append(f"the call-history probe could not run: {type(exc).__name__}: {exc}")
    for cls, ev in watch.found.items():
        res.hacks.append({"class": cls, "evidence": ev})
        if cls not in res.failure_classes:
            res.failure_classes.append(cls)
    if res.first_failure and diagnose and res.first_failure.get("class") in ("numerical", None):
        res.first_failure["diagnosis"] = _diagnose(pop, new, res.first_failure["index"])
    if res.failed or res.hacks:
        res.verdict = "failed"
    elif res.inconclusive:
        res.verdict = "inconclusive"
    else:
        res.verdict = "passed"
    res.elapsed_s = round(time.perf_counter() - t0, 3)
    return res


def _history(pop: ProblemOp, cand: Candidate, new: torch.nn.Module, index: int, watch: "_hacks.Watch",
             res: PairResult) -> None:
    """Call history: a case of the same shape as a passing one, other values, run on the instance
    that ran every case and on a fresh one. Failing only on the used one, the candidate's result
    depends on its earlier calls (a cache keyed on the shape, a stale buffer, a captured graph);
    returning the passing case's output bitwise, it returns a stale result."""
    case_a = pop.cases[index][0]
    b = pop.engine.cases(pop.op.name, pop.master_seed ^ 0x5EED, 1, dtypes=[pop.dtype], strategy=pop.strategy,
                         dims={k: [v] for k, v in case_a.dims.items()}, layouts=True, start=index)[0]
    judge_b = pop.engine.case_judge(b)
    with torch.no_grad():
        used = _outputs(new(*_args(pop, b)))
        first = _outputs(new(*_args(pop, case_a)))
    used_ok = _passes(judge_b, used, pop.dtype)
    if used_ok:
        return
    fresh, _note = pop.candidate_module(cand)
    with torch.no_grad():
        fresh_out = _outputs(fresh(*_args(pop, b)))
    if not _passes(judge_b, fresh_out, pop.dtype):
        return  # wrong on a fresh instance too: a plain failure of the case, not of its history
    stale = any(isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and _hacks.same_bits(x.detach(), y.detach())
                for x, y in zip(used, first))
    if stale:
        watch.note("stale_output", f"a case of case {index}'s shape with other values got case {index}'s output back "
                                   "bitwise (a result kept from an earlier call); a fresh instance computes it right")
    else:
        watch.note("call_history", f"a case of case {index}'s shape with other values fails on the instance that ran "
                                   "the run's cases and passes on a fresh one: the result depends on earlier calls")
    res.cases += 1
    res.failed += 1


def _passes(judge: Any, outs: List[Any], dtype: str) -> bool:
    if not all(isinstance(o, torch.Tensor) for o in outs):
        return False
    try:
        arrays = [_fw.output_array(o.detach(), dtype, None) for o in outs]
        return bool(judge.judge([(a, d) for d, a in arrays], with_outputs=False)["passed"])
    except Exception:
        return False


def _has_nan_where_finite(verdict: Dict[str, Any]) -> bool:
    return any(int(o.get("nan_where_finite", 0)) > 0 for o in verdict.get("outputs") or [])


def _worst_terms(verdict: Dict[str, Any], terms: List[Dict[str, Any]]) -> Dict[str, Any]:
    """The worst element of the first failing output, its error and the bound's terms there, named:
    output rounding, the fp32 arithmetic a correct kernel may err by (derived op by op), rounding to
    the case dtype at each op (PyTorch's own in 16 bits), the measuring stick (PyTorch's measured
    error beyond its last rounding)."""
    for k, o in enumerate(verdict.get("outputs") or []):
        if o.get("passed", True) or o.get("worst_index", -1) < 0 or k >= len(terms):
            continue
        ref, got = float(o.get("worst_ref", 0.0)), float(o.get("worst_out", 0.0))
        t = TorchOp.terms_at(terms, k, int(o["worst_index"]), ref)
        return {"worst": {"output": o.get("name"), "coords": o.get("worst_coords"), "got": got, "expected": ref,
                          "difference": abs(got - ref), "bound_terms": t}}
    return {}


def _follows_the_sentinel(pop: ProblemOp, new: torch.nn.Module, case: Any, outs: List[Any]) -> bool:
    """The same call under another sentinel changes exactly what it returned as NaN: those outputs
    are memory the candidate allocated and never wrote."""
    try:
        with torch.no_grad(), _hacks.nan_sentinel(True, SECOND_SENTINEL):
            again = _outputs(new(*_args(pop, case)))
    except Exception:  # the candidate raised on the repeat: no evidence either way
        return False
    for a, b in zip(outs, again):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or a.shape != b.shape:
            continue
        nan = torch.isnan(a.detach().float())
        if bool(nan.any()) and bool((b.detach().float()[nan] == SECOND_SENTINEL).all()):
            return True
    return False


SECOND_SENTINEL = -12288.0  # -3 * 2^12: exact in float32, float16 and bfloat16


def _is_constant(pop: ProblemOp, new: torch.nn.Module, case: Any, outs: List[Any]) -> bool:
    """The call's output bits do not change when every floating input is changed (x -> 2x + 1),
    while the reference's do."""
    args = _args(pop, case)
    moved = [2.0 * a + 1.0 if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]
    if not any(isinstance(a, torch.Tensor) and a.is_floating_point() for a in args):
        return False
    with torch.no_grad():
        try:
            again = _outputs(new(*moved))
            ref_a = _outputs(pop.op._plain(torch.float32)(*[a.cpu().float() if isinstance(a, torch.Tensor) and
                                                            a.is_floating_point() else a for a in args]))
            ref_b = _outputs(pop.op._plain(torch.float32)(*[a.cpu().float() if isinstance(a, torch.Tensor) and
                                                            a.is_floating_point() else a for a in moved]))
        except Exception:
            return False
    same_out = all(isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and _hacks.same_bits(a.detach(), b.detach())
                   for a, b in zip(outs, again))
    ref_moves = any(isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and not torch.equal(a, b)
                    for a, b in zip(ref_a, ref_b))
    return same_out and ref_moves


def _contract(outs: List[Any], ref_shapes: List[Tuple[Tuple[int, ...], str]], tdt: torch.dtype):
    if len(outs) != len(ref_shapes):
        return "wrong_shape", f"{len(outs)} outputs where the reference has {len(ref_shapes)}"
    for k, (o, (shape, dt)) in enumerate(zip(outs, ref_shapes)):
        if not isinstance(o, torch.Tensor):
            return "wrong_shape", f"output {k} is a {type(o).__name__}, not a tensor"
        if tuple(o.shape) != tuple(shape):
            how = " (it only broadcasts to it)" if _broadcasts(tuple(o.shape), tuple(shape)) else ""
            return "wrong_shape", f"output {k} has shape {list(o.shape)}, the reference {list(shape)}{how}"
        want = str(tdt).replace("torch.", "") if dt == "case" else dt
        got = str(o.dtype).replace("torch.", "")
        if got != want:
            return "wrong_dtype", f"output {k} is {got}, the reference {want}"
    return None


def _broadcasts(a: Tuple[int, ...], b: Tuple[int, ...]) -> bool:
    try:
        return torch.broadcast_shapes(a, b) == torch.Size(b)
    except RuntimeError:
        return False


def _first(res: PairResult, idx: int, case: Any, info: Dict[str, Any], cls: str) -> None:
    if res.first_failure is None:
        res.first_failure = {"index": idx, "seed": int(case.seed), "dims": dict(case.dims),
                             "layouts": {k: v for k, v in case.layouts.items() if v != "contiguous"},
                             "class": cls, **{k: v for k, v in info.items() if v is not None}}
    if cls not in ("numerical",) and cls not in res.failure_classes:
        res.failure_classes.append(cls)


def _diagnose(pop: ProblemOp, new: torch.nn.Module, index: int) -> Dict[str, Any]:
    """The engine's diagnosis of a failing case, re-running the candidate on its probes."""
    case = pop.cases[index][0]

    def kernel(c):
        with torch.no_grad():
            out = _outputs(new(*_args(pop, c)))
        return [(a, d) for d, a in (_fw.output_array(o.detach(), pop.dtype, None) for o in out)]
    try:
        outs = kernel(case)
        r = pop.engine.diagnose(case, outs, kernel, dtypes=[pop.dtype], strategy=pop.strategy)
        return dict(r.get("diagnosis", {}))
    except Exception as exc:  # a diagnosis that cannot run says so; the verdict stands
        return {"bug_class": "not_diagnosed", "summary": f"the probes could not run: {type(exc).__name__}: {exc}"}


def judge_pair(problem_path: Any, candidate_path: Any, dtype: str = "float32", cases: int = 100,
               seed: int = KERNELBENCH_SEED, **options: Any) -> PairResult:
    """One candidate against one problem (docs/kernelbench.md). Bad input (a problem that does
    not import, a ModelNew that cannot be built) is a result with ``verdict="error"``."""
    t0 = time.perf_counter()
    try:
        problem = load_problem(problem_path)
        cand = load_candidate(candidate_path)
        pop = ProblemOp(problem, dtype, seed=seed, cases=cases, **_problem_options(options))
    except ValidationError as exc:
        r = PairResult(problem=str(problem_path), candidate=str(candidate_path), dtype=dtype, seed=seed,
                       problem_file=str(problem_path), candidate_file=str(candidate_path), error=str(exc))
        r.elapsed_s = round(time.perf_counter() - t0, 3)
        return r
    return judge_candidate(pop, cand, cases, **_candidate_options(options))


def _problem_options(o: Dict[str, Any]) -> Dict[str, Any]:
    return {k: o[k] for k in ("strategy", "forbid", "allow", "max_elements", "device", "init_seed") if k in o}


def _candidate_options(o: Dict[str, Any]) -> Dict[str, Any]:
    return {k: o[k] for k in ("deterministic", "sentinel", "diagnose") if k in o}
