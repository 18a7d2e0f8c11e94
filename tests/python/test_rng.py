"""gpuemu.rng (pure Python) against the shared vectors generated from the C++
(tests/data/rng_vectors.json, also checked by tests/cpp/rng_test.cpp), and draw for draw against
the C++ Rng bound in gpuemu._core on seeds and domains the vectors do not hold."""

from __future__ import annotations

import json
import math
import pathlib
import random
import struct

import pytest

from gpuemu import rng
from gpuemu._native import core

VECTORS = pathlib.Path(__file__).resolve().parents[1] / "data" / "rng_vectors.json"


@pytest.fixture(scope="module")
def vectors():
    with open(VECTORS, encoding="utf-8") as f:
        return json.load(f)


def h64(s: str) -> int:
    return int(s, 16)


def fbits(x: float) -> str:
    return "0x%016x" % struct.unpack("<Q", struct.pack("<d", x))[0]


def f_of(s: str) -> float:
    return struct.unpack("<d", struct.pack("<Q", int(s, 16)))[0]


# ---- the shared vectors ----


def test_vectors_file_has_every_section(vectors):
    for key in ("splitmix64", "derive_seed", "case_chain", "streams", "det_log"):
        assert vectors[key], key
    seeds = {h64(s["seed"]) for s in vectors["streams"]}
    assert {0, 1, 2**64 - 1} <= seeds
    bounds = {h64(b["n"]) for b in vectors["streams"][0]["bounded"]}
    assert {1, 2, 3, 10, 1000, 2**63 + 1} <= bounds


def test_splitmix64(vectors):
    for e in vectors["splitmix64"]:
        state = h64(e["state"])
        for out in e["outputs"]:
            state, value = rng.splitmix64_next(state)
            assert value == h64(out)
        assert state == h64(e["final_state"])


def test_derive_seed(vectors):
    for e in vectors["derive_seed"]:
        assert rng.derive_seed(h64(e["parent"]), e["domain"]) == h64(e["seed"]), e["domain"]
        # bytes name the same stream as their UTF-8 str
        assert rng.derive_seed(h64(e["parent"]), e["domain"].encode()) == h64(e["seed"])


def test_case_chain(vectors):
    for e in vectors["case_chain"]:
        cs = rng.case_seed(h64(e["master"]), e["case"])
        assert cs == h64(e["case_seed"])
        assert cs == rng.derive_seed(h64(e["master"]), f"case:{e['case']}")
        r = rng.Rng.substream(cs, e["domain"])
        assert [r.next_u64() for _ in e["next_u64"]] == [h64(v) for v in e["next_u64"]]


def test_streams(vectors):
    for st in vectors["streams"]:
        seed = h64(st["seed"])
        r = rng.Rng(seed)
        assert [r.next_u64() for _ in range(16)] == [h64(v) for v in st["next_u64"]]
        r = rng.Rng(seed)
        assert [fbits(r.uniform01()) for _ in range(16)] == st["uniform01"]
        r = rng.Rng(seed)
        assert [fbits(r.normal()) for _ in range(16)] == st["normal"], f"seed {seed:#x}"
        for u in st["uniform"]:
            r = rng.Rng(seed)
            lo, hi = f_of(u["lo"]), f_of(u["hi"])
            assert [fbits(r.uniform(lo, hi)) for _ in u["draws"]] == u["draws"]
        for b in st["bounded"]:
            r = rng.Rng(seed)
            n = h64(b["n"])
            assert [r.bounded(n) for _ in b["draws"]] == [h64(v) for v in b["draws"]], n
        for b in st["integer"]:
            r = rng.Rng(seed)
            lo, hi = int(b["lo"]), int(b["hi"])
            assert [str(r.integer(lo, hi)) for _ in b["draws"]] == b["draws"], (lo, hi)
        for c in st["chance"]:
            r = rng.Rng(seed)
            num, den = h64(c["num"]), h64(c["den"])
            assert [r.chance(num, den) for _ in c["draws"]] == c["draws"]
        for w in st["weighted"]:
            r = rng.Rng(seed)
            ws = [h64(x) for x in w["weights"]]
            assert [r.weighted(ws) for _ in w["draws"]] == w["draws"]


def test_det_log(vectors):
    for e in vectors["det_log"]:
        assert fbits(rng.det_log(f_of(e["x"]))) == e["log"], e["x"]


# ---- draw for draw against the C++ ----


def _seeds(count: int):
    g = random.Random(20241129)
    yield from (0, 1, 2**64 - 1, 2**63)
    for _ in range(count):
        yield g.getrandbits(64)


