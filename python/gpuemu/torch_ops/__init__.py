"""Ops from PyTorch code: the schema inferred, the fp64 reference and its error bounds derived op by
op (docs/torch-ops.md)."""

from ._bounds import UnsupportedOpError, evaluate
from ._op import TorchOp, torch_op

__all__ = ["TorchOp", "UnsupportedOpError", "evaluate", "torch_op"]
