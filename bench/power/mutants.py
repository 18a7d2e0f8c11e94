"""Every catalogue op's mutable control, by op (bench/power/mutants_*.py)."""

from __future__ import annotations

from typing import Dict, List

from bench.power import (mutants_attention, mutants_backward, mutants_elementwise, mutants_gemm, mutants_norm,
                         mutants_reduction)
from bench.power.kernel import MutableKernel

KERNELS: Dict[str, MutableKernel] = {}
for _family in (mutants_elementwise, mutants_reduction, mutants_norm, mutants_gemm, mutants_attention,
                mutants_backward):
    for _op, _k in _family.KERNELS.items():
        assert _op not in KERNELS, f"two mutable controls for {_op}"
        KERNELS[_op] = _k


def uncovered_ops() -> List[str]:
    """Catalogue ops without a mutable control."""
    from gpuemu import ops

    names = sorted(o["name"] if isinstance(o, dict) else str(o) for o in ops())
    return [o for o in names if o not in KERNELS]
