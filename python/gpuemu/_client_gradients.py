"""``fuzz_op_client_side(..., backward=True)`` (the Client's concern that judges gradients): the forward
run, then ``<op>_backward``'s cases through the kernel's autograd, every input gradient judged by the
backward op's fp64 reference (docs/python.md). gpuemu.client.Client mixes it in."""

from __future__ import annotations

import dataclasses
import secrets
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

from . import _core, errors
from ._client_cases import _present_with
from .inprocess import Failure, FuzzResults, _ReadTracking

# Domains of a backward op's saved inputs that are statistics of the forward's inputs (values.cpp,
# derive_saved), which a kernel's forward recomputes and the backward op's model covers.
_RECOMPUTED_STATISTICS = ("saved_rstd", "saved_mean", "saved_ln_rstd")



class _Gradients:
    """backward=True (a mixin of Client: it makes two client-side runs, ``_fuzz_client_side``)."""

    def _fuzz_with_gradients(self, op: str, run_op: Callable[[Dict[str, Any]], Any], **kw: Any) -> FuzzResults:
        """``fuzz_op_client_side(..., backward=True)``: the forward run, then ``<op>_backward``'s
        cases through ``run_op``'s autograd (:func:`_autograd_kernel`)."""
        kw["framework"] = kw.get("framework") or "torch"  # autograd's: the default for backward=True
        if self._framework(kw["framework"]) != "torch":
            raise errors.ValidationError("backward=True runs the kernel's autograd: it needs framework='torch'")
        bop = f"{op}_backward"
        if bop not in _core.ops():
            raise errors.ValidationError(f"backward=True: op '{op}' has no backward op in the catalogue "
                                         f"(no '{bop}'); ops with one: " +
                                         ", ".join(sorted(o[:-len('_backward')] for o in _core.ops()
                                                          if o.endswith("_backward"))))
        fschema = _core.op_schema(op)
        fwd_inputs = [i["name"] for i in fschema.get("inputs", [])]
        bschema = _core.op_schema(bop)
        # What the backward op takes beyond the forward's inputs: saved statistics (rms_norm's rstd,
        # layer_norm's mean and rstd), which the kernel's own forward recomputes from x and whose
        # recomputation the backward op's error model covers, are left to it. A saved output is the
        # kernel's own forward's under autograd, so the backward op must have a mode that judges
        # from the forward's inputs (its autograd mode, docs/python.md): an optional forward input
        # present only when pinned (softmax_backward's x: the saved y is then derived from it and
        # the reference is the exact forward of it) or saved outputs the case may drop
        # (flash_attention_backward's out and lse, presence "unless_pinned_absent"); the mode's pins
        # go to the backward run. Otherwise the op is refused.
        mode_pins: Dict[str, bool] = {}
        for i in bschema.get("inputs", []):
            if i.get("optional", False) and i.get("presence") == "when_pinned" and i["name"] in fwd_inputs:
                mode_pins[i["name"]] = True
        from_inputs = bool(mode_pins)  # the saved outputs it keeps are derived from pinned inputs
        saved = []
        for i in bschema.get("inputs", []):
            if i["name"] == "grad_out" or i["name"] in fwd_inputs or i.get("domain") in _RECOMPUTED_STATISTICS:
                continue
            if i.get("optional", False) and i.get("presence") == "unless_pinned_absent":
                mode_pins[i["name"]] = False  # the kernel's forward makes its own
            elif not from_inputs:
                saved.append(i["name"])
        if saved:
            raise errors.ValidationError(
                f"backward=True: {bop} takes the forward's saved {', '.join(saved)} beside its inputs, which "
                f"autograd keeps inside the kernel; fuzz the backward kernel itself with "
                f"fuzz_op_client_side('{bop}', ...)")
        b_inputs = [i["name"] for i in bschema.get("inputs", [])]
        optional_fwd = {i["name"] for i in fschema.get("inputs", []) if i.get("optional", False)}
        absent = [i["name"] for i in _core.op_schema(op).get("inputs", [])
                  if i["name"] not in b_inputs and not i.get("optional", False)]
        if absent:
            raise errors.ValidationError(
                f"backward=True: {bop}'s cases do not carry {op}'s {', '.join(absent)} (its gradients do not "
                f"depend on them), so the forward cannot run on them; fuzz the backward kernel itself with "
                f"fuzz_op_client_side('{bop}', ...)")
        grads = []
        zero_leaves = {}  # optional forward inputs the cases lack whose gradient is judged: their spec
        for out in bschema.get("outputs", []):
            name = out["name"]
            wrt = name[len("grad_"):] if name.startswith("grad_") else ""
            if wrt not in fwd_inputs:
                raise errors.ValidationError(f"backward=True: {bop}'s output '{name}' is not the gradient of "
                                             f"an input of {op}")
            if wrt not in b_inputs:
                if wrt not in optional_fwd:
                    raise errors.ValidationError(
                        f"backward=True: {bop} judges the gradient of {op}'s '{wrt}', which its cases do not "
                        f"carry; fuzz the backward kernel itself with fuzz_op_client_side('{bop}', ...)")
                # An optional input (a bias) whose gradient does not depend on its value: a leaf of
                # zeros stands for it, which leaves the forward's output as it is.
                zero_leaves[wrt] = next(i for i in fschema["inputs"] if i["name"] == wrt)
            grads.append((name, wrt, _present_with(bschema, out)))
        present = dict(kw.get("present") or {})
        pinned_off = [name for name in zero_leaves if present.get(name) is False]
        if pinned_off:
            raise errors.ValidationError(
                f"backward=True: {bop} judges the gradient of {op}'s '{pinned_off[0]}', which present= pins "
                f"absent; fuzz the backward kernel itself with fuzz_op_client_side('{bop}', ...)")
        # The two runs' records name the backward run they are part of (the daemon stores it with
        # each run record; `gpuemu report` joins them into one count of cases).
        # Each part is a run of its own (_ClientRun) that carries its part_of.
        run = secrets.token_hex(8)
        forward = self._fuzz_client_side(op, run_op, **kw,
                                         part_of={"part": "forward", "run": run, "gradients_op": bop})
        if kw.get("fail_fast") and not forward.ok:
            return forward
        kernel = _autograd_kernel(run_op, fwd_inputs, grads, b_inputs, zero_leaves, fschema)
        # pins of inputs the backward op's cases carry (a forward-only input's, the bias's, are not
        # its) ... and the autograd mode's own pins (softmax_backward's x present,
        # flash_attention_backward's saved out and lse absent)
        bkw = {**kw, "present": {**{k: v for k, v in present.items() if k in b_inputs}, **mode_pins} or None}
        gradients = self._fuzz_client_side(bop, kernel, **bkw, part_of={"part": "gradients", "run": run, "op": op})
        return _one_case_per_index(forward, gradients, bool(kw.get("fail_fast")))


