"""gpuemu's dtype conversions against numpy (float16) and PyTorch (bfloat16, and fp8 where the
installed torch has it), on millions of doubles chosen to hit every rounding case.

What the frameworks do differently (docs/dtypes.md):
- NaN: gpuemu writes the canonical quiet NaN with the input's sign; numpy keeps payload bits and
  torch drops the sign. Only NaN-ness is compared.
- torch converts float64 to bfloat16 (and to fp8) through float32, rounding twice; gpuemu rounds
  once, from the double. They agree on every float32-representable double, and torch equals gpuemu
  applied to float32(x) everywhere, which the tests check; the double-rounding cases are counted.
"""

from __future__ import annotations

import numpy as np
import pytest

import gpuemu
from gpuemu import dtypes
from gpuemu.errors import ValidationError

torch = pytest.importorskip("torch")

N_RANDOM = 1_500_000  # per generator call; each format sees several calls' worth


def grid_values(bits: np.ndarray, dtype: str) -> np.ndarray:
    """The finite values among all of a format's bit patterns, sorted ascending (both signs)."""
    v = dtypes.from_bits(bits, dtype)
    return np.unique(v[np.isfinite(v)])


def stress_doubles(grid: np.ndarray, n: int, seed: int) -> np.ndarray:
    """Doubles that exercise a format with sorted finite values `grid`: random bit patterns,
    grid values, exact midpoints and their neighbours, random points between grid values, the
    format's exponent range, double subnormals, and specials."""
    g = np.random.default_rng(seed)
    parts = []
    k = n // 8
    parts.append(g.integers(0, 2**64, size=k, dtype=np.uint64).view(np.float64))
    i = g.integers(0, len(grid) - 1, size=k)
    lo, hi = grid[i], grid[i + 1]
    mid = (lo + hi) / 2  # exact: few significant bits
    parts.append(mid)
    parts.append(np.nextafter(mid, np.inf))
    parts.append(np.nextafter(mid, -np.inf))
    parts.append(lo + (hi - lo) * g.random(k))
    parts.append(grid[g.integers(0, len(grid), size=k)])
    top = np.max(np.abs(grid))
    tiny = np.min(np.abs(grid[grid != 0]))
    e = g.integers(int(np.floor(np.log2(tiny))) - 4, int(np.ceil(np.log2(top))) + 3, size=k)
    parts.append(np.ldexp(1.0 + g.random(k), e) * np.where(g.random(k) < 0.5, -1.0, 1.0))
    parts.append(np.ldexp(g.random(k), g.integers(-1074, -1000, size=k)))
    specials = np.array(
        [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1.0, -1.0, 5e-324, 2.2250738585072014e-308,
         1.7976931348623157e308, tiny / 2, -tiny / 2, np.nextafter(tiny / 2, 1.0), top, -top]
    )
    parts.append(specials)
    with np.errstate(all="ignore"):
        return np.concatenate(parts)


def assert_bits_equal(got: np.ndarray, want: np.ndarray, values: np.ndarray, dtype: str, nan_of):
    """Equal bits everywhere, except that NaN results are compared as NaN only."""
    got_nan, want_nan = nan_of(got), nan_of(want)
    np.testing.assert_array_equal(got_nan, want_nan, err_msg=f"{dtype}: NaN-ness differs")
    bad = (got != want) & ~got_nan
    if bad.any():
        idx = np.flatnonzero(bad)[:10]
        rows = [f"{values[j]!r}: gpuemu {int(got[j]):#x}, framework {int(want[j]):#x}" for j in idx]
        pytest.fail(f"{dtype}: {bad.sum()} of {len(values)} differ:\n" + "\n".join(rows))


# ---- float16 vs numpy ----


def f16_is_nan(b: np.ndarray) -> np.ndarray:
    return ((b & 0x7C00) == 0x7C00) & ((b & 0x03FF) != 0)


