"""Custom ops (a user's schema plus a float64 Python reference in gpuemu.toml), envelope overrides,
`gpuemu ci` running lint, `gpuemu report --runs daemon`, progress bars and the daemon's log rotation:
through the real binaries and a real daemon in a temporary GPUEMU_HOME (docs/custom-ops.md)."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap

import pytest

from daemon_harness import GPUEMU, Daemon, daemon  # noqa: F401  (daemon: the shared fixture)

SCHEMA = textwrap.dedent('''\
    {
      "name": "scaled_rowsum",
      "version": 1,
      "summary": "scale * sum(x, -1): one sum per row",
      "family": "custom",
      "dtypes": ["float32", "float16"],
      "dims": {
        "R": {"min": 1, "max": 8, "role": "batch"},
        "N": {"min": 1, "max": 300, "role": "reduction"}
      },
      "inputs": [{"name": "x", "shape": ["R", "N"], "dtype": "case", "domain": "real"}],
      "attrs": {"scale": {"type": "float", "default": 2.0}},
      "outputs": [{"name": "out", "shape": ["R"], "dtype": "case"}],
      "reduced_dims": ["N"],
      "reference": "script:ref.py:reference"
    }
''')

REF = textwrap.dedent('''
    import numpy as np

    def reference(inp):
        x = inp["x"]
        assert x.dtype == np.float64, x.dtype     # the daemon sends float64
        s = inp["scale"]
        # The value, then its condition term (what an fp32 sum may accumulate): sum |x| * |scale|.
        return s * x.sum(axis=-1), abs(s) * np.abs(x).sum(axis=-1)

    def reference_values_only(inp):
        return inp["scale"] * inp["x"].sum(axis=-1)

    def reference_raises(inp):
        raise ValueError("no reference today")

    def reference_wrong_axis(inp):
        # Sums over the rows instead of along them: [N] where the schema says [R].
        return inp["scale"] * inp["x"].sum(axis=0)
''')

KERNELS = textwrap.dedent('''
    import time
    import numpy as np

    def good(inp):
        x = inp["x"]
        return (np.float32(inp["scale"]) * x.astype(np.float32).sum(axis=-1)).astype(x.dtype)

    def tail_bug(inp):
        # Drops the last element of rows longer than 64.
        x = inp["x"]
        n = x.shape[-1]
        y = x[..., : n - 1] if n > 64 else x
        return (np.float32(inp["scale"]) * y.astype(np.float32).sum(axis=-1)).astype(x.dtype)

    def slow_good(inp):
        time.sleep(0.05)
        return good(inp)
''')

CONFIG = textwrap.dedent('''
    [project]
    name = "custom"

    [defaults]
    iterations = 12
    seed = 11
    dtypes = ["float32"]

    [custom_ops.scaled_rowsum]
    schema = "ops/scaled_rowsum.json"
    reference = "ops/ref.py:reference"
    control = "kernels.py:good"

    [[op]]
    name = "scaled_rowsum"
    script = "kernels.py:good"

    [[op]]
    name = "scaled_rowsum"
    script = "kernels.py:tail_bug"
    dims = { N = [65, 200] }
''')


@pytest.fixture()
def project(tmp_path):
    p = tmp_path / "proj"
    (p / "ops").mkdir(parents=True)
    (p / "ops" / "scaled_rowsum.json").write_text(SCHEMA)
    (p / "ops" / "ref.py").write_text(REF)
    (p / "kernels.py").write_text(KERNELS)
    (p / "gpuemu.toml").write_text(CONFIG)
    return p


def ci_json(daemon, project, *args, rc=None):
    r = daemon.cli("ci", "--config", str(project / "gpuemu.toml"), "--json", *args)
    if rc is not None:
        assert r.returncode == rc, r.stdout + r.stderr + daemon.log()
    return r, (json.loads(r.stdout) if r.stdout.strip() else None)


def test_custom_op_fuzz_store_and_repro(daemon, project):
    r, doc = ci_json(daemon, project, rc=1)
    good, bad = doc["results"]
    assert good["status"] == "passed" and good["cases"] == 12, good
    assert bad["status"] == "failed", bad
    f = bad["failure"]
    assert f["id"] and f["max_error"] > 4
    # Never calibrated: the fallback envelope judged it, and the run says so.
    assert bad["envelope"]["source"] == "fallback" and bad["envelope"]["value"] == 4
    stored = daemon.cli_json("failures", "show", f["id"])
    assert stored["op"] == "scaled_rowsum"
    assert stored["custom_op"]["name"] == "scaled_rowsum"
    assert stored["custom_op"]["reference"]["function"] == "reference"
    assert stored["envelope_source"]["source"] == "fallback"
    # Replay from the stored bytes and from the seed, through the custom op's reference again.
    rep = daemon.cli_json("repro", f["id"], expect_rc=1)
    assert rep["passed"] is False and rep["regenerated_identical"] is True, rep
    # The plain fuzz command finds the custom op in the nearest gpuemu.toml.
    r = subprocess.run([GPUEMU, "fuzz", "scaled_rowsum", "--script", "kernels.py:good", "-n", "6",
                        "--seed", "3", "--dtype", "float16", "--json"], cwd=project, env=daemon.env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(r.stdout)["passed"] == 6


def test_calibrate_custom_op_against_the_users_control(daemon, project):
    cfg = str(project / "gpuemu.toml")
    r = daemon.cli("calibrate", "scaled_rowsum", "--config", cfg, "--dtype", "float32",
                   "--cases", "8", "--json")
    assert r.returncode == 0, r.stdout + r.stderr + daemon.log()
    (res,) = json.loads(r.stdout)
    assert res["op"] == "scaled_rowsum" and res["dtype"] == "float32" and res["envelope"] >= 2
    assert res["controls"] == ["good"] and res["control_kernels"][0]["function"] == "good"
    assert res["custom_op"]["reference"]["function"] == "reference"
    # Applied and stored: the next run is judged by it, with its provenance.
    r, doc = ci_json(daemon, project, rc=1)
    env = doc["results"][1]["envelope"]
    assert env["source"] == "table" and env["value"] == pytest.approx(res["envelope"])
    assert env["provenance"]["control_kernels"][0]["function"] == "good"
    # No control: a clear error.
    text = (project / "gpuemu.toml").read_text().replace('control = "kernels.py:good"\n', "")
    (project / "gpuemu.toml").write_text(text)
    r = daemon.cli("calibrate", "scaled_rowsum", "--config", cfg, "--cases", "2")
    assert r.returncode == 2 and "control" in r.stderr, r.stderr


def test_envelope_override_judges_and_is_recorded(daemon, project):
    text = (project / "gpuemu.toml").read_text()
    (project / "gpuemu.toml").write_text(text.replace('dims = { N = [65, 200] }',
                                                      'dims = { N = [65, 200] }\nenvelope = 1e12'))
    r, doc = ci_json(daemon, project, rc=0)
    assert doc["results"][1]["status"] == "passed"
    assert doc["results"][1]["envelope"] == {"value": 1e12, "source": "override"}
    # Per dtype: float32 stays tight, the failure records the override that judged it.
    (project / "gpuemu.toml").write_text(text.replace('dims = { N = [65, 200] }',
                                                      'dims = { N = [65, 200] }\nenvelope = { float32 = 3.0 }'))
    r, doc = ci_json(daemon, project, rc=1)
    f = doc["results"][1]["failure"]
    stored = daemon.cli_json("failures", "show", f["id"])
    assert stored["envelope"] == 3.0
    assert stored["envelope_source"] == {"value": 3.0, "source": "override"}
    rep = daemon.cli_json("repro", f["id"], expect_rc=1)
    assert rep["envelope_source"]["source"] == "override"
    # Built-in ops take overrides too (gpuemu fuzz --envelope).
    r = daemon.cli("fuzz", "softmax", "--kernel", "tail_leak", "-n", "5", "--seed", "1",
                   "--dtype", "float32", "--envelope", "1e30", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(r.stdout)["envelope"]["float32"]["source"] == "override"


@pytest.mark.parametrize("edit,message", [
    (('reference = "ops/ref.py:reference"', 'reference = "ops/ref.py:reference"\ntolerance = 2'),
     "gpuemu.toml:13: 'tolerance' in [custom_ops.scaled_rowsum] is not a key: override the envelope"),
    (('[custom_ops.scaled_rowsum]', '[custom_ops.rowsum]'),
     "defines op 'scaled_rowsum', not 'rowsum'"),
    (('reference = "ops/ref.py:reference"', 'reference = "ops/nope.py:reference"'),
     "'reference': no file"),
    (('dims = { N = [65, 200] }', 'dims = { N = [65, 200] }\nenvelope = { bfloat16 = 3.0 }'),
     "envelope: custom op 'scaled_rowsum' does not allow dtype 'bfloat16'"),
])
def test_config_errors_name_the_line(daemon, project, edit, message):
    text = (project / "gpuemu.toml").read_text()
    (project / "gpuemu.toml").write_text(text.replace(*edit))
    r = daemon.cli("ci", "--config", str(project / "gpuemu.toml"))
    assert r.returncode == 2 and message in r.stderr, r.stderr


def test_bad_schema_and_bad_reference(daemon, project):
    (project / "ops" / "scaled_rowsum.json").write_text(SCHEMA.replace('"family": "custom"', '"family": "nope"'))
    r = daemon.cli("ci", "--config", str(project / "gpuemu.toml"))
    assert r.returncode == 2 and "scaled_rowsum.json:5" in r.stderr, r.stderr
    (project / "ops" / "scaled_rowsum.json").write_text(SCHEMA)
    text = (project / "gpuemu.toml").read_text()
    (project / "gpuemu.toml").write_text(text.replace("ref.py:reference", "ref.py:reference_raises"))
    r, doc = ci_json(daemon, project, rc=2)
    assert doc["results"][0]["status"] == "error"
    assert "ValueError: no reference today" in doc["results"][0]["error"]
    # A reference that returns the values only (no condition term) works too.
    (project / "gpuemu.toml").write_text(text.replace("ref.py:reference", "ref.py:reference_values_only"))
    r, doc = ci_json(daemon, project)
    assert [x["status"] for x in doc["results"]][1] == "failed", doc
    assert doc["results"][0]["status"] in ("passed", "failed")  # judged by rounding alone


def test_a_reference_whose_output_contradicts_the_schema_is_an_error_naming_it(daemon, project):
    # Before, the reference's shape was taken as the truth: every case of the correct kernel failed
    # ("contract: shape mismatch: output 'out' has shape [R], expected [N]") and was stored.
    text = (project / "gpuemu.toml").read_text()
    (project / "gpuemu.toml").write_text(text.replace("ref.py:reference", "ref.py:reference_wrong_axis"))
    r, doc = ci_json(daemon, project, rc=2)
    for res in doc["results"]:
        assert res["status"] == "error", res
        assert "ops/ref.py:reference_wrong_axis returned output 'out' of shape" in res["error"], res
        assert "the reference is wrong, not the kernel" in res["error"], res
    assert daemon.cli_json("failures", "list") == []  # nothing stored against the correct kernel
    # The client-side path: the daemon refuses to judge by it, and says why.
    r = subprocess.run([GPUEMU, "fuzz", "scaled_rowsum", "--script", "kernels.py:good", "-n", "4",
                        "--seed", "3"], cwd=project, env=daemon.env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "reference_wrong_axis returned output 'out'" in r.stderr, r.stdout + r.stderr


def test_custom_op_may_not_shadow_a_catalogue_op(daemon, project):
    (project / "ops" / "softmax.json").write_text(SCHEMA.replace('"scaled_rowsum"', '"softmax"'))
    text = CONFIG.replace("scaled_rowsum", "softmax")
    (project / "gpuemu.toml").write_text(text)
    r, doc = ci_json(daemon, project, rc=2)
    assert "has the name of a catalogue op" in doc["results"][0]["error"]


def test_ci_runs_lint_into_junit_and_sarif(daemon, project, tmp_path):
    src = os.path.join(os.path.dirname(__file__), "..", "data", "lint", "kernels.cu")
    (project / "k.cu").write_text(open(src).read())
    text = CONFIG + '\n[lint]\narch = ["sm_90"]\nmax_registers = 1\n\n[ci]\nlint_paths = ["k.cu"]\n'
    (project / "gpuemu.toml").write_text(text)
    junit, sarif = tmp_path / "j.xml", tmp_path / "s.sarif"
    r, doc = ci_json(daemon, project, "--junit", str(junit), "--sarif", str(sarif))
    lint = [x for x in doc["results"] if x["op"] == "lint"]
    if lint and lint[0]["status"] == "error" and "nvcc" in lint[0].get("error", ""):
        pytest.skip("no nvcc: " + lint[0]["error"])
    assert r.returncode == 1, r.stdout + r.stderr
    assert lint and all(x["status"] == "failed" for x in lint), lint
    assert lint[0]["failure"]["bug_class"].startswith("lint-")
    assert "gpuemu.lint" in junit.read_text()
    rules = {res["ruleId"] for res in json.loads(sarif.read_text())["runs"][0]["results"]}
    assert any(rule.startswith("gpuemu/lint-") for rule in rules), rules
    # Within the limits: a passed lint test case.
    (project / "gpuemu.toml").write_text(text.replace("max_registers = 1", "max_registers = 255"))
    r, doc = ci_json(daemon, project)
    assert [x["status"] for x in doc["results"] if x["op"] == "lint"] == ["passed"]


def test_report_reads_the_daemons_run_history(daemon, project):
    ci_json(daemon, project, rc=1)
    r = daemon.cli("report", "--format", "json", "--runs", "daemon")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    runs = doc["daemon_runs"]
    assert len(runs) == 2 and {r["op"] for r in runs} == {"scaled_rowsum"}
    assert doc["runs"] == []
    text = daemon.cli("report", "--runs", "all").stdout
    assert "daemon runs (store):" in text and "recent ci runs:" in text


def test_progress_bar_only_on_a_tty(daemon, project):
    cmd = (f"{GPUEMU} fuzz scaled_rowsum --script kernels.py:slow_good -n 12 --seed 2 "
           f"--dtype float32")
    env = dict(daemon.env, TERM="xterm")
    r = subprocess.run(["script", "-qec", cmd, "/dev/null"], cwd=project, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "scaled_rowsum [" in r.stdout and "/12" in r.stdout, r.stdout
    assert "\033[32m" not in r.stdout  # NO_COLOR (the harness sets it)
    # Not a TTY (or --json): no bar at all.
    r = subprocess.run(cmd.split(), cwd=project, env=env, capture_output=True, text=True, timeout=120)
    assert "[#" not in r.stderr and "[." not in r.stderr


def test_daemon_log_rotates(tmp_path):
    d = Daemon(tmp_path / "home")
    d.env["GPUEMU_LOG_MAX_BYTES"] = "2048"
    try:
        d.start()
        for _ in range(40):
            assert d.cli("failures", "list").returncode == 0
        logs = sorted(p.name for p in (tmp_path / "home" / "logs").iterdir())
        assert "daemon.log" in logs and "daemon.1.log" in logs, logs
        assert (tmp_path / "home" / "logs" / "daemon.1.log").stat().st_size <= 2048 + 512
        assert "failures ok" in (tmp_path / "home" / "logs" / "daemon.log").read_text() + \
            (tmp_path / "home" / "logs" / "daemon.1.log").read_text()
    finally:
        d.stop()


ADD_RMS_SCHEMA = textwrap.dedent('''\
    {
      "name": "add_rms_norm", "version": 1, "summary": "(x + residual) * rsqrt(mean((x + residual)^2) + eps) * weight",
      "family": "custom", "dtypes": ["float32", "float16"],
      "dims": {"R": {"min": 1, "max": 64, "role": "batch"}, "N": {"min": 1, "max": 4096, "role": "reduction"}},
      "inputs": [{"name": "x", "shape": ["R", "N"], "dtype": "case", "domain": "real"},
                 {"name": "residual", "shape": ["R", "N"], "dtype": "case", "domain": "real"},
                 {"name": "weight", "shape": ["N"], "dtype": "case", "domain": "real"}],
      "attrs": {"eps": {"type": "float", "default": 1e-6}},
      "outputs": [{"name": "out", "shape": "like:x", "dtype": "case"}],
      "reduced_dims": ["N"], "max_elements": 65536,
      "reference": "script:ref.py:reference"
    }
''')

ADD_RMS_REF = textwrap.dedent('''
    import numpy as np

    def reference(inp):  # the value only, as docs/custom-ops.md shows: the condition term is derived
        h = inp["x"] + inp["residual"]
        return h / np.sqrt((h * h).mean(axis=-1, keepdims=True) + inp["eps"]) * inp["weight"]

    def reference_rounding_only(inp):  # the same value with a zero condition term: output rounding alone
        v = reference(inp)
        return v, np.zeros_like(v)
''')

ADD_RMS_KERNELS = textwrap.dedent('''
    import numpy as np

    def fused(inp):  # a correct fp32 kernel: the sum of squares in 128-wide tiles, fp32 throughout
        x, r, w = (inp[k].astype(np.float32) for k in ("x", "residual", "weight"))
        h = x + r
        ss = np.zeros(h.shape[:-1], np.float32)
        for s in range(0, h.shape[-1], 128):
            t = h[..., s:s + 128]
            ss += (t * t).sum(axis=-1, dtype=np.float32)
        rstd = np.float32(1) / np.sqrt(ss / np.float32(h.shape[-1]) + np.float32(inp["eps"]))
        return (h * rstd[..., None] * w).astype(inp["x"].dtype)

    def norm_without_residual(inp):  # the bug: the rms of x alone
        x, r, w = (inp[k].astype(np.float32) for k in ("x", "residual", "weight"))
        rstd = np.float32(1) / np.sqrt((x * x).mean(axis=-1) + np.float32(inp["eps"]))
        return ((x + r) * rstd[..., None] * w).astype(inp["x"].dtype)
''')


def test_a_reference_without_a_condition_term_gets_it_derived(daemon, tmp_path):
    """The issue's add + rms_norm, written as docs/custom-ops.md shows (a numpy reference that
    returns values only): a correct fp32 kernel failed 20 of 100 cases at 4.28 against the fallback
    envelope of 4 when only output rounding judged it. The runner now derives the term from the
    reference's own operations: the kernel passes, the bug still fails."""
    p = tmp_path / "proj"
    (p / "ops").mkdir(parents=True)
    (p / "ops" / "add_rms_norm.json").write_text(ADD_RMS_SCHEMA)
    (p / "ops" / "ref.py").write_text(ADD_RMS_REF)
    (p / "kernels.py").write_text(ADD_RMS_KERNELS)
    config = textwrap.dedent('''
        [project]
        name = "add_rms"
        [defaults]
        iterations = 100
        seed = 20261207
        dtypes = ["float32", "float16"]
        [custom_ops.add_rms_norm]
        schema = "ops/add_rms_norm.json"
        reference = "ops/REF"
        [[op]]
        name = "add_rms_norm"
        script = "kernels.py:fused"
        [[op]]
        name = "add_rms_norm"
        script = "kernels.py:norm_without_residual"
    ''')
    (p / "gpuemu.toml").write_text(config.replace("REF", "ref.py:reference"))
    r, doc = ci_json(daemon, p)
    # one result per kernel and dtype
    by = {(x["kernel"], x["dtype"]): x for x in doc["results"]}
    for dt in ("float32", "float16"):
        fused, bug = by[("kernels.py:fused", dt)], by[("kernels.py:norm_without_residual", dt)]
        assert fused["status"] == "passed" and fused["cases"] == 100 and fused["failed_cases"] == 0, fused
        assert bug["status"] == "failed" and bug["failed_cases"] > 80, bug
    # the same reference with its condition term zeroed: the correct kernel fails (what the
    # derivation is for)
    (p / "gpuemu.toml").write_text(config.replace("REF", "ref.py:reference_rounding_only"))
    r, doc = ci_json(daemon, p)
    assert any(x["kernel"] == "kernels.py:fused" and x["status"] == "failed" for x in doc["results"]), doc["results"]
