"""Packaging and first run (docs/python.md, "Installing"; docs/performance.md, "Build time"):

- one version number (VERSION) reported by the CLI, the daemon, the Python package and the wire;
- `pip install --no-build-isolation .` into a fresh venv: `import gpuemu`, `Client()`, the console
  scripts and the pytest plugin (found through its pytest11 entry point) work from the venv alone;
- the .deb of `make package`, unpacked into a scratch root, runs `gpuemu ops list` and a fuzz with
  the schemas it carries, not the source tree's.

The wheel reuses the configured build/ (GPUEMU_CMAKE_BUILD_DIR): setup.py's own CMake build is the
same CMake, timed in docs/performance.md.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from daemon_harness import BIN_DIR, DAEMON, GPUEMU, daemon  # noqa: F401 (daemon: the fixture)

import gpuemu

ROOT = Path(__file__).resolve().parents[2]
VERSION = (ROOT / "VERSION").read_text().strip()
BUILD_DIR = BIN_DIR.parent

pytestmark = pytest.mark.skipif(not (os.path.exists(GPUEMU) and os.path.exists(DAEMON)),
                                reason="gpuemu / gpuemu-daemon not built")


def clean_env(home: Path, **extra: str) -> dict:
    """The environment of a machine that has only the installed package: no GPUEMU_* variables,
    no source tree on PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUEMU_") and k != "PYTHONPATH"}
    env.update(GPUEMU_HOME=str(home), NO_COLOR="1", **extra)
    return env


def test_one_version_everywhere(daemon):
    assert VERSION.count(".") == 2
    assert gpuemu.__version__ == VERSION
    assert subprocess.run([GPUEMU, "--version"], capture_output=True, text=True).stdout.strip() == f"gpuemu {VERSION}"
    assert subprocess.run([DAEMON, "--version"], capture_output=True, text=True).stdout.strip() == \
        f"gpuemu-daemon {VERSION}"
    v = daemon.cli_json("version")
    assert v["version"] == VERSION and v["protocol"] == 1
    daemon.start()
    assert daemon.cli_json("daemon", "status")["version"] == VERSION
    hello = gpuemu.Client(socket=daemon.info["socket"]).hello
    assert hello["version"] == VERSION and hello["protocol"] == v["protocol"]


def test_build_tree_uses_the_source_schemas():
    assert Path(gpuemu._core.builtin_schema_dir()).resolve() == (ROOT / "schemas").resolve()
    v = json.loads(subprocess.run([GPUEMU, "version", "--json"], capture_output=True, text=True, check=True).stdout)
    assert Path(v["schemas"]).resolve() == (ROOT / "schemas").resolve()
    assert Path(v["daemon"]).resolve() == Path(DAEMON).resolve()


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    env = dict(os.environ, GPUEMU_CMAKE_BUILD_DIR=str(BUILD_DIR))
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "--no-index",
                        "-w", str(out), str(ROOT)], env=env, capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    wheels = list(out.glob(f"gpuemu-{VERSION}-*.whl"))
    assert len(wheels) == 1, list(out.iterdir())
    return wheels[0]


