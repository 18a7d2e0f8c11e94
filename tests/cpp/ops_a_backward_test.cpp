// Backward ops (softmax_backward, log_softmax_backward, ..., embedding_backward, rope_backward): the fp64 reference gradients against
// central finite differences of the forward, their special values, and the error model measured on
// correct fp32 controls and known-buggy kernels (see ops_a_harness.hpp), over the upstream
// gradients the fuzzer draws (dense, sparse, one-hot, constant rows, wide magnitudes).
#include "ops_a_harness.hpp"

#include <functional>

namespace gpuemu::test_a {
namespace {

// softmax or log_softmax of one row, in fp64.
std::vector<double> forward_row(const std::vector<double>& x, bool log) {
  double m = -k_inf;
  for (double v : x) m = std::max(m, v);
  double s = 0.0;
  for (double v : x) s += std::exp(v - m);
  std::vector<double> y(x.size());
  for (std::size_t k = 0; k < x.size(); ++k)
    y[k] = log ? x[k] - m - std::log(s) : std::exp(x[k] - m) / s;
  return y;
}

// Rows of `len` along the last dim, or the rows of a [len, cols] tensor along dim 0.
std::vector<double> forward(const std::vector<double>& x, std::int64_t rows, std::int64_t len,
                            bool log, bool dim0) {
  std::vector<double> y(x.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    std::vector<double> line(static_cast<std::size_t>(len));
    auto at = [&](std::int64_t k) { return dim0 ? k * rows + r : r * len + k; };
    for (std::int64_t k = 0; k < len; ++k) line[k] = x[at(k)];
    const auto out = forward_row(line, log);
    for (std::int64_t k = 0; k < len; ++k) y[at(k)] = out[k];
  }
  return y;
}

TEST(OpsABackward, GradientsMatchCentralFiniteDifferences) {
  // d/dx_i of L(x) = sum_j g_j * f(x)_j, by central differences with h = 1e-5 on rows of fp64
  // logits, against the reference given y = f(x) and grad_out = g; along the last dim and dim 0.
  Rng rng(2026);
  for (bool log : {false, true})
    for (bool dim0 : {false, true}) {
      const std::string op = log ? "log_softmax_backward" : "softmax_backward";
      const std::int64_t rows = 3, len = 7;
      std::vector<double> x(rows * len), g(rows * len);
      for (auto& v : x) v = 2.0 * rng.normal();
      for (auto& v : g) v = rng.normal();
      const Shape shape = dim0 ? Shape{len, rows} : Shape{rows, len};
      auto ctx = make_ctx(op, DType::float32,
                          {{"grad_out", arg(DType::float64, shape, g)},
                           {"y", arg(DType::float64, shape, forward(x, rows, len, log, dim0))}},
                          {{"dim", dim0 ? 0 : -1}});
      auto ref = builtin_of(op).reference(ctx);
      ASSERT_TRUE(ref.ok()) << ref.error().message;
      auto loss = [&](const std::vector<double>& xs) {
        const auto y = forward(xs, rows, len, log, dim0);
        double l = 0.0;
        for (std::size_t k = 0; k < y.size(); ++k) l += g[k] * y[k];
        return l;
      };
      const double h = 1e-5;
      for (std::size_t i = 0; i < x.size(); ++i) {
        auto xp = x, xm = x;
        xp[i] += h, xm[i] -= h;
        const double fd = (loss(xp) - loss(xm)) / (2 * h);
        EXPECT_NEAR(ref->at(0).value[i], fd, 1e-8 * (1.0 + std::fabs(fd))) << op << " " << i;
      }
    }
}

TEST(OpsABackward, SpecialValuesPropagateAndConstantGradientsCancel) {
  // A NaN in a row's grad_out makes softmax's whole row NaN (through the sum) and log_softmax's
  // too; other rows are untouched. A constant grad_out cancels exactly: softmax's gradient is 0.
  auto ctx = make_ctx("softmax_backward", DType::float32,
                      {{"grad_out", arg(DType::float32, {2, 3}, {1, k_nan, 2, 0.5, 0.5, 0.5})},
                       {"y", arg(DType::float64, {2, 3}, {0.2, 0.3, 0.5, 0.25, 0.25, 0.5})}});
  auto ref = builtin_of("softmax_backward").reference(ctx);
  ASSERT_TRUE(ref.ok());
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(std::isnan(ref->at(0).value[i])) << i;
  for (int i = 3; i < 6; ++i) EXPECT_EQ(ref->at(0).value[i], 0.0) << i;
  // The cancellation leaves a term: an fp32 sum's error times y, not zero.
  EXPECT_GT(ref->at(0).c_acc[3], 0.0);
  auto lctx = make_ctx("log_softmax_backward", DType::float32,
                       {{"grad_out", arg(DType::float32, {1, 2}, {1.0, -1.0})},
                        {"y", arg(DType::float64, {1, 2}, {std::log(0.25), std::log(0.75)})}});
  auto lref = builtin_of("log_softmax_backward").reference(lctx);
  ASSERT_TRUE(lref.ok());
  EXPECT_EQ(lref->at(0).value, (RefVec{1.0, -1.0}));  // sum g = 0
  // Shapes that differ are an error, not a crash.
  auto bad = builtin_of("softmax_backward")
                 .reference(make_ctx("softmax_backward", DType::float32,
                                     {{"grad_out", arg(DType::float32, {2, 3}, std::vector<double>(6))},
                                      {"y", arg(DType::float32, {3, 2}, std::vector<double>(6))}}));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, ErrorCode::shape_mismatch);
}

// The upstream gradients the fuzzer's adversarial strategy draws, and plain normal ones.
enum class Grad { normal, sparse, one_hot, constant, wide };

std::vector<double> grad_values(Rng& rng, std::int64_t rows, std::int64_t len, Grad kind,
                                DType dt) {
  std::vector<double> g(static_cast<std::size_t>(rows * len), 0.0);
  for (std::int64_t r = 0; r < rows; ++r) {
    const double c = rng.normal();
    const auto hot = static_cast<std::int64_t>(rng.bounded(static_cast<std::uint64_t>(len)));
    for (std::int64_t k = 0; k < len; ++k) {
      double& v = g[static_cast<std::size_t>(r * len + k)];
      switch (kind) {
        case Grad::normal: v = rng.normal(); break;
        case Grad::sparse: v = rng.chance(1, 16) ? 4.0 * rng.normal() : 0.0; break;
        case Grad::one_hot: v = k == hot ? c : 0.0; break;
        case Grad::constant: v = c; break;
        case Grad::wide: v = (rng.chance(1, 2) ? 1 : -1) * std::pow(10.0, rng.uniform(-3, 3)); break;
      }
      v = round_to(dt, v);
    }
  }
  return g;
}

std::vector<Scenario> backward_scenarios(bool log) {
  const std::string op = log ? "log_softmax_backward" : "softmax_backward";
  std::vector<Scenario> out;
  Rng rng(log ? 77 : 76);
  const std::pair<std::int64_t, std::int64_t> shapes[] = {{4, 1},  {8, 7},   {6, 128}, {6, 129},
                                                          {4, 1000}, {3, 1025}, {2, 4099}};
  const std::pair<Grad, const char*> grads[] = {{Grad::normal, "normal"},
                                                {Grad::sparse, "sparse"},
                                                {Grad::one_hot, "one-hot"},
                                                {Grad::constant, "constant"},
                                                {Grad::wide, "wide"}};
  for (DType dt : k_dtypes)
    for (auto [rows, len] : shapes)
      for (auto [kind, gname] : grads)
        for (double spread : {1.0, 8.0}) {
          // y as a forward kernel returns it: the fp64 forward of logits, rounded once.
          auto x = normal_values(rng, rows * len, 0.0, spread, DType::float64);
          auto y = forward(x, rows, len, log, false);
          for (auto& v : y) v = round_to(dt, v);
          Scenario s;
          s.label = std::to_string(rows) + "x" + std::to_string(len) + " " + gname + " spread " +
                    std::to_string(static_cast<int>(spread));
          s.ctx = make_ctx(op, dt,
                           {{"grad_out", arg(dt, {rows, len}, grad_values(rng, rows, len, kind, dt))},
                            {"y", arg(dt, {rows, len}, std::move(y))}});
          out.push_back(std::move(s));
        }
  return out;
}

TEST(OpsABackward, SoftmaxBackward) {
  score_op("softmax_backward", backward_scenarios(false),
           {{"lowp_sum", DType::float32, "the case dtype is the accumulator's: nothing lost"}});
}

TEST(OpsABackward, LogSoftmaxBackward) {
  score_op("log_softmax_backward", backward_scenarios(true),
           {{"lowp_sum", DType::float32, "the case dtype is the accumulator's: nothing lost"}});
}

// rms_norm's forward in fp64: x * rstd * w over rows of x[R, N], rstd = 1/sqrt(mean(x^2) + eps).
std::vector<double> rms_rstd(const std::vector<double>& x, std::int64_t rows, std::int64_t n, double eps) {
  std::vector<double> r(static_cast<std::size_t>(rows));
  for (std::int64_t i = 0; i < rows; ++i) {
    double ss = 0.0;
    for (std::int64_t k = 0; k < n; ++k) ss += x[i * n + k] * x[i * n + k];
    r[i] = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
  }
  return r;
}

TEST(OpsABackward, RmsNormGradientsMatchCentralFiniteDifferences) {
  // L(x, w) = sum g * rms_norm(x, w); d/dx and d/dw by central differences (h = 1e-6) against the
  // reference given the exact fp64 rstd of x.
  Rng rng(31);
  const std::int64_t R = 3, N = 6;
  const double eps = 1e-6;
  std::vector<double> x(R * N), g(R * N), w(N);
  for (auto& v : x) v = rng.normal();
  for (auto& v : g) v = rng.normal();
  for (auto& v : w) v = rng.normal();
  auto ctx = make_ctx("rms_norm_backward", DType::float32,
                      {{"grad_out", arg(DType::float64, {R, N}, g)},
                       {"x", arg(DType::float64, {R, N}, x)},
                       {"rstd", arg(DType::float64, {R}, rms_rstd(x, R, N, eps))},
                       {"weight", arg(DType::float64, {N}, w)}},
                      {{"eps", eps}});
  auto ref = builtin_of("rms_norm_backward").reference(ctx);
  ASSERT_TRUE(ref.ok()) << ref.error().message;
  ASSERT_EQ(ref->size(), 2u);
  auto loss = [&](const std::vector<double>& xs, const std::vector<double>& ws) {
    const auto r = rms_rstd(xs, R, N, eps);
    double l = 0.0;
    for (std::int64_t i = 0; i < R; ++i)
      for (std::int64_t k = 0; k < N; ++k) l += g[i * N + k] * xs[i * N + k] * r[i] * ws[k];
    return l;
  };
  const double h = 1e-6;
  for (std::size_t i = 0; i < x.size(); ++i) {
    auto xp = x, xm = x;
    xp[i] += h, xm[i] -= h;
    const double fd = (loss(xp, w) - loss(xm, w)) / (2 * h);
    EXPECT_NEAR(ref->at(0).value[i], fd, 1e-7 * (1.0 + std::fabs(fd))) << "grad_x " << i;
  }
  for (std::size_t k = 0; k < w.size(); ++k) {
    auto wp = w, wm = w;
    wp[k] += h, wm[k] -= h;
    const double fd = (loss(x, wp) - loss(x, wm)) / (2 * h);
    EXPECT_NEAR(ref->at(1).value[k], fd, 1e-7 * (1.0 + std::fabs(fd))) << "grad_weight " << k;
  }
  // Inputs of the wrong shapes are an error, not a crash.
  auto bad = builtin_of("rms_norm_backward")
                 .reference(make_ctx("rms_norm_backward", DType::float32,
                                     {{"grad_out", arg(DType::float32, {R, N}, g)},
                                      {"x", arg(DType::float32, {R, N}, x)},
                                      {"rstd", arg(DType::float32, {R + 1}, std::vector<double>(R + 1, 1.0))},
                                      {"weight", arg(DType::float32, {N}, w)}}));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, ErrorCode::shape_mismatch);
}

