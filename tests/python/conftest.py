"""Shared by the Python suites.

- Keeps each test's call report on its item, so the daemon fixture of daemon_harness.py can print
  the daemon's log when a test fails.
- Strict mode (GPUEMU_STRICT_TESTS=1, which `make test-python` and so `make test` and CI set): a
  test or a whole module that skips is a failure, unless its reason says it needs what no machine
  of this kind can have (a GPU, a framework Debian does not package, a newer torch). A suite that
  skipped itself because the binaries were not built, GPUEMU_BIN_DIR was wrong, or torch or
  jsonschema could not be imported no longer reports success (docs/reliability.md).
"""

import os

import pytest

STRICT = os.environ.get("GPUEMU_STRICT_TESTS") == "1"

# The only reasons a skip may give in strict mode: each names something this machine lacks by
# design (the GPU machine runs those tests: docs/gpu.md), never something a build step provides.
ALLOWED_SKIP_REASONS = (
    "is not installed here",      # CuPy, JAX, TensorFlow: not in Debian's archive
    "is installed here",          # the "missing framework" error tests, where the framework exists
    "no CUDA device",
    "has no float8 dtypes",       # Debian's torch 1.13
    "needs root to mount",        # the full-disk tests mount a tmpfs; CI runs as root
    "needs root to create network namespaces",  # test_scale_netns.py; CI runs as root
)


def _skip_reason(longrepr) -> str:
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    return str(longrepr)


def _strict_failure(rep, what: str) -> None:
    reason = _skip_reason(rep.longrepr)
    if any(a in reason for a in ALLOWED_SKIP_REASONS):
        return
    rep.outcome = "failed"
    rep.longrepr = (f"{what} skipped under GPUEMU_STRICT_TESTS=1, where a skip is a failure: {reason}\n"
                    "(build first, point GPUEMU_BIN_DIR at build/bin, and use the .venv of `make venv`)")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):  # noqa: D103
    outcome = yield
    rep = outcome.get_result()
    if STRICT and rep.skipped and not hasattr(rep, "wasxfail"):
        _strict_failure(rep, "this test")
    setattr(item, "rep_" + rep.when, rep)


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):  # noqa: D103
    outcome = yield
    rep = outcome.get_result()
    if STRICT and rep.skipped:
        _strict_failure(rep, f"the module {collector.nodeid}")
