"""fuzz_op_client_side("layer_norm", run_op, backward=True) measured against a running daemon
(GPUEMU_HOME's): torch's F.layer_norm through autograd in fp32, 100 cases under each strategy, and
the two buggy autograd.Functions of tests/python/test_backward_client.py (a grad_x without its
projection term, a grad_bias that drops its last block of 64 rows). Output:
evidence/conformance/autograd_layer_norm.txt. From the repository root, with a daemon running:

    PYTHONPATH=.:tests/python .venv/bin/python evidence/conformance/autograd_layer_norm.py
"""
import time
import torch, torch.nn.functional as F
from gpuemu import Client
from test_backward_client import layer_norm_by_hand
torch.set_num_threads(1)
def ln(i):
    return F.layer_norm(i["x"], [i["x"].shape[-1]], i["weight"], i["bias"], i["eps"])
with Client() as c:
    for strat in ["regular", "boundary", "adversarial", "special"]:
        t=time.time()
        r = c.fuzz_op_client_side("layer_norm", ln, iterations=100, dtypes=["float32"], seed=2026, value_distribution=strat, backward=True, diagnose_limit=0)
        g = r.gradients
        print(f"F.layer_norm fp32 {strat}: forward {r.passed}/{r.total}, gradients {g.passed}/{g.total}, worst ratio {g.worst_ratio:.3g} ", flush=True)
        for f in g.failures[:2]: print("   ", f.message[:200])
    for bug, pres in [("projection", {"weight": True}), ("bias_tail", {"weight": True, "bias": True})]:
        r = c.fuzz_op_client_side("layer_norm", layer_norm_by_hand(bug), iterations=50, dtypes=["float32"], seed=2026, backward=True, present=pres, diagnose_limit=0)
        g = r.gradients
        names = sorted({f.message.split("'")[1] if "'" in f.message else "?" for f in g.failures})
        print(f"buggy {bug}: forward {r.passed}/{r.total}, gradients failed {g.failed}/{g.total}, failures name {names}", flush=True)
