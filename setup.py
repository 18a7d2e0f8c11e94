"""Builds the gpuemu wheel with CMake: gpuemu._core, the gpuemu CLI and gpuemu-daemon, and the data
they find next to themselves (engine/include/gpuemu/engine/install_paths.hpp):

    gpuemu/_core.<abi>.so
    gpuemu/bin/gpuemu, gpuemu/bin/gpuemu-daemon     (console scripts gpuemu, gpuemu-daemon exec them)
    gpuemu/share/gpuemu/schemas/{ops/*.json, envelopes.json, ...}

The metadata is pyproject.toml's. GPUEMU_CMAKE_BUILD_DIR reuses a configured build tree (the tests
point it at build/ so that a wheel costs no second compile); CMAKE_ARGS adds CMake options.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
VERSION = (ROOT / "VERSION").read_text().strip()


def _cache_value(build_dir: Path, name: str) -> str:
    for line in (build_dir / "CMakeCache.txt").read_text().splitlines():
        if line.startswith(name + ":"):
            return line.split("=", 1)[1]
    raise RuntimeError(f"{build_dir}: {name} is not in CMakeCache.txt (configure it with this tree's CMakeLists)")


class CMakeBuild(build_ext):
    def build_extension(self, ext: Extension) -> None:
        reuse = os.environ.get("GPUEMU_CMAKE_BUILD_DIR")
        build_dir = Path(reuse).resolve() if reuse else Path(self.build_temp).resolve() / "cmake"
        if reuse:
            # a tree configured already (build/, for this interpreter): build what is missing in it
            module_dir = Path(_cache_value(build_dir, "GPUEMU_PYTHON_MODULE_DIR"))
        else:
            module_dir = build_dir / "python-module"
            args = [
                "cmake", "-S", str(ROOT), "-B", str(build_dir),
                # the build type the suites run (-O2, -ffp-contract=off: the oracle's bits)
                "-DCMAKE_BUILD_TYPE=RelWithDebInfo",
                "-DGPUEMU_BUILD_TESTS=OFF", "-DGPUEMU_BUILD_BENCH=OFF", "-DGPUEMU_BUILD_PYTHON=ON",
                f"-DPython_EXECUTABLE={sys.executable}",
                f"-DGPUEMU_PYTHON_MODULE_DIR={module_dir}",
            ]
            if shutil.which("ninja") and not (build_dir / "CMakeCache.txt").exists():
                args += ["-G", "Ninja"]
            try:
                import pybind11

                args.append(f"-Dpybind11_DIR={pybind11.get_cmake_dir()}")
            except ImportError:
                pass  # Debian's pybind11-dev: CMake finds it on its own
            args += shlex.split(os.environ.get("CMAKE_ARGS", ""))
            subprocess.run(args, check=True)
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
        subprocess.run(["cmake", "--build", str(build_dir), "-j", jobs,
                        "--target", "_core", "gpuemu", "gpuemu-daemon"], check=True)

        built = sorted(module_dir.glob("_core*.so"))
        if not built:
            raise RuntimeError(f"CMake built no gpuemu._core in {module_dir}")
        target = Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(built[0], target)
        pkg = target.parent
        (pkg / "bin").mkdir(exist_ok=True)
        for name in ("gpuemu", "gpuemu-daemon"):
            shutil.copy2(build_dir / "bin" / name, pkg / "bin" / name)
        data = pkg / "share" / "gpuemu"
        if data.exists():
            shutil.rmtree(data)
        shutil.copytree(ROOT / "schemas", data / "schemas")


setup(
    version=VERSION,
    ext_modules=[Extension("gpuemu._core", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    zip_safe=False,
)
