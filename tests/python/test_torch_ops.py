"""gpuemu.torch_op: an op from the PyTorch code a kernel replaces (docs/torch-ops.md). The schema is
inferred, the reference is the same code in float64, the bound derived op by op; real PyTorch
(Debian's 1.13, CPU), the real engine in process."""

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import gpuemu  # noqa: E402
from gpuemu.torch_ops import UnsupportedOpError, evaluate  # noqa: E402
from gpuemu.torch_ops._bounds import U32  # noqa: E402


class AddRmsNorm(nn.Module):
    def __init__(self, hidden, eps=1e-6):
        super().__init__()
        torch.manual_seed(0)
        self.weight = nn.Parameter(torch.randn(hidden))
        self.eps = eps

    def forward(self, x, residual):
        h = x + residual
        return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def _add_rms(weight, *, skip_residual_in_norm=False, bf16_sum=False):
    """A fused add + rms_norm kernel as a Triton one computes it: fp32 math on the loaded tiles."""
    def run(i):
        x, r = i["x"], i["residual"]
        h = x.float() + r.float()
        src = x.float() if skip_residual_in_norm else h
        if bf16_sum:
            acc = torch.zeros(h.shape[:-1], dtype=torch.bfloat16)
            for s in range(0, h.shape[-1], 64):  # a running sum kept in bf16
                acc = (acc.float() + (src[..., s:s + 64] ** 2).sum(-1)).to(torch.bfloat16)
            ms = acc.float()[..., None] / h.shape[-1]
        else:
            ms = (src * src).mean(-1, keepdim=True)
        return (h * torch.rsqrt(ms + 1e-6) * weight.to(x.dtype).float()).to(x.dtype)
    return run


def test_the_schema_is_inferred_from_the_example_and_the_module():
    x, r = torch.randn(8, 256), torch.randn(8, 256)
    op = gpuemu.torch_op("add_rms_norm", reference=AddRmsNorm(256), example_inputs=(x, r))
    s = op.schema
    assert [i["name"] for i in s["inputs"]] == ["x", "residual"]  # forward's parameter names
    # equal sizes are one dim; the weight's size is fixed, and said so once
    assert s["inputs"][0]["shape"] == s["inputs"][1]["shape"] == ["D0", "D1"]
    assert s["dims"]["D1"]["values"] == [256] and "weight" in s["dims"]["D1"]["description"]
    assert s["dims"]["D0"]["min"] == 1 and s["dims"]["D0"]["max"] >= 8
    assert any("D1 fixed at 256" in n for n in op.notes)
    # the values each input feeds: a normalisation (through the add, before any GEMM)
    assert {i["values"] for i in s["inputs"]} == {"norm"}
    assert s["reference"] == "torch:add_rms_norm" and s["dtypes"] == ["float32", "float16", "bfloat16"]


def test_recipes_sizes_of_one_names_and_overrides():
    q = torch.randn(2, 16, 32)
    op = gpuemu.torch_op("attn", lambda q, k, v: torch.softmax(q @ k.transpose(-1, -2), -1) @ v, (q, q, q))
    rec = {i["name"]: i["values"] for i in op.schema["inputs"]}
    assert rec == {"q": "logits", "k": "logits", "v": "accumulated"}  # q and k reach the softmax through a GEMM
    mm = gpuemu.torch_op("mm", lambda a, b: a @ b, (torch.randn(4, 8), torch.randn(8, 5)))
    assert {i["values"] for i in mm.schema["inputs"]} == {"accumulated"}
    ew = gpuemu.torch_op("ew", lambda a: torch.tanh(a) * 2, (torch.randn(3, 5, 1),))
    assert ew.schema["inputs"][0]["shape"][-1] == "1" and ew.schema["inputs"][0]["values"] == "wide"
    named = gpuemu.torch_op("named", lambda a, b: a + b, (torch.randn(4, 4), torch.randn(4, 4)),
                            dims={"a": ["B", "N"], "b": ["B", "N"]}, bound={"B": (2, 64)}, pin={"N": 16})
    assert named.schema["dims"]["B"]["min"] == 2 and named.schema["dims"]["B"]["max"] == 64
    assert named.schema["dims"]["N"]["values"] == [16]