def _one_case_per_index(forward: FuzzResults, gradients: FuzzResults, fail_fast: bool) -> FuzzResults:
    """The results of a backward=True run: case i is the forward's case i and the gradients' case i
    (both drawn from the same case seed, the master seed's i-th: the same dtype, and the same dims
    where the backward op's schema draws them alike), and it fails when its output or any of its
    gradients failed. Its failure is the forward's (its ``tensors`` then also naming the gradients
    that failed, its message followed by theirs) or, when only gradients failed, the gradients'
    (``tensors``: ``["grad_x"]``, ...). ``total`` is the cases asked for (under ``fail_fast``, the
    cases both parts judged). ``forward`` and ``gradients`` keep each part's own results."""
    total = min(forward.total, gradients.total) if fail_fast else max(forward.total, gradients.total)
    by_index: Dict[int, Failure] = {}
    for f in forward.failures:
        if f.index < total:
            by_index[f.index] = f
    for g in gradients.failures:
        if g.index >= total:
            continue
        f = by_index.get(g.index)
        if f is None:
            by_index[g.index] = g
        else:
            by_index[g.index] = dataclasses.replace(
                f, tensors=list(f.tensors) + [t for t in g.tensors if t not in f.tensors],
                message=f"{f.message}; gradients ({g.id}): {g.message}")
    failures = [by_index[i] for i in sorted(by_index)]
    worst = [(r.worst_ratio, r.worst_index) for r in (forward, gradients) if r.worst_ratio is not None]
    ratio, index = max(worst, key=lambda w: w[0]) if worst else (None, -1)
    return dataclasses.replace(
        forward, total=total, passed=total - len(failures), failures=failures,
        first_failure=failures[0].index if failures else -1, elapsed=forward.elapsed + gradients.elapsed,
        worst_ratio=ratio, worst_index=index, gradients=gradients, forward=forward)


