"""bench/gpu/corpus.py's verdicts, on rows of the shape its GPU run writes (no GPU needed): a
correct kernel that gpuemu flags is a false positive unless the evidence measured beside the run
shows the kernel's own arithmetic coarser than any fp32 softmax."""

import gzip
import json
from pathlib import Path

from bench.gpu import corpus

ROOT = Path(__file__).resolve().parents[2]


def row(**kw):
    r = {"kernel": "softmax (JAX jax.nn.softmax)", "op": "softmax", "dtype": "float16", "bug": "", "buggy": False,
         "framework": "jax", "cases": 100, "failed": 0, "first_failure": None, "worst_ratio": 0.4, "seconds": 1.0,
         "allclose": True, "assert_close": True}
    r.update(kw)
    return r


def test_a_flagged_correct_kernel_is_a_false_positive_unless_its_evidence_says_otherwise():
    assert corpus.verdict(row()) == "pass"
    assert corpus.verdict(row(failed=1, first_failure=3)) == "FALSE POSITIVE"
    near = {"shape": [97, 1142], "row_sum_error_in_u": 1.0, "max_rel_error_in_u": 1.1}
    assert corpus.verdict(row(failed=1, first_failure=3, evidence=near)) == "FALSE POSITIVE"
    far = dict(near, max_rel_error_in_u=10.0)
    assert corpus.verdict(row(failed=1, first_failure=3, evidence=far)) == corpus.IMPRECISE
    assert corpus.verdict(row(bug="tail_leak", buggy=True, failed=1, first_failure=0)) == "caught"
    assert corpus.verdict(row(bug="tail_leak", buggy=True)) == "MISSED"
    md = corpus.markdown([row(), row(failed=1, first_failure=3, evidence=far), row(dtype="bfloat16", failed=1, first_failure=1)],
                         "abc", "GPU")
    assert "(false positives: 1; the kernel's own imprecision, measured beside the run: 1)" in md


def test_the_recorded_h200_corpus_has_every_bug_caught_and_no_false_positive():
    with gzip.open(ROOT / "evidence" / "gpu" / "corpus" / "corpus.jsonl.gz", "rt") as f:
        rows = [json.loads(line) for line in f.read().splitlines()]
    verdicts = [corpus.verdict(r) for r in rows]
    assert len(rows) >= 100
    assert not {"MISSED", "FALSE POSITIVE", "ERROR"} & set(verdicts), verdicts
    assert verdicts.count(corpus.IMPRECISE) == 2