def test_the_dims_reduced_over_are_measured_not_guessed():
    """A dim is a reduction when a change at one of its positions reaches the others (measured on
    the probe), a batch dim when it reaches none, a window's between: only measured reductions
    are named in reduced_dims, which a diagnosis reads as "the reduction length"."""
    def roles(op):
        return {d: v.get("role") for d, v in op.schema["dims"].items()}, op.schema["reduced_dims"]
    norm = gpuemu.torch_op("rn", AddRmsNorm(256), (torch.randn(8, 256), torch.randn(8, 256)))
    assert roles(norm) == ({"D0": "batch", "D1": None}, ["D1"])  # the fixed weight width is reduced over
    mm = gpuemu.torch_op("mm2", lambda a, b: a @ b, (torch.randn(32, 64), torch.randn(64, 48)))
    assert roles(mm) == ({"D0": "batch", "D1": "reduction", "D2": "batch"}, ["D1"])
    cs = gpuemu.torch_op("cs", lambda x: torch.cumsum(x, 0), (torch.randn(32, 64),))
    assert roles(cs) == ({"D0": "reduction", "D1": "batch"}, ["D0"])
    ew = gpuemu.torch_op("ew2", lambda x: torch.relu(x) * 2, (torch.randn(32, 64),))
    assert roles(ew) == ({"D0": "batch", "D1": "batch"}, [])
    conv = gpuemu.torch_op("c1", torch.nn.Conv1d(8, 16, 3, padding=1), (torch.randn(4, 8, 100),))
    assert roles(conv)[0]["D2"] == "spatial" and "D2" not in roles(conv)[1]


def test_a_size_the_reference_cannot_take_is_fixed_with_its_reason():
    op = gpuemu.torch_op("fixed_view", lambda x: x.reshape(-1, 64).sum(-1), (torch.randn(8, 64),))
    assert op.schema["dims"]["D1"]["values"] == [64]
    assert any("D1" in n and "raised" in n for n in op.notes), op.notes


@pytest.mark.parametrize("bad,match", [
    (lambda x: x + torch.randn_like(x), "random"),
    (lambda x: torch.linalg.svd(x)[0], "no error rule"),
])
def test_a_reference_the_analysis_cannot_follow_is_refused_with_the_op(bad, match):
    with pytest.raises(gpuemu.ValidationError, match=match):
        gpuemu.torch_op("bad_ref", bad, (torch.randn(4, 4),))


def test_bad_arguments_are_clear_errors():
    with pytest.raises(gpuemu.ValidationError, match="op name"):
        gpuemu.torch_op("Bad-Name", lambda x: x * 2, (torch.randn(2, 2),))
    with pytest.raises(gpuemu.ValidationError, match="tensor or a number"):
        gpuemu.torch_op("strs", lambda x, s: x * 2, (torch.randn(2, 2), "a"))
    with pytest.raises(gpuemu.ValidationError, match="dims"):
        gpuemu.torch_op("dims_bad", lambda x: x * 2, (torch.randn(2, 3),), dims={"x": ["A"]})


def test_correct_kernels_pass_and_bugs_fail_in_process():
    x, r = torch.randn(8, 256), torch.randn(8, 256)
    module = AddRmsNorm(256)
    op = gpuemu.torch_op("add_rms_norm", reference=module, example_inputs=(x, r))
    w = module.weight.detach()
    good = gpuemu.fuzz_op_in_process(op, _add_rms(w), iterations=24, seed=1, dtypes=["float32", "bfloat16"])
    assert good.ok and good.total == 24, good.summary()
    wrong = gpuemu.fuzz_op_in_process(op, _add_rms(w, skip_residual_in_norm=True), iterations=24, seed=1,
                                      dtypes=["float32", "bfloat16"])
    assert not wrong.ok and wrong.passed <= 2, wrong.summary()
    lowp = gpuemu.fuzz_op_in_process(op, _add_rms(w, bf16_sum=True), iterations=24, seed=1, dtypes=["float32"])
    assert not lowp.ok, lowp.summary()


