"""`gpuemu cases OP ...` through the real binary: the same seed prints the same cases, another seed
other cases, and every wrong call ends with exit code 2 and one line `gpuemu: error: ...` on stderr
(no output on stdout, no crash). The binary is taken from $GPUEMU_BIN_DIR (default build/bin)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import List, Optional

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN_DIR = Path(os.environ.get("GPUEMU_BIN_DIR", "build/bin"))
GPUEMU = (BIN_DIR if BIN_DIR.is_absolute() else ROOT / BIN_DIR) / "gpuemu"
EXIT_USAGE = 2  # cli/cli_common.hpp k_exit_usage; docs/lint.md "Exit codes, as for every command"

pytestmark = pytest.mark.skipif(not GPUEMU.is_file(), reason=f"{GPUEMU} not built")


def gpuemu(*args: str, env: Optional[dict] = None) -> subprocess.CompletedProcess:
    full_env = dict(os.environ)
    full_env.pop("GPUEMU_SCHEMA_PATH", None)
    full_env.update(env or {})
    return subprocess.run([str(GPUEMU), *args], capture_output=True, text=True, timeout=120, env=full_env)


def cases_json(op: str, seed: int, count: int = 4, *extra: str) -> str:
    r = gpuemu("cases", op, "--seed", str(seed), "--count", str(count), "--json", *extra)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    return r.stdout


def catalogue() -> List[str]:
    r = gpuemu("ops", "list", "--json")
    assert r.returncode == 0, r.stderr
    return [o["name"] for o in json.loads(r.stdout)]


# ---- determinism ----


@pytest.mark.parametrize("op", ["softmax", "matmul", "flash_attention", "cross_entropy", "conv2d"])
def test_same_seed_same_cases_other_seed_other_cases(op):
    first = cases_json(op, 1234)
    assert cases_json(op, 1234) == first
    other = cases_json(op, 1235)
    assert other != first
    a, b = json.loads(first), json.loads(other)
    assert len(a) == len(b) == 4
    # Not just the printed seed: the drawn inputs differ.
    digests = lambda cs: [{k: v["digest"] for k, v in c["inputs"].items()} for c in cs]
    assert digests(a) != digests(b)


def test_json_describes_each_case():
    cases = json.loads(cases_json("layer_norm", 7, 3))
    assert [c["index"] for c in cases] == [0, 1, 2]
    for c in cases:
        assert c["op"] == "layer_norm" and c["master_seed"] == 7
        assert c["dtype"] in ("float32", "float16", "bfloat16")
        assert set(c["dims"]) == {"R", "N"}
        assert "eps" in c["attrs"]
        x = c["inputs"]["x"]
        assert x["shape"] == [c["dims"]["R"], c["dims"]["N"]]
        assert len(x["strides"]) == 2 and isinstance(x["offset"], int)
        assert len(x["digest"]) == 16 and int(x["digest"], 16) >= 0


def test_case_i_does_not_depend_on_count():
    # Each case draws from its own stream of (seed, index): the first cases of a longer run are the
    # cases of a shorter one.
    short, long = json.loads(cases_json("rms_norm", 99, 2)), json.loads(cases_json("rms_norm", 99, 5))
    assert long[:2] == short


def test_text_output_is_deterministic_too():
    args = ("cases", "bmm", "--seed", "5", "--count", "3")
    a, b, c = gpuemu(*args), gpuemu(*args), gpuemu("cases", "bmm", "--seed", "6", "--count", "3")
    assert a.returncode == b.returncode == c.returncode == 0
    assert a.stdout == b.stdout and a.stdout.startswith("case 0  seed ")
    assert c.stdout != a.stdout


def test_restrictions_are_honoured_and_deterministic():
    extra = ("--dtype", "bfloat16", "--dims", "N=129,1000", "--attr", "dim=0", "--no-layouts")
    out = cases_json("softmax", 3, 6, *extra)
    assert cases_json("softmax", 3, 6, *extra) == out
    for c in json.loads(out):
        assert c["dtype"] == "bfloat16"
        assert c["dims"]["N"] in (129, 1000)
        assert c["attrs"]["dim"] == 0
        assert c["inputs"]["x"]["layout"] == "contiguous"


def test_count_zero_is_an_empty_list():
    assert json.loads(cases_json("softmax", 1, 0)) == []


def test_every_op_generates_cases():
    ops = catalogue()
    assert len(ops) >= 41 and "softmax" in ops
    for op in ops:
        cases = json.loads(cases_json(op, 11, 2))
        assert len(cases) == 2 and all(c["op"] == op for c in cases), op


# ---- errors: exit 2, one line on stderr, nothing on stdout ----


def assert_usage_error(r: subprocess.CompletedProcess, *fragments: str) -> None:
    assert r.returncode == EXIT_USAGE, (r.returncode, r.stdout, r.stderr)
    assert r.stdout == "", r.stdout
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("gpuemu: error: "), lines[0]
    for f in fragments:
        assert f in lines[0], (f, lines[0])


CASES = ("cases", "softmax", "--seed", "1", "--count", "2")


def test_unknown_op():
    assert_usage_error(gpuemu("cases", "softmx", "--seed", "1"), "unknown op 'softmx'", "softmax")
    assert_usage_error(gpuemu("cases", "no_such_op", "--seed", "1", "--json"), "unknown op 'no_such_op'")


@pytest.mark.parametrize(
    "dims,fragment",
    [
        ("Q=3", "has no dim 'Q'"),  # not a dim of softmax
        ("N=abc", "'abc' is not a size"),
        ("N=-3", "'-3' is not a size"),
        ("N=4,x", "'x' is not a size"),
        ("N", "NAME=SIZE"),  # no '='
        ("N=", "NAME=SIZE"),  # no size
    ],
)
def test_bad_dims(dims, fragment):
    assert_usage_error(gpuemu(*CASES, "--dims", dims), fragment)
    assert_usage_error(gpuemu(*CASES, "--json", "--dims", dims), fragment)


@pytest.mark.parametrize(
    "dtype,fragment",
    [
        ("float33", "unknown dtype 'float33'"),
        ("float64", "does not take dtype float64"),  # a dtype, but not one softmax takes
        ("int8", "does not take dtype int8"),
    ],
)
def test_bad_dtype(dtype, fragment):
    assert_usage_error(gpuemu(*CASES, "--dtype", dtype), fragment)
    assert_usage_error(gpuemu(*CASES, "--json", "--dtype", "float32", "--dtype", dtype), fragment)


def test_bad_attrs_strategy_and_arguments():
    assert_usage_error(gpuemu(*CASES, "--attr", "dimm=0"), "no attr 'dimm'")
    assert_usage_error(gpuemu(*CASES, "--vary-attr", "dimm"), "no attr 'dimm'")
    assert_usage_error(gpuemu(*CASES, "--strategy", "bogus"), "unknown strategy 'bogus'")
    assert_usage_error(gpuemu("cases", "softmax", "--count", "1"), "--seed is required")
    assert_usage_error(gpuemu("cases", "--seed", "1"), "OP is required")
    assert_usage_error(gpuemu(*CASES[:-2], "--count", "-1"), "--count")


def test_malformed_schema_reports_file_and_line(tmp_path):
    bad = tmp_path / "broken.json"
    bad.write_text('{\n  "name": "broken",\n  "version": 1\n  "family": "elementwise"\n}\n')
    r = gpuemu(*CASES, env={"GPUEMU_SCHEMA_PATH": str(tmp_path)})
    assert_usage_error(r, f"{bad}:4:", "invalid JSON")


def test_attr_out_of_range_for_the_op():
    """A dim attr (schema `dim_of`) is checked against the rank the fuzzer draws: x[R, N] has dims
    -2..1, whatever the attr's sampled values are."""
    assert_usage_error(gpuemu(*CASES, "--attr", "dim=5"),
                       "attr 'dim' of op 'softmax' is 5, not a dim of the rank-2 input 'x' (it takes -2..1)")
    assert_usage_error(gpuemu(*CASES, "--attr", "dim=-3"), "is -3, not a dim")
    # 1 is not among the values the fuzzer varies dim over (-1, 0) but is a dim of x: accepted.
    cases = json.loads(cases_json("softmax", 3, 2, "--attr", "dim=1"))
    assert [c["attrs"]["dim"] for c in cases] == [1, 1]


def test_ops_show_text_and_json():
    r = gpuemu("ops", "show", "softmax")
    assert r.returncode == 0 and r.stderr == "", r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("softmax (v1, softmax): torch.softmax(x, dim)")
    assert "    x[R, N] case dtype, real, any leading dims (R is their product), layouts: transposed, strided, offset, expanded" in lines
    assert "    dim: int = -1  in [-1,0]  (a dim of x)" in lines
    assert "  reduced over: N" in lines
    assert any(l.startswith("  schema: ") and l.endswith("schemas/ops/softmax.json") for l in lines)
    matmul = gpuemu("ops", "show", "matmul").stdout
    assert "any leading dims" not in matmul and "    a[M, K] case dtype" in matmul
    shown = json.loads(gpuemu("ops", "show", "softmax", "--json").stdout)
    assert shown["inputs"][0]["any_leading_dims"] is True and shown["attrs"]["dim"]["dim_of"] == "x"
    assert shown["source"].endswith("schemas/ops/softmax.json")
    assert_usage_error(gpuemu("ops", "show", "softmx"), "unknown op 'softmx'")
