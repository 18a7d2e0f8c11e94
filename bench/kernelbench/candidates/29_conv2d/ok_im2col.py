"""Conv2d 3x3 / pad 1 as im2col: gather (Cin * 9, H * W) columns, one fp32 GEMM with the flattened weight, plus bias."""
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
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=1)

    def forward(self, x):
        a = _load(x)
        W, b = _load(self.conv.weight), _load(self.conv.bias)
        cout, cin, kh, kw = W.shape
        n, _, H, Wd = a.shape
        p = 1
        xp = np.zeros((n, cin, H + 2 * p, Wd + 2 * p), dtype=np.float32)
        xp[:, :, p:p + H, p:p + Wd] = a
        ho, wo = H + 2 * p - kh + 1, Wd + 2 * p - kw + 1
        cols = np.stack([xp[:, :, i:i + ho, j:j + wo] for i in range(kh) for j in range(kw)], axis=2)
        cols = cols.reshape(n, cin * kh * kw, ho * wo)
        out = np.matmul(W.reshape(cout, -1)[None], cols) + b[None, :, None]
        return _store(out.reshape(n, cout, ho, wo), x.dtype)