def test_the_reference_is_the_same_code_in_float64_with_the_modules_rounded_parameters():
    module = nn.Linear(16, 8)
    op = gpuemu.torch_op("lin", module, (torch.randn(4, 16),))
    x = np.random.default_rng(0).standard_normal((4, 16)).astype(np.float32).astype(np.float64)
    assert op.input_names == ["input"]  # nn.Linear.forward(self, input)
    (v, c_acc, c_in), = op.reference({"input": gpuemu.round_to(x, "bfloat16")}, {}, {}, "bfloat16")
    w = module.weight.detach().to(torch.bfloat16).double().numpy()  # the values the bf16 module holds
    b = module.bias.detach().to(torch.bfloat16).double().numpy()
    np.testing.assert_allclose(v, gpuemu.round_to(x, "bfloat16") @ w.T + b, rtol=1e-14, atol=1e-14)
    # one op: its one rounding to bfloat16 is the output's own (the verdict's u_out |ref|), so c_in is 0
    assert (c_acc > 0).all() and (c_in == 0).all()
    # two: the GEMM's result, stored in bfloat16 by PyTorch before the gelu, is c_in
    two = gpuemu.torch_op("lin_gelu", nn.Sequential(module, nn.GELU()), (torch.randn(4, 16),))
    (v2, c_acc2, c_in2), = two.reference({"input": gpuemu.round_to(x, "bfloat16")}, {}, {}, "bfloat16")
    assert (c_in2 > 0).any()


COMPOSITIONS = {
    "layer_norm": (lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b, 1e-5), [(6, 96), (96,), (96,)]),
    "softmax": (lambda x: torch.softmax(x * 20, -1), [(5, 300)]),
    "log_softmax": (lambda x: torch.log_softmax(x * 20, 0), [(70, 9)]),
    "gelu": (lambda x: F.gelu(x * 4), [(7, 33)]),
    "gelu_tanh": (lambda x: F.gelu(x * 4, approximate="tanh"), [(7, 33)]),
    "linear_silu": (lambda x, w: F.silu(x @ w.t()) * x[..., :17], [(6, 40), (17, 40)]),
    "conv2d_relu": (lambda x, w: torch.relu(F.conv2d(x, w, padding=1)), [(2, 3, 9, 9), (4, 3, 3, 3)]),
    "attention": (lambda q, k, v: torch.softmax(q @ k.transpose(-1, -2) / 8.0, -1) @ v,
                  [(2, 12, 64), (2, 12, 64), (2, 12, 64)]),
    "cross_entropy_like": (lambda x: -torch.log_softmax(x, -1)[:, 0].mean(), [(12, 50)]),
    "var_mean": (lambda x: x.var(-1) + x.mean(-1), [(9, 200)]),
    "cumsum": (lambda x: torch.cumsum(x, 1), [(4, 500)]),
    "logsumexp": (lambda x: torch.logsumexp(x * 10, -1), [(6, 77)]),
    "mse": (lambda x, y: F.mse_loss(x, y), [(9, 40), (9, 40)]),
    "group_norm": (lambda x: F.group_norm(x, 3), [(2, 6, 5, 5)]),
    "avg_pool": (lambda x: F.avg_pool2d(x, 2), [(1, 2, 8, 8)]),
}


@pytest.mark.parametrize("name", sorted(COMPOSITIONS))
@pytest.mark.parametrize("offset", [0.0, 300.0])
def test_pytorchs_own_float32_run_lies_within_the_derived_bound(name, offset):
    """The property the bound claims: a correct fp32 implementation (here PyTorch's, on the same
    exact inputs) is within u_fp32 * c_acc + u_out * |ref| of the fp64 value, element by element
    (first-order analysis plus the sums' growth; 1.0 would be the bound itself)."""
    fn, shapes = COMPOSITIONS[name]
    g = torch.Generator().manual_seed(7)
    args = [torch.randn(s, generator=g) * (1 + 3 * k) + (offset if k == 0 else 0) for k, s in enumerate(shapes)]
    out = evaluate(fn, args)
    got = fn(*[a.float() for a in args]).double()
    bound = U32 * out.e + U32 * out.v.abs() + 1e-300
    ratio = float(((got - out.v).abs() / bound).max())
    assert ratio <= 1.0, f"{name}: PyTorch's fp32 run is {ratio:.3g} of the bound"
    # and not hopelessly loose on well-scaled inputs: within 2^12 of what fp32 actually did somewhere
    if offset == 0.0 and float((got - out.v).abs().max()) > 0:
        assert ratio > 2.0 ** -12, f"{name}: the bound is {1 / ratio:.3g} times PyTorch's error"


