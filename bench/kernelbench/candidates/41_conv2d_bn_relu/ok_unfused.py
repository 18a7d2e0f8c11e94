"""Three kernels: conv2d by nine per-tap contractions (stored in the model dtype), then inference BN as written, then ReLU."""
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
        cout, cin, kh, kw = W.shape
        n, _, H, Wd = a.shape
        xp = np.zeros((n, cin, H + 2, Wd + 2), dtype=np.float32)
        xp[:, :, 1:1 + H, 1:1 + Wd] = a
        acc = np.zeros((n, cout, H, Wd), dtype=np.float32)
        for i in range(kh):
            for j in range(kw):
                acc += np.einsum("oc,nchw->nohw", W[:, :, i, j], xp[:, :, i:i + H, j:j + Wd], dtype=np.float32)
        y = _load(_store(acc, x.dtype))  # the conv kernel's output, as stored
        c = (1, -1, 1, 1)
        y = (y - _load(self.running_mean).reshape(c)) / np.sqrt(_load(self.running_var).reshape(c) + np.float32(1e-5))
        y = y * _load(self.bn_weight).reshape(c) + _load(self.bn_bias).reshape(c)
        y = _load(_store(y, x.dtype))  # the BN kernel's output, as stored
        return _store(np.maximum(y, np.float32(0.0)), x.dtype)
