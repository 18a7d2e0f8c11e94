"""The torch_op bounds measured (python -m bench.torch_ops.catalogue_bounds, python -m bench.torch_ops.derived_conformance)."""
