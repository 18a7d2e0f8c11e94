"""The cases of a client-side run and their hand-off (the Client's concern that moves tensors): the
wire's tensors made into framework tensors on the caller's device, the kernel run on one case
(``_run_item``: the output contract, the determinism check, the inputs sent back for the mutation
check), the outputs each case expects from the op's schema. gpuemu.client.Client mixes it in."""

from __future__ import annotations

import traceback
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from . import _core, errors
from . import _frameworks as _fw
from ._client_state import _HandedOut, _OpCatalogue
from .dtypes import to_bits
from .inprocess import _ReadTracking


def _round_bits(values: np.ndarray, dtype: str) -> np.ndarray:
    """Float values rounded once, from their own precision, to bfloat16/fp8 bits."""
    return to_bits(values.astype(np.float64), dtype)


def _output_array(v: Any, want: Optional[str]) -> Tuple[str, np.ndarray]:
    """(gpuemu dtype, contiguous numpy array) of one kernel output; float values for a
    bfloat16/fp8 output are rounded to it here, once."""
    return _fw.output_array(v, want, _round_bits)


def _pristine_copies(inputs: Dict[str, _fw.Input]) -> Dict[str, np.ndarray]:
    """Copies of the received storages a kernel is about to be handed itself (its writes land
    there), taken before it runs: what it left is compared with them afterwards, so an input it
    did not touch need not go back to the daemon."""
    return {n: inp.storage.copy() for n, inp in inputs.items() if not inp.immutable and inp.own is None}


def _wire_input(inp: _fw.Input, key: str, pristine: Optional[np.ndarray] = None) -> Optional[tuple]:
    """The input's storage as the kernel left it, for the daemon's mutation check (None for
    immutable JAX/TensorFlow arrays: nothing to check). Zero copy when the kernel's tensor views
    the received storage. None too when those bytes are the ones received: ``pristine`` (a copy
    taken before the kernel ran), or the received storage itself when the kernel was handed a
    copy of it (a device tensor, decoded bfloat16/fp8 values). Any difference, even one the
    daemon would not count (a NaN's payload, padding between strided elements), sends the input
    back, and the daemon's element-by-element check decides, as it does for every input a
    client sends."""
    if inp.immutable:
        return None
    data = inp.storage
    if inp.own is not None:
        host = inp.host_storage()
        if inp.dtype in _fw.BITS and host.dtype.kind == "f":
            data = to_bits(host.astype(np.float64), inp.dtype)
        else:
            data = np.ascontiguousarray(host)
    received = pristine if pristine is not None else inp.storage if inp.own is not None else None
    if received is not None and _core.same_bytes(received, data):
        return None
    return (key, inp.dtype, inp.shape, inp.strides, inp.offset, data)


def _outputs_of(result: Any) -> List[Any]:
    if isinstance(result, (list, tuple)):
        return list(result)
    return [result]


def _output_present(schema: Dict[str, Any], out: Dict[str, Any], inputs: Any) -> bool:
    """Whether output spec ``out`` of ``schema``'s op is returned for a case holding ``inputs``:
    an output shaped like an optional input exists exactly when that input does."""
    cond = _present_with(schema, out)
    return cond is None or (cond in inputs and inputs[cond] is not None)


def _present_with(schema: Dict[str, Any], out: Dict[str, Any]) -> Optional[str]:
    """The optional input whose presence ``out`` follows (its shape ``like:`` it), or None."""
    spec = out.get("shape")
    if not (isinstance(spec, str) and spec.startswith("like:")):
        return None
    src = next((i for i in schema.get("inputs", []) if i["name"] == spec[5:]), None)
    return spec[5:] if src is not None and src.get("optional", False) else None


@dataclass
class _Batch:
    """A batch of cases as the daemon handed it out: [(case json, {name: _fw.Input})], the master
    seed it was drawn from and, when the request opened a client-side run, that run's id."""

    cases: List[Tuple[Dict[str, Any], Dict[str, _fw.Input]]]
    master_seed: int
    run_id: Optional[str] = None


