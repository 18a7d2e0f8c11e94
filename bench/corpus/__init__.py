"""gpuemu's evidence corpus: correct and LLM-style buggy GPU kernels, emulated in PyTorch on the CPU.

Each kernel is one module declaring ``OP`` (the gpuemu op it implements), ``DTYPES`` (the dtypes it
supports), ``BUG`` (None for a correct kernel, else the bug class), ``run(inputs) -> tensor``
(``inputs``: every schema input by name as a torch tensor with its real strides, and every attr by
name: what ``gpuemu.fuzz_op_in_process`` hands ``run_op``), and optionally ``ATTRS`` (attrs the
kernel is written for, pinned when fuzzing) and ``VARY_ATTRS`` (attrs drawn from the schema's values
whether the kernel reads them or not; without it a run varies, after its first case, the attrs the
kernel reads, as ``fuzz_op_in_process`` does by default). ``KERNELS`` lists them in a fixed order.

The kernels compute the way a Triton/CUDA kernel does: tiles loaded in the input dtype, fp32 math
per tile, masks, rounding where real kernels round, outputs stored in the input dtype (tiles.py).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

MODULES: Tuple[str, ...] = (
    # correct
    "softmax_two_pass",
    "softmax_online",
    "log_softmax_two_pass",
    "layer_norm_welford",
    "rms_norm_tiled",
    "matmul_tiled",
    "flash_attention_fwd",
    "sum_tiled",
    "cumsum_blocked",
    "gelu_fp32",
    "gelu_tanh_fp32",
    "cross_entropy_online",
    "rope_fp32",
    # buggy
    "softmax_tail_leak",
    "layer_norm_tail_mask",
    "matmul_acc_overwrite",
    "cumsum_carry_overwrite",
    "matmul_lowp_acc",
    "sum_lowp_acc",
    "flash_attention_no_scale",
    "flash_attention_no_rescale",
    "layer_norm_eps_outside",
    "rms_norm_eps_outside",
    "matmul_dropped_k_tail",
    "softmax_assumes_contiguous",
    "rms_norm_assumes_contiguous",
    "softmax_no_max",
    "cross_entropy_no_max",
    "gelu_tanh_wrong_const",
    "rope_theta_fixed",
    "rope_offset_ignored",
    "flash_attention_causal_bottom_right",
)

BUG_CLASSES: Tuple[str, ...] = (
    "tail_mask",
    "accumulator_overwrite",
    "low_precision_accumulator",
    "missing_scale",
    "online_rescale",
    "eps_placement",
    "dropped_tail",
    "stride_assumption",
    "overflow",
    "wrong_constant",
    "position_offset",
    "mask_alignment",
)

# The engine's diagnosis class (gpuemu Diagnosis.bug_class) each corpus bug class must be diagnosed
# as: the engine has one class for accumulators overwritten or kept in low precision, and names a
# dropped tail tile a tail mask; an ignored position offset shows as a wrong constant. None: the
# engine has no class of its own for it (a causal mask aligned to the wrong corner).
DIAGNOSIS: Dict[str, Optional[str]] = {
    "tail_mask": "tail_mask",
    "accumulator_overwrite": "accumulation",
    "low_precision_accumulator": "accumulation",
    "missing_scale": "missing_scale",
    "online_rescale": "online_rescale",
    "eps_placement": "eps_placement",
    "dropped_tail": "tail_mask",
    "stride_assumption": "stride_assumption",
    "overflow": "overflow",
    "wrong_constant": "wrong_constant",
    "position_offset": "wrong_constant",
    "mask_alignment": None,
}


@dataclass(frozen=True)
class CorpusKernel:
    name: str
    op: str
    dtypes: Tuple[str, ...]
    run: Callable[[Dict[str, Any]], Any]
    bug: Optional[str]
    description: str
    attrs: Dict[str, Any] = field(default_factory=dict)
    vary_attrs: Tuple[str, ...] = ()

    @property
    def correct(self) -> bool:
        return self.bug is None

    @property
    def diagnosis(self) -> Optional[str]:
        """The engine's diagnosis class this kernel's failures must get (None when correct)."""
        return DIAGNOSIS[self.bug] if self.bug else None


def _load(name: str) -> CorpusKernel:
    mod = importlib.import_module(f"{__name__}.{name}")
    bug = getattr(mod, "BUG")
    if bug is not None and bug not in BUG_CLASSES:
        raise ValueError(f"corpus kernel {name}: unknown bug class {bug!r}")
    return CorpusKernel(
        name=name,
        op=mod.OP,
        dtypes=tuple(mod.DTYPES),
        run=mod.run,
        bug=bug,
        description=" ".join((mod.__doc__ or "").split()),
        attrs=dict(getattr(mod, "ATTRS", {})),
        vary_attrs=tuple(getattr(mod, "VARY_ATTRS", ())),
    )


KERNELS: List[CorpusKernel] = [_load(n) for n in MODULES]
BY_NAME: Dict[str, CorpusKernel] = {k.name: k for k in KERNELS}


def fuzz(kernel: CorpusKernel, **options: Any):
    """Fuzzes one corpus kernel in-process with its declared dtypes and attrs; ``options`` go to
    ``gpuemu.inprocess.fuzz_op_in_process`` (iterations, value_distribution, seed, ...)."""
    from gpuemu.inprocess import fuzz_op_in_process

    options.setdefault("dtypes", list(kernel.dtypes))
    if kernel.attrs:
        options.setdefault("attrs", dict(kernel.attrs))
    if kernel.vary_attrs:
        options.setdefault("vary_attrs", list(kernel.vary_attrs))
    return fuzz_op_in_process(kernel.op, kernel.run, **options)
