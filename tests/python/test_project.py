"""gpuemu init / ci / report / report verify through the real binaries and a real daemon."""

from __future__ import annotations

import json
import textwrap
import xml.etree.ElementTree as ET

import pytest

from daemon_harness import daemon  # noqa: F401  (the shared daemon fixture)

KERNELS = textwrap.dedent('''
    import numpy as np

    def softmax(inputs):
        x = inputs["x"].astype(np.float32)
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    def softmax_no_max(inputs):
        # Buggy: forgets to normalise by the sum on rows longer than 64.
        x = inputs["x"].astype(np.float32)
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        s = e.sum(axis=-1, keepdims=True)
        if x.shape[-1] > 64:
            s = s * 0 + 1
        return e / s
''')

CONFIG = textwrap.dedent('''
    [project]
    name = "demo"

    [defaults]
    iterations = 12
    seed = 7
    dtypes = ["float32"]

    [[op]]
    name = "softmax"
    script = "kernels/softmax.py:softmax"

    [[op]]
    name = "softmax"
    script = "kernels/softmax.py:softmax_no_max"
    dims = { N = [65, 130] }
''')


@pytest.fixture()
def project(tmp_path):
    p = tmp_path / "proj"
    (p / "kernels").mkdir(parents=True)
    (p / "kernels" / "softmax.py").write_text(KERNELS)
    (p / "gpuemu.toml").write_text(CONFIG)
    return p


def test_init_writes_a_config_that_ci_accepts(daemon, tmp_path):
    cfg = tmp_path / "init" / "gpuemu.toml"
    cfg.parent.mkdir()
    r = daemon.cli("init", "--config", str(cfg))
    assert r.returncode == 0, r.stderr
    assert cfg.read_text().startswith("#")
    r = daemon.cli("init", "--config", str(cfg))
    assert r.returncode == 2 and "--force" in r.stderr
    assert daemon.cli("init", "--config", str(cfg), "--force").returncode == 0
    r = daemon.cli("ci", "--quick", "--config", str(cfg), "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    assert doc["summary"]["failed"] == 0 and doc["summary"]["total"] >= 1
    assert doc["preset"] == "quick" and doc["results"][0]["cases"] == 10


def test_ci_junit_sarif_and_reports(daemon, project, tmp_path):
    junit, sarif = tmp_path / "junit.xml", tmp_path / "out.sarif"
    r = daemon.cli("ci", "--config", str(project / "gpuemu.toml"), "--junit", str(junit), "--sarif", str(sarif))
    assert r.returncode == 1, r.stdout + r.stderr + daemon.log()
    assert "softmax_no_max" in r.stdout

    suite = ET.parse(junit).getroot()
    cases = suite.findall(".//testcase")
    assert len(cases) == 2
    failed = [c for c in cases if c.find("failure") is not None]
    assert len(failed) == 1 and "softmax_no_max" in failed[0].get("name")
    text = failed[0].find("failure").text
    assert "seed:" in text and "diagnosis:" in text and "repro:     gpuemu repro" in text

    s = json.loads(sarif.read_text())
    assert s["version"] == "2.1.0"
    results = s["runs"][0]["results"]
    assert len(results) == 1
    loc = results[0]["locations"][0]["physicalLocation"]
    assert loc["artifactLocation"] == {"uri": "kernels/softmax.py", "uriBaseId": "SRCROOT"}
    assert s["runs"][0]["originalUriBaseIds"]["SRCROOT"]["uri"] == f"file://{project}/"
    expected_line = KERNELS.splitlines().index("def softmax_no_max(inputs):") + 1
    assert loc["region"]["startLine"] == expected_line

    # report: every format over the stored failures and the recent run
    for fmt in ("text", "json", "junit", "sarif", "html"):
        r = daemon.cli("report", "--format", fmt, "--op", "softmax")
        assert r.returncode == 0, r.stderr
        assert r.stdout
    doc = json.loads(daemon.cli("report", "--format", "json").stdout)
    assert doc["summary"]["failed"] >= 1 and doc["runs"][-1]["failed"] == 1
    ET.fromstring(daemon.cli("report", "--format", "junit").stdout)
    assert json.loads(daemon.cli("report", "--format", "sarif").stdout)["version"] == "2.1.0"
    html = daemon.cli("report", "--format", "html").stdout
    assert html.startswith("<!DOCTYPE html>") and "<script" not in html and "<style>" in html

    # signing and offline verification
    rep = tmp_path / "report.json"
    r = daemon.cli("report", "--sign", "-o", str(rep))
    assert r.returncode == 0, r.stderr
    sig = json.loads((tmp_path / "report.json.sig").read_text())
    assert sig["algorithm"] == "ed25519"
    key_file = daemon.home / "keys" / "report_ed25519"
    assert oct(key_file.stat().st_mode & 0o777) == "0o600"
    json.loads(rep.read_text())
    assert daemon.cli("report", "verify", str(rep)).returncode == 0
    assert daemon.cli("report", "verify", str(rep), "--key", sig["public_key"]).returncode == 0
    other = "A" * 43 + "="
    assert daemon.cli("report", "verify", str(rep), "--key", other).returncode == 1
    rep.write_text(rep.read_text().replace('"failures"', '"failurez"', 1))
    r = daemon.cli("report", "verify", str(rep))
    assert r.returncode == 1 and "invalid" in r.stderr


@pytest.mark.parametrize("body,needle", [
    ('[[op]]\nname = "softmax"\nkernel = "fp32_online"\nitrations = 3\n', ":4: unknown key 'itrations'"),
    ('[project]\nname = "x"\n\n[defults]\n', ":4: unknown key 'defults'"),
    ('[[op]]\nname = "softmax"\nkernel = "fp32_online"\ntolerance = { envelope = 6.0 }\n', ":4: 'tolerance'"),
    ('[lint]\nmax_regs = 3\n', ":2: unknown key 'max_regs'"),
    ('[[op]]\nname = "softmax"\nscript = "nope.py:f"\n', ":3: 'script': no file"),
    # a float where an integer belongs, past int64's range (fuzz_toml: converting it was undefined)
    ('[[op]]\nname = "softmax"\nkernel = "fp32_online"\nseed = 1.2e49\n', ":4: 'seed' must be a non-negative integer"),
    ('[[op]]\nname = "softmax"\nkernel = "fp32_online"\niterations = 9.9e99\n', ":4: 'iterations' must be a positive integer"),
])
def test_config_errors_name_the_line(daemon, tmp_path, body, needle):
    cfg = tmp_path / "gpuemu.toml"
    cfg.write_text(body)
    r = daemon.cli("ci", "--config", str(cfg))
    assert r.returncode == 2
    assert r.stderr.startswith("gpuemu: error: ") and needle in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_config_found_upward(daemon, project):
    sub = project / "kernels"
    r = subprocess_in(daemon, sub, "ci", "--json", "--quick")
    doc = json.loads(r.stdout)
    assert doc["config"] == str(project / "gpuemu.toml")


def subprocess_in(daemon, cwd, *args):
    import subprocess
    from daemon_harness import GPUEMU
    return subprocess.run([GPUEMU, *args], env=daemon.env, cwd=cwd, capture_output=True, text=True, timeout=600)
