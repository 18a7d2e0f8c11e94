"""A torch op registered in gpuemu.toml (`[custom_ops.NAME] torch_op = "FILE.py:OP"`): `gpuemu ci`
reads its inferred schema from Python, the daemon runs its reference (value, c_acc, c_in) in a
script process, so a correct kernel passes under the envelope of 2, a buggy one fails, and the
stored failure replays from any directory; bad entries are config errors naming their line; an op
whose file changed is refused on replay; the editor's runOps runs it. Real daemon, real CLI, real
PyTorch (CPU)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("torch")

from daemon_harness import GPUEMU, daemon  # noqa: F401,E402  (the shared daemon fixture)
from lsp_client import LspClient  # noqa: E402

OPS = textwrap.dedent('''\
    import torch
    import gpuemu


    class AddRmsNorm(torch.nn.Module):
        def __init__(self, n):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.linspace(0.5, 1.5, n))

        def forward(self, x, residual):
            h = x + residual
            return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


    def make():
        return gpuemu.torch_op("add_rms_norm", reference=AddRmsNorm(256),
                               example_inputs=(torch.randn(4, 256), torch.randn(4, 256)), dtypes=DTYPES)


    DTYPES = ["float32", "bfloat16"]
    OP = make()
''')

KERNELS = textwrap.dedent('''\
    import torch


    def _weight(dtype):
        return torch.linspace(0.5, 1.5, 256).to(dtype).float()


    def good(inp):
        x, r = inp["x"], inp["residual"]
        h = x.float() + r.float()
        return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * _weight(x.dtype)).to(x.dtype)


    def no_residual(inp):  # the residual left out of the norm
        x = inp["x"]
        h = x.float()
        return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * _weight(x.dtype)).to(x.dtype)
''')

CONFIG = textwrap.dedent('''\
    [project]
    name = "torch-ops"

    [defaults]
    iterations = 12
    seed = 5
    framework = "torch"

    [custom_ops.add_rms_norm]
    torch_op = "ops.py:OP"

    [[op]]
    name = "add_rms_norm"
    script = "kernels.py:good"

    [[op]]
    name = "add_rms_norm"
    script = "kernels.py:no_residual"
    dtypes = ["float32"]
''')


@pytest.fixture()
def project(tmp_path):
    p = tmp_path / "proj"
    p.mkdir()
    (p / "ops.py").write_text(OPS)
    (p / "kernels.py").write_text(KERNELS)
    (p / "gpuemu.toml").write_text(CONFIG)
    return p


def ci(daemon, project, rc):  # noqa: F811
    r = daemon.cli("ci", "--config", str(project / "gpuemu.toml"), "--json", timeout=300)
    assert r.returncode == rc, r.stdout + r.stderr + daemon.log()
    return json.loads(r.stdout) if r.stdout.strip() else None


def test_ci_judges_a_torch_op_and_its_failures_replay_anywhere(daemon, project, tmp_path):  # noqa: F811
    doc = ci(daemon, project, 1)
    rows = {(r["kernel"], r["dtype"]): r for r in doc["results"]}
    # Every dtype the op allows for the entry without dtypes, the one asked for the other.
    assert sorted(rows) == [("kernels.py:good", "bfloat16"), ("kernels.py:good", "float32"),
                            ("kernels.py:no_residual", "float32")], sorted(rows)
    for dt in ("float32", "bfloat16"):
        good = rows[("kernels.py:good", dt)]
        assert good["status"] == "passed" and good["cases"] == 12, good
        # the op's own envelope (2: no term of a derived bound is calibrated), not the fallback of 4
        assert good["envelope"]["value"] == 2, good["envelope"]
    bad = rows[("kernels.py:no_residual", "float32")]
    assert bad["status"] == "failed" and bad["failure"]["max_error"] > 10, bad
    fid = bad["failure"]["id"]
    stored = daemon.cli_json("failures", "show", fid)
    assert stored["custom_op"]["reference"]["torch_op"] is True
    assert stored["custom_op"]["reference"]["function"] == "OP"
    assert json.loads(stored["custom_op"]["schema"])["reference"] == "torch:add_rms_norm"
    # Replayed from another directory: the daemon runs the op's reference itself.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    r = subprocess.run([GPUEMU, "repro", fid, "--json"], cwd=elsewhere, env=daemon.env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 1, r.stdout + r.stderr
    rep = json.loads(r.stdout)
    assert rep["passed"] is False and rep["regenerated_identical"] is True, rep
    # `gpuemu fuzz` finds the op in the nearest gpuemu.toml, as it does a schema-file custom op.
    r = subprocess.run([GPUEMU, "fuzz", "add_rms_norm", "--script", "kernels.py:good", "--framework", "torch",
                        "-n", "6", "--seed", "3", "--dtype", "bfloat16", "--json"], cwd=project, env=daemon.env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(r.stdout)["passed"] == 6

    # The schema gpuemu ci read is the one `python -m gpuemu.torch_ops schema` prints.
    r = subprocess.run([sys.executable, "-m", "gpuemu.torch_ops", "schema", "ops.py:OP"], cwd=project,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    printed = json.loads(r.stdout)
    assert printed["name"] == "add_rms_norm" and json.loads(printed["schema"]) == json.loads(stored["custom_op"]["schema"])
    r = subprocess.run([sys.executable, "-m", "gpuemu.torch_ops", "schema", "ops.py:nope"], cwd=project,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "has no 'nope'" in r.stderr, r.stderr

    # The op's file changes (it now infers another schema): its failure is refused, not misjudged.
    (project / "ops.py").write_text(OPS.replace('DTYPES = ["float32", "bfloat16"]', 'DTYPES = ["float32"]'))
    r = daemon.cli("repro", fid, "--json", timeout=300)
    assert r.returncode not in (0, 1), r.stdout + r.stderr
    assert "now infers another schema" in r.stdout + r.stderr, r.stdout + r.stderr


@pytest.mark.parametrize("entry, message", [
    ('torch_op = "ops.py:nope"', "has no 'nope'"),
    ('torch_op = "ops.py:AddRmsNorm"', "is a type, not a gpuemu.torch_op"),
    ('torch_op = "broken.py:OP"', "RuntimeError: boom at import"),
    ('torch_op = "missing.py:OP"', "no file"),
    ('torch_op = "ops.py:OP"\nschema = "x.json"', "'schema' and 'torch_op' exclude each other"),
])
def test_bad_torch_op_entries_are_config_errors_naming_the_line(daemon, project, entry, message):  # noqa: F811
    (project / "broken.py").write_text('raise RuntimeError("boom at import")\n')
    (project / "gpuemu.toml").write_text(CONFIG.replace('torch_op = "ops.py:OP"', entry))
    r = daemon.cli("ci", "--config", str(project / "gpuemu.toml"), timeout=300)
    assert r.returncode == 2, r.stdout + r.stderr
    assert message in r.stderr and "gpuemu.toml:" in r.stderr, r.stderr
    # Python reads the file with the same reader: the same error, word for word.
    import gpuemu

    with pytest.raises(gpuemu.ValidationError) as e:
        gpuemu.Client().run_registered("add_rms_norm", kernel="good", config=project / "gpuemu.toml")
    assert ("gpuemu: error: " + str(e.value)).strip() == r.stderr.strip(), (str(e.value), r.stderr)


def test_a_table_named_unlike_its_op_and_a_dtype_it_does_not_allow_are_refused(daemon, project):  # noqa: F811
    (project / "gpuemu.toml").write_text(CONFIG.replace("[custom_ops.add_rms_norm]", "[custom_ops.other]")
                                         .replace('name = "add_rms_norm"', 'name = "other"'))
    r = daemon.cli("ci", "--config", str(project / "gpuemu.toml"), timeout=300)
    assert r.returncode == 2 and "the op is named 'add_rms_norm', the table 'other'" in r.stderr, r.stderr
    (project / "gpuemu.toml").write_text(CONFIG.replace('dtypes = ["float32"]', 'dtypes = ["float16"]'))
    r = daemon.cli("ci", "--config", str(project / "gpuemu.toml"), timeout=300)
    assert r.returncode == 2 and "does not allow dtype 'float16'" in r.stderr, r.stderr


def test_the_editor_runs_a_torch_op_entry(daemon, project):  # noqa: F811
    daemon.start()
    c = LspClient([GPUEMU, "lsp"], dict(daemon.env))
    try:
        c.initialize(project, home=str(daemon.home), pollIntervalMs=100, python=sys.executable)
        ops = c.result("gpuemu/ops")["ops"]
        assert [o["op"] for o in ops] == ["add_rms_norm", "add_rms_norm"], ops
        run = {r["kernel"]: r for r in c.result("gpuemu/runOps", {"ids": [o["id"] for o in ops]},
                                                timeout=300)["results"]}
        assert run["kernels.py:good"]["status"] == "passed", run
        assert run["kernels.py:no_residual"]["status"] == "failed" and run["kernels.py:no_residual"]["failed"] > 0, run
    finally:
        rc = c.close()
    assert rc == 0, "".join(c.stderr_lines)


def test_run_registered_runs_a_torch_op_entry_as_gpuemu_ci_does(daemon, project):  # noqa: F811
    """Python reads gpuemu.toml with the CLI's reader, torch ops included (their schema read by the
    package's own script runner); its reader before knew no [custom_ops]."""
    from gpuemu import Client

    client = Client()
    good = client.run_registered("add_rms_norm", kernel="good", config=project / "gpuemu.toml")
    assert good.total == 12 and good.passed == 12, good.summary()
    bad = client.run_registered("add_rms_norm", kernel="no_residual", config=project / "gpuemu.toml")
    assert bad.total == 12 and bad.passed < 12, bad.summary()
    assert bad.failures[0].max_error > 10
