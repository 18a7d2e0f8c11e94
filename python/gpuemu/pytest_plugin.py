"""gpuemu's pytest plugin: one test per op, fuzzed against the daemon, failures reported with their
seed, diagnosis and repro line (and in pytest's own JUnit XML through ``--junitxml``).

Enable it in a ``conftest.py``::

    pytest_plugins = ["gpuemu.pytest_plugin"]

then write::

    import pytest

    @pytest.mark.gpuemu("softmax", iterations=50, dtypes=["bfloat16", "float32"])
    def test_my_softmax(gpuemu_fuzz):
        gpuemu_fuzz(lambda inputs: my_softmax(inputs["x"]))

The marker's op is an op name or an op made from PyTorch code (``gpuemu.torch_op``, built at
import time: ``@pytest.mark.gpuemu(gpuemu.torch_op("add_rms_norm", reference=..., example_inputs=...))``).
The marker's keyword arguments are those of :meth:`gpuemu.Client.fuzz_op_client_side`
(``iterations``, ``value_distribution``, ``dtypes``, ``seed``, ``framework``, ``device``, ``dims``,
``attrs``, ``vary_attrs``, ``layouts``, ``fail_fast``, ``check_determinism``). ``gpuemu_fuzz(run_op, **overrides)``
runs the fuzz, records ``gpuemu_seed`` / ``gpuemu_passed`` / ``gpuemu_total`` /
``gpuemu_varied_attrs`` (the attrs drawn over their schema values, comma-separated: those the
kernel read, see :meth:`gpuemu.Client.fuzz_op_client_side`; and the first failure's
``gpuemu_repro``) as JUnit properties, and fails the test with one line per failing case.
``gpuemu_client`` is the session's :class:`gpuemu.Client` (one daemon for the whole session).

Command-line options: ``--gpuemu-iterations N`` overrides every marker's iteration count (e.g. a
quick pre-commit run), ``--gpuemu-seed S`` pins the master seed.
"""

from __future__ import annotations

from typing import Any, Callable, Dict

import pytest

_MARKER = "gpuemu"
_MAX_LISTED = 10


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("gpuemu")
    group.addoption("--gpuemu-iterations", type=int, default=None,
                    help="override the iterations of every @pytest.mark.gpuemu test")
    group.addoption("--gpuemu-seed", type=int, default=None, help="master seed of every gpuemu fuzz")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "gpuemu(op, **fuzz_options): fuzz OP against the kernel this test passes to gpuemu_fuzz")


@pytest.fixture(scope="session")
def gpuemu_client():
    """The session's daemon client (the daemon of $GPUEMU_HOME, started when none answers)."""
    from gpuemu import Client

    return Client()


def _describe(f: Any) -> str:
    diag = (f.diagnosis or {}).get("bug_class", "")
    shapes = " ".join(f"{k}={list(v)}" for k, v in (f.shapes or {}).items())
    return (f"seed {f.seed} {f.dtype} {shapes}: {f.message}"
            + (f" [{diag}]" if diag else "") + (f"\n      repro: {f.repro}" if f.repro else ""))


@pytest.fixture
def gpuemu_fuzz(request: pytest.FixtureRequest, gpuemu_client, record_property) -> Callable[..., Any]:
    """Calls ``fuzz_op_client_side`` with the test's marker and fails the test on any failing case."""
    marker = request.node.get_closest_marker(_MARKER)
    if marker is None or not marker.args:
        raise pytest.UsageError(f"{request.node.nodeid}: gpuemu_fuzz needs @pytest.mark.gpuemu(\"op\", ...)")
    op = marker.args[0]
    options: Dict[str, Any] = dict(marker.kwargs)
    cli_iterations = request.config.getoption("--gpuemu-iterations")
    cli_seed = request.config.getoption("--gpuemu-seed")
    if cli_iterations is not None:
        options["iterations"] = cli_iterations
    if cli_seed is not None:
        options["seed"] = cli_seed

    name = op if isinstance(op, str) else getattr(op, "name", repr(op))  # an op name or a gpuemu.torch_op

    def run(run_op: Callable[[Dict[str, Any]], Any], **overrides: Any):
        results = gpuemu_client.fuzz_op_client_side(op, run_op, **{**options, **overrides})
        record_property("gpuemu_op", name)
        record_property("gpuemu_seed", results.seed)
        record_property("gpuemu_passed", results.passed)
        record_property("gpuemu_total", results.total)
        if results.inconclusive:  # a torch op's cases its reference could not decide: not failures
            record_property("gpuemu_inconclusive", results.inconclusive)
        # the attrs drawn over their schema values (those run_op read, or the marker's vary_attrs)
        record_property("gpuemu_varied_attrs", ",".join(results.varied_attrs))
        if results.failures:
            record_property("gpuemu_repro", results.failures[0].repro)
            lines = [f"gpuemu: {name}: {results.failed} of {results.total} cases failed "
                     f"(master seed {results.seed}"
                     + (f"; attrs varied: {', '.join(results.varied_attrs)}" if results.varied_attrs else "") + ")"]
            lines += ["  - " + _describe(f) for f in results.failures[:_MAX_LISTED]]
            if len(results.failures) > _MAX_LISTED:
                lines.append(f"  ... and {len(results.failures) - _MAX_LISTED} more (gpuemu failures list --op {name})")
            pytest.fail("\n".join(lines), pytrace=False)
        return results

    return run
