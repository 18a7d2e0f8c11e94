"""gpuemu's GPU corpus: Triton kernels written the way kernel authors write them (the Triton
tutorials' softmax, layer norm, matmul and fused attention are the model: one program per row or
tile, masks on the tails, strides passed in, fp32 accumulators, ``tl.dot``, online softmax), each
correct kernel beside the LLM-style bugs of the Detection classes.

Every wrapper takes what ``fuzz_op_client_side`` hands ``run_op`` (each input by its schema name
as a CUDA tensor with the case's real strides, every attr by name) and returns the op's output.
A bug is one line away from its correct kernel: a ``tl.constexpr`` flag selects it, so each
variant compiles to its own kernel exactly as the mutated source would.

Runs only where Triton and a CUDA GPU are (scripts/gpu/run.sh); evidence/gpu/corpus.md has the table.
"""

from __future__ import annotations

import math
from typing import Any, Dict

import torch
import triton
import triton.language as tl

Args = Dict[str, Any]
NEG_INF = tl.constexpr(float("-inf"))


def _warps(block: int) -> int:
    return 4 if block <= 2048 else (8 if block <= 8192 else 16)


def _rows(x: torch.Tensor, dim: int) -> torch.Tensor:
    """The [R, N] view whose rows are reduced: x itself for dim -1/1, its transpose for dim 0."""
    return x if dim in (-1, 1) else x.t()


def _unrows(y: torch.Tensor, dim: int) -> torch.Tensor:
    return y if dim in (-1, 1) else y.t()


# -----------------------------------------------------------------------------------------------
# Softmax / log_softmax


