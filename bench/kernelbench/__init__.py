"""KernelBench's format judged by gpuemu: the measurement (python -m bench.kernelbench.measure) and its speed.

problems/ and candidates/ are not packages: gpuemu.kernelbench loads their files by path."""
