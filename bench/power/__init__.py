"""Detection power: the precision-mutation harness (python -m bench.power.power_curve, python -m bench.power.formulations)."""