def test_float16_every_pattern_decodes_like_numpy():
    bits = np.arange(65536, dtype=np.uint16)
    ours = dtypes.from_bits(bits, "float16")
    theirs = bits.view(np.float16).astype(np.float64)
    np.testing.assert_array_equal(ours, theirs)  # NaN == NaN for assert_array_equal
    np.testing.assert_array_equal(np.signbit(ours), np.signbit(theirs))
    back = dtypes.to_bits(ours, "float16")
    finite = ~np.isnan(ours)
    np.testing.assert_array_equal(back[finite], bits[finite])
    assert f16_is_nan(back[~finite]).all()


def test_float16_matches_numpy_on_millions_of_doubles():
    grid = grid_values(np.arange(65536, dtype=np.uint16), "float16")
    for seed in (1, 2):
        x = stress_doubles(grid, N_RANDOM, seed)
        ours = gpuemu.to_bits(x, "float16")
        with np.errstate(all="ignore"):
            theirs = x.astype(np.float16).view(np.uint16)
        assert_bits_equal(ours, theirs, x, "float16", f16_is_nan)


# ---- bfloat16 vs torch ----


def bf16_is_nan(b: np.ndarray) -> np.ndarray:
    return ((b & 0x7F80) == 0x7F80) & ((b & 0x007F) != 0)


def torch_bits(x: np.ndarray, dtype) -> np.ndarray:
    t = torch.from_numpy(x).to(dtype)
    width = torch.int16 if dtype == torch.bfloat16 else torch.uint8
    out = t.view(width).numpy()
    return out.view(np.uint16) if width == torch.int16 else out


def test_bfloat16_every_pattern_decodes_like_torch():
    bits = np.arange(65536, dtype=np.uint16)
    ours = dtypes.from_bits(bits, "bfloat16")
    theirs = torch.from_numpy(bits.view(np.int16)).view(torch.bfloat16).double().numpy()
    np.testing.assert_array_equal(ours, theirs)
    np.testing.assert_array_equal(np.signbit(ours), np.signbit(theirs))
    # The signed view torch gives (int16) is accepted as bits too.
    np.testing.assert_array_equal(dtypes.from_bits(bits.view(np.int16), "bfloat16"), ours)
    back = dtypes.to_bits(ours, "bfloat16")
    finite = ~np.isnan(ours)
    np.testing.assert_array_equal(back[finite], bits[finite])
    assert bf16_is_nan(back[~finite]).all()


def test_bfloat16_matches_torch_on_float32_representable_doubles():
    grid = grid_values(np.arange(65536, dtype=np.uint16), "bfloat16")
    for seed in (3, 4):
        with np.errstate(all="ignore"):
            x = stress_doubles(grid, N_RANDOM, seed).astype(np.float32).astype(np.float64)
        assert_bits_equal(gpuemu.to_bits(x, "bfloat16"), torch_bits(x, torch.bfloat16), x,
                          "bfloat16", bf16_is_nan)


def test_bfloat16_torch_rounds_through_float32():
    grid = grid_values(np.arange(65536, dtype=np.uint16), "bfloat16")
    x = stress_doubles(grid, N_RANDOM, 5)
    theirs = torch_bits(x, torch.bfloat16)
    with np.errstate(all="ignore"):
        via_f32 = gpuemu.to_bits(x.astype(np.float32).astype(np.float64), "bfloat16")
    # torch == (round to float32, then gpuemu's single rounding to bfloat16), for every double.
    assert_bits_equal(via_f32, theirs, x, "bfloat16 via float32", bf16_is_nan)
    # gpuemu rounds once: where they differ, gpuemu is the nearest (ties to even) and torch is not.
    ours = gpuemu.to_bits(x, "bfloat16")
    differ = (ours != theirs) & ~bf16_is_nan(ours)
    # The doubles just off a bfloat16 midpoint (a quarter of the sample) round onto it in float32.
    assert differ.sum() > len(x) // 20, differ.sum()
    with np.errstate(all="ignore"):
        representable = x == x.astype(np.float32).astype(np.float64)
    assert not (differ & representable).any()
    xs = x[differ]
    err_ours = np.abs(dtypes.from_bits(ours[differ], "bfloat16") - xs)
    err_theirs = np.abs(dtypes.from_bits(theirs[differ], "bfloat16") - xs)
    with np.errstate(invalid="ignore"):
        assert (err_ours <= err_theirs).all()
    # The textbook case: 1 + 2^-8 + 2^-30 is above the midpoint of 1 and 1 + 2^-7.
    y = np.array([1 + 2**-8 + 2**-30])
    assert gpuemu.to_bits(y, "bfloat16")[0] == 0x3F81
    assert torch_bits(y, torch.bfloat16)[0] == 0x3F80


