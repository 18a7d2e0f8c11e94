"""AvgPool dividing border windows by their count of real pixels (count_include_pad=False) where the model counts the padding."""
import math

import numpy as np
import torch
import torch.nn as nn

EXPECT = "fail"
BUG = "border_handling"


def _load(t):
    """A tensor as a float32 numpy array (a copy: the kernel never writes its inputs)."""
    return np.array(t.detach().float().contiguous().numpy(), dtype=np.float32)


def _store(a, dtype):
    """A float32 result as a tensor of the model's dtype (one rounding for bfloat16)."""
    return torch.from_numpy(np.array(a, dtype=np.float32)).to(dtype)


K, S, P = 3, 2, 1


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        a = _load(x)
        n, c, H, W = a.shape
        xp = np.zeros((n, c, H + 2 * P, W + 2 * P), dtype=np.float32)
        xp[:, :, P:P + H, P:P + W] = a
        ones = np.zeros((H + 2 * P, W + 2 * P), dtype=np.float32)
        ones[P:P + H, P:P + W] = 1.0
        ho, wo = (H + 2 * P - K) // S + 1, (W + 2 * P - K) // S + 1
        acc = np.zeros((n, c, ho, wo), dtype=np.float32)
        cnt = np.zeros((ho, wo), dtype=np.float32)
        for i in range(K):
            for j in range(K):
                acc += xp[:, :, i:i + S * (ho - 1) + 1:S, j:j + S * (wo - 1) + 1:S]
                cnt += ones[i:i + S * (ho - 1) + 1:S, j:j + S * (wo - 1) + 1:S]
        return _store(acc / cnt, x.dtype)