class _Cases:
    """Batches of cases from the daemon and one kernel run per case (a mixin of Client: it needs
    ``request`` and the Client's state, below, which Client.__init__ makes)."""

    _catalogue: _OpCatalogue  # schemas, torch ops, in-process engines (_client_state.py)
    _cases: _HandedOut  # the cases get_test_batch handed out (_client_state.py)

    @staticmethod
    def _options(dtypes, value_distribution, dims, attrs, layouts, present=None, precision=None,
                 vary_attrs=None) -> Dict[str, Any]:
        o: Dict[str, Any] = {"distribution": value_distribution, "layouts": bool(layouts)}
        if vary_attrs:
            if isinstance(vary_attrs, str) or not all(isinstance(a, str) for a in vary_attrs):
                raise errors.ValidationError(f"vary_attrs must be a list of attr names, got {vary_attrs!r}")
            o["vary_attrs"] = list(vary_attrs)
        if dtypes is not None:
            o["dtypes"] = [dtypes] if isinstance(dtypes, str) else list(dtypes)
        if dims is not None:
            o["dims"] = {k: ([v] if isinstance(v, int) else list(v)) for k, v in dims.items()}
        if attrs is not None:
            o["attrs"] = dict(attrs)
        if present:
            if not isinstance(present, dict) or not all(isinstance(k, str) and isinstance(v, bool)
                                                        for k, v in present.items()):
                raise errors.ValidationError(f"present must map input names to True or False, got {present!r}")
            o["present"] = dict(present)
        if precision:
            if not isinstance(precision, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                          for k, v in precision.items()):
                raise errors.ValidationError(f"precision must map op or family names to policies, got {precision!r}")
            o["precision"] = dict(precision)
        return o

    def _register_torch_op(self, op: Any) -> str:
        """An op object (gpuemu.torch_op) fuzzed through the daemon: its schema travels with every
        request (``custom_op``) and its reference runs here, sent with each item's outputs."""
        for attr in ("name", "schema", "reference", "schema_json", "engine"):
            if not hasattr(op, attr):
                raise errors.ValidationError(f"op must be an op name or a gpuemu.torch_op, got {type(op).__name__}")
        return self._catalogue.register_torch_op(op)

    def _torch_op_params(self, op: str) -> Dict[str, Any]:
        """The params every request about the torch op ``op`` carries: its schema (``custom_op``) and
        its envelope (2 unless the op says otherwise: none of its terms is calibrated). Empty for
        any other op."""
        t = self._catalogue.torch_op(op)
        if t is None:
            return {}
        return {"custom_op": {"name": op, "schema": t.schema_json(), "schema_file": f"<torch_op {op}>"},
                "envelope": {"*": float(t.envelope)}}

    def _supplied_reference(self, op: str, case: Dict[str, Any], inputs: Dict[str, _fw.Input], i: int) -> list:
        """The wire tensors of a torch op's reference for one case (items/<i>/reference/<k>/value,
        c_acc, c_in), computed here from the case's exact inputs before the kernel runs."""
        t = self._catalogue.torch_op(op)
        assert t is not None, op
        exact = {}
        for name, inp in inputs.items():
            x = inp.tensor
            if hasattr(x, "detach"):  # torch
                x = x.detach().cpu()
                exact[name] = (x.double() if x.is_floating_point() else x.long()).numpy()
            else:
                a = np.asarray(x)
                exact[name] = a.astype(np.float64) if a.dtype.kind == "f" else a.astype(np.int64)
        out = []
        for k, parts in enumerate(t.reference(exact, dict(case.get("attrs", {})), dict(case.get("dims", {})),
                                              case["dtype"])):
            for term, arr in zip(("value", "c_acc", "c_in"), parts):
                a = np.ascontiguousarray(arr, dtype=np.float64)
                strides = [st // 8 for st in a.strides] if a.ndim else []
                out.append((f"items/{i}/reference/{k}/{term}", "float64", list(a.shape), strides, 0, a))
        return out

    def _with_absent(self, op: str, case: Dict[str, Any], args: Dict[str, Any]) -> Dict[str, Any]:
        """``args`` plus ``None`` for every input of the op the case left out (an optional input
        arrives under its name as ``None``, as PyTorch's own signatures take ``weight=None``)."""
        for spec in self._schema(op).get("inputs", []):
            args.setdefault(spec["name"], None)
        return args

    def _fetch_batch(self, op, options, seed, start, count, framework, device, keep_wire: bool = False,
                     prefetch: int = 0, digests: bool = True, run: Optional[Dict[str, Any]] = None) -> _Batch:
        """A batch of ``count`` cases from ``start`` (``keep_wire``: see _cases_of; ``prefetch``:
        the daemon generates that many cases after these meanwhile; ``digests``: the cases' JSON
        carries each input's digest, which the daemon hashes every byte for; ``run``: open a
        client-side run in the daemon, whose id the batch then carries)."""
        params = {"op": op, "count": count, "start_index": start, "options": options}
        params.update(self._torch_op_params(op))
        if run is not None:
            params["run"] = run
        if prefetch > 0:
            params["prefetch"] = int(prefetch)
        if not digests:
            params["digests"] = False
        if seed is not None:
            params["seed"] = int(seed)
        res, tens = self.request("get_test_batch", params)
        return _Batch(self._cases_of(res, tens, framework, device, keep_wire), int(res["master_seed"]),
                      res.get("run_id"))

    @staticmethod
    def _cases_of(res, tens, framework, device, keep_wire: bool = False):
        """[(case json, {name: _fw.Input})] of a batch's reply (get_test_batch's, or the ``next``
        of a submit_outputs). ``keep_wire``: each case also carries a private copy of its wire
        inputs under ``case["_wire"]``, from which the same inputs are made again without asking
        the daemon (the determinism check's second run gets inputs no kernel has touched)."""
        out = []
        for i, c in enumerate(res["cases"]):
            inputs = {}
            wire = {}
            for name in c["inputs"]:
                d, shape, strides, offset, storage = tens[f"cases/{i}/{name}"]
                if keep_wire:
                    wire[name] = (d, shape, strides, offset, storage.copy())
                inputs[name] = _fw.make_input(framework, d, shape, strides, offset, storage, device)
            if keep_wire:
                c["_wire"] = wire
            out.append((c, inputs))
        return out

    @staticmethod
    def _framework(framework: Optional[str]) -> str:
        """The framework's name, checked (and imported) now: a missing one is a ValidationError
        naming the package to install."""
        f = framework or "numpy"
        _fw.require(f)
        return f

    def _schema(self, op: str) -> Dict[str, Any]:
        return self._catalogue.schema(op)

    def _expected(self, op: str, case: Dict[str, Any], inputs: Dict[str, _fw.Input]):
        """[(dtype, shape or None)] of the op's outputs for this case (from its schema)."""
        out = []
        for o in self._schema(op).get("outputs", []):
            d = o.get("dtype", "case")
            d = case["dtype"] if d == "case" else d
            spec = o.get("shape")
            shape = None
            if not _output_present(self._schema(op), o, inputs):
                continue  # shaped like an optional input the case lacks (layer_norm_backward's grad_weight)
            if isinstance(spec, str) and spec.startswith("like:") and spec[5:] in inputs:
                shape = list(inputs[spec[5:]].shape)
            elif isinstance(spec, list) and all(isinstance(s, (int, str)) for s in spec):
                dims = case.get("dims", {})
                if all(isinstance(s, int) or s in dims for s in spec):
                    shape = [s if isinstance(s, int) else int(dims[s]) for s in spec]
            out.append((d if isinstance(d, str) and not d.startswith("like:") else None, shape))
        return out

    def _run_item(self, op, run_op, case, inputs, i: int, check_determinism: bool, rebuild,
                  runs_here: bool = True, reads: Optional[set] = None) -> Tuple[dict, list]:
        """Runs the kernel on one case: (item json, wire tensors). ``runs_here``: ``run_op`` is the
        kernel itself, so the inputs it is handed can be copied before it runs (an input that
        comes back unchanged is then not sent); False when it only returns what a kernel already
        made (submit_output). ``reads``: a set the attrs ``run_op`` reads are recorded in."""
        args: Dict[str, Any] = self._with_absent(op, case, {n: inp.tensor for n, inp in inputs.items()})
        args.update(case.get("attrs", {}))
        if reads is not None:
            args = _ReadTracking(args, case.get("attrs", {}).keys(), reads)
        item: Dict[str, Any] = {"case": case}
        tensors = []
        pristine = _pristine_copies(inputs) if runs_here else {}
        try:
            result = run_op(args)
        except Exception:  # noqa: BLE001 (a kernel's exception is a failure of the case)
            item["kernel_error"] = traceback.format_exc()
            return item, tensors
        try:
            expected = self._expected(op, case, inputs)
            values = _outputs_of(result)
            contract = ""
            ranges = [r for r in (_fw.memory_range(inp.tensor) for inp in inputs.values()) if r]
            for k, v in enumerate(values):
                r = _fw.memory_range(v)
                if r and any(lo < r[1] and r[0] < hi for lo, hi in ranges):
                    contract = f"output {k} aliases an input (a kernel must return new memory)"
                    break
            want = [e[0] for e in expected] + [None] * max(0, len(values) - len(expected))
            outs = [] if contract else [_output_array(v, want[k]) for k, v in enumerate(values)]
            if not contract and expected and len(values) != len(expected):
                contract = f"run_op returned {len(values)} outputs, the op has {len(expected)}"
            for k, (d, arr) in enumerate(outs):
                if contract or k >= len(expected):
                    break
                ed, es = expected[k]
                if es is not None and list(arr.shape) != es:
                    contract = f"output {k} has shape {list(arr.shape)}, expected {es}"
                elif ed is not None and d != ed:
                    contract = f"output {k} is {d}, expected {ed}"
            if not contract and check_determinism:
                again_inputs = rebuild()
                args2: Dict[str, Any] = self._with_absent(op, case, {n: inp.tensor for n, inp in again_inputs.items()})
                args2.update(case.get("attrs", {}))
                if reads is not None:
                    args2 = _ReadTracking(args2, case.get("attrs", {}).keys(), reads)
                again = [_output_array(v, want[k]) for k, v in enumerate(_outputs_of(run_op(args2)))]
                for k, ((_, a), (_, b)) in enumerate(zip(outs, again)):
                    if a.tobytes() != b.tobytes():
                        contract = f"nondeterministic: output {k} differs bitwise between two runs"
                        break
        except Exception:  # noqa: BLE001
            item["kernel_error"] = traceback.format_exc()
            return item, tensors
        if contract:
            item["contract_error"] = contract
            return item, tensors
        for k, (d, arr) in enumerate(outs):
            strides = [s // arr.itemsize for s in arr.strides] if arr.ndim else []
            tensors.append((f"items/{i}/outputs/{k}", d, list(arr.shape), strides, 0, arr))
        for name, inp in inputs.items():
            wired = _wire_input(inp, f"items/{i}/inputs/{name}", pristine.get(name))
            if wired is not None:
                tensors.append(wired)
        return item, tensors
