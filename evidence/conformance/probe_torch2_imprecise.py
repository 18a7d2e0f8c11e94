"""Candidate demonstrations of the low-dtype natives that fail gpuemu's check under PyTorch 2.x
(evidence/conformance/torch2.md): each line says whether the imprecision shows (HOLDS) on this torch. Run on the
GPU machine's CPU (torch 2.11) and here (torch 1.13, bf16 only)."""
import math, torch, torch.nn.functional as F
torch.set_num_threads(1)
print("torch", torch.__version__)
B, H = torch.bfloat16, torch.float16
K = 4096
def show(name, got, exact, holds):
    print(f"{'HOLDS' if holds else 'no   '} {name}: got {got} exact {exact}")
def body(dt):
    x = torch.tensor([[10.0, 4.0]], dtype=dt)
    got = torch.log_softmax(x, -1)[0].tolist(); ex = torch.log_softmax(x.double(), -1)[0].tolist()
    show(f"log_softmax([10,4]) {dt}", got, ex, got[0] == 0.0)
    y = torch.tensor([[-0.0006, -8.0, -9.0]], dtype=dt)
    got = torch.logsumexp(y, -1).item(); ex = torch.logsumexp(y.double(), -1).item()
    show(f"logsumexp([-0.0006,-8,-9]) {dt}", got, ex, abs(got - ex) > 4 * abs(torch.tensor(ex).to(dt).item() - ex) + 1e-5)
    # a row of many small logits beside a large one, in the low dtype
    z = torch.cat([torch.tensor([14.0]), torch.full((999,), 8.0)]).to(dt)[None]
    got = torch.log_softmax(z, -1)[0, :2].tolist(); ex = torch.log_softmax(z.double(), -1)[0, :2].tolist()
    up = torch.log_softmax(z.float(), -1)[0, :2].to(dt).tolist()
    show(f"log_softmax(14, 8 x999) {dt}", got, [ex, up], abs(got[0]-ex[0]) > 3*abs(up[0]-ex[0]) + 1e-4)
    g = torch.logsumexp(z, -1).item(); e = torch.logsumexp(z.double(), -1).item(); u = torch.logsumexp(z.float(), -1).to(dt).item()
    show(f"logsumexp(14, 8 x999) {dt}", g, [e, u], abs(g-e) > 3*abs(u-e) + 1e-4)
    v = torch.tensor([300.0, 400.0], dtype=dt)
    got = F.normalize(v, dim=0).tolist(); ex = [0.6, 0.8]
    show(f"normalize([300,400]) {dt}", got, ex, abs(got[0] - 0.6) > 0.01)
    v2 = torch.tensor([[300.0], [400.0]], dtype=dt)
    got = F.normalize(v2, dim=0).flatten().tolist()
    show(f"normalize([[300],[400]], dim0) {dt}", got, ex, abs(got[0] - 0.6) > 0.01)
    o = torch.ones(K, 2, dtype=dt)
    got = F.normalize(o, dim=0)[0, 0].item()
    show(f"normalize(ones(4096,2), dim0) {dt}", got, 1/64, abs(got - 1/64) > 1e-3)
    for name, f in [("a@b", lambda: (torch.ones(1, K, dtype=dt) @ torch.ones(K, 1, dtype=dt)).item()),
                    ("bmm", lambda: torch.bmm(torch.ones(1, 1, K, dtype=dt), torch.ones(1, K, 1, dtype=dt)).item()),
                    ("linear W^T", lambda: F.linear(torch.ones(1, K, dtype=dt), torch.ones(K, 2, dtype=dt).t())[0, 0].item()),
                    ("conv1d", lambda: F.conv1d(torch.ones(1, 1, K, dtype=dt), torch.ones(1, 1, K, dtype=dt)).item()),
                    ("conv2d", lambda: F.conv2d(torch.ones(1, 1, 64, 64, dtype=dt), torch.ones(1, 1, 64, 64, dtype=dt)).item())]:
        got = f(); show(f"{name} of {K} ones {dt}", got, K, got != K)
    # cross_entropy with label smoothing over many classes
    gen = torch.Generator().manual_seed(0)
    lg = torch.randn(4, 25027, generator=gen).to(dt); t = torch.tensor([1, 2, 3, 4])
    got = F.cross_entropy(lg, t, label_smoothing=0.1).item(); ex = F.cross_entropy(lg.double(), t, label_smoothing=0.1).item()
    up = F.cross_entropy(lg.float(), t, label_smoothing=0.1).item()
    show(f"cross_entropy(C=25027, ls=0.1) {dt}", got, [ex, up], not math.isfinite(got) or abs(got - ex) > 5 * abs(up - ex) + 1e-3)
    x = torch.tensor([[10.0, 4.0]], dtype=dt)
    got = F.cross_entropy(x, torch.tensor([0])).item(); ex = math.log1p(math.exp(-6.0))
    show(f"cross_entropy([10,4]) {dt}", got, ex, got == 0.0)
    # batch_norm eval
    mean = torch.tensor([0.0712890625] * 3, dtype=dt); var = torch.tensor([0.1806640625] * 3, dtype=dt)
    w = torch.tensor([-0.41015625] * 3, dtype=dt); b = torch.tensor([-0.25] * 3, dtype=dt)
    xx = torch.full((2, 5, 3), -0.1953125, dtype=dt).transpose(1, 2)
    got = F.batch_norm(xx, mean, var, w, b, training=False, eps=1e-5).flatten()[0].item()
    ex = F.batch_norm(xx.double(), mean.double(), var.double(), w.double(), b.double(), training=False, eps=1e-5).flatten()[0].item()
    up = F.batch_norm(xx.float(), mean.float(), var.float(), w.float(), b.float(), training=False, eps=1e-5).flatten()[0].to(dt).item()
    show(f"batch_norm cancel noncontig {dt}", got, [ex, up], abs(got-ex) > 2*abs(up-ex) + 1e-6)
    xb = (torch.randn(8, 16, 37, generator=gen) * 0.5 + 300).to(dt)
    m2 = xb.double().mean((0, 2)); v2 = xb.double().var((0, 2), unbiased=False)
    got = F.batch_norm(xb, m2.to(dt), v2.to(dt), None, None, training=False)
    ex = F.batch_norm(xb.double(), m2.to(dt).double(), v2.to(dt).double(), None, None, training=False)
    up = F.batch_norm(xb.float(), m2.to(dt).float(), v2.to(dt).float(), None, None, training=False).to(dt).double()
    show(f"batch_norm mean 300 std 0.5 {dt}", (got.double()-ex).abs().max().item(), (up-ex).abs().max().item(), (got.double()-ex).abs().max().item() > 2*(up-ex).abs().max().item())
def tail(dt):
    got = F.gelu(torch.tensor([float("inf")], dtype=dt)).item()
    show(f"gelu(+inf) {dt}", got, "inf", math.isnan(got))

for dt in (B, H):
    try:
        body(dt)
    except Exception as e:  # a dtype this torch has no CPU kernel for
        print("ERR", dt, str(e)[:100])
for dt in (torch.float32, H, B):
    try:
        tail(dt)
    except Exception as e:
        print("ERR", dt, str(e)[:100])