def _zero_leaf(spec: Dict[str, Any], fschema: Dict[str, Any], args: Dict[str, Any]) -> Any:
    """Zeros shaped as the forward's input ``spec``, its dims read off the forward inputs at hand
    (their shapes against their schema shapes, from the last dim), in their dtype and device."""
    import torch

    dims: Dict[str, int] = {}
    like = None
    for s in fschema.get("inputs", []):
        t = args.get(s["name"])
        if not (torch.is_tensor(t) and isinstance(s.get("shape"), list)):
            continue
        like = like if like is not None or not t.is_floating_point() else t
        for name, size in zip(reversed(s["shape"]), reversed(list(t.shape))):
            if isinstance(name, str):
                dims.setdefault(name, int(size))
    shape = [d if isinstance(d, int) else dims[d] for d in spec["shape"]]
    return torch.zeros(shape, dtype=like.dtype, device=like.device, requires_grad=True)


def _autograd_kernel(run_op: Callable[[Dict[str, Any]], Any], fwd_inputs: Sequence[str],
                     grads: Sequence[Tuple[str, str, Optional[str]]], b_inputs: Sequence[str] = (),
                     zero_leaves: Optional[Dict[str, Dict[str, Any]]] = None,
                     fschema: Optional[Dict[str, Any]] = None) -> Callable[[Dict[str, Any]], Any]:
    """A kernel of ``<op>_backward`` made of ``run_op``'s autograd: the forward inputs (as received,
    with their strides) become leaves that require grad, ``run_op`` runs on them and the attrs (not
    on the saved statistics the backward op also takes: the kernel's forward computes its own),
    ``torch.autograd.backward`` takes the case's ``grad_out``, and the leaves' gradients come back
    in the backward op's output order (``grads``: output name, input name, and the optional input
    whose presence the output follows). An optional forward input the cases lack whose gradient is
    judged (``zero_leaves``) is a leaf of zeros. A gradient autograd never reached is returned as
    zeros, and judged."""
    zero_leaves = zero_leaves or {}

    def run(inputs: Dict[str, Any]) -> Any:
        import torch

        leaves: Dict[str, Any] = {}
        args: Dict[str, Any] = {}
        for name, value in dict.items(inputs):  # not a read of every attr: run_op's own reads count
            if name == "grad_out" or (name in b_inputs and name not in fwd_inputs):
                continue  # the upstream gradient, and saved statistics
            if name in fwd_inputs and torch.is_tensor(value) and value.is_floating_point():
                value = value.detach().requires_grad_(True)
                leaves[name] = value
            args[name] = value
        wanted = [(o, i) for o, i, cond in grads if cond is None or inputs.get(cond) is not None]
        for _o, name in wanted:
            if name in zero_leaves and name not in leaves:
                leaves[name] = args[name] = _zero_leaf(zero_leaves[name], fschema or {}, args)
        for name in fwd_inputs:
            args.setdefault(name, None)  # an optional input the case lacks, as PyTorch's weight=None
        if isinstance(inputs, _ReadTracking):  # the attrs run_op reads are varied (fuzz_op_client_side)
            args = _ReadTracking(args, inputs._watched, inputs._reads)
        out = run_op(args)
        first = out[0] if isinstance(out, (tuple, list)) else out
        torch.autograd.backward(first, inputs["grad_out"])
        result = []
        for _out_name, in_name in wanted:
            leaf = leaves[in_name]
            result.append(leaf.grad if leaf.grad is not None else torch.zeros_like(leaf))
        return tuple(result) if len(result) > 1 else result[0]

    run.__wrapped__ = run_op  # type: ignore[attr-defined]  # the kernel's identity (file, line) is run_op's
    return run
