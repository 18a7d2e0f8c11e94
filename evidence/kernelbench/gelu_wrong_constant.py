"""Why 51_mlp_gelu_tanh/bug_wrong_constant is invisible: its float64 deviation (0.0447 for 0.044715)
against the bound a correct fp32 kernel is allowed, on the problem's inputs at three scales.

    .venv/bin/python evidence/kernelbench/gelu_wrong_constant.py
"""
import math, torch, sys
from gpuemu.kernelbench import load_problem
from gpuemu.torch_ops import evaluate
from gpuemu.torch_ops._bounds import U32
P = load_problem("bench/kernelbench/problems/51_mlp_gelu_tanh.py")
torch.manual_seed(42); m = P.Model(*P.get_init_inputs()).double()
for scale in (1.0, 3.0, 10.0):
    x = torch.randn(128, 384, dtype=torch.float64) * scale
    def f(k):
        h = m.fc1(x); c = math.sqrt(2 / math.pi)
        g = 0.5 * h * (1 + torch.tanh(c * (h + k * h ** 3)))
        return m.fc2(g)
    dev = (f(0.0447) - f(0.044715)).abs()
    o = evaluate(lambda t: m.fc2(torch.nn.functional.gelu(m.fc1(t), approximate="tanh")), [x.float()])
    bound = (U32 * o.v.abs() + U32 * o.e)
    print(scale, "max dev/bound", float((dev / bound).max()), "median", float((dev / bound).median()))