TEST(OpsABackward, RmsNormBackward) {
  // Rows of plain normals, of a large offset over a small spread (the forward's adversarial rows),
  // and of wide magnitudes; R across the 64-row blocks grad_weight is summed over (R = 1, 63, 64,
  // 65, 200), the upstream gradients of the fuzzer.
  std::vector<Scenario> sc;
  Rng rng(41);
  const double eps = 1e-6;
  const std::pair<std::int64_t, std::int64_t> shapes[] = {{1, 7}, {63, 33}, {64, 128}, {65, 129}, {200, 40}, {3, 4099}};
  const std::pair<Grad, const char*> grads[] = {{Grad::normal, "normal"}, {Grad::sparse, "sparse"},
                                                {Grad::constant, "constant"}, {Grad::wide, "wide"}};
  for (DType dt : k_dtypes)
    for (auto [rows, n] : shapes)
      for (auto [kind, gname] : grads)
        for (int xk = 0; xk < 3; ++xk) {
          std::vector<double> x = xk == 0   ? normal_values(rng, rows * n, 0.0, 1.0, dt)
                                  : xk == 1 ? normal_values(rng, rows * n, 100.0, 0.5, dt)
                                            : wide_values(rng, rows * n, -3, 3, dt);
          auto r = rms_rstd(x, rows, n, eps);
          for (auto& v : r) v = round_to(DType::float32, v);
          Scenario s;
          s.label = std::to_string(rows) + "x" + std::to_string(n) + " " + gname + " x" + std::to_string(xk);
          s.ctx = make_ctx("rms_norm_backward", dt,
                           {{"grad_out", arg(dt, {rows, n}, grad_values(rng, rows, n, kind, dt))},
                            {"x", arg(dt, {rows, n}, std::move(x))},
                            {"rstd", arg(DType::float32, {rows}, std::move(r))},
                            {"weight", arg(dt, {n}, normal_values(rng, n, 1.0, 0.3, dt))}},
                           {{"eps", eps}});
          sc.push_back(std::move(s));
        }
  score_op("rms_norm_backward", sc,
           {{"dweight_lowp", DType::float32, "the case dtype is the accumulator's: nothing lost"}});
}

double silu64_(double x) { return x / (1.0 + std::exp(-x)); }

TEST(OpsABackward, SiluAndSwigluGradientsMatchCentralFiniteDifferences) {
  Rng rng(51);
  const double h = 1e-6;
  std::vector<double> x(40), g(40), up(40);
  for (auto& v : x) v = 4.0 * rng.normal();
  for (auto& v : g) v = rng.normal();
  for (auto& v : up) v = rng.normal();
  auto s = builtin_of("silu_backward")
               .reference(make_ctx("silu_backward", DType::float32,
                                   {{"grad_out", arg(DType::float64, {4, 10}, g)}, {"x", arg(DType::float64, {4, 10}, x)}}));
  auto w = builtin_of("swiglu_backward")
               .reference(make_ctx("swiglu_backward", DType::float32,
                                   {{"grad_out", arg(DType::float64, {4, 10}, g)},
                                    {"gate", arg(DType::float64, {4, 10}, x)},
                                    {"up", arg(DType::float64, {4, 10}, up)}}));
  ASSERT_TRUE(s.ok() && w.ok());
  ASSERT_EQ(w->size(), 2u);
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double d = (silu64_(x[i] + h) - silu64_(x[i] - h)) / (2 * h);
    EXPECT_NEAR(s->at(0).value[i], g[i] * d, 1e-8 * (1.0 + std::fabs(g[i] * d))) << i;
    EXPECT_NEAR(w->at(0).value[i], g[i] * up[i] * d, 1e-8 * (1.0 + std::fabs(g[i] * up[i] * d))) << i;
    EXPECT_NEAR(w->at(1).value[i], g[i] * silu64_(x[i]), 1e-12 * (1.0 + std::fabs(g[i] * silu64_(x[i])))) << i;
  }
  // Special values follow the formula: silu'(+-Inf) is NaN (0 * -Inf, 1 + Inf * 0).
  auto sp = builtin_of("silu_backward")
                .reference(make_ctx("silu_backward", DType::float32,
                                    {{"grad_out", arg(DType::float32, {2}, {1.0, 1.0})},
                                     {"x", arg(DType::float32, {2}, {k_inf, -k_inf})}}));
  ASSERT_TRUE(sp.ok());
  EXPECT_TRUE(std::isnan(sp->at(0).value[0]) && std::isnan(sp->at(0).value[1]));
}

TEST(OpsABackward, SiluAndSwigluBackward) {
  // x over many octaves (both signs: the derivative's cancellations at x ~ -1.28 and its tail
  // below -10) and plain normals, against the fuzzer's upstream gradients.
  for (const char* op : {"silu_backward", "swiglu_backward"}) {
    std::vector<Scenario> sc;
    Rng rng(op[1] == 'i' ? 61 : 62);
    const std::pair<Grad, const char*> grads[] = {{Grad::normal, "normal"}, {Grad::sparse, "sparse"},
                                                  {Grad::wide, "wide"}};
    for (DType dt : k_dtypes)
      for (auto [kind, gname] : grads)
        for (int xk = 0; xk < 3; ++xk) {
          const std::int64_t R = 16, N = 257;
          auto x = xk == 0 ? normal_values(rng, R * N, 0.0, 3.0, dt)
                   : xk == 1 ? wide_values(rng, R * N, -3, 2, dt)
                             : uniform_values(rng, R * N, -1.4, -1.1, dt);  // around silu' = 0
          Scenario s;
          s.label = std::string(gname) + " x" + std::to_string(xk);
          std::map<std::string, RefArg, std::less<>> in = {{"grad_out", arg(dt, {R, N}, grad_values(rng, R, N, kind, dt))}};
          if (op[1] == 'i') {
            in["x"] = arg(dt, {R, N}, std::move(x));
          } else {
            in["gate"] = arg(dt, {R, N}, std::move(x));
            in["up"] = arg(dt, {R, N}, normal_values(rng, R * N, 0.0, 1.0, dt));
          }
          s.ctx = make_ctx(op, dt, std::move(in));
          sc.push_back(std::move(s));
        }
    score_op(op, sc);
  }
}

TEST(OpsABackward, MatmulGradientsMatchCentralFiniteDifferences) {
  // L(a, b) = sum g * (a @ b) is bilinear: central differences are exact up to rounding.
  Rng rng(71);
  const std::int64_t M = 3, K = 4, N = 5;
  std::vector<double> a(M * K), b(K * N), g(M * N);
  for (auto& v : a) v = rng.normal();
  for (auto& v : b) v = rng.normal();
  for (auto& v : g) v = rng.normal();
  auto ref = builtin_of("matmul_backward")
                 .reference(make_ctx("matmul_backward", DType::float32,
                                     {{"grad_out", arg(DType::float64, {M, N}, g)},
                                      {"a", arg(DType::float64, {M, K}, a)},
                                      {"b", arg(DType::float64, {K, N}, b)}}));
  ASSERT_TRUE(ref.ok()) << ref.error().message;
  ASSERT_EQ(ref->size(), 2u);
  EXPECT_EQ(ref->at(0).shape, (Shape{M, K}));
  EXPECT_EQ(ref->at(1).shape, (Shape{K, N}));
  auto loss = [&](const std::vector<double>& aa, const std::vector<double>& bb) {
    double l = 0.0;
    for (std::int64_t i = 0; i < M; ++i)
      for (std::int64_t j = 0; j < N; ++j)
        for (std::int64_t k = 0; k < K; ++k) l += g[i * N + j] * aa[i * K + k] * bb[k * N + j];
    return l;
  };
  const double h = 1e-4;
  for (std::size_t i = 0; i < a.size(); ++i) {
    auto ap = a, am = a;
    ap[i] += h, am[i] -= h;
    EXPECT_NEAR(ref->at(0).value[i], (loss(ap, b) - loss(am, b)) / (2 * h), 1e-9) << "grad_a " << i;
  }
  for (std::size_t i = 0; i < b.size(); ++i) {
    auto bp = b, bm = b;
    bp[i] += h, bm[i] -= h;
    EXPECT_NEAR(ref->at(1).value[i], (loss(a, bp) - loss(a, bm)) / (2 * h), 1e-9) << "grad_b " << i;
  }
  auto bad = builtin_of("matmul_backward")
                 .reference(make_ctx("matmul_backward", DType::float32,
                                     {{"grad_out", arg(DType::float32, {M, N + 1}, std::vector<double>(M * (N + 1)))},
                                      {"a", arg(DType::float32, {M, K}, a)},
                                      {"b", arg(DType::float32, {K, N}, b)}}));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, ErrorCode::shape_mismatch);
}

TEST(OpsABackward, MatmulBackward) {
  // Reduced dims (N for grad_a, M for grad_b) across the 32-wide K tiles: 1, 31, 33, 64, 100, 257.
  std::vector<Scenario> sc;
  Rng rng(81);
  const std::int64_t mnk[][3] = {{1, 8, 1}, {31, 16, 33}, {64, 40, 64}, {100, 7, 257}, {257, 33, 100}};
  for (DType dt : k_dtypes)
    for (const auto& d : mnk)
      for (Grad kind : {Grad::normal, Grad::sparse, Grad::wide}) {
        const std::int64_t M = d[0], K = d[1], N = d[2];
        Scenario s;
        s.label = std::to_string(M) + "x" + std::to_string(K) + "x" + std::to_string(N) + " grad " +
                  std::to_string(static_cast<int>(kind));
        s.ctx = make_ctx("matmul_backward", dt,
                         {{"grad_out", arg(dt, {M, N}, grad_values(rng, M, N, kind, dt))},
                          {"a", arg(dt, {M, K}, normal_values(rng, M * K, 0.0, 1.0, dt))},
                          {"b", arg(dt, {K, N}, normal_values(rng, K * N, 0.0, 1.0, dt))}});
        sc.push_back(std::move(s));
      }
  score_op("matmul_backward", sc);
}

double gelu64_(double x, bool tanh_approx) {
  if (tanh_approx) return 0.5 * x * (1.0 + std::tanh(0.79788456080286535588 * (x + 0.044715 * x * x * x)));
  return 0.5 * x * std::erfc(-x * 0.70710678118654752440);
}

