"""Problems and candidates in KernelBench's format, loaded as untrusted code.

A problem file holds ``Model`` (an ``nn.Module``), ``get_inputs()``, ``get_init_inputs()`` and its
sizes as module-level integer constants; a candidate file holds ``ModelNew``, built from the same
init inputs. Every failure to load (a syntax error, an import that fails, a missing name, a
``ModelNew`` whose constructor does not take the problem's init inputs) is a ``ValidationError``
naming the file and what is wrong, with the traceback's last lines.
"""

from __future__ import annotations

import importlib.util
import inspect
import math
import re
import sys
import traceback
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import torch

from ..errors import ValidationError

REAL_INPUT_ELEMENTS = 1 << 24  # get_inputs() is called for real when its inputs are at most this big


def _tail(tb: str, lines: int = 6) -> str:
    return "\n".join(tb.rstrip().splitlines()[-lines:])


def _load_module(path: Path, kind: str) -> Any:
    if not path.is_file():
        raise ValidationError(f"{kind} {path}: no such file")
    name = f"gpuemu_kb_{kind}_{re.sub(r'[^A-Za-z0-9_]', '_', path.stem)}_{uuid.uuid4().hex[:8]}"
    spec = importlib.util.spec_from_file_location(name, str(path))
    if spec is None or spec.loader is None:
        raise ValidationError(f"{kind} {path}: not a Python file")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses and pickling look modules up by name
    try:
        spec.loader.exec_module(mod)
    except BaseException as exc:  # SystemExit and KeyboardInterrupt from a file are its errors too
        sys.modules.pop(name, None)
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise ValidationError(f"{kind} {path} does not import: {type(exc).__name__}: {exc}\n"
                              f"{_tail(traceback.format_exc())}") from None
    return mod


@dataclass
class Problem:
    path: Path
    name: str
    Model: type
    get_inputs: Callable[[], List[Any]]
    get_init_inputs: Callable[[], List[Any]]
    constants: Dict[str, int] = field(default_factory=dict)  # module-level int constants (sizes)


@dataclass
class Candidate:
    path: Path
    name: str
    ModelNew: type


def load_problem(path: Any) -> Problem:
    p = Path(path)
    mod = _load_module(p, "problem")
    missing = [n for n in ("Model", "get_inputs", "get_init_inputs") if not hasattr(mod, n)]
    if missing:
        raise ValidationError(f"problem {p}: no {', '.join(missing)} (a KernelBench problem defines Model, "
                              "get_inputs and get_init_inputs)")
    if not (inspect.isclass(mod.Model) and issubclass(mod.Model, torch.nn.Module)):
        raise ValidationError(f"problem {p}: Model is not an nn.Module class")
    for n in ("get_inputs", "get_init_inputs"):
        if not callable(getattr(mod, n)):
            raise ValidationError(f"problem {p}: {n} is not a function")
    consts = {k: int(v) for k, v in vars(mod).items()
              if not k.startswith("_") and isinstance(v, int) and not isinstance(v, bool) and v > 1}
    return Problem(path=p, name=p.stem, Model=mod.Model, get_inputs=mod.get_inputs,
                   get_init_inputs=mod.get_init_inputs, constants=consts)


def load_candidate(path: Any) -> Candidate:
    p = Path(path)
    mod = _load_module(p, "candidate")
    if not hasattr(mod, "ModelNew"):
        raise ValidationError(f"candidate {p}: no ModelNew (a KernelBench candidate defines class ModelNew)")
    if not (inspect.isclass(mod.ModelNew) and issubclass(mod.ModelNew, torch.nn.Module)):
        raise ValidationError(f"candidate {p}: ModelNew is not an nn.Module class")
    return Candidate(path=p, name=p.stem, ModelNew=mod.ModelNew)


def call_user(what: str, fn: Callable[..., Any], *args: Any) -> Any:
    """Runs user code; its exception becomes a ValidationError saying what was being done."""
    try:
        return fn(*args)
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise ValidationError(f"{what} raised {type(exc).__name__}: {exc}\n{_tail(traceback.format_exc())}") from None


# --- get_inputs() at the problem's sizes, without allocating them ---------------------------------

_FACTORIES = ("rand", "randn", "randint", "zeros", "ones", "empty", "full", "arange", "rand_like", "randn_like",
              "ones_like", "zeros_like", "randperm", "tensor")


@contextmanager
def _meta_factories(ranges: List[Tuple[int, int]]) -> Iterator[None]:
    """torch's factories make meta tensors (shapes and dtypes, no memory) while get_inputs runs at
    the problem's sizes; randint records its range."""
    saved = {n: getattr(torch, n) for n in _FACTORIES if hasattr(torch, n)}

    def meta(fn_name):
        orig = saved[fn_name]

        def f(*args, **kwargs):
            if fn_name == "randint":
                lo, hi = (0, args[0]) if len(args) >= 2 and not isinstance(args[1], (tuple, list, torch.Size)) \
                    and len(args) == 2 else (args[0], args[1]) if len(args) >= 3 else (0, args[0])
                ranges.append((int(lo), int(hi) - 1))
            if fn_name == "tensor":
                return orig(*args, **kwargs)
            kwargs["device"] = "meta"
            return orig(*args, **kwargs)
        return f
    try:
        for n in saved:
            setattr(torch, n, meta(n))
        yield
    finally:
        for n, f in saved.items():
            setattr(torch, n, f)


def example_inputs(problem: Problem, seed: int) -> Tuple[List[Any], List[Tuple[int, int]], bool]:
    """(inputs, randint ranges, real): get_inputs()'s inputs, for real when small enough, else as
    meta tensors of the problem's shapes (the ranges its randint calls drew from)."""
    ranges: List[Tuple[int, int]] = []
    with _meta_factories(ranges):
        torch.manual_seed(seed)
        meta = call_user(f"problem {problem.path}: get_inputs()", problem.get_inputs)
    if not isinstance(meta, (list, tuple)):
        raise ValidationError(f"problem {problem.path}: get_inputs() returned a {type(meta).__name__}, not a list")
    total = sum(math.prod(t.shape) for t in meta if isinstance(t, torch.Tensor))
    if total <= REAL_INPUT_ELEMENTS:
        torch.manual_seed(seed)
        real = call_user(f"problem {problem.path}: get_inputs()", problem.get_inputs)
        return list(real), ranges, True
    return list(meta), ranges, False
