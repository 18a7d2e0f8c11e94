"""What a Client keeps between calls (docs/python.md, "Runs and threads"), each piece one object with
its own lock, shared by every thread that uses the Client:

- :class:`_OpCatalogue`: what the client knows of ops — schemas read here, the ``gpuemu.torch_op``
  ops registered through it, the in-process engine that diagnoses and minimizes (one per torch op
  beside the plain one) and the lock under which that engine is used.
- :class:`_HandedOut`: the cases ``get_test_batch`` handed out, each kept with the batch it came
  from, so ``submit_output`` judges an output against the very case its batch handed out.

What belongs to one run is not here: a client-side run is a ``_ClientRun`` (_client_runs.py), made by
``fuzz_op_client_side`` and passed along, never an attribute of the Client.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from . import _core, errors
from . import _frameworks as _fw


class _OpCatalogue:
    """Per-client knowledge of ops: schemas (the catalogue's, or a registered torch op's), torch
    ops, and the in-process engines. Safe to use from several threads."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._schemas: Dict[str, Dict[str, Any]] = {}
        self._torch_ops: Dict[str, Any] = {}  # name -> gpuemu.torch_op
        self._engine: Optional[Any] = None  # _core.Engine, made when first needed
        self._op_engines: Dict[str, Any] = {}  # torch op name -> the engine with it in its catalogue
        # The in-process engine's envelopes are set per diagnosis (set_envelope, then diagnose):
        # its users hold this lock across both, so two runs' diagnoses do not judge with each
        # other's envelope.
        self.engine_lock = threading.RLock()

    def schema(self, op: str) -> Dict[str, Any]:
        """The op's schema as this process knows it ({} for an op only the daemon knows: it then
        judges alone)."""
        with self._lock:
            if op in self._schemas:
                return self._schemas[op]
        try:
            from ._reference import op_schema

            schema = op_schema(op)
        except Exception:  # noqa: BLE001 (an op only the daemon knows)
            schema = {}
        with self._lock:
            return self._schemas.setdefault(op, schema)

    def register_torch_op(self, op: Any) -> str:
        """Registers a ``gpuemu.torch_op`` (its schema travels with every request about it); its name."""
        with self._lock:
            if self._torch_ops.get(op.name) is not op:
                self._op_engines.pop(op.name, None)  # another op of that name: its engine is made again
            self._schemas[op.name] = op.schema
            self._torch_ops[op.name] = op
        return op.name

    def torch_op(self, op: str) -> Optional[Any]:
        """The torch op registered under ``op``, or None."""
        with self._lock:
            return self._torch_ops.get(op)

    def engine(self, op: Optional[str] = None) -> Any:
        """The in-process engine (with the torch op ``op`` in its catalogue, when it is one). Use
        it under ``engine_lock``."""
        with self._lock:
            if self._engine is None:
                self._engine = _core.Engine()
            t = self._torch_ops.get(op) if op else None
            if t is None:
                return self._engine
            if op not in self._op_engines:
                self._op_engines[op] = t.engine(self._engine)
            return self._op_engines[op]


@dataclass
class _HandedOutCase:
    """A case ``get_test_batch`` handed out: the case as the daemon sent it, the options its batch
    was drawn under, the inputs made from it, and the dict of tensors handed to the caller."""

    case: Dict[str, Any]
    options: Dict[str, Any]
    inputs: Dict[str, _fw.Input]
    handed: Dict[str, Any]

    def as_tuple(self) -> Tuple[Dict[str, Any], Dict[str, Any], Dict[str, _fw.Input]]:
        return self.case, self.options, self.inputs

    def holds(self, inputs: Dict[str, Any]) -> bool:
        """Whether ``inputs`` (what the caller passed to submit_output) are this case's: the dict
        handed out itself, or a dict holding one of the very tensors handed out."""
        if inputs is self.handed:
            return True
        mine = [inp.tensor for inp in self.inputs.values()]
        return any(any(v is t for t in mine) for v in inputs.values() if v is not None)


class _HandedOut:
    """The cases get_test_batch handed out, by (op, case seed). A case seed identifies a case within
    one set of options; two batches of one op drawn from the same seed under other options (other
    dtypes, dims, ...) hand out different cases under the same case seed, and both are kept."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cases: Dict[Tuple[str, int], List[_HandedOutCase]] = {}

    def add(self, op: str, handed: _HandedOutCase) -> None:
        key = (op, int(handed.case["seed"]))
        with self._lock:
            kept = [h for h in self._cases.get(key, []) if h.options != handed.options]
            self._cases[key] = kept + [handed]  # the same case fetched again replaces the one before

    def find(self, op: str, seed: int, inputs: Optional[Dict[str, Any]]) -> _HandedOutCase:
        """The case of ``op`` with case seed ``seed`` that ``inputs`` came from (the latest one
        handed out when there is only one, or ``inputs`` names none of several)."""
        with self._lock:
            found = list(self._cases.get((op, int(seed)), []))
        if not found:
            raise errors.NotFoundError(f"no case with seed {seed} of {op!r} was fetched by this client "
                                       "(call get_test_batch first)")
        if len(found) == 1:
            return found[0]
        if isinstance(inputs, dict):
            mine = [h for h in found if h.holds(inputs)]
            if mine:
                return mine[-1]
        dtypes = ", ".join(repr(h.case.get("dtype")) for h in found)
        raise errors.ValidationError(
            f"case seed {seed} of {op!r} was handed out by {len(found)} batches drawn under other options "
            f"({dtypes}): pass the case's inputs (case['inputs']) to submit_output to say which case this "
            "output is for")

    def __getitem__(self, key: Tuple[str, int]) -> Tuple[Dict[str, Any], Dict[str, Any], Dict[str, _fw.Input]]:
        """(case, options, inputs) of the case handed out last under ``key`` = (op, case seed)."""
        with self._lock:
            found = self._cases.get((key[0], int(key[1])))
            if not found:
                raise KeyError(key)
            return found[-1].as_tuple()

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return bool(self._cases.get(key))  # type: ignore[call-overload]

    def clear(self) -> None:
        with self._lock:
            self._cases.clear()