TEST(OpsABackward, GeluGradientsMatchCentralFiniteDifferences) {
  // Both forms (`approximate` none and tanh): g * gelu'(x) against central differences of the
  // fp64 forward, over x in [-8, 8] (the derivative's zero near -0.75 and its tails).
  Rng rng(91);
  const double h = 1e-6;
  std::vector<double> x(60), g(60);
  for (auto& v : x) v = rng.uniform(-8.0, 8.0);
  for (auto& v : g) v = rng.normal();
  for (bool tanh_approx : {false, true}) {
    auto ref = builtin_of("gelu_backward")
                   .reference(make_ctx("gelu_backward", DType::float32,
                                       {{"grad_out", arg(DType::float64, {6, 10}, g)}, {"x", arg(DType::float64, {6, 10}, x)}},
                                       {{"approximate", tanh_approx ? "tanh" : "none"}}));
    ASSERT_TRUE(ref.ok()) << ref.error().message;
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double d = (gelu64_(x[i] + h, tanh_approx) - gelu64_(x[i] - h, tanh_approx)) / (2 * h);
      EXPECT_NEAR(ref->at(0).value[i], g[i] * d, 1e-8 * (1.0 + std::fabs(g[i] * d))) << tanh_approx << " " << i;
    }
  }
  // The two forms differ (by up to ~2e-3 in the derivative): the attr is read.
  auto erf = builtin_of("gelu_backward")
                 .reference(make_ctx("gelu_backward", DType::float32,
                                     {{"grad_out", arg(DType::float32, {1}, {1.0})}, {"x", arg(DType::float32, {1}, {1.5})}}));
  auto tnh = builtin_of("gelu_backward")
                 .reference(make_ctx("gelu_backward", DType::float32,
                                     {{"grad_out", arg(DType::float32, {1}, {1.0})}, {"x", arg(DType::float32, {1}, {1.5})}},
                                     {{"approximate", "tanh"}}));
  ASSERT_TRUE(erf.ok() && tnh.ok());
  EXPECT_GT(std::fabs(erf->at(0).value[0] - tnh->at(0).value[0]), 1e-4);
  // Special values follow torch's formula: gelu'(+-Inf) is NaN (x * pdf = Inf * 0). In the tanh
  // form, x*x overflows fp32 past 1.8e19: indeterminate, NaN accepted. An infinite g on a
  // derivative that fp32 may round to 0 (x = -12, tanh form: 1 - t^2 is 0): NaN accepted too.
  auto sp = builtin_of("gelu_backward")
                .reference(make_ctx("gelu_backward", DType::float32,
                                    {{"grad_out", arg(DType::float32, {5}, {1.0, 1.0, 1.0, k_inf, 1.0})},
                                     {"x", arg(DType::float32, {5}, {k_inf, -k_inf, 1e20, -12.0, 1.0})}},
                                    {{"approximate", "tanh"}}));
  ASSERT_TRUE(sp.ok());
  const RefOutput& o = sp->at(0);
  EXPECT_TRUE(std::isnan(o.value[0]) && std::isnan(o.value[1]));
  EXPECT_EQ(o.value[2], 1.0);
  ASSERT_EQ(o.alt_nonfinite.size(), 5u);
  EXPECT_TRUE(alt_accepts(o.alt_nonfinite[2], k_nan));
  EXPECT_GE(o.c_acc[2], std::numeric_limits<float>::max() / 4.0);
  EXPECT_TRUE(std::isinf(o.value[3]) && alt_accepts(o.alt_nonfinite[3], k_nan));
  EXPECT_FALSE(alt_accepts(o.alt_nonfinite[4], k_nan));  // a plain element: NaN is a bug
  auto bad = builtin_of("gelu_backward")
                 .reference(make_ctx("gelu_backward", DType::float32,
                                     {{"grad_out", arg(DType::float32, {2, 3}, std::vector<double>(6))},
                                      {"x", arg(DType::float32, {3, 2}, std::vector<double>(6))}}));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, ErrorCode::shape_mismatch);
}

TEST(OpsABackward, GeluBackward) {
  // Both forms; x as plain normals, over many octaves, around gelu'(x) = 0 (x ~ -0.75, where
  // cdf + x * pdf cancels) and in the negative tail (x in [-6, -3]: 1 + erf and 1 + tanh cancel).
  // tanh_for_erf is right on the tanh form and no_inner_chain on the erf form: each is caught on
  // the other.
  std::vector<Scenario> sc;
  Rng rng(92);
  const std::pair<Grad, const char*> grads[] = {{Grad::normal, "normal"}, {Grad::sparse, "sparse"},
                                                {Grad::wide, "wide"}};
  for (const char* form : {"none", "tanh"})
    for (DType dt : k_dtypes)
      for (auto [kind, gname] : grads)
        for (int xk = 0; xk < 4; ++xk) {
          const std::int64_t R = 16, N = 257;
          auto x = xk == 0   ? normal_values(rng, R * N, 0.0, 3.0, dt)
                   : xk == 1 ? wide_values(rng, R * N, -3, 2, dt)
                   : xk == 2 ? uniform_values(rng, R * N, -0.9, -0.6, dt)
                             : uniform_values(rng, R * N, -6.0, -3.0, dt);
          Scenario s;
          s.label = std::string(form) + " " + gname + " x" + std::to_string(xk);
          s.ctx = make_ctx("gelu_backward", dt,
                           {{"grad_out", arg(dt, {R, N}, grad_values(rng, R, N, kind, dt))}, {"x", arg(dt, {R, N}, std::move(x))}},
                           {{"approximate", form}});
          sc.push_back(std::move(s));
        }
  score_op("gelu_backward", sc);
}

TEST(OpsABackward, LinearGradientsMatchCentralFiniteDifferences) {
  // L(x, W, b) = sum g * (x @ W^T + b) is bilinear in (x, W) and linear in b: central differences
  // are exact up to rounding. grad_bias is d/db.
  Rng rng(101);
  const std::int64_t M = 5, K = 3, N = 4;
  std::vector<double> x(M * K), w(N * K), g(M * N), bias(N);
  for (auto& v : x) v = rng.normal();
  for (auto& v : w) v = rng.normal();
  for (auto& v : g) v = rng.normal();
  for (auto& v : bias) v = rng.normal();
  auto ref = builtin_of("linear_backward")
                 .reference(make_ctx("linear_backward", DType::float32,
                                     {{"grad_out", arg(DType::float64, {M, N}, g)},
                                      {"x", arg(DType::float64, {M, K}, x)},
                                      {"weight", arg(DType::float64, {N, K}, w)}}));
  ASSERT_TRUE(ref.ok()) << ref.error().message;
  ASSERT_EQ(ref->size(), 3u);
  EXPECT_EQ(ref->at(0).shape, (Shape{M, K}));
  EXPECT_EQ(ref->at(1).shape, (Shape{N, K}));
  EXPECT_EQ(ref->at(2).shape, (Shape{N}));
  EXPECT_EQ(ref->at(2).name, "grad_bias");
  auto loss = [&](const std::vector<double>& xx, const std::vector<double>& ww, const std::vector<double>& bb) {
    double l = 0.0;
    for (std::int64_t i = 0; i < M; ++i)
      for (std::int64_t j = 0; j < N; ++j) {
        double y = bb[j];
        for (std::int64_t k = 0; k < K; ++k) y += xx[i * K + k] * ww[j * K + k];
        l += g[i * N + j] * y;
      }
    return l;
  };
  const double h = 1e-4;
  for (std::size_t i = 0; i < x.size(); ++i) {
    auto p = x, m = x;
    p[i] += h, m[i] -= h;
    EXPECT_NEAR(ref->at(0).value[i], (loss(p, w, bias) - loss(m, w, bias)) / (2 * h), 1e-9) << "grad_x " << i;
  }
  for (std::size_t i = 0; i < w.size(); ++i) {
    auto p = w, m = w;
    p[i] += h, m[i] -= h;
    EXPECT_NEAR(ref->at(1).value[i], (loss(x, p, bias) - loss(x, m, bias)) / (2 * h), 1e-9) << "grad_weight " << i;
  }
  for (std::size_t i = 0; i < bias.size(); ++i) {
    auto p = bias, m = bias;
    p[i] += h, m[i] -= h;
    EXPECT_NEAR(ref->at(2).value[i], (loss(x, w, p) - loss(x, w, m)) / (2 * h), 1e-9) << "grad_bias " << i;
  }
  auto bad = builtin_of("linear_backward")
                 .reference(make_ctx("linear_backward", DType::float32,
                                     {{"grad_out", arg(DType::float32, {M, N}, g)},
                                      {"x", arg(DType::float32, {M, K}, x)},
                                      {"weight", arg(DType::float32, {N, K + 1}, std::vector<double>(N * (K + 1)))}}));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, ErrorCode::shape_mismatch);
}

TEST(OpsABackward, LinearBackward) {
  // M (the rows grad_weight and grad_bias sum over) across the 64-row blocks of grad_bias and the
  // 32-wide K tiles: 1, 63, 64, 65, 200, 257; N (grad_x's dot products) 1 to 100; the fuzzer's
  // upstream gradients, constant ones included (grad_bias a sum of equal terms).
  std::vector<Scenario> sc;
  Rng rng(102);
  const std::int64_t mkn[][3] = {{1, 8, 3}, {63, 16, 33}, {64, 40, 64}, {65, 7, 100}, {200, 33, 17}, {257, 5, 1}};
  const std::pair<Grad, const char*> grads[] = {{Grad::normal, "normal"}, {Grad::sparse, "sparse"},
                                                {Grad::constant, "constant"}, {Grad::wide, "wide"}};
  for (DType dt : k_dtypes)
    for (const auto& d : mkn)
      for (auto [kind, gname] : grads) {
        const std::int64_t M = d[0], K = d[1], N = d[2];
        Scenario s;
        s.label = std::to_string(M) + "x" + std::to_string(K) + "x" + std::to_string(N) + " " + gname;
        s.ctx = make_ctx("linear_backward", dt,
                         {{"grad_out", arg(dt, {M, N}, grad_values(rng, M, N, kind, dt))},
                          {"x", arg(dt, {M, K}, normal_values(rng, M * K, 0.0, 1.0, dt))},
                          {"weight", arg(dt, {N, K}, normal_values(rng, N * K, 0.0, 0.5, dt))}});
        sc.push_back(std::move(s));
      }
  score_op("linear_backward", sc);
}

