"""The evidence corpus (bench/corpus), bounded: every kernel for 20 adversarial cases under one
master seed. Every correct kernel passes, every buggy one is caught and its first failure is
diagnosed as its class; the tail-mask bugs minimize to one past a block boundary. The full
measurement is bench/evidence.py (docs/evidence.md)."""

from __future__ import annotations

import functools
import re
import sys

import pytest

torch = pytest.importorskip("torch")
torch.set_num_threads(1)  # 2 threads on this loaded 2-core VM run ~20x slower (spin-waits)

from bench import corpus  # noqa: E402

SEED = 20261129  # the first master seed of bench/evidence.py
CASES = 20


def test_corpus_shape():
    correct = [k for k in corpus.KERNELS if k.correct]
    buggy = [k for k in corpus.KERNELS if not k.correct]
    assert len(correct) >= 12 and len(buggy) >= 12
    assert set(corpus.BUG_CLASSES) <= {k.bug for k in buggy}, "every bug class has a kernel"
    assert {k.op for k in buggy} <= {k.op for k in correct}, "every buggy op has a correct counterpart"
    assert set(corpus.DIAGNOSIS) == set(corpus.BUG_CLASSES), "every bug class names its diagnosis"


@pytest.mark.parametrize("kernel", [k for k in corpus.KERNELS if k.correct], ids=lambda k: k.name)
def test_correct_kernel_passes(kernel):
    r = corpus.fuzz(kernel, iterations=CASES, seed=SEED, diagnose=False)
    assert r.ok, r.summary()


@functools.lru_cache(maxsize=None)
def _bug_run(name: str):
    """One fail-fast run per bug kernel, diagnosed (and minimized for the tail masks), shared by
    the tests below so that no kernel is fuzzed twice."""
    kernel = corpus.BY_NAME[name]
    return corpus.fuzz(kernel, iterations=CASES, seed=SEED, fail_fast=True, diagnose=True,
                       minimize=kernel.bug == "tail_mask")


@pytest.mark.parametrize("kernel", [k for k in corpus.KERNELS if not k.correct], ids=lambda k: k.name)
def test_buggy_kernel_is_caught(kernel):
    r = _bug_run(kernel.name)
    assert not r.ok, f"{kernel.name} ({kernel.bug}) passed {r.total} cases"


# (a bug class the engine has no diagnosis of its own for, DIAGNOSIS None, is only caught)
@pytest.mark.parametrize("kernel", [k for k in corpus.KERNELS if not k.correct and k.diagnosis is not None],
                         ids=lambda k: k.name)
def test_buggy_kernel_is_diagnosed_as_its_class(kernel):
    r = _bug_run(kernel.name)
    assert r.failures
    f = r.failures[0]
    assert f.bug_class == kernel.diagnosis, f"{kernel.name} ({kernel.bug}): {f.describe()}"


@pytest.mark.parametrize("kernel", [k for k in corpus.KERNELS if k.bug == "tail_mask"], ids=lambda k: k.name)
def test_tail_mask_minimizes_one_past_a_block(kernel):
    r = _bug_run(kernel.name)
    assert r.failures
    summary = r.failures[0].minimized["summary"]
    block = getattr(sys.modules[kernel.run.__module__], "BLOCK")
    # e.g. "fails at R=2, passes at R=1; fails at N=1025, passes at N=1024 [N=1025, R=2]"
    clauses = [(int(a), int(b)) for a, b in re.findall(r"fails at \w+=(\d+), passes at \w+=(\d+)", summary)]
    assert (block + 1, block) in clauses, summary