def test_an_argmax_whose_runner_up_is_within_the_error_is_unresolved():
    x = torch.tensor([[1.0, 1.0 + 2 ** -23, 0.0], [5.0, 1.0, 2.0]])
    out = evaluate(lambda t: torch.argmax(t * 3.0 + 0.1, -1), [x])  # two roundings each: 2 ulps apart is a tie
    assert out.v.tolist() == [1, 0]
    assert math.isinf(float(out.e[0])) and float(out.e[1]) == 0.0  # row 0 may be index 0 or 1


def test_a_where_on_an_uncertain_condition_may_take_either_branch():
    x = torch.tensor([1e-9, 2.0])
    out = evaluate(lambda t: torch.where(t * 3.0 > 3e-9, t, torch.zeros_like(t) + 7.0), [x])
    assert float(out.e[0]) >= 7.0 / U32 * 0.99 and float(out.e[1]) < 1e3


def test_an_inferred_schema_is_a_valid_op_schema():
    import json
    from pathlib import Path

    jsonschema = pytest.importorskip("jsonschema")
    root = Path(__file__).resolve().parents[2]
    meta = json.loads((root / "schemas" / "op.schema.json").read_text())
    op = gpuemu.torch_op("ln_linear", nn.Sequential(nn.LayerNorm(24), nn.Linear(24, 8)), (torch.randn(5, 24),))
    jsonschema.validate(op.schema, meta)
    assert op.input_names == ["input"] and op.schema["inputs"][0]["values"] == "norm"


def test_cases_the_reference_cannot_resolve_are_inconclusive_not_passed():
    """y at the argmax of x: where x's two largest values are within their error of each other (the
    logits recipe draws ties), a correct kernel may pick either; those cases are inconclusive,
    counted apart, and fail nothing."""
    op = gpuemu.torch_op("pick_at_argmax", lambda x, y: torch.gather(y, -1, x.argmax(-1, keepdim=True)),
                         (torch.randn(6, 40), torch.randn(6, 40)))
    assert op.schema["inputs"][0]["values"] == "logits"

    def kernel(i):
        return torch.gather(i["y"], -1, i["x"].float().argmax(-1, keepdim=True))

    r = gpuemu.fuzz_op_in_process(op, kernel, iterations=40, seed=3, dtypes=["float32"])
    assert r.inconclusive > 0 and r.failed == 0 and r.ok, r.summary()
    assert r.passed + r.inconclusive == r.total and "inconclusive" in r.summary()


from daemon_harness import daemon  # noqa: E402,F401  (a real daemon on a temp socket with its own store)


def test_a_torch_op_through_the_daemon_judged_by_the_reference_the_client_sends(daemon):  # noqa: F811
    """Client().fuzz_op_client_side with a torch op: the daemon draws the cases from the op's schema
    (sent with every request), the client runs the kernel and the reference (PyTorch code lives
    here), the daemon judges by that reference and stores the failures with the op's schema."""
    x, r = torch.randn(8, 256), torch.randn(8, 256)
    module = AddRmsNorm(256)
    op = gpuemu.torch_op("add_rms_norm_client", reference=module, example_inputs=(x, r))
    w = module.weight.detach()
    client = gpuemu.Client()
    good = client.fuzz_op_client_side(op, _add_rms(w), iterations=20, seed=5, framework="torch",
                                      dtypes=["float32", "bfloat16"])
    assert good.ok and good.total == 20, good.summary()
    bad = client.fuzz_op_client_side(op, _add_rms(w, skip_residual_in_norm=True), iterations=20, seed=5,
                                     framework="torch", dtypes=["float32"])
    assert not bad.ok and bad.failed >= 15, bad.summary()
    f = bad.failures[0]
    assert f.id and f.diagnosis.get("bug_class")  # stored, and diagnosed here with the local engine
    # judged against the op's envelope (2: no term calibrated), not a custom op's fallback; and
    # the rows are no reduction: no diagnosis says the error grows with "the reduction length D0"
    assert all(x.envelope == 2 for x in bad.failures), [x.envelope for x in bad.failures]
    assert not any("D0" in x.diagnosis.get("summary", "") for x in bad.failures if x.diagnosis)
    stored = client.failure(f.id)
    assert stored["op"] == "add_rms_norm_client" and "custom_op" in stored
    # replayed from this client (it holds the reference): the stored inputs fail again, the fix passes
    rep = client.reproduce(f.id, run_op=_add_rms(w, skip_residual_in_norm=True), framework="torch")
    assert rep["regenerated_identical"] and not rep["passed"], rep
    assert rep["verdict"]["failed_outputs"] == ["out"] and rep["verdict"]["diagnosis"]["bug_class"] != "kernel_error"
    fixed = client.reproduce(f.id, run_op=_add_rms(w), framework="torch")
    assert fixed["passed"], fixed["verdict"]
    small = client.minimize(f.id, run_op=_add_rms(w, skip_residual_in_norm=True), max_evaluations=40,
                            framework="torch")
    assert small["id"] == f.id and small["summary"] and small["evaluations"] > 0
    assert small["dims"]["D0"] <= f.dims["D0"], small
    # a client that never made the op cannot judge it: the daemon says who holds the reference
    other = gpuemu.Client()
    with pytest.raises(gpuemu.GpuemuError, match="held by the client"):
        other.reproduce(f.id, run_op=_add_rms(w), framework="torch")


