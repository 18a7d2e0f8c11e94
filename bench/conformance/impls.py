"""The implementations a user already trusts, for every op of the catalogue (the Conformance sweep).

For each op: the PyTorch call a user would make (torch 1.13, CPU), in the two styles kernels use —

- ``native``: the op run in the case dtype itself, where torch has a CPU kernel for that dtype
  (what that kernel does inside, e.g. accumulating in fp32, is torch's business);
- ``upcast``: floating inputs cast to float32, the op computed, floating outputs cast back to the
  case dtype ("upcast to fp32, compute, cast back");

and, where torch 1.13 has no such op (rms_norm, rope, SDPA-style attention, decode attention, fp8),
``composition``: the plain fp32 composition a kernel author writes (inputs upcast, fp32 math,
output cast back). For float32 cases the styles coincide and only ``native`` runs. The reductions
and norms also run as single-thread fp32 loops over the row (``LOOP``, a composition): the first
kernel a CUDA author writes.

Every ``fn`` takes what ``run_op`` receives (each input by its schema name as a torch tensor with
the case's real strides, absent optional inputs as ``None``, every attr by name) and returns the
op's output(s).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

ALL_DTYPES: Tuple[str, ...] = ("float32", "float16", "bfloat16")
TORCH_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}

Args = Dict[str, Any]


@dataclass(frozen=True)
class Impl:
    """One trusted implementation of ``op``: ``name`` (what the user calls), ``fn`` (args -> output),
    ``styles`` it runs in (``native``/``upcast``, or ``composition``), the ``dtypes`` it serves."""

    op: str
    name: str
    fn: Callable[[Args], Any]
    styles: Tuple[str, ...] = ("native", "upcast")
    dtypes: Tuple[str, ...] = ALL_DTYPES
    note: str = ""
    # What the implementation declares or needs: a precision policy (TF32 GEMMs), dims it supports
    # (a backend's head sizes), backend flags set around each call.
    precision: Optional[Dict[str, str]] = None
    dims: Optional[Dict[str, List[int]]] = None
    flags: Optional[Callable[[], Any]] = None  # () -> a context manager


@dataclass(frozen=True)
class Variant:
    """An implementation in one style for one case dtype: what the sweep fuzzes."""

    impl: Impl
    style: str
    dtype: str

    @property
    def op(self) -> str:
        return self.impl.op

    @property
    def label(self) -> str:
        return f"{self.impl.name} [{self.style}]"

    def run_op(self) -> Callable[[Args], Any]:
        fn = self.impl.fn
        dt = TORCH_DTYPES.get(self.dtype)
        if self.style == "upcast":
            inner = fn
            fn = lambda args: _cast_outputs(inner(_upcast(args)), dt)  # noqa: E731
        # native: as is; composition: the function upcasts and casts back itself
        flags = self.impl.flags
        if flags is None:
            return fn

        def with_flags(args: Args) -> Any:
            with flags():
                return fn(args)

        return with_flags


def _upcast(args: Args) -> Args:
    return {k: (v.float() if isinstance(v, torch.Tensor) and v.is_floating_point() else v) for k, v in args.items()}


def _cast_outputs(out: Any, dt: torch.dtype) -> Any:
    if isinstance(out, (tuple, list)):
        return type(out)(_cast_outputs(o, dt) for o in out)
    if isinstance(out, torch.Tensor) and out.is_floating_point():
        return out.to(dt)
    return out


# ---------------------------------------------------------------------------------------------
# Compositions of ops torch 1.13 does not have


def _scale(args: Args, d: int) -> float:
    return args["scale"] if args.get("scale") is not None else 1.0 / math.sqrt(d)


def sdpa_fp32(args: Args) -> torch.Tensor:
    """softmax(q @ k^T * scale [+ causal mask, top-left]) @ v, GQA by repeating k and v heads."""
    q, k, v = args["q"].float(), args["k"].float(), args["v"].float()
    h, hkv = q.shape[-3], k.shape[-3]
    if h != hkv:
        k = k.repeat_interleave(h // hkv, dim=-3)
        v = v.repeat_interleave(h // hkv, dim=-3)
    s = (q @ k.transpose(-1, -2)) * _scale(args, q.shape[-1])
    if args.get("causal"):
        lq, lk = s.shape[-2:]
        s = s.masked_fill(torch.ones(lq, lk, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    return (torch.softmax(s, dim=-1) @ v).to(args["q"].dtype)


def decode_attention_fp32(args: Args) -> torch.Tensor:
    """One decode step: q[B,H,D] against the first seq_lens[b] positions of the KV cache."""
    q, kc, vc = args["q"].float(), args["k_cache"].float(), args["v_cache"].float()
    lens = args["seq_lens"].long()
    h, hkv, length = q.shape[1], kc.shape[1], kc.shape[2]
    if h != hkv:
        kc = kc.repeat_interleave(h // hkv, dim=1)
        vc = vc.repeat_interleave(h // hkv, dim=1)
    s = torch.einsum("bhd,bhld->bhl", q, kc) * _scale(args, q.shape[-1])
    masked = torch.arange(length, device=lens.device)[None, :] >= lens[:, None]
    s = s.masked_fill(masked[:, None, :], float("-inf"))
    return torch.einsum("bhl,bhld->bhd", torch.softmax(s, dim=-1), vc).to(args["q"].dtype)


def rms_norm_hf(args: Args) -> torch.Tensor:
    """HF LlamaRMSNorm: fp32 statistics, x_hat cast back to the input dtype, then times weight."""
    x = args["x"]
    xf = x.float()
    y = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + args["eps"])).to(x.dtype)
    return y if args.get("weight") is None else args["weight"] * y


def rms_norm_fp32(args: Args) -> torch.Tensor:
    """fp32 throughout: x * rsqrt(mean(x^2) + eps) * weight, cast back once."""
    x = args["x"]
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + args["eps"])
    if args.get("weight") is not None:
        y = y * args["weight"].float()
    return y.to(x.dtype)


def _rope_angles(args: Args, length: int, d: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """HF's cache: inv_freq and positions in fp32, angles = outer(t, inv_freq), cos/sin in fp32."""
    dev = args["x"].device
    inv_freq = 1.0 / (args["theta"] ** (torch.arange(0, d, 2, dtype=torch.float32, device=dev) / d))
    t = torch.arange(length, dtype=torch.float32, device=dev) + float(args["offset"])
    freqs = torch.outer(t, inv_freq)  # [L, D/2]
    return freqs.cos(), freqs.sin()


