"""The reference heap's cache (engine/core/ref_heap.hpp) as a user meets it: large reference
outputs freed and made again in one process give the same bits as in a process with the cache
off (GPUEMU_REF_CACHE_MB=0), and a GPUEMU_REF_CACHE_MB that is not a number says so on stderr and
changes no result.

Criteria: bit-identical outputs (value) for softmax, layer_norm and matmul at sizes over the 4 MiB
large-block threshold, computed three times in each process (the second and third calls reuse the
blocks the first freed when the cache is on)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys

SCRIPT = r"""
import hashlib, numpy as np, gpuemu
g = np.random.default_rng(11)
x = g.standard_normal((700, 1024)).astype(np.float32)
w = g.standard_normal(1024).astype(np.float32)
a = g.standard_normal((600, 512)).astype(np.float32)
b = g.standard_normal((512, 1100)).astype(np.float32)
h = hashlib.sha256()
for _ in range(3):
    for op, inputs in (("softmax", {"x": x}),
                       ("layer_norm", {"x": x, "weight": w, "bias": w}),
                       ("matmul", {"a": a, "b": b})):
        out = gpuemu.reference(op, inputs)
        arr = out if isinstance(out, np.ndarray) else out[0]
        h.update(np.ascontiguousarray(arr).tobytes())
print(h.hexdigest())
"""


def run(cache_mb: str | None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("GPUEMU_REF_CACHE_MB", None)
    if cache_mb is not None:
        env["GPUEMU_REF_CACHE_MB"] = cache_mb
    return subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True,
                          timeout=300)


def test_cache_on_off_and_invalid_give_the_same_bits():
    default, off, invalid = run(None), run("0"), run("lots")
    for p in (default, off, invalid):
        assert p.returncode == 0, p.stderr
    assert default.stdout.strip() == off.stdout.strip() == invalid.stdout.strip()
    assert len(default.stdout.strip()) == len(hashlib.sha256().hexdigest())
    assert "GPUEMU_REF_CACHE_MB='lots' is not a number of MiB; using the default" in invalid.stderr
    assert "GPUEMU_REF_CACHE_MB" not in default.stderr + off.stderr
