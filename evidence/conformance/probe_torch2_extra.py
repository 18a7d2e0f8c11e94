"""Second round of candidate demonstrations under PyTorch 2.x (see probe_torch2_imprecise.py)."""
import math, torch, torch.nn.functional as F
torch.set_num_threads(1)
print("torch", torch.__version__)
H, B = torch.float16, torch.bfloat16
for dt in (torch.float32, H, B):
    x = torch.tensor([float("inf")] + [1.0] * 15, dtype=dt)
    print("gelu(+inf) in 16", dt, F.gelu(x)[0].item(), "tanh", F.gelu(x, approximate="tanh")[0].item())
for dt in (H, B):
    v = torch.full((1000,), 300.0, dtype=dt)
    print("normalize(300 x1000) dim0", dt, F.normalize(v, dim=0)[0].item(), "exact", 1 / math.sqrt(1000))
    v = torch.full((1000, 2), 300.0, dtype=dt)
    print("normalize(300 x1000 x2) dim0", dt, F.normalize(v, dim=0)[0, 0].item(), "exact", 1 / math.sqrt(1000))
    v = torch.full((2, 1000), 300.0, dtype=dt)
    print("normalize(2 x 300 x1000) dim1", dt, F.normalize(v, dim=1)[0, 0].item(), "exact", 1 / math.sqrt(1000))
    z = torch.tensor([[14.0, 8.0, 8.0, 8.0, 8.0, 8.0, 8.0, 8.0]], dtype=dt)
    print("log_softmax(14, 8x7)", dt, torch.log_softmax(z, -1)[0, :2].tolist(), "exact", torch.log_softmax(z.double(), -1)[0, :2].tolist(),
          "upcast", torch.log_softmax(z.float(), -1)[0, :2].to(dt).tolist())
    z = torch.tensor([[3.0, 2.9990234375]], dtype=dt)
    print("log_softmax(3, 2.999)", dt, torch.log_softmax(z, -1)[0].tolist(), "exact", torch.log_softmax(z.double(), -1)[0].tolist())
    g = torch.Generator().manual_seed(0)
    z = (torch.randn(64, 1000, generator=g) * 3).to(dt)
    low = torch.log_softmax(z, -1).double(); ex = torch.log_softmax(z.double(), -1); up = torch.log_softmax(z.float(), -1).to(dt).double()
    print("log_softmax randn*3 64x1000", dt, "max|low-ex|", (low - ex).abs().max().item(), "max|up-ex|", (up - ex).abs().max().item())
    low = torch.logsumexp(z, -1).double(); ex = torch.logsumexp(z.double(), -1); up = torch.logsumexp(z.float(), -1).to(dt).double()
    print("logsumexp randn*3 64x1000", dt, "max|low-ex|", (low - ex).abs().max().item(), "max|up-ex|", (up - ex).abs().max().item())
    t = torch.randint(0, 1000, (64,), generator=g)
    low = F.cross_entropy(z, t, reduction="none").double(); ex = F.cross_entropy(z.double(), t, reduction="none"); up = F.cross_entropy(z.float(), t, reduction="none").to(dt).double()
    print("cross_entropy randn*3 64x1000", dt, "max|low-ex|", (low - ex).abs().max().item(), "max|up-ex|", (up - ex).abs().max().item())
