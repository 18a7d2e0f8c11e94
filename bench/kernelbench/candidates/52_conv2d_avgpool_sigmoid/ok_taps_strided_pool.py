"""Conv2d by nine per-tap contractions, pool as the mean of four strided sub-grids, stable sigmoid."""
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
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)

    def forward(self, x):
        a = _load(x)
        W, b = _load(self.conv.weight), _load(self.conv.bias)
        cout, cin, kh, kw = W.shape
        n, _, H, Wd = a.shape
        ho, wo = H - kh + 1, Wd - kw + 1
        y = np.zeros((n, cout, ho, wo), dtype=np.float32) + b[None, :, None, None]
        for i in range(kh):
            for j in range(kw):
                y += np.einsum("oc,nchw->nohw", W[:, :, i, j], a[:, :, i:i + ho, j:j + wo], dtype=np.float32)
        ph, pw = ho // 2, wo // 2
        p = (y[:, :, 0:2 * ph:2, 0:2 * pw:2] + y[:, :, 0:2 * ph:2, 1:2 * pw:2]
             + y[:, :, 1:2 * ph:2, 0:2 * pw:2] + y[:, :, 1:2 * ph:2, 1:2 * pw:2]) / np.float32(4.0)
        e = np.exp(-np.abs(p))
        return _store(np.where(p >= 0, np.float32(1.0), e) / (np.float32(1.0) + e), x.dtype)
