"""Conv2d that pads on the top/left only (shifted window): every output reads the input one row and column off."""
import math

import numpy as np
import torch
import torch.nn as nn

EXPECT = "fail"
BUG = "index_offset"


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
        xp = np.zeros((n, cin, H + 2, Wd + 2), dtype=np.float32)
        xp[:, :, 2:, 2:] = a  # BUG: both pads put before the data
        ho, wo = H, Wd
        cols = np.stack([xp[:, :, i:i + ho, j:j + wo] for i in range(kh) for j in range(kw)], axis=2)
        out = np.matmul(W.reshape(cout, -1)[None], cols.reshape(n, cin * kh * kw, ho * wo)) + b[None, :, None]
        return _store(out.reshape(n, cout, ho, wo), x.dtype)
