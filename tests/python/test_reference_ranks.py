"""gpuemu.reference on the caller's own ranks: ops whose PyTorch shape is (*, N) (elementwise, the
row-wise reductions, softmax, the norms, linear, fp8_quantize; flash_attention's q, k, v as SDPA's
(*, L, E); embedding's indices) take inputs of any rank from the schema's rank - 1 up
(`any_leading_dims`), and a dim attr (`dim_of`) is checked against the rank
of the input actually given.

Criteria: the reference of a rank-3 (or rank-1) input is bit-identical to the reference of the same
values as the schema's rank-2 [R, N] (a reshape changes no value and, for a dim of -1, no order of
operations); reductions over a middle dim, and layer_norm / linear on [B, L, D], agree with
PyTorch float64 to 1e-12 relative (the same bound as test_reference_accuracy.py)."""

from __future__ import annotations

import numpy as np
import pytest

import gpuemu

torch = pytest.importorskip("torch")
F = torch.nn.functional

ROW_OPS = ["relu", "gelu", "silu", "exp", "sum", "mean", "amax", "argmax", "logsumexp", "l2norm",
           "cumsum", "softmax", "log_softmax", "layer_norm", "rms_norm", "fp8_quantize"]


def inputs_for(op: str, x: np.ndarray) -> dict:
    n = x.shape[-1]
    g = np.random.default_rng(7)
    if op == "layer_norm":
        return {"x": x, "weight": g.standard_normal(n).astype(np.float32),
                "bias": g.standard_normal(n).astype(np.float32)}
    if op == "rms_norm":
        return {"x": x, "weight": g.standard_normal(n).astype(np.float32)}
    if op == "fp8_quantize":
        return {"x": x, "scale": np.array(0.25, np.float32)}
    return {"x": x}


def as_list(r):
    return list(r) if isinstance(r, (tuple, list)) else [r]


@pytest.mark.parametrize("op", ROW_OPS)
@pytest.mark.parametrize("shape", [(2, 3, 37), (37,), (2, 1, 2, 5)], ids=lambda s: "x".join(map(str, s)))
def test_any_rank_equals_the_flattened_rows(op, shape):
    x = np.random.default_rng(len(shape)).standard_normal(shape).astype(np.float32)
    got = as_list(gpuemu.reference(op, inputs_for(op, x)))
    flat = as_list(gpuemu.reference(op, inputs_for(op, x.reshape(-1, shape[-1]))))
    assert len(got) == len(flat)
    for g, f in zip(got, flat):
        g, f = np.asarray(g), np.asarray(f)
        # A row result (sum, argmax, ...) drops the last dim; an elementwise one keeps the shape.
        assert g.shape in (shape, shape[:-1]), (op, g.shape)
        np.testing.assert_array_equal(g.reshape(f.shape), f, err_msg=op)


@pytest.mark.parametrize("dim", [0, 1, -2])
def test_reductions_over_a_middle_dim_of_a_rank3_input_match_torch(dim):
    x = np.random.default_rng(3).standard_normal((4, 9, 6)).astype(np.float32)
    xd = torch.from_numpy(x).double()
    want = {"softmax": torch.softmax(xd, dim), "log_softmax": torch.log_softmax(xd, dim),
            "cumsum": torch.cumsum(xd, dim), "amax": torch.amax(xd, dim),
            "logsumexp": torch.logsumexp(xd, dim)}
    for op, w in want.items():
        got = np.asarray(gpuemu.reference(op, {"x": x}, dim=dim))
        scale = torch.cumsum(xd.abs(), dim).numpy() if op == "cumsum" else 0.0
        assert got.shape == tuple(w.shape), op
        np.testing.assert_array_less(np.abs(got - w.numpy()), 1e-12 * (np.abs(w.numpy()) + scale) + 1e-300,
                                     err_msg=f"{op} dim={dim}")


def test_layer_norm_and_linear_on_batch_seq_hidden_match_torch():
    g = np.random.default_rng(11)
    x = g.standard_normal((2, 5, 48)).astype(np.float32)
    w, b = g.standard_normal(48).astype(np.float32), g.standard_normal(48).astype(np.float32)
    xd, wd, bd = (torch.from_numpy(a).double() for a in (x, w, b))
    got = np.asarray(gpuemu.reference("layer_norm", {"x": x, "weight": w, "bias": b}))
    want = F.layer_norm(xd, (48,), wd, bd, 1e-5).numpy()
    np.testing.assert_array_less(np.abs(got - want), 1e-12 * (np.abs(want) + np.abs(bd.numpy())) + 1e-300)

    weight = g.standard_normal((7, 48)).astype(np.float32)
    for xs in (x[0], x, x.reshape(1, 2, 5, 48)):  # [L, K] (rank 2), [B, L, K], [1, B, L, K]
        got = np.asarray(gpuemu.reference("linear", {"x": xs, "weight": weight}))
        xt, wt = torch.from_numpy(np.ascontiguousarray(xs)).double(), torch.from_numpy(weight).double()
        want = F.linear(xt, wt).numpy()
        assert got.shape == want.shape == xs.shape[:-1] + (7,)
        np.testing.assert_array_less(np.abs(got - want), 1e-12 * (xt.abs() @ wt.abs().T).numpy() + 1e-300)