TEST(OpsABackward, EmbeddingGradientMatchesCentralFiniteDifferences) {
  // L(W) = sum g * W[indices] is linear in W: d/dW by central differences, with repeated indices
  // (they accumulate) and a row no index names (0).
  Rng rng(111);
  const std::int64_t B = 2, L = 5, D = 3, V = 4;
  const std::vector<double> idx = {0, 2, 2, 3, 0, 2, 0, 3, 2, 2};  // row 1 never named
  std::vector<double> g(B * L * D), w(V * D);
  for (auto& v : g) v = rng.normal();
  for (auto& v : w) v = rng.normal();
  auto ref = builtin_of("embedding_backward")
                 .reference(make_ctx("embedding_backward", DType::float32,
                                     {{"grad_out", arg(DType::float64, {B, L, D}, g)},
                                      {"indices", arg(DType::int64, {B, L}, idx)}},
                                     {{"num_weights", V}}));
  ASSERT_TRUE(ref.ok()) << ref.error().message;
  ASSERT_EQ(ref->at(0).shape, (Shape{V, D}));
  auto loss = [&](const std::vector<double>& ww) {
    double l = 0.0;
    for (std::size_t p = 0; p < idx.size(); ++p)
      for (std::int64_t d = 0; d < D; ++d) l += g[p * D + d] * ww[static_cast<std::size_t>(idx[p]) * D + d];
    return l;
  };
  const double h = 1e-4;
  for (std::size_t i = 0; i < w.size(); ++i) {
    auto wp = w, wm = w;
    wp[i] += h, wm[i] -= h;
    EXPECT_NEAR(ref->at(0).value[i], (loss(wp) - loss(wm)) / (2 * h), 1e-9) << i;
  }
  for (std::int64_t d = 0; d < D; ++d) {
    EXPECT_EQ(ref->at(0).value[D + d], 0.0);  // row 1
    EXPECT_EQ(ref->at(0).c_acc[D + d], 0.0);  // and exactly so
  }
  // An index outside [0, num_weights) and a grad_out of the wrong shape are errors, not crashes.
  auto out_of_range = builtin_of("embedding_backward")
                          .reference(make_ctx("embedding_backward", DType::float32,
                                              {{"grad_out", arg(DType::float32, {1, 2, D}, std::vector<double>(2 * D))},
                                               {"indices", arg(DType::int64, {1, 2}, {0, 4})}},
                                              {{"num_weights", V}}));
  ASSERT_FALSE(out_of_range.ok());
  EXPECT_EQ(out_of_range.error().code, ErrorCode::invalid_argument);
  auto bad = builtin_of("embedding_backward")
                 .reference(make_ctx("embedding_backward", DType::float32,
                                     {{"grad_out", arg(DType::float32, {1, 3, D}, std::vector<double>(3 * D))},
                                      {"indices", arg(DType::int64, {1, 2}, {0, 1})}},
                                     {{"num_weights", V}}));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, ErrorCode::shape_mismatch);
}

TEST(OpsABackward, EmbeddingBackward) {
  // Few rows (many repeats: lost updates and 16-bit accumulators show), D across the 128-wide
  // tiles (1, 127, 129, 300), indices uniform or concentrated on one row, the fuzzer's upstream
  // gradients (a constant one repeated at one row: a sum of equal terms).
  std::vector<Scenario> sc;
  Rng rng(112);
  const std::int64_t shapes[][4] = {{4, 64, 1, 3}, {2, 500, 127, 1}, {8, 100, 129, 64}, {1, 1000, 300, 7}, {3, 33, 40, 1000}};
  const std::pair<Grad, const char*> grads[] = {{Grad::normal, "normal"}, {Grad::sparse, "sparse"},
                                                {Grad::constant, "constant"}, {Grad::wide, "wide"}};
  for (DType dt : k_dtypes)
    for (const auto& sh : shapes)
      for (auto [kind, gname] : grads)
        for (bool hot : {false, true}) {
          const std::int64_t B = sh[0], L = sh[1], D = sh[2], V = sh[3];
          std::vector<double> idx(static_cast<std::size_t>(B * L));
          for (auto& v : idx)
            v = static_cast<double>(hot && rng.chance(3, 4) ? 0 : static_cast<std::int64_t>(rng.bounded(static_cast<std::uint64_t>(V))));
          Scenario s;
          s.label = std::to_string(B) + "x" + std::to_string(L) + "x" + std::to_string(D) + " V=" + std::to_string(V) +
                    " " + gname + (hot ? " hot" : "");
          s.ctx = make_ctx("embedding_backward", dt,
                           {{"grad_out", arg(dt, {B, L, D}, grad_values(rng, B * L, D, kind, dt))},
                            {"indices", arg(DType::int64, {B, L}, std::move(idx))}},
                           {{"num_weights", V}});
          sc.push_back(std::move(s));
        }
  // An expanded grad_out (stride 0 along B): 5 values repeated 49 times at one row, summed in
  // order (the roundings of a running sum repeat with its terms).
  for (DType dt : k_dtypes) {
    const std::int64_t B = 49, L = 5, D = 300;
    auto row = normal_values(rng, L * D, 0.0, 1.0, dt);
    std::vector<double> g;
    for (std::int64_t b = 0; b < B; ++b) g.insert(g.end(), row.begin(), row.end());
    Scenario s;
    s.label = "expanded grad_out, V=1";
    s.ctx = make_ctx("embedding_backward", dt,
                     {{"grad_out", arg(dt, {B, L, D}, std::move(g))},
                      {"indices", arg(DType::int64, {B, L}, std::vector<double>(static_cast<std::size_t>(B * L), 0.0))}},
                     {{"num_weights", 1}});
    sc.push_back(std::move(s));
  }
  score_op("embedding_backward", sc);
}

TEST(OpsABackward, RopeGradientMatchesCentralFiniteDifferences) {
  // L(x) = sum g * rope(x) is linear in x: d/dx by central differences through rope's own fp64
  // reference, against rope_backward's (the inverse rotation), for both styles and an offset.
  Rng rng(121);
  const std::int64_t B = 1, L = 3, H = 2, D = 6;
  std::vector<double> x(B * L * H * D), g(x.size());
  for (auto& v : x) v = rng.normal();
  for (auto& v : g) v = rng.normal();
  for (const char* style : {"half", "interleaved"}) {
    const Json attrs = {{"style", style}, {"offset", 5}, {"theta", 100.0}};
    auto ref = builtin_of("rope_backward")
                   .reference(make_ctx("rope_backward", DType::float32, {{"grad_out", arg(DType::float64, {B, L, H, D}, g)}}, attrs));
    ASSERT_TRUE(ref.ok()) << ref.error().message;
    auto loss = [&](const std::vector<double>& xs) {
      auto y = builtin_of("rope").reference(make_ctx("rope", DType::float32, {{"x", arg(DType::float64, {B, L, H, D}, xs)}}, attrs));
      double l = 0.0;
      for (std::size_t k = 0; k < xs.size(); ++k) l += g[k] * y->at(0).value[k];
      return l;
    };
    const double h = 1e-4;
    for (std::size_t i = 0; i < x.size(); ++i) {
      auto xp = x, xm = x;
      xp[i] += h, xm[i] -= h;
      EXPECT_NEAR(ref->at(0).value[i], (loss(xp) - loss(xm)) / (2 * h), 1e-9) << style << " " << i;
    }
  }
}

TEST(OpsABackward, RopeBackward) {
  // Both styles, rope's thetas and offsets (positions up to ~1e5: the angle's error grows with it),
  // D across 2..128, the fuzzer's upstream gradients.
  std::vector<Scenario> sc;
  Rng rng(122);
  const std::int64_t shapes[][4] = {{1, 7, 2, 2}, {2, 33, 3, 64}, {1, 129, 1, 128}, {1, 5, 4, 10}};
  const std::pair<double, std::int64_t> angles[] = {{10000.0, 0}, {500000.0, 4095}, {1e6, 100000}};
  const std::pair<Grad, const char*> grads[] = {{Grad::normal, "normal"}, {Grad::sparse, "sparse"}, {Grad::wide, "wide"}};
  for (DType dt : k_dtypes)
    for (const char* style : {"half", "interleaved"})
      for (const auto& sh : shapes)
        for (auto [theta, offset] : angles)
          for (auto [kind, gname] : grads) {
            const std::int64_t B = sh[0], L = sh[1], H = sh[2], D = sh[3];
            Scenario s;
            s.label = std::string(style) + " D=" + std::to_string(D) + " offset=" + std::to_string(offset) + " " + gname;
            s.ctx = make_ctx("rope_backward", dt, {{"grad_out", arg(dt, {B, L, H, D}, grad_values(rng, B * L * H, D, kind, dt))}},
                             {{"style", style}, {"theta", theta}, {"offset", offset}});
            sc.push_back(std::move(s));
          }
  score_op("rope_backward", sc);
}

// layer_norm's saved statistics in fp64: the mean and 1/sqrt(var + eps) (biased) of each row.
std::pair<std::vector<double>, std::vector<double>> ln_stats(const std::vector<double>& x, std::int64_t rows,
                                                             std::int64_t n, double eps) {
  std::vector<double> m(static_cast<std::size_t>(rows)), r(static_cast<std::size_t>(rows));
  for (std::int64_t i = 0; i < rows; ++i) {
    double s = 0.0, ss = 0.0;
    for (std::int64_t k = 0; k < n; ++k) s += x[i * n + k];
    m[i] = s / static_cast<double>(n);
    for (std::int64_t k = 0; k < n; ++k) ss += (x[i * n + k] - m[i]) * (x[i * n + k] - m[i]);
    r[i] = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
  }
  return {m, r};
}

TEST(OpsABackward, LayerNormGradientsMatchCentralFiniteDifferences) {
  // L(x, w, b) = sum g * layer_norm(x, w, b); d/dx, d/dw and d/db by central differences (h = 1e-6)
  // against the reference given the exact fp64 mean and rstd of x; without a weight, grad_x alone.
  Rng rng(37);
  const std::int64_t R = 3, N = 6;
  const double eps = 1e-5;
  std::vector<double> x(R * N), g(R * N), w(N), b(N);
  for (auto& v : x) v = 2.0 + rng.normal();
  for (auto& v : g) v = rng.normal();
  for (auto& v : w) v = rng.normal();
  for (auto& v : b) v = rng.normal();
  auto loss = [&](const std::vector<double>& xs, const std::vector<double>& ws, const std::vector<double>& bs) {
    const auto [m, r] = ln_stats(xs, R, N, eps);
    double l = 0.0;
    for (std::int64_t i = 0; i < R; ++i)
      for (std::int64_t k = 0; k < N; ++k)
        l += g[i * N + k] * ((xs[i * N + k] - m[i]) * r[i] * (ws.empty() ? 1.0 : ws[k]) + bs[k]);
    return l;
  };
  const double h = 1e-6;
  for (bool affine : {true, false}) {
    const auto [m, r] = ln_stats(x, R, N, eps);
    std::map<std::string, RefArg, std::less<>> in = {{"grad_out", arg(DType::float64, {R, N}, g)},
                                                     {"x", arg(DType::float64, {R, N}, x)},
                                                     {"mean", arg(DType::float64, {R}, m)},
                                                     {"rstd", arg(DType::float64, {R}, r)}};
    if (affine) in["weight"] = arg(DType::float64, {N}, w);
    auto ref = builtin_of("layer_norm_backward").reference(make_ctx("layer_norm_backward", DType::float32, in, {{"eps", eps}}));
    ASSERT_TRUE(ref.ok()) << ref.error().message;
    ASSERT_EQ(ref->size(), affine ? 3u : 1u);
    const std::vector<double> ws = affine ? w : std::vector<double>{};
    for (std::size_t i = 0; i < x.size(); ++i) {
      auto xp = x, xm = x;
      xp[i] += h, xm[i] -= h;
      const double fd = (loss(xp, ws, b) - loss(xm, ws, b)) / (2 * h);
      EXPECT_NEAR(ref->at(0).value[i], fd, 1e-7 * (1.0 + std::fabs(fd))) << "grad_x " << i << " affine " << affine;
      EXPECT_GT(ref->at(0).c_acc[i], 0.0);
    }
    if (!affine) continue;
    for (std::size_t k = 0; k < w.size(); ++k) {
      auto wp = w, wm = w, bp = b, bm = b;
      wp[k] += h, wm[k] -= h, bp[k] += h, bm[k] -= h;
      const double fdw = (loss(x, wp, b) - loss(x, wm, b)) / (2 * h);
      const double fdb = (loss(x, w, bp) - loss(x, w, bm)) / (2 * h);
      EXPECT_NEAR(ref->at(1).value[k], fdw, 1e-7 * (1.0 + std::fabs(fdw))) << "grad_weight " << k;
      EXPECT_NEAR(ref->at(2).value[k], fdb, 1e-7 * (1.0 + std::fabs(fdb))) << "grad_bias " << k;
    }
    EXPECT_EQ(ref->at(1).name, "grad_weight");
    EXPECT_EQ(ref->at(2).name, "grad_bias");
  }
  // Inputs of the wrong shapes are an error, not a crash.
  auto bad = builtin_of("layer_norm_backward")
                 .reference(make_ctx("layer_norm_backward", DType::float32,
                                     {{"grad_out", arg(DType::float32, {R, N}, g)},
                                      {"x", arg(DType::float32, {R, N}, x)},
                                      {"mean", arg(DType::float32, {R}, std::vector<double>(R, 0.0))},
                                      {"rstd", arg(DType::float32, {R + 1}, std::vector<double>(R + 1, 1.0))}}));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, ErrorCode::shape_mismatch);
}