def test_matches_cpp_on_random_seeds():
    c = core()
    g = random.Random(5)
    for seed in _seeds(150):
        py, cpp = rng.Rng(seed), c.Rng(seed)
        assert [py.next_u64() for _ in range(32)] == [cpp.next_u64() for _ in range(32)]
        assert [py.uniform01() for _ in range(32)] == [cpp.uniform01() for _ in range(32)]
        assert [fbits(py.normal()) for _ in range(32)] == [fbits(cpp.normal()) for _ in range(32)]
        for _ in range(8):
            n = g.choice([g.randrange(1, 100), g.getrandbits(64) or 1, 2**63 + g.randrange(1, 2**62)])
            assert py.bounded(n) == cpp.bounded(n)
            lo = g.randrange(-(2**63), 2**63)
            hi = g.randrange(lo, 2**63)
            assert py.integer(lo, hi) == cpp.integer(lo, hi)
            a, b = g.uniform(-1e6, 1e6), g.uniform(-1e6, 1e6)
            assert fbits(py.uniform(a, b)) == fbits(cpp.uniform(a, b))
            num, den = g.randrange(0, 50), g.randrange(1, 50)
            assert py.chance(num, den) == cpp.chance(num, den)
            ws = [g.randrange(0, 10) for _ in range(g.randrange(1, 6))]
            if sum(ws):
                assert py.weighted(ws) == cpp.weighted(ws)
        assert py.integer(-(2**63), 2**63 - 1) == cpp.integer(-(2**63), 2**63 - 1)


def test_long_streams_match_cpp():
    c = core()
    for seed in (0, 7, 2**64 - 1):
        py, cpp = rng.Rng(seed), c.Rng(seed)
        assert py.u64s(20000) == [int(v) for v in cpp.u64s(20000)]
        assert [py.normal() for _ in range(20000)] == list(cpp.normals(20000))
        assert [py.uniform01() for _ in range(20000)] == list(cpp.uniform01s(20000))


def test_derive_seed_and_det_log_match_cpp():
    c = core()
    g = random.Random(11)
    domains = ["", "case:0", "dims", "dim:Lk", "input:k_cache", "layout:q", "dtype", "attrs", "ü/λ"]
    domains += [f"case:{g.getrandbits(40)}" for _ in range(200)]
    for parent in _seeds(20):
        for d in domains:
            assert rng.derive_seed(parent, d) == c.derive_seed(parent, d)
    for state in _seeds(200):
        assert rng.splitmix64_next(state) == c.splitmix64_next(state)
    xs = [g.random() + 2**-60 for _ in range(5000)]
    xs += [math.ldexp(1.0 + g.random(), g.randrange(-1074, 1024)) for _ in range(5000)]
    xs += [5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, 0.7071067811865476]
    for x in xs:
        if math.isfinite(x) and x > 0:
            assert fbits(rng.det_log(x)) == fbits(c.det_log(x)), x


# ---- properties of the pure-Python module itself ----


def test_det_log_close_to_math_log():
    g = random.Random(3)
    for _ in range(20000):
        x = math.ldexp(1.0 + g.random(), g.randrange(-1070, 1020))
        want, got = math.log(x), rng.det_log(x)
        if abs(want) < 1e-3:
            assert abs(got - want) <= 1e-15 * abs(want) + 1e-300
        else:
            assert abs(got - want) <= 4 * math.ulp(want), x
    assert rng.det_log(1.0) == 0.0


def test_argument_checks():
    with pytest.raises(ValueError):
        rng.Rng(-1)
    with pytest.raises(ValueError):
        rng.Rng(2**64)
    with pytest.raises(TypeError):
        rng.Rng(1.0)
    with pytest.raises(TypeError):
        rng.derive_seed(1, 5)
    r = rng.Rng(1)
    with pytest.raises(ValueError):
        r.integer(0, 2**63)
    with pytest.raises(ValueError):
        r.weighted([])
    with pytest.raises(ValueError):
        rng.case_seed(1, -1)
    assert r.bounded(0) == 0 and r.bounded(1) == 0
    assert r.integer(5, 5) == 5 and r.integer(9, 2) == 9


def test_substreams_are_order_independent():
    master = 1234
    names = ["dims", "dim:N", "input:x", "layout:x", "dtype", "attrs"]
    forward = {n: rng.derive_seed(master, n) for n in names}
    backward = {n: rng.derive_seed(master, n) for n in reversed(names)}
    assert forward == backward
    assert len(set(forward.values())) == len(names)
    assert rng.Rng.substream(master, "dims").next_u64() == rng.Rng(forward["dims"]).next_u64()


def test_distribution_sanity():
    r = rng.Rng(99)
    xs = [r.normal() for _ in range(50000)]
    mean = sum(xs) / len(xs)
    var = sum((x - mean) ** 2 for x in xs) / len(xs)
    assert abs(mean) < 0.03 and abs(var - 1.0) < 0.03
    counts = [0] * 7
    for _ in range(70000):
        counts[r.bounded(7)] += 1
    assert max(counts) - min(counts) < 800
