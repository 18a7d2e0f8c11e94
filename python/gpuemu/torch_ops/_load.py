"""A torch op named in a project file: ``FILE.py:NAME`` (docs/torch-ops.md, "In gpuemu.toml").

NAME is a :class:`~gpuemu.TorchOp` the file makes when imported (``OP = gpuemu.torch_op(...)``) or
a function of no arguments that returns one. The file is user code: it is imported as a script
kernel's is, its directory first on ``sys.path`` so that its sibling modules import."""

import importlib.util
import inspect
import os
import sys
from typing import Any

from ..errors import ValidationError


def is_torch_op(obj: Any) -> bool:
    return all(hasattr(obj, a) for a in ("name", "schema", "schema_json", "reference"))


def load_torch_op(script: str, name: str) -> Any:
    """The torch op ``name`` of the file ``script``; ValidationError when it is something else."""
    path = os.path.abspath(script)
    if not os.path.isfile(path):
        raise ValidationError(f"no file {path} (the torch op's FILE.py)")
    directory = os.path.dirname(path)
    if directory not in sys.path:
        sys.path.insert(0, directory)
    stem = os.path.splitext(os.path.basename(path))[0]
    module_name = stem if stem.isidentifier() and stem not in sys.modules else "gpuemu_torch_op_module"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ValidationError(f"cannot load {path} as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    obj: Any = module
    for part in name.split("."):
        if not hasattr(obj, part):
            raise ValidationError(f"{path} has no '{name}' (a gpuemu.torch_op, or a function returning one)")
        obj = getattr(obj, part)
    if not is_torch_op(obj) and inspect.isfunction(obj):  # a factory (a class is not one)
        obj = obj()
    if not is_torch_op(obj):
        raise ValidationError(f"'{name}' in {path} is a {type(obj).__name__}, not a gpuemu.torch_op "
                              "(write NAME = gpuemu.torch_op(...), or a function of no arguments returning one)")
    return obj
