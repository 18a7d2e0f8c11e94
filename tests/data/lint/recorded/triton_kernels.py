import torch, triton, triton.language as tl, json, os, sys

@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)

@triton.jit
def softmax_kernel(out_ptr, in_ptr, stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(in_ptr + row * stride + cols, mask=cols < n_cols, other=-float('inf'))
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    tl.store(out_ptr + row * stride + cols, num / tl.sum(num, axis=0), mask=cols < n_cols)

@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m = tl.program_id(0); pid_n = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM); rn = pid_n * BN + tl.arange(0, BN); rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :])
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(tl.float16))

x = torch.randn(4096, device='cuda'); y = torch.randn(4096, device='cuda'); o = torch.empty_like(x)
add_kernel[(4,)](x, y, o, 4096, BLOCK=1024)
add_kernel[(8,)](x, y, o, 4096, BLOCK=512)
a = torch.randn(64, 1000, device='cuda'); b = torch.empty_like(a)
softmax_kernel[(64,)](b, a, 1000, 1000, BLOCK=1024)
A = torch.randn(256, 256, device='cuda', dtype=torch.float16); B = torch.randn(256, 256, device='cuda', dtype=torch.float16); C = torch.empty(256, 256, device='cuda', dtype=torch.float16)
matmul_kernel[(2, 2)](A, B, C, 256, 256, 256, BM=128, BN=128, BK=64)
torch.cuda.synchronize()
print("triton", triton.__version__)