@triton.jit
def softmax_row_kernel(X, Y, N, sxr, sxc, syr, syc, BLOCK: tl.constexpr, TAIL_ZERO: tl.constexpr,
                       CONTIGUOUS_ASSUMED: tl.constexpr):
    """The tutorial's fused softmax: the whole row in one block (BLOCK = next_pow2(N))."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    if CONTIGUOUS_ASSUMED:  # bug: the row stride is taken to be N and the column stride 1
        ptrs = X + row * N + cols
    else:
        ptrs = X + row * sxr + cols * sxc
    if TAIL_ZERO:  # bug: the padded lanes read 0.0 instead of -inf, so exp(0 - max) joins the sum
        x = tl.load(ptrs, mask=cols < N, other=0.0).to(tl.float32)
    else:
        x = tl.load(ptrs, mask=cols < N, other=NEG_INF).to(tl.float32)
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    y = num / tl.sum(num, axis=0)
    tl.store(Y + row * syr + cols * syc, y.to(Y.dtype.element_ty), mask=cols < N)


@triton.jit
def online_softmax_kernel(X, Y, N, sxr, sxc, syr, syc, BLOCK: tl.constexpr, LOG: tl.constexpr,
                          NO_RESCALE: tl.constexpr):
    """Two passes over the row in BLOCK chunks: per-lane running max and rescaled sum, then the
    normalised output (softmax, or log_softmax with LOG)."""
    row = tl.program_id(0)
    cols0 = tl.arange(0, BLOCK)
    m = tl.full([BLOCK], NEG_INF, tl.float32)
    s = tl.zeros([BLOCK], tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + cols0
        x = tl.load(X + row * sxr + cols * sxc, mask=cols < N, other=NEG_INF).to(tl.float32)
        m_new = tl.maximum(m, x)
        safe = m_new != NEG_INF
        alpha = tl.where(safe, tl.exp(m - m_new), 0.0)
        p = tl.where(safe, tl.exp(x - m_new), 0.0)
        if NO_RESCALE:  # bug: the running sum is not rescaled when the running max grows
            s = s + p
        else:
            s = s * alpha + p
        m = m_new
    row_max = tl.max(m, axis=0)
    s = tl.sum(tl.where(m != NEG_INF, s * tl.exp(m - row_max), 0.0), axis=0)
    log_s = tl.log(s)
    for start in range(0, N, BLOCK):
        cols = start + cols0
        x = tl.load(X + row * sxr + cols * sxc, mask=cols < N, other=0.0).to(tl.float32)
        if LOG:
            y = x - row_max - log_s
        else:
            y = tl.exp(x - row_max) / s
        tl.store(Y + row * syr + cols * syc, y.to(Y.dtype.element_ty), mask=cols < N)


def softmax(a: Args, tail_zero: bool = False, contiguous_assumed: bool = False) -> torch.Tensor:
    x = _rows(a["x"], a["dim"])
    r, n = x.shape
    y = torch.empty((r, n), dtype=x.dtype, device=x.device)
    block = triton.next_power_of_2(n)
    softmax_row_kernel[(r,)](x, y, n, x.stride(0), x.stride(1), y.stride(0), y.stride(1), BLOCK=block,
                             TAIL_ZERO=tail_zero, CONTIGUOUS_ASSUMED=contiguous_assumed,
                             num_warps=_warps(block))
    return _unrows(y, a["dim"])


def online_softmax(a: Args, log: bool = False, no_rescale: bool = False) -> torch.Tensor:
    x = _rows(a["x"], a["dim"])
    r, n = x.shape
    y = torch.empty((r, n), dtype=x.dtype, device=x.device)
    online_softmax_kernel[(r,)](x, y, n, x.stride(0), x.stride(1), y.stride(0), y.stride(1), BLOCK=1024,
                                LOG=log, NO_RESCALE=no_rescale, num_warps=4)
    return _unrows(y, a["dim"])


# -----------------------------------------------------------------------------------------------
# Norms


@triton.jit
def layer_norm_kernel(X, Y, W, B, N, sxr, sxc, syr, syc, eps, BLOCK: tl.constexpr,
                      ONE_PASS_VAR: tl.constexpr, CONTIGUOUS_ASSUMED: tl.constexpr):
    """The tutorial's layer norm forward: mean, then variance of (x - mean), then the output."""
    row = tl.program_id(0)
    if CONTIGUOUS_ASSUMED:  # bug: rows are taken to be N apart, columns adjacent
        X = X + row * N
        sxc = 1
    else:
        X = X + row * sxr
    cols0 = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], tl.float32)
    acc2 = tl.zeros([BLOCK], tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + cols0
        x = tl.load(X + cols * sxc, mask=cols < N, other=0.0).to(tl.float32)
        acc += x
        acc2 += x * x
    mean = tl.sum(acc, axis=0) / N
    if ONE_PASS_VAR:  # bug: E[x^2] - E[x]^2 in fp32 cancels catastrophically when |mean| >> std
        var = tl.sum(acc2, axis=0) / N - mean * mean
    else:
        acc = tl.zeros([BLOCK], tl.float32)
        for start in range(0, N, BLOCK):
            cols = start + cols0
            x = tl.load(X + cols * sxc, mask=cols < N, other=0.0).to(tl.float32)
            d = tl.where(cols < N, x - mean, 0.0)
            acc += d * d
        var = tl.sum(acc, axis=0) / N
    rstd = 1 / tl.sqrt(var + eps)
    for start in range(0, N, BLOCK):
        cols = start + cols0
        mask = cols < N
        x = tl.load(X + cols * sxc, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(W + cols, mask=mask).to(tl.float32)
        b = tl.load(B + cols, mask=mask).to(tl.float32)
        y = (x - mean) * rstd * w + b
        tl.store(Y + row * syr + cols * syc, y.to(Y.dtype.element_ty), mask=mask)


def layer_norm(a: Args, one_pass_var: bool = False, contiguous_assumed: bool = False) -> torch.Tensor:
    x, w, b = a["x"], a["weight"].contiguous(), a["bias"].contiguous()
    r, n = x.shape
    y = torch.empty((r, n), dtype=x.dtype, device=x.device)
    block = min(4096, triton.next_power_of_2(n))
    layer_norm_kernel[(r,)](x, y, w, b, n, x.stride(0), x.stride(1), y.stride(0), y.stride(1), a["eps"],
                            BLOCK=block, ONE_PASS_VAR=one_pass_var, CONTIGUOUS_ASSUMED=contiguous_assumed,
                            num_warps=_warps(block))
    return y


@triton.jit
def rms_norm_kernel(X, Y, W, N, sxr, sxc, syr, syc, eps, BLOCK: tl.constexpr, MEAN_OVER_BLOCK: tl.constexpr):
    """Llama's RMSNorm, the whole row in one block: x * rsqrt(mean(x^2) + eps) * w, fp32 inside."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(X + row * sxr + cols * sxc, mask=mask, other=0.0).to(tl.float32)
    if MEAN_OVER_BLOCK:  # bug: the mean divides by the padded block, not by N
        ms = tl.sum(x * x, axis=0) / BLOCK
    else:
        ms = tl.sum(x * x, axis=0) / N
    rstd = 1 / tl.sqrt(ms + eps)
    w = tl.load(W + cols, mask=mask).to(tl.float32)
    tl.store(Y + row * syr + cols * syc, (x * rstd * w).to(Y.dtype.element_ty), mask=mask)


def rms_norm(a: Args, mean_over_block: bool = False) -> torch.Tensor:
    x, w = a["x"], a["weight"].contiguous()
    r, n = x.shape
    y = torch.empty((r, n), dtype=x.dtype, device=x.device)
    block = triton.next_power_of_2(n)
    rms_norm_kernel[(r,)](x, y, w, n, x.stride(0), x.stride(1), y.stride(0), y.stride(1), a["eps"],
                          BLOCK=block, MEAN_OVER_BLOCK=mean_over_block, num_warps=_warps(block))
    return y


# -----------------------------------------------------------------------------------------------
# Matmul


@triton.jit
def matmul_kernel(A, B, C, M, N, K, sam, sak, sbk, sbn, scm, scn, BLOCK_M: tl.constexpr,
                  BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PRECISION: tl.constexpr,
                  OVERWRITE: tl.constexpr, LOW_ACC: tl.constexpr):
    """The tutorial's tiled matmul (without the grouped ordering): fp32 accumulator, masked K tail."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    if LOW_ACC:  # bug: the accumulator is kept in the input dtype
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=A.dtype.element_ty)
    else:
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + offs_k
        a = tl.load(A + offs_m[:, None] * sam + ks[None, :] * sak,
                    mask=(offs_m[:, None] < M) & (ks[None, :] < K), other=0.0)
        b = tl.load(B + ks[:, None] * sbk + offs_n[None, :] * sbn,
                    mask=(ks[:, None] < K) & (offs_n[None, :] < N), other=0.0)
        if OVERWRITE:  # bug: acc = instead of acc +=
            acc = tl.dot(a, b, input_precision=PRECISION)
        elif LOW_ACC:
            acc = (acc + tl.dot(a, b, input_precision=PRECISION)).to(A.dtype.element_ty)
        else:
            acc += tl.dot(a, b, input_precision=PRECISION)
    c = acc.to(C.dtype.element_ty)
    tl.store(C + offs_m[:, None] * scm + offs_n[None, :] * scn, c,
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def matmul(a: Args, precision: str = "ieee", overwrite: bool = False, low_acc: bool = False) -> torch.Tensor:
    """``precision``: tl.dot's input_precision ("ieee"; "tf32" is Triton's default for fp32)."""
    x, w = a["a"], a["b"]
    m, k = x.shape
    n = w.shape[1]
    c = torch.empty((m, n), dtype=x.dtype, device=x.device)
    bm, bn, bk = 64, 64, 32
    grid = (triton.cdiv(m, bm), triton.cdiv(n, bn))
    matmul_kernel[grid](x, w, c, m, n, k, x.stride(0), x.stride(1), w.stride(0), w.stride(1),
                        c.stride(0), c.stride(1), BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk,
                        PRECISION=precision if x.dtype == torch.float32 else None, OVERWRITE=overwrite, LOW_ACC=low_acc, num_warps=4)
    return c


# -----------------------------------------------------------------------------------------------
# Fused attention (forward)


@triton.jit
def attention_kernel(Q, K, V, O, sqb, sqh, sqm, sqd, skb, skh, skn, skd, svb, svh, svn, svd,
                     sob, soh, som, sod, H, HKV, LQ, LK, D, scale, CAUSAL: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                     PRECISION: tl.constexpr, NO_RESCALE: tl.constexpr, CAUSAL_STRICT: tl.constexpr):
    """Flash attention forward, the tutorial's online softmax over BLOCK_N key blocks; causal is
    top-left aligned (query i attends keys j <= i), GQA maps query head h to KV head h // (H/HKV)."""
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    hk = h // (H // HKV)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    offs_n0 = tl.arange(0, BLOCK_N)
    q = tl.load(Q + b * sqb + h * sqh + offs_m[:, None] * sqm + offs_d[None, :] * sqd,
                mask=(offs_m[:, None] < LQ) & (offs_d[None, :] < D), other=0.0)
    m_i = tl.full([BLOCK_M], NEG_INF, tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    hi = LK
    if CAUSAL:
        hi = tl.minimum(LK, (pid_m + 1) * BLOCK_M)
    for start in range(0, hi, BLOCK_N):
        offs_n = start + offs_n0
        kt = tl.load(K + b * skb + hk * skh + offs_n[None, :] * skn + offs_d[:, None] * skd,
                     mask=(offs_n[None, :] < LK) & (offs_d[:, None] < D), other=0.0)
        qk = tl.dot(q, kt, input_precision=PRECISION) * scale
        valid = offs_n[None, :] < LK
        if CAUSAL:
            if CAUSAL_STRICT:  # bug: j < i instead of j <= i (a query never sees its own key)
                valid = valid & (offs_n[None, :] < offs_m[:, None])
            else:
                valid = valid & (offs_n[None, :] <= offs_m[:, None])
        qk = tl.where(valid, qk, NEG_INF)
        m_new = tl.maximum(m_i, tl.max(qk, axis=1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(qk - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        if not NO_RESCALE:  # the bug leaves out acc *= alpha
            acc = acc * alpha[:, None]
        v = tl.load(V + b * svb + hk * svh + offs_n[:, None] * svn + offs_d[None, :] * svd,
                    mask=(offs_n[:, None] < LK) & (offs_d[None, :] < D), other=0.0)
        acc += tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        m_i = m_new
    out = acc / l_i[:, None]
    tl.store(O + b * sob + h * soh + offs_m[:, None] * som + offs_d[None, :] * sod,
             out.to(O.dtype.element_ty), mask=(offs_m[:, None] < LQ) & (offs_d[None, :] < D))


def attention(a: Args, no_scale: bool = False, no_rescale: bool = False,
              causal_strict: bool = False, precision: str = "ieee") -> torch.Tensor:
    """``precision``: tl.dot's input_precision for fp32 ("ieee"; "tf32" is Triton's default)."""
    q, k, v = a["q"], a["k"], a["v"]
    bsz, h, lq, d = q.shape
    hkv, lk = k.shape[1], k.shape[2]
    o = torch.empty((bsz, h, lq, d), dtype=q.dtype, device=q.device)
    scale = a["scale"] if a.get("scale") is not None else 1.0 / math.sqrt(d)
    if no_scale:  # bug: the scores are not scaled
        scale = 1.0
    block_d = max(16, triton.next_power_of_2(d))
    block_m = 64 if block_d <= 128 else 32
    block_n = 64 if block_d <= 64 else 32
    grid = (triton.cdiv(lq, block_m), bsz * h)
    attention_kernel[grid](q, k, v, o, *q.stride(), *k.stride(), *v.stride(), *o.stride(), h, hkv, lq, lk, d,
                           scale, CAUSAL=bool(a["causal"]), BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=block_d,
                           PRECISION=precision if q.dtype == torch.float32 else None, NO_RESCALE=no_rescale, CAUSAL_STRICT=causal_strict,
                           num_warps=4 if block_d <= 64 else 8)
    return o


# -----------------------------------------------------------------------------------------------
# Elementwise (2-D grid over rows and column blocks; strides passed in)


@triton.jit
def _gelu_erf(x):
    return 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476))


@triton.jit
def _gelu_tanh(x):
    # 0.5 x (1 + tanh(u)) = x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3)
    u = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    return x / (1.0 + tl.exp(-2.0 * u))


@triton.jit
def unary_kernel(X, Y, N, sxr, sxc, syr, syc, BLOCK: tl.constexpr, FN: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(X + row * sxr + cols * sxc, mask=mask, other=0.0).to(tl.float32)
    if FN == "gelu":
        y = _gelu_erf(x)
    elif FN == "gelu_tanh":
        y = _gelu_tanh(x)
    else:  # silu
        y = x / (1.0 + tl.exp(-x))
    tl.store(Y + row * syr + cols * syc, y.to(Y.dtype.element_ty), mask=mask)


@triton.jit
def binary_kernel(A, B, Y, N, sar, sac, sbr, sbc, syr, syc, BLOCK: tl.constexpr, FN: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < N
    a = tl.load(A + row * sar + cols * sac, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(B + row * sbr + cols * sbc, mask=mask, other=0.0).to(tl.float32)
    if FN == "add":
        y = a + b
    elif FN == "swiglu":  # a = gate, b = up
        y = a / (1.0 + tl.exp(-a)) * b
    else:  # swiglu_swapped, the bug: silu on up, times gate
        y = b / (1.0 + tl.exp(-b)) * a
    tl.store(Y + row * syr + cols * syc, y.to(Y.dtype.element_ty), mask=mask)


def _unary(x: torch.Tensor, fn: str) -> torch.Tensor:
    r, n = x.shape
    y = torch.empty((r, n), dtype=x.dtype, device=x.device)
    grid = (r, triton.cdiv(n, 1024))
    unary_kernel[grid](x, y, n, x.stride(0), x.stride(1), y.stride(0), y.stride(1), BLOCK=1024, FN=fn)
    return y


def _binary(a: torch.Tensor, b: torch.Tensor, fn: str) -> torch.Tensor:
    r, n = a.shape
    b = b.expand(r, n)  # broadcasting as strides of 0
    y = torch.empty((r, n), dtype=a.dtype, device=a.device)
    grid = (r, triton.cdiv(n, 1024))
    binary_kernel[grid](a, b, y, n, a.stride(0), a.stride(1), b.stride(0), b.stride(1), y.stride(0), y.stride(1),
                        BLOCK=1024, FN=fn)
    return y


def gelu(a: Args, tanh_for_erf: bool = False) -> torch.Tensor:
    tanh = a["approximate"] == "tanh" or tanh_for_erf  # the bug: the tanh form for approximate='none'
    return _unary(a["x"], "gelu_tanh" if tanh else "gelu")


def silu(a: Args) -> torch.Tensor:
    return _unary(a["x"], "silu")


def add(a: Args) -> torch.Tensor:
    return _binary(a["a"], a["b"], "add")


def swiglu(a: Args, swapped: bool = False) -> torch.Tensor:
    return _binary(a["gate"], a["up"], "swiglu_swapped" if swapped else "swiglu")


# -----------------------------------------------------------------------------------------------
# Cumsum


@triton.jit
def cumsum_kernel(X, Y, N, sxr, sxc, syr, syc, CHUNK: tl.constexpr, LOW_CARRY: tl.constexpr):
    """A blocked scan: each CHUNK scanned with tl.cumsum in fp32, plus the carry of the chunks
    before it."""
    row = tl.program_id(0)
    cols0 = tl.arange(0, CHUNK)
    carry = tl.zeros([1], tl.float32)
    for start in range(0, N, CHUNK):
        cols = start + cols0
        mask = cols < N
        x = tl.load(X + row * sxr + cols * sxc, mask=mask, other=0.0).to(tl.float32)
        y = tl.cumsum(x, axis=0) + carry
        tl.store(Y + row * syr + cols * syc, y.to(Y.dtype.element_ty), mask=mask)
        if LOW_CARRY:  # bug: the carry is kept in the input dtype between chunks
            carry = (carry + tl.sum(x, axis=0)).to(X.dtype.element_ty).to(tl.float32)
        else:
            carry = carry + tl.sum(x, axis=0)


def cumsum(a: Args, low_carry: bool = False) -> torch.Tensor:
    x = _rows(a["x"], a["dim"])
    r, n = x.shape
    y = torch.empty((r, n), dtype=x.dtype, device=x.device)
    cumsum_kernel[(r,)](x, y, n, x.stride(0), x.stride(1), y.stride(0), y.stride(1), CHUNK=256,
                        LOW_CARRY=low_carry)
    return _unrows(y, a["dim"])


# -----------------------------------------------------------------------------------------------
# Cross-entropy (per-row loss in one program, the reduction in torch, fp32)


@triton.jit
def cross_entropy_kernel(LOGITS, TARGET, LOSS, VALID, C, slr, slc, st, ignore_index, smoothing,
                         BLOCK: tl.constexpr, NO_MAX: tl.constexpr):
    row = tl.program_id(0)
    cols0 = tl.arange(0, BLOCK)
    m = tl.full([BLOCK], NEG_INF, tl.float32)
    s = tl.zeros([BLOCK], tl.float32)
    total = tl.zeros([BLOCK], tl.float32)
    for start in range(0, C, BLOCK):
        cols = start + cols0
        x = tl.load(LOGITS + row * slr + cols * slc, mask=cols < C, other=NEG_INF).to(tl.float32)
        total += tl.where(cols < C, x, 0.0)
        if NO_MAX:  # bug: sum(exp(x)) without subtracting the max: overflows for large logits
            s += tl.exp(x)
        else:
            m_new = tl.maximum(m, x)
            safe = m_new != NEG_INF
            s = s * tl.where(safe, tl.exp(m - m_new), 0.0) + tl.where(safe, tl.exp(x - m_new), 0.0)
            m = m_new
    if NO_MAX:
        lse = tl.log(tl.sum(s, axis=0))
    else:
        row_max = tl.max(m, axis=0)
        lse = row_max + tl.log(tl.sum(tl.where(m != NEG_INF, s * tl.exp(m - row_max), 0.0), axis=0))
    t = tl.load(TARGET + row * st)
    valid = t != ignore_index
    xt = tl.load(LOGITS + row * slr + t * slc, mask=valid, other=0.0).to(tl.float32)
    loss = (1.0 - smoothing) * (lse - xt) + smoothing * (lse - tl.sum(total, axis=0) / C)
    tl.store(LOSS + row, tl.where(valid, loss, 0.0))
    tl.store(VALID + row, valid.to(tl.float32))


def cross_entropy(a: Args, no_max: bool = False) -> torch.Tensor:
    logits, target = a["logits"], a["target"]
    n, c = logits.shape
    loss = torch.empty(n, dtype=torch.float32, device=logits.device)
    valid = torch.empty(n, dtype=torch.float32, device=logits.device)
    cross_entropy_kernel[(n,)](logits, target, loss, valid, c, logits.stride(0), logits.stride(1), target.stride(0),
                               a["ignore_index"], float(a["label_smoothing"]), BLOCK=1024, NO_MAX=no_max)
    if a["reduction"] == "none":
        return loss.to(logits.dtype)
    if a["reduction"] == "sum":
        return loss.sum().to(logits.dtype)
    return (loss.sum() / valid.sum()).to(logits.dtype)


# -----------------------------------------------------------------------------------------------
# RoPE (the cos/sin cache computed as HF does, in fp32; the rotation in the kernel, fp32 inside)


@triton.jit
def rope_kernel(X, Y, COS, SIN, L, H, half, sxb, sxl, sxh, sxd, syb, syl, syh, syd,
                BLOCK: tl.constexpr, INTERLEAVED: tl.constexpr):
    pid = tl.program_id(0)  # one (b, l, h) row
    hh = pid % H
    ll = (pid // H) % L
    bb = pid // (H * L)
    i = tl.arange(0, BLOCK)
    mask = i < half
    if INTERLEAVED:
        d1 = 2 * i
        d2 = 2 * i + 1
    else:
        d1 = i
        d2 = i + half
    base = X + bb * sxb + ll * sxl + hh * sxh
    x1 = tl.load(base + d1 * sxd, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(base + d2 * sxd, mask=mask, other=0.0).to(tl.float32)
    c = tl.load(COS + ll * half + i, mask=mask, other=0.0)
    s = tl.load(SIN + ll * half + i, mask=mask, other=0.0)
    out = Y + bb * syb + ll * syl + hh * syh
    tl.store(out + d1 * syd, (x1 * c - x2 * s).to(Y.dtype.element_ty), mask=mask)
    tl.store(out + d2 * syd, (x2 * c + x1 * s).to(Y.dtype.element_ty), mask=mask)


def rope(a: Args, ignore_offset: bool = False) -> torch.Tensor:
    x = a["x"]
    bsz, length, h, d = x.shape
    half = d // 2
    inv_freq = 1.0 / (a["theta"] ** (torch.arange(0, d, 2, dtype=torch.float32, device=x.device) / d))
    offset = 0.0 if ignore_offset else float(a["offset"])  # the bug: positions start at 0 in a decode step
    t = torch.arange(length, dtype=torch.float32, device=x.device) + offset
    freqs = torch.outer(t, inv_freq).contiguous()
    cos, sin = freqs.cos().contiguous(), freqs.sin().contiguous()
    y = torch.empty((bsz, length, h, d), dtype=x.dtype, device=x.device)
    block = triton.next_power_of_2(half)
    rope_kernel[(bsz * length * h,)](x, y, cos, sin, length, h, half, *x.stride(), *y.stride(), BLOCK=block,
                                     INTERLEAVED=a["style"] == "interleaved")
    return y


# -----------------------------------------------------------------------------------------------
# Embedding


@triton.jit
def embedding_kernel(W, IDX, Y, D, swv, swd, sib, sil, L, BLOCK: tl.constexpr):
    pid = tl.program_id(0)  # one (b, l) token
    bb = pid // L
    ll = pid % L
    row = tl.load(IDX + bb * sib + ll * sil)
    for start in range(0, D, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        w = tl.load(W + row * swv + cols * swd, mask=cols < D)
        tl.store(Y + pid * D + cols, w, mask=cols < D)


def embedding(a: Args) -> torch.Tensor:
    w, idx = a["weight"], a["indices"]
    bsz, length = idx.shape
    d = w.shape[1]
    y = torch.empty((bsz, length, d), dtype=w.dtype, device=w.device)
    embedding_kernel[(bsz * length,)](w, idx, y, d, w.stride(0), w.stride(1), idx.stride(0), idx.stride(1),
                                      length, BLOCK=256)
    return y
