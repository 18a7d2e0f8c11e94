"""The conformance sweep: PyTorch's own implementations fuzzed against gpuemu (python -m bench.conformance.sweep)."""