def rope_hf(args: Args) -> torch.Tensor:
    """HF apply_rotary_pos_emb (style half: rotate_half) or GPT-J's interleaved pairs, cos/sin
    cast to the input dtype as HF's module does, products and sums in the input dtype."""
    x = args["x"]
    length, d = x.shape[1], x.shape[-1]
    cos, sin = _rope_angles(args, length, d)
    if args["style"] == "interleaved":
        c = cos[None, :, None, :].to(x.dtype)
        s = sin[None, :, None, :].to(x.dtype)
        x1, x2 = x[..., 0::2], x[..., 1::2]
        return torch.stack((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1).flatten(-2)
    c = torch.cat((cos, cos), dim=-1)[None, :, None, :].to(x.dtype)
    s = torch.cat((sin, sin), dim=-1)[None, :, None, :].to(x.dtype)
    rot = torch.cat((-x[..., d // 2:], x[..., : d // 2]), dim=-1)
    return x * c + rot * s


def rope_fp32(args: Args) -> torch.Tensor:
    """The same rotation computed in fp32 and cast back once (vLLM-style fused kernels)."""
    x = args["x"]
    xf = x.float()
    length, d = x.shape[1], x.shape[-1]
    cos, sin = _rope_angles(args, length, d)
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    if args["style"] == "interleaved":
        x1, x2 = xf[..., 0::2], xf[..., 1::2]
        out = torch.stack((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1).flatten(-2)
    else:
        x1, x2 = xf[..., : d // 2], xf[..., d // 2:]
        out = torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)
    return out.to(x.dtype)


def _rope_backward(rope: Callable[[Args], torch.Tensor]) -> Callable[[Args], torch.Tensor]:
    """PyTorch's autograd through a rope composition (x's values do not enter the gradient: zeros)."""
    def fn(args: Args) -> torch.Tensor:
        g = args["grad_out"]
        x = torch.zeros(g.shape, dtype=g.dtype, device=g.device, requires_grad=True)
        rope({**args, "x": x}).backward(g)
        return x.grad
    return fn


def fp8_quantize_fp32(args: Args) -> Any:
    """clamp(x / scale, -448, 448) in fp32, then the cast to float8_e4m3fn (round to nearest even;
    torch 1.13 has no fp8 dtype, so the cast is gpuemu.dtypes.to_bits, docs/dtypes.md)."""
    from gpuemu.dtypes import to_bits

    q = torch.clamp(args["x"].float() / args["scale"].float(), -448.0, 448.0)
    return (to_bits(q.double().cpu().numpy(), "float8_e4m3fn"), "float8_e4m3fn")


def scaled_fp8_matmul_fp32(args: Args) -> torch.Tensor:
    """(a @ b) * scale_a * scale_b with fp32 accumulation over the e4m3 values, cast to out_dtype."""
    a, b = args["a"].float(), args["b"].float()
    out = (a @ b) * (args["scale_a"].float() * args["scale_b"].float())
    return out.to(TORCH_DTYPES[args["out_dtype"]])


# ---------------------------------------------------------------------------------------------
# Single-thread loops: one thread per row, an fp32 running sum in row order (the kernel a CUDA
# author writes first, and what PyTorch's strided vector_norm does). Correct kernels whose error
# over rows of near-equal terms grows like the row length (docs/error-model.md, "Correlated
# rounding"). Vectorised over the other rows; the reduced dim is walked one element at a time.


def _running(x: torch.Tensor, term: Callable[[torch.Tensor], torch.Tensor] = lambda v: v,
             keep: bool = False) -> Any:
    """fp32 running sum of term(x[..., k]) over the last dim, k = 0, 1, ...; with ``keep``, every
    prefix (a scan) as well."""
    acc = torch.zeros(x.shape[:-1], dtype=torch.float32, device=x.device)
    prefixes = []
    for k in range(x.shape[-1]):
        acc = acc + term(x[..., k])
        if keep:
            prefixes.append(acc)
    return (acc, torch.stack(prefixes, -1)) if keep else acc


def _rows(args: Args) -> Tuple[torch.Tensor, int]:
    return args["x"].float().movedim(args["dim"], -1), args["dim"]


def _reduced(r: torch.Tensor, args: Args) -> torch.Tensor:
    return (r.unsqueeze(args["dim"]) if args.get("keepdim") else r).to(args["x"].dtype)


def sum_loop(args: Args) -> torch.Tensor:
    x, _ = _rows(args)
    return _reduced(_running(x), args)


def mean_loop(args: Args) -> torch.Tensor:
    x, _ = _rows(args)
    return _reduced(_running(x) / x.shape[-1], args)


def cumsum_loop(args: Args) -> torch.Tensor:
    x, dim = _rows(args)
    return _running(x, keep=True)[1].movedim(-1, dim).to(args["x"].dtype)


def l2norm_loop(args: Args) -> torch.Tensor:
    x, dim = _rows(args)
    norm = _running(x, lambda v: v * v).sqrt().clamp_min(args["eps"])
    return (x / norm.unsqueeze(-1)).movedim(-1, dim).to(args["x"].dtype)


def _exp_sum(x: torch.Tensor, lse: bool = False) -> Tuple[torch.Tensor, torch.Tensor]:
    """The row max m and the running sum of exp(x - m). softmax keeps torch's semantics (a +inf
    or an all -inf row gives NaN); logsumexp's shifts an infinite max to 0 as torch.logsumexp does."""
    m = x.amax(-1, keepdim=True)
    if lse:
        m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    return m, _running(x - m, torch.exp)


def logsumexp_loop(args: Args) -> torch.Tensor:
    x, _ = _rows(args)
    m, s = _exp_sum(x, lse=True)
    return _reduced(s.log() + m.squeeze(-1), args)


def softmax_loop(args: Args) -> torch.Tensor:
    x, dim = _rows(args)
    m, s = _exp_sum(x)
    return (torch.exp(x - m) / s.unsqueeze(-1)).movedim(-1, dim).to(args["x"].dtype)


def log_softmax_loop(args: Args) -> torch.Tensor:
    x, dim = _rows(args)
    m, s = _exp_sum(x)
    return (x - m - s.log().unsqueeze(-1)).movedim(-1, dim).to(args["x"].dtype)


def softmax_backward_fp32(args: Args) -> torch.Tensor:
    g, y, dim = args["grad_out"].float(), args["y"].float(), args["dim"]
    return (y * (g - (g * y).sum(dim, keepdim=True))).to(args["grad_out"].dtype)


def log_softmax_backward_fp32(args: Args) -> torch.Tensor:
    g, y, dim = args["grad_out"].float(), args["y"].float(), args["dim"]
    return (g - torch.exp(y) * g.sum(dim, keepdim=True)).to(args["grad_out"].dtype)


def rms_norm_backward_autograd(args: Args) -> Tuple[torch.Tensor, torch.Tensor]:
    """PyTorch's autograd through the fp32 forward x * rsqrt(mean(x^2) + eps) * w (rstd recomputed
    by the forward, as autograd saves it), the gradients cast back."""
    x = args["x"].float().detach().requires_grad_(True)
    w = args["weight"].float().detach().requires_grad_(True)
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + args["eps"]) * w
    y.backward(args["grad_out"].float())
    return x.grad.to(args["x"].dtype), w.grad.to(args["weight"].dtype)


def rms_norm_backward_fp32(args: Args) -> Tuple[torch.Tensor, torch.Tensor]:
    """A Triton-style backward with the saved rstd: fp32 math, one rounding per output."""
    g, x, w = args["grad_out"].float(), args["x"].float(), args["weight"].float()
    rstd = args["rstd"].float()[:, None]
    xh, wg = x * rstd, w * g
    gx = rstd * (wg - xh * (wg * xh).mean(-1, keepdim=True))
    return gx.to(args["x"].dtype), (g * xh).sum(0).to(args["weight"].dtype)


def _ln_leaves(args: Args, dtype: Optional[torch.dtype] = None):
    """x, weight and a zero bias as autograd leaves (in ``dtype``, else as given); the bias's values
    do not enter the gradients. No weight: (x, None, None)."""
    x = args["x"].detach()
    x = (x.to(dtype) if dtype else x).requires_grad_(True)
    if args.get("weight") is None:
        return x, None, None
    w = args["weight"].detach()
    w = (w.to(dtype) if dtype else w).requires_grad_(True)
    return x, w, torch.zeros(w.shape[0], dtype=w.dtype, device=w.device, requires_grad=True)


def _ln_grads(x, w, b):
    return (x.grad, w.grad, b.grad) if w is not None else x.grad


def layer_norm_backward_autograd(args: Args) -> Any:
    """PyTorch's autograd through F.layer_norm(x, [N], weight, bias, eps) in the case dtype (native)
    or upcast: its forward recomputes mean and rstd (the case's saved ones are not used)."""
    x, w, b = _ln_leaves(args)
    F.layer_norm(x, [x.shape[-1]], w, b, args["eps"]).backward(args["grad_out"])
    return _ln_grads(x, w, b)


def layer_norm_backward_native(args: Args) -> Any:
    """torch.ops.aten.native_layer_norm_backward (what autograd calls) with the case's saved mean and
    rstd, as [R, 1] in the dtype the device's forward saves them in: x's dtype on the CPU (torch 1.13's
    CPU kernel: a bf16 forward saves them in bf16), fp32 on CUDA (its kernel takes the accumulate type
    and refuses half statistics)."""
    x, w = args["x"], args["weight"]
    sd = torch.float32 if x.is_cuda else x.dtype
    mean, rstd = args["mean"].to(sd)[:, None], args["rstd"].to(sd)[:, None]
    affine = w is not None
    bias = torch.zeros_like(w) if affine else None
    gx, gw, gb = torch.ops.aten.native_layer_norm_backward(args["grad_out"], x, [x.shape[-1]], mean, rstd, w, bias,
                                                           [True, affine, affine])
    return (gx, gw, gb) if affine else gx


def layer_norm_backward_fp32(args: Args) -> Any:
    """A Triton-style backward with the saved mean and rstd (the Triton tutorial's): fp32 math,
    x_hat = (x - mean) * rstd, grad_x = (w*g - (x_hat * c1 + c2)) * rstd, grad_weight and grad_bias
    as column sums over the rows; one rounding per output."""
    g, x = args["grad_out"].float(), args["x"].float()
    w = args["weight"].float() if args.get("weight") is not None else None
    mean, rstd = args["mean"].float()[:, None], args["rstd"].float()[:, None]
    xh = (x - mean) * rstd
    wg = g * w if w is not None else g
    c1 = (xh * wg).sum(-1, keepdim=True) / x.shape[-1]
    c2 = wg.sum(-1, keepdim=True) / x.shape[-1]
    gx = ((wg - (xh * c1 + c2)) * rstd).to(args["x"].dtype)
    if w is None:
        return gx
    dt = args["weight"].dtype
    return gx, (g * xh).sum(0).to(dt), g.sum(0).to(dt)


def matmul_backward_autograd(args: Args) -> Tuple[torch.Tensor, torch.Tensor]:
    """PyTorch's autograd through a @ b, in the case dtype (native) or upcast."""
    a = args["a"].detach().requires_grad_(True)
    b = args["b"].detach().requires_grad_(True)
    (a @ b).backward(args["grad_out"])
    return a.grad, b.grad


def linear_backward_autograd(args: Args) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """PyTorch's autograd through F.linear(x, weight, bias), in the case dtype (native) or upcast;
    the bias's values do not enter the gradients (zeros)."""
    x = args["x"].detach().requires_grad_(True)
    w = args["weight"].detach().requires_grad_(True)
    b = torch.zeros(w.shape[0], dtype=w.dtype, device=w.device, requires_grad=True)
    F.linear(x, w, b).backward(args["grad_out"])
    return x.grad, w.grad, b.grad


def embedding_backward_autograd(args: Args) -> torch.Tensor:
    """PyTorch's autograd through F.embedding(indices, weight) (embedding_dense_backward), in the case
    dtype (native) or upcast; the weight's values do not enter the gradient (zeros)."""
    g = args["grad_out"]
    w = torch.zeros(args["num_weights"], g.shape[-1], dtype=g.dtype, device=g.device, requires_grad=True)
    F.embedding(args["indices"], w).backward(g)
    return w.grad


def cross_entropy_backward_autograd(args: Args) -> torch.Tensor:
    """PyTorch's autograd through F.cross_entropy (log_softmax, then nll_loss and the smoothing term),
    in the case dtype (native) or upcast."""
    x = args["logits"].detach().requires_grad_(True)
    F.cross_entropy(x, args["target"], ignore_index=args["ignore_index"], reduction=args["reduction"],
                    label_smoothing=args["label_smoothing"]).backward(args["grad_out"])
    return x.grad


def cross_entropy_backward_fused_fp32(args: Args) -> torch.Tensor:
    """The fused kernels' formula (Liger, Apex xentropy): k * (softmax(x) - q) per row in fp32, 0 on
    ignored rows, one rounding at the end; k is grad_out[i] per row for reduction 'none'."""
    x, t = args["logits"].float(), args["target"]
    keep = t != args["ignore_index"]
    s, C = args["label_smoothing"], x.shape[-1]
    q = torch.full_like(x, s / C)
    rows = keep.nonzero()[:, 0]
    q[rows, t[rows]] += 1.0 - s
    n = int(keep.sum()) if args["reduction"] == "mean" else 1
    k = args["grad_out"].float() / n
    if args["reduction"] == "none":
        k = k[:, None]  # one upstream gradient per row
    return (k * (torch.softmax(x, -1) - q) * keep[:, None]).to(args["logits"].dtype)

def flash_attention_backward_sdpa(args: Args) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """PyTorch's autograd through torch 1.13's SDPA (torch._scaled_dot_product_attention_math: no
    scale argument and no GQA there, F.scaled_dot_product_attention arrived in 2.0), in the case dtype
    (native) or upcast. Under torch 1.13 (no scale argument, no GQA) a scale other than 1/sqrt(D) is
    folded into q (q * scale * sqrt(D), in the graph: in the case dtype when native, which rounds q) and
    GQA is a repeat_interleave of k and v (its backward sums each group); torch 2 takes both as arguments. The saved out and lse
    are not read: autograd recomputes them."""
    q = args["q"].detach().requires_grad_(True)
    k = args["k"].detach().requires_grad_(True)
    v = args["v"].detach().requires_grad_(True)
    h, hkv, d = q.shape[-3], k.shape[-3], q.shape[-1]
    if torch.__version__.startswith("1."):  # (q, k, v, attn_mask, dropout_p, need_attn_weights, is_causal)
        kk, vv = (k.repeat_interleave(h // hkv, dim=-3), v.repeat_interleave(h // hkv, dim=-3)) if h != hkv else (k, v)
        qq = q
        if args.get("scale") is not None:
            qq = q * (args["scale"] * math.sqrt(d))
        out, _ = torch._scaled_dot_product_attention_math(qq, kk, vv, None, 0.0, False, bool(args.get("causal")))
    else:  # torch 2: (q, k, v, attn_mask, dropout_p, is_causal, dropout_mask, *, scale, enable_gqa). The
        # scale and GQA go in as arguments: a fold of the scale into q in the case dtype rounds q itself
        # (evidence/gpu/classify_sdpa_math_backward.py: that rounding alone fails the fp32 math).
        out, _ = torch._scaled_dot_product_attention_math(q, k, v, None, 0.0, bool(args.get("causal")), None,
                                                          scale=args.get("scale"), enable_gqa=h != hkv)
    out.backward(args["grad_out"])
    return q.grad, k.grad, v.grad


def flash_attention_backward_fp32(args: Args) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """PyTorch's autograd through softmax(q @ k^T * scale [+ causal mask]) @ v in fp32 (sdpa_fp32's
    composition), cast back once."""
    dt = args["q"].dtype
    leaves = {n: args[n].detach().float().requires_grad_(True) for n in ("q", "k", "v")}
    sdpa_fp32({**args, **leaves}).backward(args["grad_out"].float())
    return leaves["q"].grad.to(dt), leaves["k"].grad.to(dt), leaves["v"].grad.to(dt)


def flash_attention_backward_fa2_fp32(args: Args) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """FlashAttention-2's backward formulas in fp32 with the saved out and (natural-log) lse:
    P = exp(s - lse), dV = P^T dO, dP = dO V^T, D = rowsum(dO * out), dS = P (dP - D), dQ = scale dS K,
    dK = scale dS^T Q; grad_k and grad_v summed over each GQA group; cast back once."""
    dt = args["q"].dtype
    q, k, v = args["q"].float(), args["k"].float(), args["v"].float()
    g, o, lse = args["grad_out"].float(), args["out"].float(), args["lse"].float()
    h, hkv, d = q.shape[-3], k.shape[-3], q.shape[-1]
    grp = h // hkv
    kk, vv = (k.repeat_interleave(grp, dim=-3), v.repeat_interleave(grp, dim=-3)) if grp > 1 else (k, v)
    sc = _scale(args, d)
    s = (q @ kk.transpose(-1, -2)) * sc
    if args.get("causal"):
        lq, lk = s.shape[-2:]
        s = s.masked_fill(torch.ones(lq, lk, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    p = torch.exp(s - lse[..., None])
    dv = p.transpose(-1, -2) @ g
    ds = p * (g @ vv.transpose(-1, -2) - (g * o).sum(-1, keepdim=True))
    dq = (ds @ kk) * sc
    dk = (ds.transpose(-1, -2) @ q) * sc
    if grp > 1:
        dk = dk.unflatten(-3, (hkv, grp)).sum(-3)
        dv = dv.unflatten(-3, (hkv, grp)).sum(-3)
    return dq.to(dt), dk.to(dt), dv.to(dt)


def swiglu_backward_autograd(args: Args) -> Tuple[torch.Tensor, torch.Tensor]:
    """PyTorch's autograd through F.silu(gate) * up, in the case dtype (native) or upcast."""
    gate = args["gate"].detach().requires_grad_(True)
    up = args["up"].detach().requires_grad_(True)
    (F.silu(gate) * up).backward(args["grad_out"])
    return gate.grad, up.grad


def _affine(y: torch.Tensor, args: Args) -> torch.Tensor:
    if args.get("weight") is not None:
        y = y * args["weight"].float()
    if args.get("bias") is not None:
        y = y + args["bias"].float()
    return y.to(args["x"].dtype)


def rms_norm_loop(args: Args) -> torch.Tensor:
    x = args["x"].float()
    ms = _running(x, lambda v: v * v) / x.shape[-1]
    return _affine(x * torch.rsqrt(ms + args["eps"]).unsqueeze(-1), args)


def layer_norm_loop(args: Args) -> torch.Tensor:
    x = args["x"].float()
    n = x.shape[-1]
    mu = (_running(x) / n).unsqueeze(-1)
    var = _running(x - mu, lambda d: d * d) / n
    return _affine((x - mu) * torch.rsqrt(var + args["eps"]).unsqueeze(-1), args)


LOOP = "single-thread fp32 loop over the row"


def _conv_kwargs(args: Args) -> Dict[str, Any]:
    return {"stride": tuple(args["stride"]), "padding": tuple(args["padding"]),
            "dilation": tuple(args["dilation"]), "groups": int(args["groups"])}


# ---------------------------------------------------------------------------------------------
# The table

COMPOSITION = ("composition",)

IMPLS: Tuple[Impl, ...] = (
    Impl("add", "a + b", lambda a: a["a"] + a["b"]),
    Impl("mul", "a * b", lambda a: a["a"] * a["b"]),
    Impl("amax", "torch.amax", lambda a: torch.amax(a["x"], dim=a["dim"], keepdim=a["keepdim"])),
    Impl("argmax", "torch.argmax", lambda a: torch.argmax(a["x"], dim=a["dim"], keepdim=a["keepdim"])),
    Impl("batch_norm", "F.batch_norm(training=False)",
         lambda a: F.batch_norm(a["x"], a["running_mean"], a["running_var"], a["weight"], a["bias"],
                                training=False, eps=a["eps"])),
    Impl("bmm", "torch.bmm", lambda a: torch.bmm(a["a"], a["b"])),
    Impl("conv1d", "F.conv1d", lambda a: F.conv1d(a["x"], a["weight"], a["bias"], **_conv_kwargs(a))),
    Impl("conv2d", "F.conv2d", lambda a: F.conv2d(a["x"], a["weight"], a["bias"], **_conv_kwargs(a))),
    Impl("cross_entropy", "F.cross_entropy",
         lambda a: F.cross_entropy(a["logits"], a["target"], ignore_index=a["ignore_index"],
                                   reduction=a["reduction"], label_smoothing=a["label_smoothing"])),
    Impl("cumsum", "torch.cumsum", lambda a: torch.cumsum(a["x"], dim=a["dim"])),
    Impl("decode_attention", "softmax(q.k^T * scale) @ v over seq_lens", decode_attention_fp32, COMPOSITION),
    Impl("elu", "F.elu", lambda a: F.elu(a["x"], alpha=a["alpha"])),
    Impl("embedding", "F.embedding", lambda a: F.embedding(a["indices"], a["weight"]), ("native",)),
    Impl("exp", "torch.exp", lambda a: torch.exp(a["x"])),
    Impl("flash_attention", "softmax(q @ k^T * scale) @ v (SDPA math)", sdpa_fp32, COMPOSITION),
    Impl("fp8_quantize", "clamp(x / scale, -448, 448).to(e4m3fn)", fp8_quantize_fp32, COMPOSITION),
    Impl("geglu", "F.gelu(gate) * up", lambda a: F.gelu(a["gate"], approximate=a["approximate"]) * a["up"]),
    Impl("gelu", "F.gelu", lambda a: F.gelu(a["x"], approximate=a["approximate"])),
    Impl("group_norm", "F.group_norm",
         lambda a: F.group_norm(a["x"], a["num_groups"], a["weight"], a["bias"], a["eps"])),
    Impl("l2norm", "F.normalize", lambda a: F.normalize(a["x"], p=2.0, dim=a["dim"], eps=a["eps"])),
    Impl("layer_norm", "F.layer_norm",
         lambda a: F.layer_norm(a["x"], (a["x"].shape[-1],), a["weight"], a["bias"], a["eps"])),
    Impl("leaky_relu", "F.leaky_relu", lambda a: F.leaky_relu(a["x"], a["negative_slope"])),
    Impl("linear", "F.linear", lambda a: F.linear(a["x"], a["weight"], a["bias"])),
    Impl("log", "torch.log", lambda a: torch.log(a["x"])),
    Impl("log_softmax", "torch.log_softmax", lambda a: torch.log_softmax(a["x"], dim=a["dim"])),
    Impl("logsumexp", "torch.logsumexp", lambda a: torch.logsumexp(a["x"], dim=a["dim"], keepdim=a["keepdim"])),
    Impl("matmul", "a @ b", lambda a: a["a"] @ a["b"]),
    Impl("mean", "torch.mean", lambda a: torch.mean(a["x"], dim=a["dim"], keepdim=a["keepdim"])),
    Impl("relu", "torch.relu", lambda a: torch.relu(a["x"])),
    Impl("rms_norm", "HF LlamaRMSNorm (x_hat cast back, then * weight)", rms_norm_hf, COMPOSITION),
    Impl("rms_norm", "x * rsqrt(mean(x^2) + eps) * weight in fp32", rms_norm_fp32, COMPOSITION),
    Impl("rope", "HF apply_rotary_pos_emb (cos/sin in the input dtype)", rope_hf, COMPOSITION),
    Impl("rope", "rotation in fp32, cast back once", rope_fp32, COMPOSITION),
    Impl("rope_backward", "autograd through HF apply_rotary_pos_emb (cos/sin in the input dtype)", _rope_backward(rope_hf),
         COMPOSITION),
    Impl("rope_backward", "autograd through the rotation in fp32, cast back once", _rope_backward(rope_fp32), COMPOSITION),
    Impl("rsqrt", "torch.rsqrt", lambda a: torch.rsqrt(a["x"])),
    Impl("scaled_fp8_matmul", "(a @ b) * scale_a * scale_b in fp32", scaled_fp8_matmul_fp32, COMPOSITION,
         ("float8_e4m3fn",)),
    Impl("sigmoid", "torch.sigmoid", lambda a: torch.sigmoid(a["x"])),
    Impl("silu", "F.silu", lambda a: F.silu(a["x"])),
    Impl("softmax", "torch.softmax", lambda a: torch.softmax(a["x"], dim=a["dim"])),
    # softmax's autograd backward. Autograd passes the output softmax saved, which is contiguous;
    # torch 1.13's CPU kernel computes wrong values for an output in another layout than grad_out's
    # (evidence/conformance/backward.md; tests/python/test_backward.py keeps that failing), so
    # the output is passed as autograd passes it.
    Impl("softmax_backward", "torch._softmax_backward_data (y contiguous, as autograd saves it)",
         lambda a: torch._softmax_backward_data(a["grad_out"], a["y"].contiguous(), a["dim"], a["y"].dtype)),
    Impl("log_softmax_backward", "torch._log_softmax_backward_data (log_softmax's autograd backward)",
         lambda a: torch._log_softmax_backward_data(a["grad_out"], a["y"], a["dim"], a["y"].dtype)),
    Impl("matmul_backward", "autograd through a @ b", matmul_backward_autograd),
    Impl("linear_backward", "autograd through F.linear(x, weight, bias)", linear_backward_autograd),
    Impl("layer_norm_backward", "autograd through F.layer_norm(x, [N], weight, bias, eps)",
         layer_norm_backward_autograd),
    Impl("layer_norm_backward", "torch.ops.aten.native_layer_norm_backward (the saved mean and rstd)",
         layer_norm_backward_native),
    # grad_out made contiguous: torch 1.13's CPU erf-form kernel reads a transposed grad_out against
    # a contiguous x wrongly (probe_backward_bf16.py; tests/python/test_backward.py keeps it caught).
    Impl("embedding_backward", "autograd through F.embedding(indices, weight)", embedding_backward_autograd),
    Impl("cross_entropy_backward", "autograd through F.cross_entropy", cross_entropy_backward_autograd),
    Impl("cross_entropy_backward", "k * (softmax(x) - q) in fp32 (fused kernels' formula)",
         cross_entropy_backward_fused_fp32, COMPOSITION),
    Impl("gelu_backward", "torch.ops.aten.gelu_backward (F.gelu's autograd backward), grad_out contiguous",
         lambda a: torch.ops.aten.gelu_backward(a["grad_out"].contiguous(), a["x"], approximate=a["approximate"])),
    Impl("silu_backward", "torch.ops.aten.silu_backward (F.silu's autograd backward)",
         lambda a: torch.ops.aten.silu_backward(a["grad_out"], a["x"])),
    Impl("swiglu_backward", "autograd through F.silu(gate) * up", swiglu_backward_autograd),
    Impl("flash_attention_backward", "autograd through torch._scaled_dot_product_attention_math (torch 1.13's SDPA)",
         flash_attention_backward_sdpa),
    Impl("flash_attention_backward", "autograd through softmax(q @ k^T * scale) @ v in fp32", flash_attention_backward_fp32,
         COMPOSITION),
    Impl("flash_attention_backward", "FA2's formulas with the saved out and lse (P = exp(s - lse)) in fp32",
         flash_attention_backward_fa2_fp32, COMPOSITION),
    Impl("softplus", "F.softplus", lambda a: F.softplus(a["x"], beta=a["beta"], threshold=a["threshold"])),
    Impl("sqrt", "torch.sqrt", lambda a: torch.sqrt(a["x"])),
    Impl("sum", "torch.sum", lambda a: torch.sum(a["x"], dim=a["dim"], keepdim=a["keepdim"])),
    Impl("swiglu", "F.silu(gate) * up", lambda a: F.silu(a["gate"]) * a["up"]),
    Impl("tanh", "torch.tanh", lambda a: torch.tanh(a["x"])),
    # The single-thread loops (see above): compositions, after each op's PyTorch implementation.
    Impl("sum", LOOP, sum_loop, COMPOSITION),
    Impl("mean", LOOP, mean_loop, COMPOSITION),
    Impl("cumsum", LOOP, cumsum_loop, COMPOSITION),
    Impl("l2norm", LOOP, l2norm_loop, COMPOSITION),
    Impl("logsumexp", LOOP, logsumexp_loop, COMPOSITION),
    Impl("softmax", LOOP, softmax_loop, COMPOSITION),
    Impl("log_softmax", LOOP, log_softmax_loop, COMPOSITION),
    Impl("layer_norm_backward", "(w*g - (x_hat * c1 + c2)) * rstd with the saved mean and rstd, in fp32 (Triton's)",
         layer_norm_backward_fp32, COMPOSITION),
    Impl("rms_norm_backward", "autograd through x * rsqrt(mean(x^2) + eps) * w in fp32", rms_norm_backward_autograd,
         COMPOSITION),
    Impl("rms_norm_backward", "rstd * (w*g - x_hat * mean(w*g*x_hat)) with the saved rstd, in fp32",
         rms_norm_backward_fp32, COMPOSITION),
    Impl("softmax_backward", "y * (g - sum(g * y)) in fp32, as Triton's softmax backward", softmax_backward_fp32,
         COMPOSITION),
    Impl("log_softmax_backward", "g - exp(y) * sum(g) in fp32", log_softmax_backward_fp32, COMPOSITION),
    Impl("rms_norm", LOOP, rms_norm_loop, COMPOSITION),
    Impl("layer_norm", LOOP, layer_norm_loop, COMPOSITION),
)


def variants(ops: Optional[Sequence[str]] = None, dtypes: Optional[Sequence[str]] = None,
             device: str = "cpu") -> List[Variant]:
    """Every (implementation, style, dtype) of the table, in table order, for the schema's dtypes;
    on ``device="cuda"`` also the CUDA-only implementations of impls_cuda.py."""
    from gpuemu import op_schema

    table = IMPLS
    if device != "cpu":
        from bench.conformance.impls_cuda import CUDA_IMPLS

        table = IMPLS + CUDA_IMPLS
    out: List[Variant] = []
    for impl in table:
        if ops and impl.op not in ops:
            continue
        schema_dtypes = op_schema(impl.op)["dtypes"]
        for dt in impl.dtypes:
            if dt not in schema_dtypes or (dtypes and dt not in dtypes):
                continue
            for style in impl.styles:
                if style == "upcast" and dt == "float32":
                    continue
                out.append(Variant(impl, style, dt))
    return out


def varied_attrs(op: str) -> List[str]:
    """The attrs the sweep varies: every attr whose schema lists values."""
    from gpuemu import op_schema

    return [name for name, a in op_schema(op).get("attrs", {}).items() if a.get("values")]


def catalogue_ops() -> List[str]:
    from gpuemu import ops

    return sorted(o["name"] if isinstance(o, dict) else str(o) for o in ops())


def uncovered_ops() -> List[str]:
    """Catalogue ops with no implementation in the table (the sweep fails on any)."""
    covered = {i.op for i in IMPLS}
    return [o for o in catalogue_ops() if o not in covered]
