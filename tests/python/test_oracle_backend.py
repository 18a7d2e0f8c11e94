"""Where the fp64 oracle runs (gpuemu.set_oracle / gpuemu.oracle; docs/gpu.md, "The fp64 oracle on
the GPU"). Here there is no GPU: "cuda" must say why and leave the CPU in charge; on a GPU machine
it must start and report its device. The agreement of the two backends is checked on the GPU by
tests/cpp/gpu_oracle_test.cpp (scripts/gpu/run.sh oracle)."""

import numpy as np
import pytest

import gpuemu


@pytest.fixture(autouse=True)
def _cpu_after():
    yield
    gpuemu.set_oracle("cpu", min_macs=1 << 26)


def test_the_cpu_is_the_default_and_reports_itself():
    info = gpuemu.oracle()
    assert info["backend"] == "cpu"
    assert info["description"] == "cpu (OpenBLAS)"
    assert info["min_macs"] == 1 << 26
    assert set(info) == {"backend", "description", "min_macs", "gemms", "attention_blocks", "failures"}


def test_an_unknown_backend_is_a_validation_error():
    with pytest.raises(gpuemu.ValidationError, match="cpu | cuda"):
        gpuemu.set_oracle("tpu")
    assert gpuemu.oracle()["backend"] == "cpu"


def test_cuda_starts_or_says_why_and_the_references_still_run():
    try:
        gpuemu.set_oracle("cuda", min_macs=0)
    except gpuemu.ToolMissingError as e:
        assert "CUDA oracle backend" in str(e)
        assert gpuemu.oracle()["backend"] == "cpu"
    else:
        assert gpuemu.oracle()["backend"] == "cuda"
        assert gpuemu.oracle()["description"].startswith("cuda: ")
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    b = np.ones((4, 2), dtype=np.float32)
    out = gpuemu.reference("matmul", {"a": a, "b": b})
    np.testing.assert_array_equal(out, a.astype(np.float64) @ b)


def _daemon_env(home):
    import os
    env = dict(os.environ, GPUEMU_HOME=str(home))
    env.pop("GPUEMU_ORACLE", None)
    return env


def test_a_daemon_asked_for_an_unavailable_cuda_oracle_refuses_to_start(tmp_path):
    """Asked for and unavailable is an error at start, with the reason, never a silent CPU
    fallback; on a machine with a GPU the same daemon starts and reports its device."""
    import subprocess

    from daemon_harness import DAEMON, GPUEMU

    env = _daemon_env(tmp_path / "home")
    started = subprocess.run([DAEMON, "--oracle", "cuda"], env=env, capture_output=True, text=True, timeout=60)
    try:
        if started.returncode == 0:  # a GPU machine
            with gpuemu.Client(home=str(tmp_path / "home")) as c:
                assert c.stats()["oracle"].startswith("cuda: ")
            return
        assert started.returncode == 1
        assert "CUDA oracle backend" in started.stderr, started.stderr
        assert not (tmp_path / "home" / "run" / "gpuemu.sock").exists()
        # The environment variable is the same setting.
        env_cuda = dict(env, GPUEMU_ORACLE="cuda")
        again = subprocess.run([DAEMON], env=env_cuda, capture_output=True, text=True, timeout=60)
        assert again.returncode == 1 and "CUDA oracle backend" in again.stderr, again.stderr
        # An unknown backend is refused by the command line itself.
        bad = subprocess.run([DAEMON, "--oracle", "tpu"], env=env, capture_output=True, text=True, timeout=60)
        assert bad.returncode != 0 and "tpu" in (bad.stderr + bad.stdout)
        # The CPU oracle starts, and says so.
        ok = subprocess.run([DAEMON, "--oracle", "cpu"], env=env, capture_output=True, text=True, timeout=60)
        assert ok.returncode == 0, ok.stderr
        with gpuemu.Client(home=str(tmp_path / "home")) as c:
            assert c.stats()["oracle"] == "cpu (OpenBLAS)"
    finally:
        subprocess.run([GPUEMU, "daemon", "stop"], env=env, capture_output=True, timeout=60)
