"""Under `make test` (GPUEMU_STRICT_TESTS=1) a suite that skips itself is a failure: a tree that was
never built, a wrong GPUEMU_BIN_DIR or a missing torch must not come out green (conftest.py)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def run_pytest(args, cwd, strict, bin_dir=None):
    env = dict(os.environ)
    env.pop("GPUEMU_STRICT_TESTS", None)
    if strict:
        env["GPUEMU_STRICT_TESTS"] = "1"
    if bin_dir is not None:
        env["GPUEMU_BIN_DIR"] = bin_dir
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_unbuilt_binaries_fail_the_suite_in_strict_mode(tmp_path):
    # test_cli_cases.py skips its whole module when the CLI is not where GPUEMU_BIN_DIR says
    nowhere = str(tmp_path / "no-such-build" / "bin")
    lax = run_pytest(["test_cli_cases.py"], HERE, strict=False, bin_dir=nowhere)
    assert lax.returncode == 0 and "skipped" in lax.stdout, lax.stdout + lax.stderr
    strict = run_pytest(["test_cli_cases.py"], HERE, strict=True, bin_dir=nowhere)
    assert strict.returncode != 0, strict.stdout
    assert "skipped under GPUEMU_STRICT_TESTS=1" in strict.stdout and "not built" in strict.stdout


def test_module_level_importorskip_fails_and_allowed_reasons_still_skip(tmp_path):
    shutil.copy(HERE / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_needs_module.py").write_text(
        "import pytest\nnp = pytest.importorskip('gpuemu_no_such_module')\n\ndef test_x():\n    pass\n")
    (tmp_path / "test_gpu_only.py").write_text(
        "import pytest\n\ndef test_gpu():\n    pytest.skip('no CUDA device')\n\n"
        "def test_here():\n    assert True\n")
    strict = run_pytest(["test_needs_module.py"], tmp_path, strict=True)
    assert strict.returncode != 0 and "gpuemu_no_such_module" in strict.stdout, strict.stdout
    allowed = run_pytest(["test_gpu_only.py"], tmp_path, strict=True)
    assert allowed.returncode == 0 and "1 passed, 1 skipped" in allowed.stdout, allowed.stdout
    lax = run_pytest(["test_needs_module.py"], tmp_path, strict=False)
    assert lax.returncode == 5 and "1 skipped" in lax.stdout, lax.stdout  # 5: pytest collected nothing