// Two rows of a boundary case on which PyTorch's CUDA backward (compute_gI: N * w * g, x - mean and
// x_hat * sum(wg * x_hat) formed in fp32 before the scaling by rstd / N) returned NaN and Inf where
// the exact gradient is finite (-0.093): those fp32 intermediates overflow, so the rows are
// indeterminate, and the same kernel emulated here must pass.
TEST(OpsABackward, LayerNormCudaOrderOverflowIsIndeterminate) {
  const std::vector<double> x = {-2.106031656265259, 1.7014117331926443e+38, 1.0000001192092896, 2.413750171661377, -1.0,
                                 3.5264830524668625e-38, -0.4877733588218689, 3.4028234663852886e+38, 0.7501550912857056,
                                 -3.4028234663852886e+38};
  const std::vector<double> g = {-0.9999999403953552, 0.17158035933971405, -0.12951408326625824, -3.5264830524668625e-38,
                                 -0.5388887524604797, -3.4028234663852886e+38, 1.7014117331926443e+38, 0.0,
                                 -1.401298464324817e-45, -0.05395575612783432};
  const std::vector<double> w = {0.9999999403953552, 1.7014117331926443e+38, -0.5035023093223572, -0.0, -0.9999999403953552};
  const std::vector<double> mean = {3.4028234663852886e+37, 0.0}, rstd = {1.4693680786577058e-38, 4.6465501635715534e-39};
  const RefContext ctx = make_ctx("layer_norm_backward", DType::float32,
                                  {{"grad_out", arg(DType::float32, {2, 5}, g)},
                                   {"x", arg(DType::float32, {2, 5}, x)},
                                   {"mean", arg(DType::float32, {2}, mean)},
                                   {"rstd", arg(DType::float32, {2}, rstd)},
                                   {"weight", arg(DType::float32, {5}, w)}});
  auto ref = builtin_of("layer_norm_backward").reference(ctx);
  ASSERT_TRUE(ref.ok()) << ref.error().message;
  std::vector<double> gx(10);
  bool nonfinite = false;
  for (int r = 0; r < 2; ++r) {
    float s1 = 0.0f, s2 = 0.0f;
    const auto fm = static_cast<float>(mean[r]), fr = static_cast<float>(rstd[r]);
    for (int k = 0; k < 5; ++k) {
      const auto fg = static_cast<float>(g[r * 5 + k]), fw = static_cast<float>(w[k]), fx = static_cast<float>(x[r * 5 + k]);
      s1 += fg * fw;
      s2 += fg * fw * (fx - fm) * fr;
    }
    for (int k = 0; k < 5; ++k) {
      const auto fg = static_cast<float>(g[r * 5 + k]), fw = static_cast<float>(w[k]), fx = static_cast<float>(x[r * 5 + k]);
      float f = 5.0f * fw * fg;
      f -= (fx - fm) * fr * s2;
      f -= s1;
      f *= (1.0f / 5.0f) * fr;
      gx[static_cast<std::size_t>(r * 5 + k)] = f;
      nonfinite |= !std::isfinite(f);
    }
  }
  ASSERT_TRUE(nonfinite) << "the emulation no longer overflows: the test lost its point";
  for (std::size_t i = 0; i < gx.size(); ++i) {
    const RefOutput& o = ref->at(0);
    EXPECT_LE(element_error(gx[i], o.value[i], o.c_acc[i], o.c_in.empty() ? 0.0 : o.c_in[i], DType::float32,
                            DType::float32, o.alt_nonfinite.empty() ? 0 : o.alt_nonfinite[i]),
              2.0)
        << i << ": kernel " << gx[i] << " reference " << o.value[i] << " c_acc " << o.c_acc[i];
  }
}

TEST(OpsABackward, LayerNormBackward) {
  // Rows of plain normals, of an offset over a small spread (100 +- 0.5), of the largest offset the
  // dtype still resolves (spread 1e-2, offset 2^(mantissa - 3) of it: the forward's adversarial
  // rows, where x_hat is known to about u * offset / spread) and of wide magnitudes; R across the
  // 64-row blocks grad_weight and grad_bias are summed over (R = 1, 63, 64, 65, 200), the fuzzer's
  // upstream gradients; every other scenario without a weight (grad_x alone).
  std::vector<Scenario> sc;
  Rng rng(43);
  const double eps = 1e-5;
  const std::pair<std::int64_t, std::int64_t> shapes[] = {{1, 7}, {63, 33}, {64, 128}, {65, 129}, {200, 40}, {3, 4099}};
  const std::pair<Grad, const char*> grads[] = {{Grad::normal, "normal"}, {Grad::sparse, "sparse"},
                                                {Grad::constant, "constant"}, {Grad::wide, "wide"}};
  int count = 0;
  for (DType dt : k_dtypes)
    for (auto [rows, n] : shapes)
      for (auto [kind, gname] : grads)
        for (int xk = 0; xk < 4; ++xk) {
          const double far = 1e-2 * std::ldexp(1.0, dtype_info(dt).mantissa_bits - 3);
          std::vector<double> x = xk == 0   ? normal_values(rng, rows * n, 0.0, 1.0, dt)
                                  : xk == 1 ? normal_values(rng, rows * n, 100.0, 0.5, dt)
                                  : xk == 2 ? normal_values(rng, rows * n, far, 1e-2, dt)
                                            : wide_values(rng, rows * n, -3, 3, dt);
          auto [m, r] = ln_stats(x, rows, n, eps);
          for (auto& v : m) v = round_to(DType::float32, v);
          for (auto& v : r) v = round_to(DType::float32, v);
          const bool affine = ++count % 2 == 0;
          Scenario s;
          s.label = std::to_string(rows) + "x" + std::to_string(n) + " " + gname + " x" + std::to_string(xk) +
                    (affine ? "" : " no weight");
          std::map<std::string, RefArg, std::less<>> in = {
              {"grad_out", arg(dt, {rows, n}, grad_values(rng, rows, n, kind, dt))},
              {"x", arg(dt, {rows, n}, std::move(x))},
              {"mean", arg(DType::float32, {rows}, std::move(m))},
              {"rstd", arg(DType::float32, {rows}, std::move(r))}};
          if (affine) in["weight"] = arg(dt, {n}, normal_values(rng, n, 1.0, 0.3, dt));
          s.ctx = make_ctx("layer_norm_backward", dt, std::move(in), {{"eps", eps}});
          sc.push_back(std::move(s));
        }
  score_op("layer_norm_backward", sc);
}

// ---- flash_attention_backward -------------------------------------------------------------------

struct AttnShape {
  std::int64_t B, H, Hkv, Lq, Lk, D;
  bool causal;
  double scale;  // 0: null (1/sqrt(D))
};

Json attn_attrs(const AttnShape& s) {
  Json a = Json::object();
  a["causal"] = s.causal;
  a["enable_gqa"] = s.H != s.Hkv;
  a["scale"] = s.scale == 0.0 ? Json(nullptr) : Json(s.scale);
  return a;
}

// The fp64 forward (SDPA semantics: top-left causal, KV head h / (H / Hkv)): out and the natural-log
// lse of the scaled scores over the attended keys.
void attn_forward64(const AttnShape& s, const std::vector<double>& q, const std::vector<double>& k,
                    const std::vector<double>& v, std::vector<double>& out, std::vector<double>& lse) {
  const double scale = s.scale == 0.0 ? 1.0 / std::sqrt(static_cast<double>(s.D)) : s.scale;
  out.assign(static_cast<std::size_t>(s.B * s.H * s.Lq * s.D), 0.0);
  lse.assign(static_cast<std::size_t>(s.B * s.H * s.Lq), 0.0);
  std::vector<double> sc(static_cast<std::size_t>(s.Lk));
  for (std::int64_t b = 0; b < s.B; ++b)
    for (std::int64_t h = 0; h < s.H; ++h) {
      const std::int64_t hk = h / (s.H / s.Hkv);
      for (std::int64_t i = 0; i < s.Lq; ++i) {
        const std::int64_t row = (b * s.H + h) * s.Lq + i, n = s.causal ? std::min(i + 1, s.Lk) : s.Lk;
        double m = -k_inf;
        for (std::int64_t j = 0; j < n; ++j) {
          double dot = 0.0;
          for (std::int64_t c = 0; c < s.D; ++c) dot += q[row * s.D + c] * k[((b * s.Hkv + hk) * s.Lk + j) * s.D + c];
          sc[j] = dot * scale;
          m = std::max(m, sc[j]);
        }
        double l = 0.0;
        for (std::int64_t j = 0; j < n; ++j) l += std::exp(sc[j] - m);
        lse[row] = m + std::log(l);
        for (std::int64_t j = 0; j < n; ++j)
          for (std::int64_t c = 0; c < s.D; ++c)
            out[row * s.D + c] += std::exp(sc[j] - m) / l * v[((b * s.Hkv + hk) * s.Lk + j) * s.D + c];
      }
    }
}

RefContext attn_bwd_ctx(const AttnShape& s, DType dt, const std::vector<double>& g, const std::vector<double>& q,
                        const std::vector<double>& k, const std::vector<double>& v) {
  std::vector<double> out, lse;
  attn_forward64(s, q, k, v, out, lse);
  for (auto& x : out) x = round_to(dt, x);
  for (auto& x : lse) x = round_to(dt == DType::float64 ? dt : DType::float32, x);
  const Shape qs{s.B, s.H, s.Lq, s.D}, ks{s.B, s.Hkv, s.Lk, s.D};
  return make_ctx("flash_attention_backward", dt,
                  {{"grad_out", arg(dt, qs, g)}, {"q", arg(dt, qs, q)}, {"k", arg(dt, ks, k)},
                   {"v", arg(dt, ks, v)}, {"out", arg(dt, qs, out)}, {"lse", arg(DType::float32, {s.B, s.H, s.Lq}, lse)}},
                  attn_attrs(s));
}