# ---- fp8 vs torch, where torch has it ----

HAS_FP8 = hasattr(torch, "float8_e4m3fn") and hasattr(torch, "float8_e5m2")


def fp8_is_nan(dtype: str):
    if dtype == "float8_e4m3fn":
        return lambda b: (b & 0x7F) == 0x7F
    return lambda b: ((b & 0x7C) == 0x7C) & ((b & 0x03) != 0)


@pytest.mark.skipif(not HAS_FP8, reason=f"torch {torch.__version__} has no float8 dtypes (they arrived in 2.1)")
@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "float8_e5m2"])
def test_fp8_matches_torch(dtype):
    tdt = getattr(torch, dtype)
    bits = np.arange(256, dtype=np.uint8)
    ours = dtypes.from_bits(bits, dtype)
    theirs = torch.from_numpy(bits).view(tdt).double().numpy()
    np.testing.assert_array_equal(ours, theirs)
    grid = grid_values(bits, dtype)
    with np.errstate(all="ignore"):
        x = stress_doubles(grid, N_RANDOM, 6).astype(np.float32).astype(np.float64)
    # torch's cast is the non-saturating one: gpuemu's default "to_nan".
    assert_bits_equal(gpuemu.to_bits(x, dtype), torch_bits(x, tdt), x, dtype, fp8_is_nan(dtype))


# ---- fp8 on its own (every pattern; the overflow modes) ----


@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "float8_e5m2"])
def test_fp8_every_pattern_round_trips(dtype):
    bits = np.arange(256, dtype=np.uint8)
    v = dtypes.from_bits(bits, dtype)
    nan = np.isnan(v)
    assert nan.sum() == (2 if dtype == "float8_e4m3fn" else 6)
    for mode in ("to_nan", "saturate"):
        back = dtypes.to_bits(v, dtype, overflow=mode)
        keep = ~nan & ~np.isinf(v)
        np.testing.assert_array_equal(back[keep], bits[keep])
        assert np.isnan(dtypes.from_bits(back[nan], dtype)).all()
    pos = v[: 128][~nan[:128] & ~np.isinf(v[:128])]
    assert (np.diff(pos) > 0).all()


def test_e4m3fn_overflow_modes():
    x = np.array([448.0, 464.0, 464.5, 479.0, 480.0, 1e6, np.inf, -np.inf, -500.0, np.nan])
    to_nan = dtypes.to_bits(x, "float8_e4m3fn")
    sat = dtypes.to_bits(x, "float8_e4m3fn", overflow="saturate")
    assert list(to_nan) == [0x7E, 0x7E, 0x7F, 0x7F, 0x7F, 0x7F, 0x7F, 0xFF, 0xFF, 0x7F]
    assert list(sat) == [0x7E, 0x7E, 0x7E, 0x7E, 0x7E, 0x7E, 0x7E, 0xFE, 0xFE, 0x7F]
    np.testing.assert_array_equal(
        dtypes.round_to(x, "e4m3", overflow="saturate"),
        [448, 448, 448, 448, 448, 448, 448, -448, -448, np.nan],
    )
    e5 = dtypes.to_bits(np.array([57344.0, 61439.0, 61440.0, np.inf]), "float8_e5m2")
    assert list(e5) == [0x7B, 0x7B, 0x7C, 0x7C]
    e5s = dtypes.to_bits(np.array([61440.0, np.inf]), "float8_e5m2", overflow="saturate")
    assert list(e5s) == [0x7B, 0x7B]


