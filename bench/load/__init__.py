"""Many concurrent clients against one daemon (python -m bench.load.load)."""
