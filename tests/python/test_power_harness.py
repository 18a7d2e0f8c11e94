"""The precision-mutation harness of bench/power (the detection power measurement of issue 21),
bounded to a few seconds: the rounding is the one it claims, every op's mutable control passes at
k = 1 and reaches every site it declares, a gross k is caught, and judge_many judges each candidate
as judge does. The measurement itself is bench/power/power_curve.py (docs/evidence.md)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
torch.set_num_threads(1)

import gpuemu  # noqa: E402
from gpuemu.inprocess import case_inputs  # noqa: E402
from bench.power.measure import grid_candidates, measure_run  # noqa: E402
from bench.power.mutants import KERNELS, uncovered_ops  # noqa: E402
from bench.power.rounding import Mutation, round_mantissa  # noqa: E402

SEED = 20261201  # the first master seed of power_curve.py
GROSS = 1 << 20  # 3 stored mantissa bits
ONE_BIT = 1 << 23  # only the leading bit: changes even an e4m3 output or an argmax


@pytest.fixture(scope="module")
def engine():
    return gpuemu._core.Engine()


def _reference_rounding(x: np.ndarray, drop: int) -> np.ndarray:
    """x rounded to nearest-even at 24 - drop significant bits (numpy's round is half-to-even)."""
    m, e = np.frexp(x.astype(np.float64))
    p = 24 - drop
    return np.ldexp(np.round(m * 2.0 ** p), e - p)


def test_rounding_keeps_23_minus_log2_k_bits():
    x = torch.randn(4000, dtype=torch.float64).mul(torch.rand(4000, dtype=torch.float64) * 60 - 30).exp2()
    x = (x * torch.sign(torch.randn(4000, dtype=torch.float64))).float()
    for drop in (1, 4, 13, 16, 22):
        got = round_mantissa(x, drop).double().numpy()
        assert np.array_equal(got, _reference_rounding(x.numpy(), drop)), drop
        rel = np.abs(got - x.double().numpy()) / np.abs(x.double().numpy())
        assert rel.max() <= 2.0 ** (drop - 24) and rel.max() > 2.0 ** (drop - 26), drop  # k * u_fp32, reached
    assert torch.equal(round_mantissa(x, 16), x.to(torch.bfloat16).float())  # k = 2^16: bfloat16's mantissa
    special = torch.tensor([float("nan"), float("inf"), -float("inf"), 3.4028235e38, -0.0])
    got = round_mantissa(special, 20)
    assert torch.isnan(got[0]) and got[1] == float("inf") and got[2] == -float("inf") and got[3] == float("inf")
    assert got[4] == 0 and torch.signbit(got[4])


def test_mutation_grid_rounds_each_slice_for_its_k():
    x = torch.randn(3, 50)
    mut = Mutation([1, 8, 1 << 16], sites=["acc"])
    y = mut(x, "acc", fresh=True)
    assert y.shape == (3, 3, 50)
    assert torch.equal(y[0], x) and torch.equal(y[1], round_mantissa(x, 3)) and torch.equal(y[2], round_mantissa(x, 16))
    assert mut(x, "other", fresh=True).shape == (1, 3, 50)  # a site not selected: unchanged
    assert mut.seen == {"acc", "other"}


def test_case_judge_and_judge_many_judge_as_judge_does(engine):
    case = engine.cases("softmax", 7, 1, dtypes=["float32"], dims={"R": [3], "N": [40]})[0]
    x = torch.tensor(np.asarray(case.inputs()["x"][0]), dtype=torch.float32)
    good = torch.softmax(x, dim=case.attrs["dim"]).numpy()
    bad = good * np.float32(1.001)
    cands = [[(good, "float32")], [(bad, "float32")]]
    verdicts = engine.judge_many(case, cands)
    judge = engine.case_judge(case)
    for v, c in zip(verdicts, cands):
        one = engine.judge(case, c)
        again = judge.judge(c)
        assert v["passed"] == one["passed"] == again["passed"]
        assert v["max_error"] == one["max_error"] == again["max_error"]
    assert verdicts[0]["passed"] and not verdicts[1]["passed"]
    assert judge.envelope == engine.envelope("softmax", "float32")
    assert "outputs" in engine.judge_many(case, cands[:1], with_outputs=True)[0]


def _small_dims(op: str):
    dims = gpuemu.op_schema(op)["dims"]
    return {d: [min(s["max"], max(s["min"], 8))] for d, s in dims.items() if "min" in s and "max" in s}


def test_every_op_has_a_mutable_control():
    assert uncovered_ops() == []
    for k in KERNELS.values():
        assert k.sites, k.op


@pytest.mark.parametrize("op", sorted(KERNELS))
def test_control_passes_and_every_site_is_reached(engine, op):
    """One small case per op: the unmutated control (k = 1) passes, every declared site is
    reached, and a gross k changes the output (the harness mutates what it says it does)."""
    dtype = gpuemu.op_schema(op)["dtypes"][0]
    case = engine.cases(op, SEED, 1, dtypes=[dtype], dims=_small_dims(op), vary_attrs=None)[0]
    cands, seen = grid_candidates(KERNELS[op], case_inputs(case, "torch"), (1, ONE_BIT))
    assert seen == set(KERNELS[op].sites)
    v = engine.judge_many(case, cands)
    assert v[0]["passed"], v[0]["message"]
    assert any(not np.array_equal(a, b) for (a, _), (b, _) in zip(cands[0], cands[1])), "the mutation changed nothing"


@pytest.mark.parametrize("op,dtype", [("softmax", "bfloat16"), ("sum", "float32"), ("layer_norm", "float16"),
                                      ("matmul", "float32")])
def test_default_cases_control_passes_and_gross_loss_is_caught(engine, op, dtype):
    """Default cases (adversarial, layouts, attrs varied): the control passes every case, a 3-bit
    intermediate is caught, and in float32 a single bit less (k = 2) already moves the errors."""
    run = measure_run(op, dtype, SEED, 4, (1, 2, GROSS), engine=engine)
    assert run["cases"] == 4 and not run["problems"]
    assert not any(f[0] for f in run["failed"]), run["errors"]
    assert any(f[2] for f in run["failed"]), run["errors"]
    if dtype == "float32":
        assert any(e[1] != e[0] for e in run["errors"]), "k = 2 left every output as the control's"


def _run(seed, ks, errors, envelope=2.0):
    """A run as measure_run writes it, from per-case errors at each k."""
    return {"op": "sum", "dtype": "float32", "seed": seed, "ks": list(ks), "sites": ["accumulator"], "cases": len(errors),
            "envelope": envelope, "errors": errors, "failed": [[e > envelope for e in row] for row in errors],
            "case_info": [{"index": i} for i in range(len(errors))], "problems": []}


def test_margin_per_run_compares_each_run_with_its_own_control():
    """The per-run margin: a mutant whose worst error on a run is r times the control's worst on the
    same cases. Here every run with r >= 4 fails, and one with r = 3 escapes, so the margin is 4;
    a run with r = 8 that escapes makes it inf (no threshold above which 95% are caught)."""
    from bench.power.report import summarize

    ks = (1, 2, 4)
    runs = [_run(s, ks, [[0.5, 1.5, 2.5], [0.1, 0.2, 0.3]]) for s in range(19)]  # r = 3 (passes), 5 (fails)
    runs.append(_run(19, ks, [[0.6, 2.4, 4.8], [0.0, 0.0, 0.0]]))                # r = 4 and 8, both fail
    e = summarize(runs)[0]
    assert e["margin_per_run"] == pytest.approx(4.0)
    assert e["goal_runs"] == [21, 21]
    escaped = _run(20, ks, [[0.2, 1.6, 1.9]])                                   # r = 8 and 9.5, neither fails
    e = summarize(runs + [escaped])[0]
    assert e["margin_per_run"] == float("inf") and e["goal_runs"] == [21, 23]


def test_a_seed_measured_twice_counts_once():
    """A resumed scouted run can measure the same seed's window twice: the curve and the per-run
    pairs count it once."""
    from bench.power.report import summarize

    a = _run(1, (1, 2, 4), [[0.5, 1.0, 3.0]])
    b = _run(1, (1, 4), [[0.5, 3.0]])
    c = _run(2, (1, 2, 4), [[0.5, 1.0, 1.0]])
    e = summarize([a, b, c])[0]
    at4 = next(p for p in e["curve"] if p["k"] == 4)
    assert (e["runs"], at4["runs"], at4["runs_caught"], e["cases"]) == (2, 2, 1, 2)
    assert e["goal_runs"] == [1, 1]
