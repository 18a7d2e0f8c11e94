"""Runs on the GPU machine: the GPU corpus (python -m bench.gpu.corpus), the backward client, the lint check."""