TEST(OpsABackward, FlashAttentionGradientsMatchCentralFiniteDifferences) {
  // L(q, k, v) = sum grad_out * attention(q, k, v): central differences (h = 1e-6) of the fp64
  // forward against the reference given that forward's exact out and lse, for grad_q, grad_k and
  // grad_v; causal with Lq > Lk and Lq < Lk, GQA (grad_k, grad_v summed over the group), a scale.
  Rng rng(2027);
  for (const AttnShape& s : {AttnShape{1, 2, 2, 4, 6, 3, false, 0.0}, AttnShape{2, 4, 2, 5, 3, 4, true, 0.0},
                             AttnShape{1, 3, 1, 3, 7, 2, true, 0.7}, AttnShape{1, 2, 1, 1, 1, 2, false, 0.0}}) {
    const std::int64_t nq = s.B * s.H * s.Lq * s.D, nk = s.B * s.Hkv * s.Lk * s.D;
    std::vector<double> q(nq), k(nk), v(nk), g(nq);
    for (auto* x : {&q, &k, &v, &g})
      for (auto& e : *x) e = rng.normal();
    RefContext ctx = attn_bwd_ctx(s, DType::float64, g, q, k, v);
    ctx.case_dtype = DType::float32;
    auto ref = builtin_of("flash_attention_backward").reference(ctx);
    ASSERT_TRUE(ref.ok()) << ref.error().message;
    ASSERT_EQ(ref->size(), 3u);
    auto loss = [&](const std::vector<double>& qq, const std::vector<double>& kk, const std::vector<double>& vv) {
      std::vector<double> out, lse;
      attn_forward64(s, qq, kk, vv, out, lse);
      double l = 0.0;
      for (std::size_t i = 0; i < out.size(); ++i) l += g[i] * out[i];
      return l;
    };
    const double h = 1e-6;
    std::vector<double>* inputs[] = {&q, &k, &v};
    for (int which = 0; which < 3; ++which) {
      std::vector<double>& x = *inputs[which];
      for (std::size_t i = 0; i < x.size(); ++i) {
        const double keep = x[i];
        x[i] = keep + h;
        const double lp = loss(q, k, v);
        x[i] = keep - h;
        const double lm = loss(q, k, v);
        x[i] = keep;
        const double fd = (lp - lm) / (2 * h);
        EXPECT_NEAR(ref->at(which).value[i], fd, 1e-7 * (1.0 + std::fabs(fd)))
            << ref->at(which).name << " " << i << " causal " << s.causal << " H " << s.H << " Hkv " << s.Hkv;
      }
    }
  }
}

TEST(OpsABackward, FlashAttentionBackwardSpecialValuesAndShapeErrors) {
  // A NaN in one query head's grad_out: that head's grad_q is NaN where the reference says so and
  // any non-finite value is accepted over its group (masked products, softmax recomputation);
  // another KV group is untouched and judged strictly.
  const AttnShape s{1, 2, 2, 3, 4, 2, true, 0.0};
  Rng rng(9);
  std::vector<double> q(12), k(16), v(16), g(12);
  for (auto* x : {&q, &k, &v, &g})
    for (auto& e : *x) e = rng.normal();
  RefContext ctx = attn_bwd_ctx(s, DType::float32, g, q, k, v);
  ctx.inputs["grad_out"].data[2 * 2] = k_nan;  // head 0, row 2
  auto ref = builtin_of("flash_attention_backward").reference(ctx);
  ASSERT_TRUE(ref.ok()) << ref.error().message;
  const RefOutput& gq = ref->at(0);
  EXPECT_TRUE(std::isnan(gq.value[2 * 2]));             // row 2 of head 0: D is NaN
  EXPECT_TRUE(std::isfinite(gq.value[0]));               // row 0 attends key 0 only: dS = P (dP - D) finite
  EXPECT_EQ(gq.alt_nonfinite[0] & k_alt_nan, k_alt_nan);  // head 0 may be non-finite anywhere
  for (int i = 6; i < 12; ++i) {                          // head 1 is its own KV group: strict
    EXPECT_TRUE(std::isfinite(gq.value[i])) << i;
    EXPECT_EQ(gq.alt_nonfinite[i], 0) << i;
  }
  // Causal: key 3 is attended by no row of 3 (rows 0..2): its gradients are exactly 0.
  EXPECT_EQ(ref->at(1).value[(4 + 3) * 2], 0.0);
  EXPECT_EQ(ref->at(2).value[(4 + 3) * 2], 0.0);
  // lse of the wrong shape, and Hkv != H without enable_gqa, are errors, not crashes.
  RefContext bad = ctx;
  bad.inputs["lse"].shape = {1, 2, 2};
  auto r1 = builtin_of("flash_attention_backward").reference(bad);
  ASSERT_FALSE(r1.ok());
  EXPECT_EQ(r1.error().code, ErrorCode::shape_mismatch);
  const AttnShape gs{1, 2, 1, 3, 4, 2, false, 0.0};
  std::vector<double> k1(8), v1(8);
  RefContext ctx2 = attn_bwd_ctx(gs, DType::float32, g, q, k1, v1);
  ctx2.attrs["enable_gqa"] = false;
  auto r2 = builtin_of("flash_attention_backward").reference(ctx2);
  ASSERT_FALSE(r2.ok());
  EXPECT_EQ(r2.error().code, ErrorCode::shape_mismatch);
}

TEST(OpsABackward, FlashAttentionBackwardMaskedOverflowIsIndeterminate) {
  // The CUDA sweep's seed-5 case in small (evidence/gpu/backward.md): causal, one query, boundary values. Key 0
  // is attended and its dS is exactly 0; key 1 is masked, but a kernel that forms the whole tile's
  // dP = dO·v in fp32 gets dO·v1 = Inf there and P·Inf = 0·Inf = NaN in dS: grad_q of the row and
  // grad_k (of every key: softmax's backward sums dP·P over the row) may be NaN. grad_v does not
  // read dP and stays strict.
  const AttnShape s{1, 1, 1, 1, 2, 1, true, 1.0};
  const std::vector<double> q = {-2.1372432708740234}, k = {-1.1754943508222875e-38, 1.0},
                            v = {-1.0, 3.4028234663852886e+38}, g = {1.151806116104126};
  const RefContext ctx = attn_bwd_ctx(s, DType::float32, g, q, k, v);
  auto ref = builtin_of("flash_attention_backward").reference(ctx);
  ASSERT_TRUE(ref.ok()) << ref.error().message;
  // FA2's backward in fp32 over the whole tile, then the mask's P = 0.
  const auto f = [](double x) { return static_cast<float>(x); };
  const float dp1 = f(g[0]) * f(v[1]), D = f(g[0]) * f(-1.0f);
  const float ds1 = 0.0f * (dp1 - D);
  ASSERT_TRUE(std::isnan(ds1)) << "the emulation no longer overflows: the test lost its point";
  const float dq = (f(1.0f) * (f(g[0]) * f(v[0]) - D)) * f(k[0]) + ds1 * f(k[1]);
  const RefOutput& gq = ref->at(0);
  const RefOutput& gk = ref->at(1);
  const RefOutput& gv = ref->at(2);
  EXPECT_EQ(gq.value[0], 0.0);
  EXPECT_LE(element_error(dq, gq.value[0], gq.c_acc[0], gq.c_in[0], DType::float32, DType::float32, gq.alt_nonfinite[0]), 2.0);
  EXPECT_LE(element_error(ds1 * f(q[0]), gk.value[1], gk.c_acc[1], gk.c_in[1], DType::float32, DType::float32,
                          gk.alt_nonfinite[1]), 2.0);
  EXPECT_LE(element_error(std::nan(""), gk.value[0], gk.c_acc[0], gk.c_in[0], DType::float32, DType::float32,
                          gk.alt_nonfinite[0]), 2.0);  // the row sum's NaN reaches key 0's dS
  EXPECT_EQ(gv.alt_nonfinite[1], 0);  // dv_1 = P_01 dO = 0 exactly: strict
  EXPECT_EQ(gv.value[1], 0.0);
  // Without the overflow (v1 = 1) nothing is excused: a NaN grad_q fails.
  const RefContext calm = attn_bwd_ctx(s, DType::float32, g, q, k, {-1.0, 1.0});
  auto ref2 = builtin_of("flash_attention_backward").reference(calm);
  ASSERT_TRUE(ref2.ok());
  EXPECT_GT(element_error(std::nan(""), ref2->at(0).value[0], ref2->at(0).c_acc[0], ref2->at(0).c_in[0], DType::float32,
                          DType::float32, ref2->at(0).alt_nonfinite[0]), 2.0);
  // A masked score of 4e38 (+Inf in fp32) against the additive -Inf mask: the row's P is NaN, so
  // its grad_q and every key's grad_k and grad_v may be NaN (the forward's row_nan).
  const RefContext big = attn_bwd_ctx(s, DType::float32, g, {2e19}, {1e-19, 2e19}, {-1.0, 1.0});
  auto ref3 = builtin_of("flash_attention_backward").reference(big);
  ASSERT_TRUE(ref3.ok());
  for (int o = 0; o < 3; ++o)
    for (std::size_t x = 0; x < ref3->at(static_cast<std::size_t>(o)).value.size(); ++x) {
      const RefOutput& r = ref3->at(static_cast<std::size_t>(o));
      EXPECT_LE(element_error(std::nan(""), r.value[x], r.c_acc[x], r.c_in[x], DType::float32, DType::float32,
                              r.alt_nonfinite[x]),
                2.0)
          << o << " " << x;
    }
}

