"""gpuemu.kernelbench and `gpuemu kernelbench`: KernelBench's format judged by fuzzing and the derived
error model, with the reward-hack verdicts (docs/kernelbench.md). Problems and candidates are
written here (tmp files), run by real PyTorch (CPU) and the real engine; the CLI is the built binary."""

import json
import os
import subprocess
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from gpuemu.kernelbench import ProblemOp, judge_candidate, judge_pair, load_candidate, load_problem  # noqa: E402

GPUEMU = os.path.join(os.environ.get("GPUEMU_BIN_DIR", "build/bin"), "gpuemu")
CASES = 12

SOFTMAX = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
    def forward(self, x):
        return torch.softmax(x, dim=1)

batch_size = 16
dim = 300

def get_inputs():
    return [torch.rand(batch_size, dim)]

def get_init_inputs():
    return []
'''

ADD_RMS = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, hidden, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(hidden))
        self.eps = eps
    def forward(self, x, residual):
        h = x + residual
        return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight

batch_size = 8
hidden = 256

def get_inputs():
    return [torch.randn(batch_size, hidden), torch.randn(batch_size, hidden)]

def get_init_inputs():
    return [hidden, 1e-6]
'''

# A kernel emulated in numpy (a custom kernel on this CPU machine: no aten compute op).
NP = "import numpy as np\nimport torch\nimport torch.nn as nn\n"

CANDIDATES = {
    "softmax": {
        "two_pass": NP + '''
class ModelNew(nn.Module):
    def forward(self, x):
        a = x.detach().float().contiguous().numpy()
        e = np.exp(a - a.max(1, keepdims=True))
        return torch.from_numpy(e / e.sum(1, keepdims=True, dtype=np.float32)).to(x.dtype)
''',
        "online_tiled": NP + '''
class ModelNew(nn.Module):
    def forward(self, x):
        a = x.detach().float().contiguous().numpy()
        m = np.full(a.shape[0], -np.inf, np.float32); s = np.zeros(a.shape[0], np.float32)
        for c in range(0, a.shape[1], 64):
            t = a[:, c:c + 64]
            m2 = np.maximum(m, t.max(1))
            s = s * np.exp(m - m2) + np.exp(t - m2[:, None]).sum(1, dtype=np.float32)
            m = m2
        return torch.from_numpy(np.exp(a - m[:, None]) / s[:, None]).to(x.dtype)
''',
        "no_max": NP + '''
class ModelNew(nn.Module):
    def forward(self, x):
        e = np.exp(x.detach().float().contiguous().numpy())
        return torch.from_numpy(e / e.sum(1, keepdims=True)).to(x.dtype)
''',
        "zeros": NP + '''
class ModelNew(nn.Module):
    def forward(self, x):
        return torch.zeros_like(x)
''',
        "calls_reference": NP + '''
class ModelNew(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=1)
''',
        "in_place": NP + '''
class ModelNew(nn.Module):
    def forward(self, x):
        a = x.detach().float().contiguous().numpy()
        e = np.exp(a - a.max(1, keepdims=True))
        x.copy_(torch.from_numpy(e / e.sum(1, keepdims=True)))
        return x
''',
        "unwritten": NP + '''
class ModelNew(nn.Module):
    def forward(self, x):
        a = x.detach().float().contiguous().numpy()
        e = np.exp(a - a.max(1, keepdims=True))
        out = torch.empty_like(x)
        out[:, :-1] = torch.from_numpy((e / e.sum(1, keepdims=True))[:, :-1]).to(x.dtype)
        return out
''',
        "stale_cache": NP + '''
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.cache = {}
    def forward(self, x):
        if tuple(x.shape) not in self.cache:
            a = x.detach().float().contiguous().numpy()
            e = np.exp(a - a.max(1, keepdims=True))
            self.cache[tuple(x.shape)] = torch.from_numpy(e / e.sum(1, keepdims=True)).to(x.dtype)
        return self.cache[tuple(x.shape)].clone()
''',
        "wrong_dtype": NP + '''
class ModelNew(nn.Module):
    def forward(self, x):
        a = x.detach().float().contiguous().numpy()
        e = np.exp(a - a.max(1, keepdims=True))
        return torch.from_numpy(e / e.sum(1, keepdims=True))
''',
        "wrong_shape": NP + '''
class ModelNew(nn.Module):
    def forward(self, x):
        a = x.detach().float().contiguous().numpy()
        e = np.exp(a - a.max(1, keepdims=True))
        return torch.from_numpy((e / e.sum(1, keepdims=True))[:1]).to(x.dtype)
''',
        "noisy": NP + '''
class ModelNew(nn.Module):
    def forward(self, x):
        a = x.detach().float().contiguous().numpy()
        e = np.exp(a - a.max(1, keepdims=True))
        order = np.random.permutation(a.shape[1])  # an atomic-add order that changes run to run
        s = np.zeros(a.shape[0], np.float32)
        for j in order:
            s += e[:, j]
        return torch.from_numpy(e / s[:, None]).to(x.dtype)
''',
        "bad_signature": NP + '''
class ModelNew(nn.Module):
    def __init__(self, needs_an_argument):
        super().__init__()
    def forward(self, x):
        return x
''',
    },
    "add_rms": {
        "fused": NP + '''
class ModelNew(nn.Module):
    def __init__(self, hidden, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(hidden))
        self.eps = eps
    def forward(self, x, residual):
        h = x.detach().float().contiguous().numpy() + residual.detach().float().contiguous().numpy()
        ms = (h * h).sum(-1, keepdims=True, dtype=np.float32) / np.float32(h.shape[-1])
        w = self.weight.detach().float().numpy()
        return torch.from_numpy(h / np.sqrt(ms + np.float32(self.eps)) * w).to(x.dtype)
''',
        "norm_without_residual": NP + '''
class ModelNew(nn.Module):
    def __init__(self, hidden, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(hidden))
        self.eps = eps
    def forward(self, x, residual):
        a = x.detach().float().contiguous().numpy()
        h = a + residual.detach().float().contiguous().numpy()
        ms = (a * a).mean(-1, keepdims=True)
        return torch.from_numpy(h / np.sqrt(ms + self.eps) * self.weight.detach().float().numpy()).to(x.dtype)
''',
    },
}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("kb")
    (root / "problems").mkdir()
    for name, text in (("softmax", SOFTMAX), ("add_rms", ADD_RMS)):
        (root / "problems" / f"{name}.py").write_text(textwrap.dedent(text))
        d = root / "candidates" / name
        d.mkdir(parents=True)
        for cname, ctext in CANDIDATES[name].items():
            (d / f"{cname}.py").write_text(ctext)
    return root