def test_inconclusive_cases_are_counted_apart_through_the_daemon(daemon):  # noqa: F811
    op = gpuemu.torch_op("pick_at_argmax_client", lambda x, y: torch.gather(y, -1, x.argmax(-1, keepdim=True)),
                         (torch.randn(6, 40), torch.randn(6, 40)))
    r = gpuemu.Client().fuzz_op_client_side(
        op, lambda i: torch.gather(i["y"], -1, i["x"].float().argmax(-1, keepdim=True)),
        iterations=40, seed=3, dtypes=["float32"], framework="torch")
    assert r.inconclusive > 0 and r.failed == 0 and r.ok, r.summary()
    assert r.passed + r.inconclusive == r.total


def _attention(q, k, v):
    return torch.softmax(q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5, -1) @ v


def test_fused_admits_no_rounding_at_op_boundaries():
    """An attention whose scores are rounded to bfloat16 before an fp32 softmax: what PyTorch's
    unfused code does in bfloat16, so the default admits it; a fused kernel must not (fused=True),
    while a fused kernel keeping everything in fp32 passes both."""
    q = torch.randn(2, 16, 32)
    ex = (q, q.clone(), q.clone())
    default = gpuemu.torch_op("attn_unfused", _attention, ex, dtypes=["bfloat16"])
    fused = gpuemu.torch_op("attn_fused", _attention, ex, dtypes=["bfloat16"], fused=True)

    def kernel(scores_bf16):
        def run(i):
            q, k, v = (i[n].float() for n in "qkv")
            s = q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5
            if scores_bf16:
                s = s.to(torch.bfloat16).float()
            return (torch.softmax(s, -1) @ v).to(torch.bfloat16)
        return run

    kw = dict(iterations=30, seed=7)
    assert gpuemu.fuzz_op_in_process(default, kernel(True), **kw).ok
    assert gpuemu.fuzz_op_in_process(fused, kernel(False), **kw).ok
    caught = gpuemu.fuzz_op_in_process(fused, kernel(True), **kw)
    assert caught.failed >= 10, caught.summary()


@pytest.mark.parametrize("as_argument", [True, False])
def test_a_strided_tensor_with_an_offset_keeps_its_elements_and_its_bounds(as_argument):
    """A non-contiguous view with a storage offset, as an argument or as a constant the reference
    holds (lifted to float64 when an op first reads it, after PyTorch computed a reshape's
    as_strided for its own layout): the value is PyTorch's float64 result and every bound is finite
    and non-negative (the zeros beside the value have its layout, never read past their end)."""
    g = torch.Generator().manual_seed(3)
    base = torch.randn(8 * 89 * 888 + 7, generator=g)
    x = base.as_strided((8, 89, 444), (89 * 888, 888, 2), 7)  # every other element, offset 7
    w = torch.randn(63, 444, generator=g)
    if as_argument:
        out = evaluate(lambda a: F.linear(a, w), [x])
    else:
        out = evaluate(lambda: F.linear(x, w), [])
    assert torch.equal(out.v, F.linear(x.double(), w.double()))
    assert bool(torch.isfinite(out.e).all()) and float(out.e.min()) >= 0
