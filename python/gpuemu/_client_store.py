"""The daemon's other services through the Client (its concern that is not a run): stored failures
(list, get, reproduce, minimize), calibration and the PTX/SASS lint. gpuemu.client.Client mixes it in."""

from __future__ import annotations

import os
import warnings
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

from . import _frameworks as _fw
from ._client_cases import _round_bits
from ._client_runs import _kernel_identity
from .inprocess import _Kernel


class _Services:
    """Stored failures, calibration and lint (a mixin of Client)."""

    def failures(self, op: Optional[str] = None, limit: Optional[int] = None) -> List[Dict[str, Any]]:
        params: Dict[str, Any] = {"action": "list"}
        if op:
            params["op"] = op
        if limit:
            params["limit"] = int(limit)
        res = self.request("failures", params)[0]
        if res.get("truncated"):
            warnings.warn(f"listed the newest {res.get('count')} of {res.get('matching')} stored failures (a reply "
                          "holds at most 12 MiB): pass op= or limit=", RuntimeWarning, stacklevel=2)
        return res.get("failures", [])

    def failure(self, failure_id: str, snapshot: bool = False) -> Dict[str, Any]:
        return self.request("failures", {"action": "get", "id": failure_id, "snapshot": snapshot})[0]

    def reproduce(self, failure_id: str, run_op: Optional[Callable] = None,
                  framework: Optional[str] = None, device: Optional[str] = None) -> Dict[str, Any]:
        """Replays a stored failure. The daemon regenerates the case from its seed and compares it
        with the stored bytes (``regenerated_identical``); a daemon-side kernel is rerun there. A
        client-side kernel is rerun here when ``run_op`` is given: ``verdict`` is then its
        judgement on the stored inputs."""
        res, tens = self.request("reproduce", {"id": failure_id})
        if run_op is not None:
            fw = self._framework(framework)
            case = res["case"]
            inputs = {}
            for name in case["inputs"]:
                d, shape, strides, offset, storage = tens[f"inputs/{name}"]
                inputs[name] = _fw.make_input(fw, d, shape, strides, offset, storage, device)
            meta = self.failure(failure_id)
            params = {"op": case["op"], "options": meta.get("options", {}), "kernel": _kernel_identity(run_op),
                      "store": False}
            # a torch op made here: its reference is computed here; one made by another client has
            # only its schema stored, and the daemon says where its reference lives
            held = self._torch_op_params(case["op"])
            supplied = self._supplied_reference(case["op"], case, inputs, 0) if held else []
            params.update(held or ({"custom_op": meta["custom_op"]} if "custom_op" in meta else {}))
            item, t = self._run_item(case["op"], run_op, case, inputs, 0, False, None)
            params["items"] = [item]
            sub, _ = self.request("submit_outputs", params, list(t) + supplied)
            v = sub["results"][0]
            res["verdict"] = v
            res["passed"] = v["passed"]
            res["message"] = v.get("message", "")
            res["max_error"] = v.get("max_error")
        return res

    def minimize(self, failure_id: str, run_op: Optional[Callable] = None, max_evaluations: int = 200,
                 framework: Optional[str] = None, device: Optional[str] = None) -> Dict[str, Any]:
        """Shrinks a stored failure to the smallest failing case (``summary``, ``dims``,
        ``transforms``, ``evaluations``, the minimized ``case``). A failure of a kernel the daemon
        runs (built-in or script) is minimized there, and the result stored (``minimized_id``). A
        client-side kernel's failure needs ``run_op``: the case is regenerated here from its seed
        and the in-process engine re-runs ``run_op`` on smaller variants of it."""
        if run_op is None:
            return self.request("minimize", {"id": failure_id, "max_evaluations": int(max_evaluations)})[0]
        fw = self._framework(framework)
        meta = self.failure(failure_id)
        op = meta["op"]
        o = meta.get("options", {})
        kw = {"dtypes": o.get("dtypes") or None, "strategy": o.get("distribution", "adversarial"),
              "dims": o.get("dims") or None, "attrs": o.get("attrs") or None,
              "vary_attrs": o.get("vary_attrs") or None, "layouts": bool(o.get("layouts", True)),
              "present": o.get("present") or None, "precision": o.get("precision") or None}

        def want(cc: Any) -> List[Optional[str]]:
            return [e[0] for e in self._expected(op, {"dtype": cc.dtype, "dims": dict(cc.dims)}, {})]

        kernel = _Kernel(run_op, fw, device, numpy_bits=False, round_bits=_round_bits, want=want)
        with self._catalogue.engine_lock:  # the Client's engine, its envelope set for this failure
            engine = self._local_engine(op)
            case = engine.case_from_seed(op, int(meta["seed"]), **kw)
            if meta.get("envelope"):
                engine.set_envelope(op, case.dtype, float(meta["envelope"]))
            res = engine.minimize(case, kernel, dims=kw["dims"], layouts=kw["layouts"],
                                  max_evaluations=int(max_evaluations), present=kw["present"],
                                  precision=kw["precision"])
        if kernel.abort is not None:
            raise kernel.abort
        res["id"] = failure_id
        return res

    def calibrate(self, op: str, dtypes: Optional[Sequence[str]] = None, cases: int = 200,
                  seed: Optional[int] = None, apply: bool = True) -> Dict[str, Any]:
        params: Dict[str, Any] = {"op": op, "cases": int(cases), "apply": apply}
        if dtypes is not None:
            params["dtypes"] = [dtypes] if isinstance(dtypes, str) else list(dtypes)
        if seed is not None:
            params["seed"] = int(seed)
        return self.request("calibrate", params)[0]

    def lint(self, paths: Union[str, os.PathLike, Sequence[Union[str, os.PathLike]]],
             arch: Optional[Union[str, Sequence[str]]] = None) -> Dict[str, Any]:
        ps = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
        params: Dict[str, Any] = {"paths": [os.path.abspath(str(p)) for p in ps]}
        if arch is not None:
            params["arches"] = [arch] if isinstance(arch, str) else list(arch)
        return self.request("lint", params)[0]