TEST(OpsABackward, FlashAttentionBackwardUnresolvedScoresMayGiveAnUnderflowedKeyProbability) {
  // The CPU sweep's master seed 7 in small (flash_attention_backward, boundary values): two scores
  // of 2^40 that differ by 1,000 nats. fp64 gives key 1 P = e^-1000 = 0 exactly; fp32 spaces
  // numbers near 2^40 by 2^16, so a correct fp32 kernel rounds both scores to 2^40 and, against the
  // saved lse of 2^40, gives both keys P = 1. Key 1's dS, its grad_k and grad_v and its share of
  // grad_q are then real, where the exact ones are 0.
  const AttnShape s{1, 1, 1, 1, 2, 2, false, 1.0};
  const std::vector<double> q = {0x1.0p20, 1.0}, k = {0x1.0p20, 0.0, 0x1.0p20, -1000.0},
                            v = {1.0, 0.0, -1.0, 0.0}, g = {1.0, 0.0};
  const RefContext ctx = attn_bwd_ctx(s, DType::float32, g, q, k, v);
  auto ref = builtin_of("flash_attention_backward").reference(ctx);
  ASSERT_TRUE(ref.ok()) << ref.error().message;
  // FA2's backward in fp32 from the saved out and lse.
  const auto f = [](double x) { return static_cast<float>(x); };
  const float lse = f(ctx.inputs.at("lse").data[0]);
  float P[2], dS[2];
  const float D = f(g[0]) * f(ctx.inputs.at("out").data[0]) + f(g[1]) * f(ctx.inputs.at("out").data[1]);
  for (int j = 0; j < 2; ++j) {
    const float score = f(q[0]) * f(k[2 * j]) + f(q[1]) * f(k[2 * j + 1]);
    P[j] = std::exp(score - lse);
    dS[j] = P[j] * (f(g[0]) * f(v[2 * j]) + f(g[1]) * f(v[2 * j + 1]) - D);
  }
  ASSERT_EQ(P[1], 1.0f) << "fp32 resolves the scores now: the test lost its point";
  const RefOutput& gq = ref->at(0);
  const RefOutput& gk = ref->at(1);
  const RefOutput& gv = ref->at(2);
  const auto err = [](float got, const RefOutput& r, std::size_t x) {
    return element_error(got, r.value[x], r.c_acc[x], r.c_in[x], DType::float32, DType::float32, r.alt_nonfinite[x]);
  };
  for (std::size_t c = 0; c < 2; ++c) {
    EXPECT_EQ(gq.value[c] * static_cast<double>(c), 0.0);  // exact grad_q = 0·k0 (its second element is 0)
    EXPECT_LE(err(dS[0] * f(k[c]) + dS[1] * f(k[2 + c]), gq, c), 2.0) << "grad_q " << c;
    EXPECT_EQ(gk.value[2 + c], 0.0);
    EXPECT_LE(err(dS[1] * f(q[c]), gk, 2 + c), 2.0) << "grad_k of key 1, " << c;
    EXPECT_EQ(gv.value[2 + c], 0.0);
    EXPECT_LE(err(P[1] * f(g[c]), gv, 2 + c), 2.0) << "grad_v of key 1, " << c;
  }
  // Scores fp32 resolves (0 and -1,000): key 1's P is 0 there too, and a kernel that gives it
  // P = 1 is wrong: the same gradients fail.
  const std::vector<double> q2 = {1.0, 1.0}, k2 = {0.0, 0.0, 0.0, -1000.0};
  const RefContext calm = attn_bwd_ctx(s, DType::float32, g, q2, k2, v);
  auto ref2 = builtin_of("flash_attention_backward").reference(calm);
  ASSERT_TRUE(ref2.ok()) << ref2.error().message;
  EXPECT_GT(err(1.0f, ref2->at(2), 2), 2.0);          // grad_v of key 1 from P = 1
  EXPECT_GT(err(-2.0f * -1000.0f, ref2->at(0), 1), 2.0);  // grad_q through key 1's dS = -2
}

TEST(OpsABackward, FlashAttentionBackwardAScoreThatMayOverflowLetsTheRowsPBeAnyDistribution) {
  // The H200's master seed 7 in small (flash_attention_backward, boundary values): key 1's score is
  // 1.5e38 exactly, but its fp32 dot product, summed in order, meets -4.5e38 = -Inf first and stays
  // there; autograd's softmax then gives key 0 all the probability fp64 gives key 1, and grad_v
  // moves dO (3e38) from key 1 to key 0. A finite answer, wrong by the whole row: a correct fp32
  // kernel may give it, since another summation order gives +Inf or NaN instead.
  const AttnShape s{1, 1, 1, 1, 2, 3, false, 1.0};
  const std::vector<double> g = {3e38, -2.0, 0.5}, v = {1.0, 2.0, 3.0, -1.0, 0.25, 4.0};
  const auto f = [](double x) { return static_cast<float>(x); };
  const auto autograd_grad_v = [&](const std::vector<double>& q, const std::vector<double>& k) {
    float sc[2];
    for (int j = 0; j < 2; ++j) {
      float acc = 0.0f;
      for (int c = 0; c < 3; ++c) acc += f(q[c]) * f(k[3 * j + c]);
      sc[j] = acc;
    }
    const float m = std::max(sc[0], sc[1]);
    const float e0 = std::exp(sc[0] - m), e1 = std::exp(sc[1] - m);
    const float P[2] = {e0 / (e0 + e1), e1 / (e0 + e1)};
    std::vector<float> dv(6);
    for (int j = 0; j < 2; ++j)
      for (int c = 0; c < 3; ++c) dv[3 * j + c] = P[j] * f(g[c]);
    return dv;
  };
  const auto worst = [](const std::vector<float>& got, const RefOutput& r) {
    double w = 0.0;
    for (std::size_t x = 0; x < got.size(); ++x)
      w = std::max(w, element_error(got[x], r.value[x], r.c_acc[x], r.c_in[x], DType::float32, DType::float32,
                                    r.alt_nonfinite[x]));
    return w;
  };
  const std::vector<double> q = {-3e38, 3e38, 3e38}, k = {0.0, 0.0, 0.0, 1.5, 1.0, 1.0};
  const std::vector<float> dv = autograd_grad_v(q, k);
  ASSERT_EQ(dv[0], f(g[0])) << "the emulation no longer drops key 1: the test lost its point";
  auto ref = builtin_of("flash_attention_backward").reference(attn_bwd_ctx(s, DType::float32, g, q, k, v));
  ASSERT_TRUE(ref.ok()) << ref.error().message;
  EXPECT_EQ(ref->at(2).value[0], 0.0);  // exact: key 0's P is 0
  EXPECT_EQ(ref->at(2).value[3], 3e38);
  EXPECT_LE(worst(dv, ref->at(2)), 2.0);
  // The same row 100 times smaller overflows in no order, and fp32 keeps key 1's P = 1: the same
  // moved gradient is then a wrong kernel's, and fails.
  const std::vector<double> q2 = {-3e36, 3e36, 3e36};
  ASSERT_EQ(autograd_grad_v(q2, k)[3], f(g[0]));
  auto ref2 = builtin_of("flash_attention_backward").reference(attn_bwd_ctx(s, DType::float32, g, q2, k, v));
  ASSERT_TRUE(ref2.ok()) << ref2.error().message;
  EXPECT_GT(worst(dv, ref2->at(2)), 2.0);
}

std::vector<Scenario> flash_backward_scenarios() {
  struct S {
    AttnShape shape;
    double sigma;  // q and k spread: 3.2 gives scores over about +-30
    const char* values;
  };
  const std::vector<S> shapes = {
      {{1, 2, 2, 1, 1, 16, false, 0.0}, 1.0, "normal"},
      {{1, 2, 2, 17, 130, 32, false, 0.0}, 3.2, "wide"},
      {{1, 4, 2, 65, 65, 64, true, 0.0}, 3.2, "wide"},
      {{2, 2, 1, 33, 200, 16, true, 0.5}, 1.0, "normal"},
      {{1, 1, 1, 130, 70, 8, true, 1.0}, 1.0, "normal"},
      {{1, 6, 3, 9, 300, 64, false, 0.0}, 2.0, "normal"},
      {{1, 2, 2, 64, 257, 32, true, 0.125}, 3.2, "wide"},
  };
  const std::pair<Grad, const char*> grads[] = {{Grad::normal, "normal"}, {Grad::sparse, "sparse"}, {Grad::wide, "wide"}};
  std::vector<Scenario> out;
  Rng rng(91);
  for (DType dt : k_dtypes)
    for (const S& sh : shapes)
      for (auto [kind, gname] : grads) {
        const AttnShape& s = sh.shape;
        const std::int64_t nq = s.B * s.H * s.Lq * s.D, nk = s.B * s.Hkv * s.Lk * s.D;
        Scenario sc;
        sc.label = "B=" + std::to_string(s.B) + " H=" + std::to_string(s.H) + " Hkv=" + std::to_string(s.Hkv) +
                   " Lq=" + std::to_string(s.Lq) + " Lk=" + std::to_string(s.Lk) + " D=" + std::to_string(s.D) +
                   (s.causal ? " causal" : "") + " " + sh.values + " grad " + gname;
        sc.ctx = attn_bwd_ctx(s, dt, grad_values(rng, s.B * s.H * s.Lq, s.D, kind, dt),
                              normal_values(rng, nq, 0.0, sh.sigma, dt), normal_values(rng, nk, 0.0, sh.sigma, dt),
                              normal_values(rng, nk, 0.0, 1.0, dt));
        out.push_back(std::move(sc));
      }
  return out;
}

TEST(OpsABackward, FlashAttentionBackward) {
  // Shapes past one block (Lk > 64 and > 128, Lq > 64), causal with Lq > Lk and Lq < Lk, GQA, the
  // scales; each bug must reach 20 on some scenario in every dtype, each control stay under 3.
  score_op("flash_attention_backward", flash_backward_scenarios());
}

// ---- Autograd's mode (backward=True): the forward's inputs in the case, the saved output the
// kernel's own. softmax_backward / log_softmax_backward with the logits x, flash_attention_backward
// without out and lse: the reference is the exact forward of the inputs, and the model adds what
// the kernel's own forward output may deviate by (docs/error-model.md). The probe: a kernel pair
// made of the forward as a correct fp32 kernel computes it (rounded to the dtype) and a builtin
// fp32 backward control reading that output, judged (a) by the autograd mode's reference and (b)
// by the direct reference given the exact fp64 forward output unrounded (the same value; the
// bound without the new terms).

// softmax / log_softmax of rows of x in fp32 (max pass, fp32 sum of exp), rounded to dt.
std::vector<double> forward_f32(const std::vector<double>& x, std::int64_t rows, std::int64_t len, bool log, DType dt) {
  std::vector<double> y(x.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    const double* xr = x.data() + r * len;
    float m = -std::numeric_limits<float>::infinity(), s = 0.0f;
    for (std::int64_t k = 0; k < len; ++k) m = std::max(m, static_cast<float>(xr[k]));
    for (std::int64_t k = 0; k < len; ++k) s += std::exp(static_cast<float>(xr[k]) - m);
    const float ls = std::log(s);
    for (std::int64_t k = 0; k < len; ++k) {
      const float v = static_cast<float>(xr[k]);
      y[static_cast<std::size_t>(r * len + k)] =
          round_to(dt, log ? static_cast<double>((v - m) - ls) : static_cast<double>(std::exp(v - m) / s));
    }
  }
  return y;
}

struct ProbeMax {
  double with_term = 0.0, without_term = 0.0;
  std::string worst_without;
};

