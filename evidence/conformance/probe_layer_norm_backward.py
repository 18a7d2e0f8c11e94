"""Is PyTorch's CPU layer_norm backward imprecise, or is the x_hat term of layer_norm_backward's
model justified? (docs/error-model.md, "layer_norm_backward"; output: evidence/conformance/probe_layer_norm_backward.txt)

Rows of x = offset + N(0, 1) in fp32, g ~ N(0, 1), w ~ 1 + N(0, 0.3); the saved mean and rstd are the
fp64 statistics rounded to fp32. Per kernel, the largest |grad_x - ref| over the rows in units of
u * rstd * T, for two candidate terms T (the rest of the model, the row sums and products, is the
same in both and included):

- shift: x_hat off by one common shift, the fp32 mean's error rstd * G * mean|x| (what a kernel
  that centres x before every sum sees): T = E0 * (|c1| + |x_hat| * |mean(wg)|)
- per-element: x_hat off per element by E_k = rstd * G * (|x_k| + mean|x|), as layer_norm's forward
  model admits (its own fp32 x_hat, x * rstd - mean * rstd, errs that way):
  T = E_k * |c1| + |x_hat_k| * mean(|wg| * E)

Kernels: the Triton tutorial's (x - mean) * rstd with the saved statistics, fp32; PyTorch's
native_layer_norm_backward in fp32 (sum(w*g*x) uncentred, grad_x = a*w*g + b*x + c) with the same
statistics; and the forward's own x_hat error, |x_hat(torch fp32 forward) - x_hat| in units of
u * rstd * G * (|x| + mean|x|), and its part that is not one shift per row (less the row's median
error) in units of u * rstd * |x|: per element, not a common shift.
"""

from __future__ import annotations

import math

import torch

torch.manual_seed(0)
torch.set_num_threads(1)
U = 2.0 ** -24


def main() -> None:
    print(f"torch {torch.__version__}")
    print(f"{'N':>6} {'offset':>8} | {'triton/shift':>12} {'triton/elem':>11} | {'torch/shift':>11} {'torch/elem':>10} | "
          f"{'fwd x_hat/E':>11} {'fwd own/|x|':>12}")
    for n in (64, 1024, 4096):
        for off in (0.0, 1e2, 1e4, 1e6):
            rows = 16
            x = (off + torch.randn(rows, n, dtype=torch.float64)).float().double()
            g = torch.randn(rows, n, dtype=torch.float64).float().double()
            w = (1 + 0.3 * torch.randn(n, dtype=torch.float64)).float().double()
            mu = x.mean(-1)
            rs = 1 / torch.sqrt(x.var(-1, unbiased=False) + 1e-5)
            muf, rsf = mu.float(), rs.float()
            m, r = muf.double()[:, None], rsf.double()[:, None]
            xh = (x - m) * r
            wg = w * g
            c1 = (wg * xh).mean(-1, keepdim=True)
            c2 = wg.mean(-1, keepdim=True)
            ref = r * (wg - c2 - xh * c1)
            grow = math.sqrt(n)
            mabs = x.abs().mean(-1, keepdim=True)
            base = r * (2 * wg.abs() + (grow + 1) * wg.abs().mean(-1, keepdim=True) + 2 * c2.abs()
                        + xh.abs() * (grow + 3) * (wg * xh).abs().mean(-1, keepdim=True) + 3 * (xh * c1).abs()) + ref.abs()
            e0 = r * grow * mabs
            shift = r * e0 * (c1.abs() + xh.abs() * c2.abs())
            ek = r * grow * (x.abs() + mabs)
            elem = r * (ek * c1.abs() + xh.abs() * (wg.abs() * ek).mean(-1, keepdim=True))
            xf, gf, wf = x.float(), g.float(), w.float()
            xhf = (xf - muf[:, None]) * rsf[:, None]
            wgf = wf * gf
            tri = ((wgf - (xhf * ((xhf * wgf).sum(-1, keepdim=True) / n) + wgf.sum(-1, keepdim=True) / n))
                   * rsf[:, None]).double()
            nat = torch.ops.aten.native_layer_norm_backward(gf, xf, [n], muf[:, None], rsf[:, None], wf, torch.zeros(n),
                                                            [True, False, False])[0].double()

            def worst(out, term):
                return ((out - ref).abs() / (U * (base + term))).max().item()

            y, fm, fr = torch.ops.aten.native_layer_norm(xf, [n], None, None, 1e-5)
            xh_true = (x - mu[:, None]) * rs[:, None]
            err = y.double() - xh_true
            fwd = (err.abs() / (U * r * grow * (x.abs() + mabs))).max().item()
            # its part that is not one shift per row, in units of u * rstd * |x| (the rounding of
            # x * rstd in the forward's folded form x * rstd + (-mean * rstd))
            own = ((err - err.median(-1, keepdim=True).values).abs() / (U * r * x.abs())).max().item()
            print(f"{n:>6} {off:>8.0e} | {worst(tri, shift):>12.3g} {worst(tri, elem):>11.3g} | "
                  f"{worst(nat, shift):>11.3g} {worst(nat, elem):>10.3g} | {fwd:>11.3g} {own:>12.3g}")


if __name__ == "__main__":
    main()