# ---- the rest of the dtype API ----


def test_shapes_and_widths_are_kept():
    x = np.linspace(-3, 3, 24).reshape(2, 3, 4)[:, ::2, :]  # non-contiguous input
    for name, width in (("float16", np.uint16), ("bfloat16", np.uint16), ("e5m2", np.uint8),
                        ("float32", np.uint32), ("float64", np.uint64)):
        b = dtypes.to_bits(x, name)
        assert b.shape == x.shape and b.dtype == width
        np.testing.assert_array_equal(dtypes.from_bits(b, name), dtypes.round_to(x, name))
    np.testing.assert_array_equal(dtypes.to_bits(x, "float64").view(np.float64), x)
    np.testing.assert_array_equal(
        dtypes.to_bits(x, "float32"), x.astype(np.float32).view(np.uint32))
    assert dtypes.to_bits(2.5, "bf16").shape == ()


def test_round_to_integers():
    x = np.array([2.5, 3.5, -2.5, 300.0, -300.0, np.nan, np.inf, -0.4])
    np.testing.assert_array_equal(dtypes.round_to(x, "int8"), [2, 4, -2, 127, -128, 0, 127, 0])
    np.testing.assert_array_equal(dtypes.round_to(x, "uint8"), [2, 4, 0, 255, 0, 0, 255, 0])
    np.testing.assert_array_equal(dtypes.round_to(x, "bool"), [1, 1, 1, 1, 1, 0, 1, 1])
    np.testing.assert_array_equal(dtypes.round_to([1e19, -1e19], "int64"), [2.0**63, -(2.0**63)])


def test_names_info_and_canonical():
    assert len(dtypes.names()) == 12 and "bfloat16" in dtypes.names() and "bool" in dtypes.names()
    assert dtypes.canonical("bf16") == "bfloat16"
    assert dtypes.canonical(np.float16) == "float16"
    assert dtypes.canonical(np.dtype("int32")) == "int32"
    assert dtypes.canonical(torch.bfloat16) == "bfloat16"
    assert dtypes.canonical(torch.bool) == "bool"
    info = dtypes.info("float8_e4m3fn")
    assert (info.max_finite, info.min_normal, info.min_subnormal) == (448.0, 2**-6, 2**-9)
    assert info.size == 1 and info.mantissa_bits == 3 and info.unit_roundoff == 2**-4
    assert dtypes.info(torch.float16).max_finite == 65504.0
    assert dtypes.info("bfloat16").unit_roundoff == 2**-8
    assert dtypes.storage_numpy_dtype("bfloat16") == np.uint16
    assert dtypes.storage_numpy_dtype("e4m3") == np.uint8
    assert dtypes.storage_numpy_dtype("float16") == np.float16


def test_errors():
    with pytest.raises(ValidationError, match="unknown dtype 'float128'"):
        dtypes.to_bits([1.0], "float128")
    with pytest.raises(ValidationError, match="floating"):
        dtypes.to_bits([1.0], "int8")
    with pytest.raises(ValidationError, match="overflow"):
        dtypes.to_bits([1.0], "float16", overflow="clamp")
    with pytest.raises(ValidationError, match="integer array"):
        dtypes.from_bits(np.zeros(3), "float16")
    with pytest.raises(ValidationError, match="integer array"):
        dtypes.from_bits(np.zeros(3, dtype=np.uint8), "bfloat16")
    with pytest.raises(ValidationError):
        dtypes.canonical(np.uint16)
    with pytest.raises(ValidationError):
        dtypes.canonical(torch.complex64)
    assert issubclass(ValidationError, ValueError)
