// Backward ops (softmax_backward, log_softmax_backward): the fp64 reference gradients against
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

}  // namespace
}  // namespace gpuemu::test_a