@pytest.fixture(scope="module")
def softmax_op(corpus):
    return ProblemOp(load_problem(corpus / "problems" / "softmax.py"), "float32", cases=CASES)


def _judge(pop, corpus, name, **kw):
    return judge_candidate(pop, load_candidate(corpus / "candidates" / pop.problem.name / f"{name}.py"), **kw)


@pytest.mark.parametrize("name", ["two_pass", "online_tiled"])
def test_correct_candidates_pass(softmax_op, corpus, name):
    r = _judge(softmax_op, corpus, name)
    assert r.verdict == "passed" and r.passed == CASES and not r.hacks, r.summary()


@pytest.mark.parametrize("name,cls", [
    ("zeros", "constant_output"),
    ("calls_reference", "calls_reference"),
    ("in_place", "mutated_inputs"),
    ("unwritten", "unwritten_output"),
    ("stale_cache", "stale_output"),
    ("wrong_dtype", None),  # float32 returned in a float32 run is right: see the bfloat16 test
    ("wrong_shape", "wrong_shape"),
])
def test_each_hack_is_a_named_failure_with_its_evidence(softmax_op, corpus, name, cls):
    r = _judge(softmax_op, corpus, name)
    if cls is None:
        assert r.verdict == "passed", r.summary()
        return
    assert r.verdict == "failed", r.summary()
    assert cls in r.failure_classes and any(h["class"] == cls and h["evidence"] for h in r.hacks), r.summary()


def test_aliasing_an_input_is_named(softmax_op, corpus):
    r = _judge(softmax_op, corpus, "in_place")
    assert "aliasing" in r.failure_classes, r.summary()


def test_a_numerical_bug_is_caught_and_diagnosed(softmax_op, corpus):
    r = _judge(softmax_op, corpus, "no_max")
    assert r.verdict == "failed" and "numerical" in r.failure_classes, r.summary()
    assert r.first_failure["diagnosis"]["bug_class"] == "overflow", r.first_failure
    # the worst element and the bound's terms there, named; strict JSON (NaN as a string)
    terms = r.first_failure["worst"]["bound_terms"]
    assert set(terms) == {"output_rounding", "fp32_arithmetic", "case_dtype_rounding", "measuring_stick",
                          "pytorch_in_case_dtype"}
    assert terms["fp32_arithmetic"] > 0
    json.loads(json.dumps(r.to_json()), parse_constant=lambda c: pytest.fail(f"non-strict JSON constant {c}"))


