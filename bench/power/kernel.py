"""A mutable control: a correct fp32 implementation of one op whose working precision is degraded
by k at named sites (rounding.Mutation), and what the harness needs to know about it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

from bench.power.rounding import Mutation

Args = Dict[str, Any]
# The kernel's outputs: (tensor with the leading k dim, gpuemu dtype name of the output).
Outputs = List[Tuple[torch.Tensor, str]]


@dataclass(frozen=True)
class MutableKernel:
    """``fn(args, mutation) -> outputs``. ``sites``: site name -> where it sits in the kernel (what
    a real kernel that loses precision there keeps in fewer bits). ``control``: which correct
    implementation it is at k = 1."""

    op: str
    control: str
    sites: Dict[str, str]
    fn: Callable[[Args, Mutation], Outputs]
    # Elements one k slice of the largest intermediate holds (default: the largest input): the
    # harness evaluates the grid in chunks that keep slices x chunk under a memory budget.
    work: Optional[Callable[[Args], int]] = None

    def work_elements(self, args: Args) -> int:
        if self.work is not None:
            return int(self.work(args))
        return max([int(v.numel()) for v in args.values() if isinstance(v, torch.Tensor)] + [1])


def case_dtype(args: Args, name: str) -> str:
    """The gpuemu dtype name of a torch input (float32, float16, bfloat16)."""
    return str(args[name].dtype).replace("torch.", "")


def f32(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.float32)


def optional_f32(t: Any) -> Any:
    return None if t is None else t.to(torch.float32)
