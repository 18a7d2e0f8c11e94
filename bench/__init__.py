"""gpuemu's benchmarks and measurements: a package, run from the repository root with the venv's
interpreter (where ``import gpuemu`` works), e.g. ``.venv/bin/python -m bench.conformance.sweep``.
Modules import each other by name (``from bench.conformance.impls import variants``), never by
adding folders to the import path."""