TEST(OpsABackward, AutogradModeSoftmaxJudgesTheKernelsOwnForwardOutput) {
  for (bool log : {false, true}) {
    const std::string op = log ? "log_softmax_backward" : "softmax_backward";
    const BuiltinOp& b = builtin_of(op);
    Rng rng(log ? 4711 : 4710);
    const std::pair<std::int64_t, std::int64_t> shapes[] = {{8, 7}, {6, 129}, {4, 1000}, {2, 4099}};
    const std::pair<Grad, const char*> grads[] = {{Grad::normal, "normal"}, {Grad::sparse, "sparse"},
                                                  {Grad::one_hot, "one-hot"}, {Grad::constant, "constant"},
                                                  {Grad::wide, "wide"}};
    for (DType dt : k_dtypes) {
      ProbeMax pm;
      std::map<std::string, double> bugs;
      for (auto [rows, len] : shapes)
        for (auto [kind, gname] : grads)
          for (double spread : {1.0, 8.0}) {
            const std::string label = std::to_string(rows) + "x" + std::to_string(len) + " " + gname +
                                      " spread " + std::to_string(static_cast<int>(spread));
            const auto x = normal_values(rng, rows * len, 0.0, spread, dt);
            const auto g = grad_values(rng, rows, len, kind, dt);
            const auto y64 = forward(x, rows, len, log, false);
            std::vector<double> y_rounded = y64;
            for (auto& v : y_rounded) v = round_to(dt, v);
            // The autograd mode's case: x, and y as the fuzzer derives it (the exact forward rounded).
            RefContext ctx = make_ctx(op, dt, {{"grad_out", arg(dt, {rows, len}, g)},
                                               {"y", arg(dt, {rows, len}, y_rounded)},
                                               {"x", arg(dt, {rows, len}, x)}});
            // The direct reference on the exact forward output, unrounded: the bound without the terms.
            RefContext direct = make_ctx(op, dt, {{"grad_out", arg(dt, {rows, len}, g)},
                                                  {"y", arg(DType::float64, {rows, len}, y64)}});
            auto ref = b.reference(ctx);
            auto ref0 = b.reference(direct);
            ASSERT_TRUE(ref.ok() && ref0.ok());
            // The kernel pair: an fp32 forward (its own y, rounded), then each fp32 control on it.
            RefContext own = make_ctx(op, dt, {{"grad_out", arg(dt, {rows, len}, g)},
                                               {"y", arg(dt, {rows, len}, forward_f32(x, rows, len, log, dt))}});
            for (const auto& k : b.controls) {
              auto out = k.run(own);
              ASSERT_TRUE(out.ok());
              const double e = max_error(*ref, *out, dt), e0 = max_error(*ref0, *out, dt);
              EXPECT_LE(e, k_control_limit) << op << " " << k.name << " on " << label << " (" << dtype_name(dt) << ")";
              pm.with_term = std::max(pm.with_term, e);
              if (e0 > pm.without_term) pm.without_term = e0, pm.worst_without = k.name + " on " + label;
            }
            for (const auto& k : b.buggy) {
              auto out = k.run(own);
              ASSERT_TRUE(out.ok());
              bugs[k.name] = std::max(bugs[k.name], max_error(*ref, *out, dt));
            }
          }
      std::printf("[autograd] %-21s %-8s own forward + controls: %s with the term, %s without (%s)\n", op.c_str(),
                  std::string(dtype_name(dt)).c_str(), fmt_err(pm.with_term).c_str(),
                  fmt_err(pm.without_term).c_str(), pm.worst_without.c_str());
      for (const auto& [name, e] : bugs) {
        std::printf("[autograd] %-21s %-8s buggy %-14s %s\n", op.c_str(), std::string(dtype_name(dt)).c_str(),
                    name.c_str(), fmt_err(e).c_str());
        // lowp_sum: in float32 the accumulator's own dtype (nothing lost). In float16, softmax's
        // is the one bug the term costs margin: a correct pair's y_k no longer sums to 1, so a
        // constant grad_out no longer cancels exactly and the bound holds u_in |y| sum|g y|, about
        // what one fp16 rounding of the sum costs (direct mode: 451; here 12, 6x the envelope of 2).
        const double floor = name == "lowp_sum" && dt == DType::float16 && !log ? 6.0 : k_bug_floor;
        if (!(name == "lowp_sum" && dt == DType::float32))
          EXPECT_GT(e, floor) << op << " buggy " << name << " (" << dtype_name(dt) << ")";
      }
      // The saved output's deviation is the term's reason: in 16-bit dtypes a correct pair fails
      // without it (constant upstream gradients: y_k's row sums 1 + O(u_in sqrt N), not 1).
      if (dt != DType::float32) EXPECT_GT(pm.without_term, k_control_limit) << op << " " << dtype_name(dt);
    }
  }
}

TEST(OpsABackward, AutogradModeSoftmaxTakesXOnlyWithItsShape) {
  auto bad = builtin_of("softmax_backward")
                 .reference(make_ctx("softmax_backward", DType::float32,
                                     {{"grad_out", arg(DType::float32, {2, 3}, std::vector<double>(6, 1.0))},
                                      {"y", arg(DType::float32, {2, 3}, std::vector<double>(6, 0.25))},
                                      {"x", arg(DType::float32, {3, 2}, std::vector<double>(6, 0.0))}}));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, ErrorCode::shape_mismatch);
}

// FlashAttention-2's forward as a correct kernel computes it: fp32 scores, running max and sum,
// P = exp(s - m) rounded to the input dtype before P·V, out = (P·V) / l rounded to dt, lse in fp32.
void attn_forward_fa2(const AttnShape& s, DType dt, const std::vector<double>& q, const std::vector<double>& k,
                      const std::vector<double>& v, std::vector<double>& out, std::vector<double>& lse) {
  const double scale = s.scale == 0.0 ? 1.0 / std::sqrt(static_cast<double>(s.D)) : s.scale;
  out.assign(static_cast<std::size_t>(s.B * s.H * s.Lq * s.D), 0.0);
  lse.assign(static_cast<std::size_t>(s.B * s.H * s.Lq), 0.0);
  std::vector<float> sc(static_cast<std::size_t>(s.Lk)), acc(static_cast<std::size_t>(s.D));
  for (std::int64_t b = 0; b < s.B; ++b)
    for (std::int64_t h = 0; h < s.H; ++h) {
      const std::int64_t hk = h / (s.H / s.Hkv);
      for (std::int64_t i = 0; i < s.Lq; ++i) {
        const std::int64_t row = (b * s.H + h) * s.Lq + i, n = s.causal ? std::min(i + 1, s.Lk) : s.Lk;
        float m = -std::numeric_limits<float>::infinity(), l = 0.0f;
        for (std::int64_t j = 0; j < n; ++j) {
          float dot = 0.0f;
          for (std::int64_t c = 0; c < s.D; ++c)
            dot += static_cast<float>(q[row * s.D + c]) * static_cast<float>(k[((b * s.Hkv + hk) * s.Lk + j) * s.D + c]);
          sc[j] = dot * static_cast<float>(scale);
          m = std::max(m, sc[j]);
        }
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (std::int64_t j = 0; j < n; ++j) {
          const float p = std::exp(sc[j] - m);
          l += p;
          const float pr = static_cast<float>(round_to(dt, static_cast<double>(p)));
          for (std::int64_t c = 0; c < s.D; ++c)
            acc[c] += pr * static_cast<float>(v[((b * s.Hkv + hk) * s.Lk + j) * s.D + c]);
        }
        lse[row] = static_cast<double>(m + std::log(l));
        for (std::int64_t c = 0; c < s.D; ++c) out[row * s.D + c] = round_to(dt, static_cast<double>(acc[c] / l));
      }
    }
}

TEST(OpsABackward, AutogradModeFlashAttentionJudgesTheKernelsOwnForward) {
  const BuiltinOp& b = builtin_of("flash_attention_backward");
  const std::vector<Scenario> scenarios = flash_backward_scenarios();
  std::map<DType, ProbeMax> pm;
  std::map<std::string, std::map<DType, double>> bugs;
  for (const Scenario& sc : scenarios) {
    const DType dt = sc.ctx.case_dtype;
    const RefArg &q = sc.ctx.input("q"), &k = sc.ctx.input("k"), &v = sc.ctx.input("v");
    AttnShape s{q.shape[0], q.shape[1], k.shape[1], q.shape[2], k.shape[2], q.shape[3], sc.ctx.attr_bool("causal"),
                sc.ctx.attr_is_null("scale") ? 0.0 : sc.ctx.attr_float("scale")};
    auto vec = [](const RefArg& a) { return std::vector<double>(a.data.begin(), a.data.end()); };
    // The autograd mode's case: no out, no lse.
    RefContext ctx = sc.ctx;
    ctx.inputs.erase("out");
    ctx.inputs.erase("lse");
    // The direct reference given the exact forward unrounded (lse and out in fp64).
    std::vector<double> o64, l64;
    attn_forward64(s, vec(q), vec(k), vec(v), o64, l64);
    RefContext direct = sc.ctx;
    direct.inputs["out"] = arg(DType::float64, q.shape, o64);
    direct.inputs["lse"] = arg(DType::float64, {s.B, s.H, s.Lq}, l64);
    // The kernel's own forward (FA-2's, P rounded before P·V), saved as it stores it.
    std::vector<double> ok, lk;
    attn_forward_fa2(s, dt, vec(q), vec(k), vec(v), ok, lk);
    RefContext own = sc.ctx;
    own.inputs["out"] = arg(dt, q.shape, ok);
    own.inputs["lse"] = arg(DType::float32, {s.B, s.H, s.Lq}, lk);
    auto ref = b.reference(ctx);
    auto ref0 = b.reference(direct);
    ASSERT_TRUE(ref.ok()) << ref.error().message;
    ASSERT_TRUE(ref0.ok()) << ref0.error().message;
    // The autograd mode's reference is the direct one's on the exact forward: the same values.
    for (std::size_t o = 0; o < ref->size(); ++o)
      for (std::size_t i = 0; i < (*ref)[o].value.size(); ++i)
        ASSERT_NEAR((*ref)[o].value[i], (*ref0)[o].value[i], 1e-9 * (1.0 + std::fabs((*ref0)[o].value[i])));
    for (const auto& kn : b.controls) {
      auto out = kn.run(own);
      ASSERT_TRUE(out.ok()) << out.error().message;
      const double e = max_error(*ref, *out, dt), e0 = max_error(*ref0, *out, dt);
      EXPECT_LE(e, k_control_limit) << kn.name << " on " << sc.label << " (" << dtype_name(dt) << ")";
      pm[dt].with_term = std::max(pm[dt].with_term, e);
      if (e0 > pm[dt].without_term) pm[dt].without_term = e0, pm[dt].worst_without = kn.name + " on " + sc.label;
    }
    for (const auto& kn : b.buggy) {
      auto out = kn.run(own);
      ASSERT_TRUE(out.ok()) << out.error().message;
      double& slot = bugs[kn.name][dt];
      slot = std::max(slot, max_error(*ref, *out, dt));
    }
    // The controls run in the mode too (the reference's exact out and lse stand in for the saved).
    auto plain = b.controls.front().run(ctx);
    ASSERT_TRUE(plain.ok()) << plain.error().message;
    EXPECT_LE(max_error(*ref, *plain, dt), k_control_limit) << sc.label;
  }
  for (DType dt : k_dtypes) {
    std::printf("[autograd] flash_attention_backward %-8s FA-2 forward + controls: %s with the term, %s without (%s)\n",
                std::string(dtype_name(dt)).c_str(), fmt_err(pm[dt].with_term).c_str(),
                fmt_err(pm[dt].without_term).c_str(), pm[dt].worst_without.c_str());
    for (auto& [name, by] : bugs) {
      std::printf("[autograd] flash_attention_backward %-8s buggy %-20s %s\n", std::string(dtype_name(dt)).c_str(),
                  name.c_str(), fmt_err(by[dt]).c_str());
      EXPECT_GT(by[dt], k_bug_floor) << name << " (" << dtype_name(dt) << ")";
    }
  }
  // Out and lse go together.
  RefContext half = scenarios.front().ctx;
  half.inputs.erase("lse");
  EXPECT_FALSE(b.reference(half).ok());
}

}  // namespace
}  // namespace gpuemu::test_a