def test_wheel_carries_module_binaries_schemas_and_entry_points(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for must in ("gpuemu/__init__.py", "gpuemu/py.typed", "gpuemu/_core.pyi", "gpuemu/pytest_plugin.py",
                 "gpuemu/_script_runner.py", "gpuemu/bin/gpuemu", "gpuemu/bin/gpuemu-daemon",
                 "gpuemu/share/gpuemu/schemas/envelopes.json", "gpuemu/share/gpuemu/schemas/ops/softmax.json"):
        assert must in names, must
    assert any(n.startswith("gpuemu/_core.") and n.endswith(".so") for n in names)
    ep = zipfile.ZipFile(wheel).read(f"gpuemu-{VERSION}.dist-info/entry_points.txt").decode()
    assert "[pytest11]" in ep and "gpuemu.pytest_plugin = gpuemu.pytest_plugin" in ep
    assert "gpuemu = gpuemu._launch:cli" in ep and "gpuemu-daemon = gpuemu._launch:daemon" in ep
    meta = zipfile.ZipFile(wheel).read(f"gpuemu-{VERSION}.dist-info/METADATA").decode()
    assert f"Version: {VERSION}" in meta


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("venv") / "v"
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", str(d)], check=True)
    # Without PYTHONPATH: a source tree on it (python/, with the egg-info `pip wheel` leaves there)
    # makes pip take gpuemu as installed already and install nothing into the fresh venv.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([str(d / "bin" / "python"), "-m", "pip", "install", "--no-index", "--no-deps", str(wheel)],
                       capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return d


def readme_quick_start() -> str:
    """The README's Python quick start, as written (the first python block of "## Python")."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("\n## Python\n"):]
    start = section.index("```python\n") + len("```python\n")
    return section[start:section.index("```\n", start)]


QUICK_START = '''
import json
import numpy as np
import gpuemu
from gpuemu import _core

def my_softmax(x, dim=-1):
    x32 = np.asarray(x, dtype=np.float32)
    m = np.max(x32, axis=dim, keepdims=True)
    e = np.exp(x32 - np.where(np.isfinite(m), m, 0))
    out = e / np.sum(e, axis=dim, keepdims=True)
    return out.astype(x.dtype) if x.dtype == np.float16 else out

{readme}
bad = client.fuzz_op_client_side("softmax", lambda i: my_softmax(i["x"], i["dim"]) * np.float32(1.05),
                                 iterations=5, seed=7)
print(json.dumps({{"file": gpuemu.__file__, "version": gpuemu.__version__, "schemas": _core.builtin_schema_dir(),
                  "ok": [results.passed, results.total], "verdict": bool(verdict.passed),
                  "bad": [bad.passed, bad.failed], "daemon_version": client.hello["version"]}}))
'''


def test_installed_package_runs_the_readme_quick_start(venv, tmp_path):
    """The README's quick start, as written, under the venv's interpreter: gpuemu imported from
    site-packages (not python/), its schemas from the wheel, Client() starting the daemon the wheel
    carries, the correct kernel passing; then a wrong one is caught."""
    script = tmp_path / "quick.py"
    script.write_text(QUICK_START.format(readme=readme_quick_start()))
    env = clean_env(tmp_path / "home")
    r = subprocess.run([str(venv / "bin" / "python"), str(script)], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=600)
    try:
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
        assert "Passed: 100/100" in r.stdout, r.stdout
        got = json.loads(r.stdout.strip().splitlines()[-1])
        site = str(venv / "lib")
        assert got["file"].startswith(site), got
        assert got["schemas"].startswith(site) and got["schemas"].endswith("gpuemu/share/gpuemu/schemas"), got
        assert got["version"] == got["daemon_version"] == VERSION
        assert got["ok"] == [100, 100] and got["verdict"] is True and got["bad"] == [0, 5], got
    finally:
        subprocess.run([str(venv / "bin" / "gpuemu"), "daemon", "stop"], env=env, capture_output=True, timeout=60)


def test_installed_console_scripts_use_the_wheels_binaries_and_schemas(venv, tmp_path):
    env = clean_env(tmp_path / "home", PATH=f"{venv / 'bin'}:/usr/bin:/bin")
    try:
        v = json.loads(subprocess.run(["gpuemu", "version", "--json"], env=env, capture_output=True, text=True,
                                      check=True).stdout)
        assert v["version"] == VERSION and v["schemas"].startswith(str(venv / "lib")), v
        assert v["daemon"].startswith(str(venv / "lib")), v
        ops = subprocess.run(["gpuemu", "ops", "list"], env=env, capture_output=True, text=True, check=True).stdout
        assert "softmax" in ops and "flash_attention" in ops
        caught = subprocess.run(["gpuemu", "fuzz", "softmax", "--kernel", "tail_leak", "--seed", "7", "-n", "10"],
                                env=env, capture_output=True, text=True, timeout=600)
        assert caught.returncode == 1 and "FAILED" in caught.stdout, caught.stdout + caught.stderr
        d = subprocess.run(["gpuemu-daemon", "--version"], env=env, capture_output=True, text=True, check=True)
        assert d.stdout.strip() == f"gpuemu-daemon {VERSION}"
    finally:
        subprocess.run(["gpuemu", "daemon", "stop"], env=env, capture_output=True, timeout=60)


def test_pytest_plugin_is_found_through_its_entry_point(venv, tmp_path):
    """No conftest, no -p: installing the package registers --gpuemu-* options; a conftest that
    still names the plugin (the source tree's way) loads it once, not twice."""
    (tmp_path / "test_x.py").write_text("def test_x():\n    pass\n")
    env = clean_env(tmp_path / "home")
    r = subprocess.run([str(venv / "bin" / "python"), "-m", "pytest", "--help"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "--gpuemu-iterations" in r.stdout and "--gpuemu-seed" in r.stdout
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["gpuemu.pytest_plugin"]\n')
    for extra in ([], ["-p", "gpuemu.pytest_plugin"]):
        r = subprocess.run([str(venv / "bin" / "python"), "-m", "pytest", "-q", "--gpuemu-seed", "7", *extra],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0 and "1 passed" in r.stdout, r.stdout[-2000:] + r.stderr[-2000:]
    plugins = subprocess.run([str(venv / "bin" / "python"), "-c",
                              "import importlib.metadata as m; print([e.value for e in m.entry_points(group='pytest11')])"],
                             env=env, capture_output=True, text=True, check=True).stdout
    assert "gpuemu.pytest_plugin" in plugins


def test_deb_package_runs_from_a_scratch_root(tmp_path):
    if not shutil.which("cpack") or not shutil.which("dpkg-deb"):
        pytest.fail("cpack and dpkg-deb are needed (cmake, dpkg: scripts/install-deps.sh installs them)")
    out = tmp_path / "pkg"
    r = subprocess.run(["cpack", "-G", "DEB", "-B", str(out), "--config", str(BUILD_DIR / "CPackConfig.cmake")],
                       cwd=BUILD_DIR, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    debs = list(out.glob(f"gpuemu_{VERSION}_*.deb"))
    assert len(debs) == 1, list(out.iterdir())
    info = subprocess.run(["dpkg-deb", "-f", str(debs[0]), "Package", "Version", "Depends"], capture_output=True,
                          text=True, check=True).stdout
    assert f"Version: {VERSION}" in info and "libnng" in info and "liblmdb" in info, info
    root = tmp_path / "root"
    subprocess.run(["dpkg-deb", "-x", str(debs[0]), str(root)], check=True)
    files = subprocess.run(["dpkg-deb", "-c", str(debs[0])], capture_output=True, text=True, check=True).stdout
    for must in ("./usr/bin/gpuemu", "./usr/bin/gpuemu-daemon", "./usr/share/gpuemu/schemas/envelopes.json",
                 "./usr/share/gpuemu/schemas/ops/softmax.json", "./usr/share/gpuemu/_script_runner.py"):
        assert must in files, must
    env = clean_env(tmp_path / "home", PATH="/usr/bin:/bin")
    exe = str(root / "usr" / "bin" / "gpuemu")
    try:
        v = json.loads(subprocess.run([exe, "version", "--json"], env=env, capture_output=True, text=True,
                                      check=True).stdout)
        assert v["schemas"] == str(root / "usr" / "share" / "gpuemu" / "schemas"), v
        assert v["daemon"] == str(root / "usr" / "bin" / "gpuemu-daemon"), v
        ops = subprocess.run([exe, "ops", "list"], env=env, capture_output=True, text=True, check=True).stdout
        assert "softmax" in ops and "rms_norm" in ops
        good = subprocess.run([exe, "fuzz", "softmax", "--kernel", "fp32_online", "--seed", "7", "-n", "10"], env=env,
                              capture_output=True, text=True, timeout=600)
        assert good.returncode == 0 and "PASSED" in good.stdout, good.stdout + good.stderr
        bad = subprocess.run([exe, "fuzz", "softmax", "--kernel", "tail_leak", "--seed", "7", "-n", "10"], env=env,
                             capture_output=True, text=True, timeout=600)
        assert bad.returncode == 1 and "FAILED" in bad.stdout, bad.stdout + bad.stderr
        st = json.loads(subprocess.run([exe, "daemon", "status", "--json"], env=env, capture_output=True, text=True,
                                       check=True).stdout)
        assert st["version"] == VERSION
    finally:
        subprocess.run([exe, "daemon", "stop"], env=env, capture_output=True, timeout=60)


def _deps(os_release: str, tmp_path: Path) -> list:
    f = tmp_path / "os-release"
    f.write_text(os_release)
    r = subprocess.run(["bash", str(ROOT / "scripts" / "install-deps.sh"), "--list"], capture_output=True, text=True,
                       env=dict(os.environ, GPUEMU_OS_RELEASE=str(f)), check=True)
    return r.stdout.split()


def test_install_deps_uses_each_distributions_names(tmp_path):
    """Debian 12 and Ubuntu 24.04 differ in clang's runtime, chromium (a snap on Ubuntu) and
    python3-torch (none in Ubuntu 24.04); the rest is common (checked against packages.ubuntu.com)."""
    debian = _deps('ID=debian\nVERSION_ID="12"\n', tmp_path)
    ubuntu = _deps('ID=ubuntu\nVERSION_ID="24.04"\n', tmp_path)
    for must in ("libnng-dev", "liblmdb-dev", "libtomlplusplus-dev", "pybind11-dev", "python3-pytest-xdist",
                 "python3-setuptools", "python3-wheel", "dpkg-dev", "cmake", "ninja-build"):
        assert must in debian and must in ubuntu, must
    assert "libclang-rt-14-dev" in debian and "libclang-rt-18-dev" not in debian
    assert "libclang-rt-18-dev" in ubuntu and "libclang-rt-14-dev" not in ubuntu
    assert "python3-torch" in debian and "python3-torch" not in ubuntu
    assert "chromium" in debian and "chromium" not in ubuntu
    assert set(debian) - {"libclang-rt-14-dev", "python3-torch", "chromium"} == \
        set(ubuntu) - {"libclang-rt-18-dev"}