def test_nondeterminism_only_when_asked_for(softmax_op, corpus):
    assert _judge(softmax_op, corpus, "noisy").verdict == "passed"
    r = _judge(softmax_op, corpus, "noisy", deterministic=True)
    assert r.verdict == "failed" and "nondeterminism" in r.failure_classes, r.summary()


def test_wrong_dtype_in_bfloat16(corpus):
    r = judge_pair(corpus / "problems" / "softmax.py", corpus / "candidates" / "softmax" / "wrong_dtype.py",
                   dtype="bfloat16", cases=4)
    assert r.verdict == "failed" and "wrong_dtype" in r.failure_classes, r.summary()


def test_the_references_are_made_once_and_shared(corpus):
    pop = ProblemOp(load_problem(corpus / "problems" / "add_rms.py"), "bfloat16", cases=CASES)
    calls = []
    original = pop.op.reference
    pop.op.reference = lambda *a: calls.append(1) or original(*a)  # what the engine would call again
    fused = _judge(pop, corpus, "fused")
    wrong = _judge(pop, corpus, "norm_without_residual")
    assert calls == []  # the cases' references were computed when the problem op was made
    assert fused.verdict == "passed", fused.summary()
    # (a case whose residual is tiny next to x hides the bug: the adversarial magnitudes draw some)
    assert wrong.verdict == "failed" and wrong.passed < CASES // 2, wrong.summary()
    # the parameter is the model's: ModelNew's own random init was replaced by the Model's values
    assert "hidden" in pop.op.schema["dims"] and pop.op.schema["dims"]["hidden"]["values"] == [256]


def test_bad_input_is_an_error_result_not_a_crash(corpus, tmp_path):
    broken = tmp_path / "broken.py"
    broken.write_text("import torch\nraise RuntimeError('no problem today')\n")
    r = judge_pair(broken, corpus / "candidates" / "softmax" / "two_pass.py", cases=2)
    assert r.verdict == "error" and "does not import" in r.error and "no problem today" in r.error
    r = judge_pair(corpus / "problems" / "softmax.py", corpus / "candidates" / "softmax" / "bad_signature.py", cases=2)
    assert r.verdict == "error" and "ModelNew(*get_init_inputs()) raised TypeError" in r.error
    no_model = tmp_path / "no_model.py"
    no_model.write_text("def get_inputs():\n    return []\n")
    r = judge_pair(no_model, corpus / "candidates" / "softmax" / "two_pass.py", cases=2)
    assert r.verdict == "error" and "no Model" in r.error
    raising = tmp_path / "raising.py"
    raising.write_text(SOFTMAX.replace("return torch.softmax(x, dim=1)", "raise ValueError('reference down')"))
    r = judge_pair(raising, corpus / "candidates" / "softmax" / "two_pass.py", cases=2)
    assert r.verdict == "error" and "reference down" in r.error


def _cli(*args):
    return subprocess.run([GPUEMU, "kernelbench", *map(str, args)], capture_output=True, text=True, timeout=600)


def test_the_cli_exit_codes_and_json(corpus):
    ok = _cli(corpus / "problems" / "softmax.py", corpus / "candidates" / "softmax" / "two_pass.py",
              "--cases", 4, "--json")
    assert ok.returncode == 0, ok.stderr
    doc = json.loads(ok.stdout)
    assert doc["verdict"] == "passed" and doc["cases"] == 4 and doc["dtype"] == "float32"
    bad = _cli(corpus / "problems" / "softmax.py", corpus / "candidates" / "softmax" / "zeros.py", "--cases", 4)
    assert bad.returncode == 1 and "constant_output" in bad.stdout
    usage = _cli(corpus / "problems" / "softmax.py", corpus / "candidates" / "softmax" / "two_pass.py", "--cases", 0)
    assert usage.returncode == 2 and "--cases" in usage.stderr
    err = _cli(corpus / "problems" / "softmax.py", corpus / "candidates" / "softmax" / "bad_signature.py")
    assert err.returncode == 2 and "ModelNew" in err.stdout


def test_the_directory_mode_writes_a_line_a_pair_and_goes_on_past_bad_pairs(corpus):
    r = _cli(corpus / "problems", corpus / "candidates", "--cases", 3)
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    n = sum(len(v) for v in CANDIDATES.values())
    assert len(lines) == n, r.stderr
    by = {(x["problem"], x["candidate"]): x for x in lines}
    assert by[("softmax", "bad_signature")]["verdict"] == "error"
    assert by[("softmax", "two_pass")]["verdict"] == "passed"
    assert by[("add_rms", "fused")]["verdict"] == "passed"
    assert by[("add_rms", "norm_without_residual")]["verdict"] == "failed"
    assert r.returncode == 2  # a pair could not be judged; every other pair was
    assert f"{n} pairs" in r.stderr
