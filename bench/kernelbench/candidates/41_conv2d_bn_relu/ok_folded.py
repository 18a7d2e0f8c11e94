"""Conv + inference BN folded into the conv: W' = W * g / sqrt(v + eps), b' = beta - mean * g / sqrt(v + eps); im2col GEMM, ReLU."""
import math

import numpy as np
import torch
import torch.nn as nn

EXPECT = "pass"
BUG = None


def _load(t):
    """A tensor as a float32 numpy array (a copy: the kernel never writes its inputs)."""
    return np.array(t.detach().float().contiguous().numpy(), dtype=np.float32)


def _store(a, dtype):
    """A float32 result as a tensor of the model's dtype (one rounding for bfloat16)."""
    return torch.from_numpy(np.array(a, dtype=np.float32)).to(dtype)




class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=1, bias=False)
        self.bn_weight = nn.Parameter(torch.ones(out_channels))
        self.bn_bias = nn.Parameter(torch.zeros(out_channels))
        self.register_buffer("running_mean", torch.zeros(out_channels))
        self.register_buffer("running_var", torch.ones(out_channels))

    def forward(self, x):
        a = _load(x)
        W = _load(self.conv.weight)
        scale = _load(self.bn_weight) / np.sqrt(_load(self.running_var) + np.float32(1e-5))
        shift = _load(self.bn_bias) - _load(self.running_mean) * scale
        cout, cin, kh, kw = W.shape
        Wf = (W * scale[:, None, None, None]).reshape(cout, -1)
        n, _, H, Wd = a.shape
        xp = np.zeros((n, cin, H + 2, Wd + 2), dtype=np.float32)
        xp[:, :, 1:1 + H, 1:1 + Wd] = a
        cols = np.stack([xp[:, :, i:i + H, j:j + Wd] for i in range(kh) for j in range(kw)], axis=2)
        y = np.matmul(Wf[None], cols.reshape(n, cin * kh * kw, H * Wd)) + shift[None, :, None]
        return _store(np.maximum(y.reshape(n, cout, H, Wd), np.float32(0.0)), x.dtype)