def test_binary_and_gated_ops_take_leading_dims():
    g = np.random.default_rng(5)
    a = g.standard_normal((2, 3, 8)).astype(np.float32)
    b = g.standard_normal((8,)).astype(np.float32)
    got = np.asarray(gpuemu.reference("add", {"a": a, "b": b}))
    np.testing.assert_array_equal(got, a.astype(np.float64) + b.astype(np.float64))
    up = g.standard_normal((2, 3, 8)).astype(np.float32)
    flat = np.asarray(gpuemu.reference("swiglu", {"gate": a.reshape(6, 8), "up": up.reshape(6, 8)}))
    np.testing.assert_array_equal(np.asarray(gpuemu.reference("swiglu", {"gate": a, "up": up})).reshape(6, 8), flat)


def sdpa_float64(q, k, v, causal=False):
    """softmax(q k^T / sqrt(D)) v in torch float64 over the last three dims (torch 1.13 has no SDPA)."""
    qd, kd, vd = (torch.from_numpy(np.ascontiguousarray(a)).double() for a in (q, k, v))
    s = qd @ kd.transpose(-1, -2) / np.sqrt(q.shape[-1])
    if causal:
        lq, lk = q.shape[-2], k.shape[-2]
        s = s.masked_fill(torch.ones(lq, lk, dtype=torch.bool).triu(1), float("-inf"))
    p = torch.softmax(s, -1)
    return (p @ vd).numpy(), (p @ vd.abs()).numpy()


@pytest.mark.parametrize("lead", [(), (3,), (2, 3)], ids=["no-batch", "B", "A-B"])
def test_flash_attention_takes_any_leading_batch_dims_as_sdpa(lead):
    g = np.random.default_rng(21)
    q = g.standard_normal(lead + (4, 9, 16)).astype(np.float32)
    k = g.standard_normal(lead + (4, 13, 16)).astype(np.float32)
    v = g.standard_normal(lead + (4, 13, 16)).astype(np.float32)
    for causal in (False, True):
        got = np.asarray(gpuemu.reference("flash_attention", {"q": q, "k": k, "v": v}, causal=causal))
        want, scale = sdpa_float64(q, k, v, causal)
        assert got.shape == q.shape
        np.testing.assert_array_less(np.abs(got - want), 1e-12 * scale + 1e-300)
        # Bit-identical to the same values as the schema's rank-4 [B, H, Lq, D].
        flat = np.asarray(gpuemu.reference("flash_attention", {t: a.reshape((-1,) + a.shape[-3:]) for t, a in
                                                               (("q", q), ("k", k), ("v", v))}, causal=causal))
        np.testing.assert_array_equal(got.reshape(flat.shape), flat)
    with pytest.raises(gpuemu.errors.ShapeMismatchError):
        gpuemu.reference("flash_attention", {"q": q[..., 0, :, :] if lead else q[0], "k": k, "v": v})


def test_flash_attention_gqa_with_leading_dims_and_batch_errors():
    g = np.random.default_rng(22)
    q = g.standard_normal((2, 3, 4, 5, 8)).astype(np.float32)
    k = g.standard_normal((2, 3, 2, 7, 8)).astype(np.float32)
    v = g.standard_normal((2, 3, 2, 7, 8)).astype(np.float32)
    got = np.asarray(gpuemu.reference("flash_attention", {"q": q, "k": k, "v": v}, enable_gqa=True))
    # GQA: query head h reads KV head h // (H / Hkv), along dim -3.
    want, scale = sdpa_float64(q, np.repeat(k, 2, axis=-3), np.repeat(v, 2, axis=-3))
    np.testing.assert_array_less(np.abs(got - want), 1e-12 * scale + 1e-300)
    with pytest.raises(gpuemu.errors.ShapeMismatchError, match="leading dims"):
        gpuemu.reference("flash_attention", {"q": q, "k": k.reshape(3, 2, 2, 7, 8), "v": v.reshape(3, 2, 2, 7, 8)},
                         enable_gqa=True)


@pytest.mark.parametrize("shape", [(11,), (3, 11), (2, 3, 5)], ids=lambda s: "x".join(map(str, s)))
def test_embedding_takes_indices_of_any_rank(shape):
    g = np.random.default_rng(23)
    weight = g.standard_normal((50, 6)).astype(np.float32)
    idx = g.integers(0, 50, size=shape).astype(np.int64)
    got = np.asarray(gpuemu.reference("embedding", {"weight": weight, "indices": idx}))
    want = F.embedding(torch.from_numpy(idx), torch.from_numpy(weight).double()).numpy()
    assert got.shape == shape + (6,)
    np.testing.assert_array_equal(got, want)


def test_rank_and_dim_errors_name_the_input_and_its_range():
    x = np.ones((3, 4), np.float32)
    with pytest.raises(gpuemu.errors.ShapeMismatchError, match="input 'x' of op 'linear' must have rank at least 2"):
        gpuemu.reference("linear", {"x": np.ones(4, np.float32), "weight": x})
    with pytest.raises(gpuemu.errors.ShapeMismatchError, match="must have rank 2, got shape"):
        gpuemu.reference("matmul", {"a": np.ones((2, 3, 4), np.float32), "b": x})
    with pytest.raises(gpuemu.errors.ValidationError,
                       match=r"attr 'dim' of op 'softmax' is 2, not a dim of the rank-2 input 'x' \(it takes -2..1\)"):
        gpuemu.reference("softmax", {"x": x}, dim=2)
    # The same dim is fine on a rank-3 input.
    assert np.asarray(gpuemu.reference("softmax", {"x": np.ones((2, 3, 4), np.float32)}, dim=2)).shape == (2, 3, 4)
    # Inputs that share a leading dim must share all of it, not just its product.
    with pytest.raises(gpuemu.errors.ShapeMismatchError, match="leading dims"):
        gpuemu.reference("swiglu", {"gate": np.ones((2, 6, 4), np.float32), "up": np.ones((3, 4, 4), np.float32)})
