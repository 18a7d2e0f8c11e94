// cross_entropy (and cross_entropy_backward) and embedding: torch semantics (ignore_index, reductions, label smoothing,
// all-ignored means, index errors) and the error model measured on controls and known-buggy
// kernels (see ops_a_harness.hpp).
#include "ops_a_harness.hpp"

#include "gpuemu/engine/catalogue.hpp"

namespace gpuemu::test_a {
namespace {

const std::vector<double> k_logits = {1, 2, 3, 4, 5, 0.5, -1, 2, 0, 1,
                                      3, 3, 3, 3, 3, -2,  4,  1, 0, -1};

RefVec ce(const std::vector<double>& target, const Json& attrs) {
  auto ctx = make_ctx("cross_entropy", DType::float32,
                      {{"logits", arg(DType::float32, {4, 5}, k_logits)},
                       {"target", arg(DType::int64, {4}, target)}},
                      attrs);
  auto ref = builtin_of("cross_entropy").reference(ctx);
  EXPECT_TRUE(ref.ok()) << (ref.ok() ? "" : ref.error().message);
  return ref.ok() ? ref->at(0).value : RefVec{};
}

TEST(OpsALoss, CrossEntropyFollowsTorch) {
  // torch 1.13 float64 on the same logits, target [1, -100, 3, 0].
  const std::vector<double> t = {1, -100, 3, 0};
  EXPECT_NEAR(ce(t, {{"reduction", "mean"}})[0], 3.711942744360394, 1e-13);
  EXPECT_NEAR(ce(t, {{"reduction", "mean"}, {"label_smoothing", 0.1}})[0], 3.5986094110270606,
              1e-13);
  EXPECT_NEAR(ce(t, {{"reduction", "sum"}})[0], 11.135828233081181, 1e-13);
  EXPECT_NEAR(ce(t, {{"reduction", "sum"}, {"label_smoothing", 0.1}})[0], 10.795828233081181,
              1e-13);
  const auto none = ce(t, {{"reduction", "none"}, {"label_smoothing", 0.1}});
  const std::vector<double> want = {3.351914395937593, 0.0, 1.6094379124341003, 5.834475924709488};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(none[i], want[i], 1e-13);
  EXPECT_NEAR(ce({1, 0, 3, 0}, {{"ignore_index", 0}})[0], 2.530676154185847, 1e-13);
  // Every row ignored: mean is NaN (0/0), sum is 0.
  EXPECT_TRUE(std::isnan(ce({-100, -100, -100, -100}, {})[0]));
  EXPECT_EQ(ce({-100, -100, -100, -100}, {{"reduction", "sum"}})[0], 0.0);
  // A target outside [0, C) that is not ignore_index is an error.
  auto bad = builtin_of("cross_entropy")
                 .reference(make_ctx("cross_entropy", DType::float32,
                                     {{"logits", arg(DType::float32, {4, 5}, k_logits)},
                                      {"target", arg(DType::int64, {4}, {1, 5, 0, 0})}}));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, ErrorCode::invalid_argument);
}

TEST(OpsALoss, EmbeddingFollowsTorch) {
  auto ctx = make_ctx("embedding", DType::float32,
                      {{"weight", arg(DType::float32, {3, 2}, {0, 1, 2, 3, 4, 5})},
                       {"indices", arg(DType::int64, {2, 2}, {2, 0, 1, 2})}});
  auto ref = builtin_of("embedding").reference(ctx);
  ASSERT_TRUE(ref.ok());
  EXPECT_EQ(ref->at(0).shape, (Shape{2, 2, 2}));
  EXPECT_EQ(ref->at(0).value, (RefVec{4, 5, 0, 1, 2, 3, 4, 5}));
  auto bad =
      builtin_of("embedding")
          .reference(make_ctx("embedding", DType::float32,
                              {{"weight", arg(DType::float32, {3, 2}, std::vector<double>(6))},
                               {"indices", arg(DType::int64, {1}, {3})}}));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, ErrorCode::invalid_argument);
}

// The logits cross_entropy's and cross_entropy_backward's scenarios draw: from flat to spread and
// large, and with special values.
struct LogitFill {
  std::string name;
  std::function<std::vector<double>(Rng&, std::int64_t, DType)> fill;
};
std::vector<LogitFill> ce_logit_fills() {
  return {
      {"N(0,1)", [](Rng& r, std::int64_t n, DType d) { return normal_values(r, n, 0, 1, d); }},
      {"N(0,10)", [](Rng& r, std::int64_t n, DType d) { return normal_values(r, n, 0, 10, d); }},
      {"flat N(0,0.1)",
       [](Rng& r, std::int64_t n, DType d) { return normal_values(r, n, 0, 0.1, d); }},
      {"large 100+N(0,5)",
       [](Rng& r, std::int64_t n, DType d) { return normal_values(r, n, 100, 5, d); }},
      {"special",
       [](Rng& r, std::int64_t n, DType d) {
         auto v = normal_values(r, n, 0, 2, d);
         sprinkle_specials(v, r, 2000);
         return v;
       }},
  };
}

TEST(OpsALoss, CrossEntropy) {
  const std::vector<LogitFill> logits = ce_logit_fills();
  const std::vector<Json> attr_sets = {
      {{"reduction", "mean"}},
      {{"reduction", "sum"}, {"label_smoothing", 0.1}},
      {{"reduction", "none"}},
      {{"reduction", "mean"}, {"label_smoothing", 0.1}, {"ignore_index", 0}}};
  const std::vector<std::pair<std::int64_t, std::int64_t>> shapes = {
      {64, 1000}, {8, 8192}, {33, 3}, {1, 1}, {300, 17}};
  std::vector<Scenario> out;
  for (DType dt : k_dtypes) {
    Rng rng(derive_seed(0xce, std::string(dtype_name(dt))));
    for (const auto& attrs : attr_sets)
      for (auto [n, c] : shapes)
        for (const auto& l : logits) {
          const std::int64_t ignore =
              attrs.contains("ignore_index") ? attrs["ignore_index"].get<std::int64_t>() : -100;
          std::vector<double> target(static_cast<std::size_t>(n));
          for (auto& t : target)
            t = static_cast<double>(rng.chance(1, 8) ? ignore : rng.integer(0, c - 1));
          out.push_back({l.name + " " + shape_to_string({n, c}) + " " + attrs.dump(),
                         make_ctx("cross_entropy", dt,
                                  {{"logits", arg(dt, {n, c}, l.fill(rng, n * c, dt))},
                                   {"target", arg(DType::int64, {n}, std::move(target))}},
                                  attrs)});
        }
  }
  score_op(
      "cross_entropy", out,
      {{"lowp_sum", DType::float32, "an fp32 input makes the 'low-precision' sum fp32: correct"}});
}

// The scalar loss's gradient with respect to the logits: central finite differences of the
// forward reference (every attr set, ignored rows among them), scaled by grad_out.
TEST(OpsALoss, CrossEntropyGradientMatchesCentralFiniteDifferences) {
  const std::vector<Json> attr_sets = {{{"reduction", "mean"}},
                                       {{"reduction", "sum"}},
                                       {{"reduction", "mean"}, {"label_smoothing", 0.1}},
                                       {{"reduction", "sum"}, {"label_smoothing", 0.1}, {"ignore_index", 0}}};
  const double g = -1.75, h = 1e-6;
  for (const Json& attrs : attr_sets) {
    const std::int64_t ignore = attrs.contains("ignore_index") ? attrs["ignore_index"].get<std::int64_t>() : -100;
    const std::vector<double> target = {1, static_cast<double>(ignore), 3, ignore == 0 ? 0.0 : 2.0};
    auto ref = builtin_of("cross_entropy_backward")
                   .reference(make_ctx("cross_entropy_backward", DType::float32,
                                       {{"grad_out", arg(DType::float32, {}, {g})},
                                        {"logits", arg(DType::float32, {4, 5}, k_logits)},
                                        {"target", arg(DType::int64, {4}, target)}},
                                       attrs));
    ASSERT_TRUE(ref.ok()) << ref.error().message;
    ASSERT_EQ(ref->at(0).name, "grad_logits");
    ASSERT_EQ(ref->at(0).shape, (Shape{4, 5}));
    const auto loss = [&](const std::vector<double>& x) {
      auto r = builtin_of("cross_entropy")
                   .reference(make_ctx("cross_entropy", DType::float32,
                                       {{"logits", arg(DType::float64, {4, 5}, x)},
                                        {"target", arg(DType::int64, {4}, target)}},
                                       attrs));
      EXPECT_TRUE(r.ok());
      return r.ok() ? r->at(0).value[0] : k_nan;
    };
    for (std::size_t i = 0; i < k_logits.size(); ++i) {
      auto xp = k_logits, xm = k_logits;
      xp[i] += h, xm[i] -= h;
      EXPECT_NEAR(ref->at(0).value[i], g * (loss(xp) - loss(xm)) / (2 * h), 1e-7) << attrs.dump() << " " << i;
      if (static_cast<std::int64_t>(target[i / 5]) == ignore) {
        EXPECT_EQ(ref->at(0).value[i], 0.0);  // an ignored row's gradient is exactly 0
        EXPECT_EQ(ref->at(0).c_acc[i], 0.0);
      }
    }
  }
  // torch 1.13 float64 autograd: F.cross_entropy(x, t, label_smoothing=0.1) (mean) backward with
  // grad 1, row 0 of k_logits, target [1, -100, 3, 0].
  const std::vector<double> target = {1, -100, 3, 0};
  auto ref = builtin_of("cross_entropy_backward")
                 .reference(make_ctx("cross_entropy_backward", DType::float32,
                                     {{"grad_out", arg(DType::float32, {}, {1.0})},
                                      {"logits", arg(DType::float32, {4, 5}, k_logits)},
                                      {"target", arg(DType::int64, {4}, target)}},
                                     {{"label_smoothing", 0.1}}));
  ASSERT_TRUE(ref.ok());
  const double torch_row0[] = {-0.0027812563479867984, -0.2961050264012919, 0.0220428481454229,
                               0.07137388575091219, 0.20546954885294358};
  for (int c = 0; c < 5; ++c) EXPECT_NEAR(ref->at(0).value[c], torch_row0[c], 1e-13) << c;

  // Every row ignored under 'mean': the gradient is 0, and NaN (torch's decomposition) accepted.
  auto none = builtin_of("cross_entropy_backward")
                  .reference(make_ctx("cross_entropy_backward", DType::float32,
                                      {{"grad_out", arg(DType::float32, {}, {1.0})},
                                       {"logits", arg(DType::float32, {4, 5}, k_logits)},
                                       {"target", arg(DType::int64, {4}, {-100, -100, -100, -100})}},
                                      {{"label_smoothing", 0.1}}));
  ASSERT_TRUE(none.ok());
  for (std::size_t i = 0; i < 20; ++i) {
    EXPECT_EQ(none->at(0).value[i], 0.0);
    ASSERT_FALSE(none->at(0).alt_nonfinite.empty());
    EXPECT_TRUE(alt_accepts(none->at(0).alt_nonfinite[i], k_nan));
    EXPECT_FALSE(alt_accepts(none->at(0).alt_nonfinite[i], k_inf));
  }
  // A grad_out whose shape does not match the reduction is an error with the reason, not a crash:
  // 'none' wants one per row, 'mean' and 'sum' a scalar (the reference checks it when handed one
  // anyway; make_ref_context refuses the rank first, CrossEntropyBackwardNoneShapeFollowsTheAttr).
  RefContext none_ctx = make_ctx("cross_entropy_backward", DType::float32,
                                 {{"grad_out", arg(DType::float32, {}, {1.0})},
                                  {"logits", arg(DType::float32, {4, 5}, k_logits)},
                                  {"target", arg(DType::int64, {4}, target)}},
                                 {{"reduction", "none"}});
  auto red_none = builtin_of("cross_entropy_backward").reference(none_ctx);
  ASSERT_FALSE(red_none.ok());
  EXPECT_EQ(red_none.error().code, ErrorCode::shape_mismatch);
  EXPECT_NE(red_none.error().message.find("'none'"), std::string::npos);
  auto vec_grad = builtin_of("cross_entropy_backward")
                      .reference(make_ctx("cross_entropy_backward", DType::float32,
                                          {{"grad_out", arg(DType::float32, {4}, {1, 1, 1, 1})},
                                           {"logits", arg(DType::float32, {4, 5}, k_logits)},
                                           {"target", arg(DType::int64, {4}, target)}}));
  ASSERT_FALSE(vec_grad.ok());
  EXPECT_EQ(vec_grad.error().code, ErrorCode::shape_mismatch);
}

// Reduction 'none': one upstream gradient per row, grad[i] = g_i * d loss_i / d x_i. Central
// finite differences of sum_i g_i * loss_i (the forward's 'none' reference), torch 1.13's float64
// autograd, ignored rows exactly 0 whatever g_i is, and the bound per row.
TEST(OpsALoss, CrossEntropyBackwardNoneMatchesFiniteDifferencesAndTorch) {
  const std::vector<Json> attr_sets = {{{"reduction", "none"}},
                                       {{"reduction", "none"}, {"label_smoothing", 0.1}},
                                       {{"reduction", "none"}, {"label_smoothing", 0.1}, {"ignore_index", 0}}};
  const std::vector<double> g = {0.5, 2.0, -1.25, 0.0};  // a zero row among them
  const double h = 1e-6;
  for (const Json& attrs : attr_sets) {
    const std::int64_t ignore = attrs.contains("ignore_index") ? attrs["ignore_index"].get<std::int64_t>() : -100;
    const std::vector<double> target = {1, static_cast<double>(ignore), 3, ignore == 0 ? 0.0 : 2.0};
    auto ref = builtin_of("cross_entropy_backward")
                   .reference(make_ctx("cross_entropy_backward", DType::float32,
                                       {{"grad_out", arg(DType::float32, {4}, g)},
                                        {"logits", arg(DType::float32, {4, 5}, k_logits)},
                                        {"target", arg(DType::int64, {4}, target)}},
                                       attrs));
    ASSERT_TRUE(ref.ok()) << ref.error().message;
    ASSERT_EQ(ref->at(0).shape, (Shape{4, 5}));
    const auto loss = [&](const std::vector<double>& x) {
      auto r = builtin_of("cross_entropy")
                   .reference(make_ctx("cross_entropy", DType::float32,
                                       {{"logits", arg(DType::float64, {4, 5}, x)},
                                        {"target", arg(DType::int64, {4}, target)}},
                                       attrs));
      EXPECT_TRUE(r.ok());
      double l = 0.0;
      for (int i = 0; i < 4 && r.ok(); ++i) l += g[static_cast<std::size_t>(i)] * r->at(0).value[static_cast<std::size_t>(i)];
      return l;
    };
    for (std::size_t i = 0; i < k_logits.size(); ++i) {
      auto xp = k_logits, xm = k_logits;
      xp[i] += h, xm[i] -= h;
      EXPECT_NEAR(ref->at(0).value[i], (loss(xp) - loss(xm)) / (2 * h), 1e-7) << attrs.dump() << " " << i;
      const bool ignored = static_cast<std::int64_t>(target[i / 5]) == ignore;
      if (ignored || g[i / 5] == 0.0) {
        EXPECT_EQ(ref->at(0).value[i], 0.0);  // an ignored row's, and a zero upstream gradient's
        EXPECT_EQ(ref->at(0).c_acc[i], 0.0);
      } else {
        EXPECT_GT(ref->at(0).c_acc[i], 0.0);
      }
    }
  }
  // torch 1.13 float64 autograd: F.cross_entropy(x, t, reduction='none', label_smoothing=0.1)
  // backward with grad [0.5, 2, -1.25, 3], target [1, -100, 3, 0].
  auto ref = builtin_of("cross_entropy_backward")
                 .reference(make_ctx("cross_entropy_backward", DType::float32,
                                     {{"grad_out", arg(DType::float32, {4}, {0.5, 2.0, -1.25, 3.0})},
                                      {"logits", arg(DType::float32, {4, 5}, k_logits)},
                                      {"target", arg(DType::int64, {4}, {1, -100, 3, 0})}},
                                     {{"reduction", "none"}, {"label_smoothing", 0.1}}));
  ASSERT_TRUE(ref.ok());
  const double torch_grad[4][5] = {
      {-0.004171884521980196, -0.4441575396019379, 0.033064272218134357, 0.10706082862636832, 0.30820432327941544},
      {0.0, 0.0, 0.0, 0.0, 0.0},
      {-0.225, -0.225, -0.225, 0.8999999999999999, -0.225},
      {-2.753097444930817, 2.7246894635777497, 0.07864152470641582, -0.008996633367847034, -0.04123690998550138}};
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 5; ++c) EXPECT_NEAR(ref->at(0).value[static_cast<std::size_t>(r * 5 + c)], torch_grad[r][c], 1e-13) << r << " " << c;
  // The bound's k is each row's own |g_i|: row 3's (|g| = 3) is 6 times row 0's where p and q agree
  // (the same logits would give the same terms; here compare c_acc / |g_i| on a shared row).
  auto scaled = builtin_of("cross_entropy_backward")
                    .reference(make_ctx("cross_entropy_backward", DType::float32,
                                        {{"grad_out", arg(DType::float32, {2}, {0.5, 3.0})},
                                         {"logits", arg(DType::float32, {2, 5}, {1, 2, 3, 4, 5, 1, 2, 3, 4, 5})},
                                         {"target", arg(DType::int64, {2}, {1, 1})}},
                                        {{"reduction", "none"}}));
  ASSERT_TRUE(scaled.ok());
  for (int c = 0; c < 5; ++c)
    EXPECT_DOUBLE_EQ(scaled->at(0).c_acc[static_cast<std::size_t>(5 + c)], 6.0 * scaled->at(0).c_acc[static_cast<std::size_t>(c)]) << c;

  // Special upstream gradients per row: torch skips an ignored row (0 even for a NaN g_i: checked
  // on torch 1.13), a finite row is untouched by another row's Inf, and a row with an infinite or
  // NaN g_i takes any non-finite value; an ignored row with non-finite logits takes NaN (log_softmax
  // times the zero mask), as under 'mean'.
  std::vector<double> logits = k_logits;
  logits[15] = k_nan;  // row 3, ignored below
  auto special = builtin_of("cross_entropy_backward")
                     .reference(make_ctx("cross_entropy_backward", DType::float32,
                                         {{"grad_out", arg(DType::float32, {4}, {k_inf, k_nan, 1.0, 2.0})},
                                          {"logits", arg(DType::float32, {4, 5}, logits)},
                                          {"target", arg(DType::int64, {4}, {1, -100, 3, -100})}},
                                         {{"reduction", "none"}}));
  ASSERT_TRUE(special.ok());
  const RefOutput& o = special->at(0);
  ASSERT_EQ(o.alt_nonfinite.size(), 20u);
  for (int c = 0; c < 5; ++c) {
    EXPECT_TRUE(alt_accepts(o.alt_nonfinite[static_cast<std::size_t>(c)], k_inf)) << c;        // row 0: g = Inf
    EXPECT_EQ(o.value[static_cast<std::size_t>(5 + c)], 0.0) << c;                             // row 1: ignored, g = NaN
    EXPECT_TRUE(alt_accepts(o.alt_nonfinite[static_cast<std::size_t>(5 + c)], k_nan)) << c;
    EXPECT_TRUE(std::isfinite(o.value[static_cast<std::size_t>(10 + c)])) << c;                // row 2: finite
    EXPECT_EQ(o.alt_nonfinite[static_cast<std::size_t>(10 + c)], 0) << c;
    EXPECT_EQ(o.value[static_cast<std::size_t>(15 + c)], 0.0) << c;                            // row 3: ignored, NaN logit
    EXPECT_TRUE(alt_accepts(o.alt_nonfinite[static_cast<std::size_t>(15 + c)], k_nan)) << c;
    EXPECT_FALSE(alt_accepts(o.alt_nonfinite[static_cast<std::size_t>(15 + c)], k_inf)) << c;
  }
}

// grad_out's shape follows the reduction (schema key shape_when): the rank check of
// make_ref_context takes [N] for 'none' and refuses a scalar there; a scalar's shape checks no
// rank (one-element tensors pass, as before), and the reference refuses [N] for 'sum'.
TEST(OpsALoss, CrossEntropyBackwardNoneShapeFollowsTheAttr) {
  const OpSchema& s = schema_of("cross_entropy_backward");
  const InputSpec* go = s.find_input("grad_out");
  ASSERT_NE(go, nullptr);
  EXPECT_EQ(go->shape_for(Json{{"reduction", "none"}}), (std::vector<std::string>{"N"}));
  EXPECT_TRUE(go->shape_for(Json{{"reduction", "mean"}}).empty());
  EXPECT_TRUE(go->shape_for(Json{{"reduction", "sum"}}).empty());
  auto inputs = [](Shape g) {
    std::map<std::string, RefArg, std::less<>> in;
    in.emplace("grad_out", arg(DType::float32, g, std::vector<double>(g.empty() ? 1 : 4, 1.0)));
    in.emplace("logits", arg(DType::float32, {4, 5}, k_logits));
    in.emplace("target", arg(DType::int64, {4}, {1, 2, 3, 0}));
    return in;
  };
  EXPECT_TRUE(make_ref_context(s, inputs({4}), Json{{"reduction", "none"}}).ok());
  EXPECT_TRUE(make_ref_context(s, inputs({}), Json{{"reduction", "mean"}}).ok());
  auto bad_none = make_ref_context(s, inputs({}), Json{{"reduction", "none"}});
  ASSERT_FALSE(bad_none.ok());
  EXPECT_EQ(bad_none.error().code, ErrorCode::shape_mismatch);
  auto sum_ctx = make_ref_context(s, inputs({4}), Json{{"reduction", "sum"}});
  ASSERT_TRUE(sum_ctx.ok());
  auto bad_sum = builtin_of("cross_entropy_backward").reference(*sum_ctx);
  ASSERT_FALSE(bad_sum.ok());
  EXPECT_EQ(bad_sum.error().code, ErrorCode::shape_mismatch);
  // N bound by grad_out must agree with the logits' N.
  auto mismatch = make_ref_context(s, [&] {
    auto in = inputs({4});
    in.erase("grad_out");
    in.emplace("grad_out", arg(DType::float32, {3}, {1, 1, 1}));
    return in;
  }(), Json{{"reduction", "none"}});
  ASSERT_FALSE(mismatch.ok());
  EXPECT_EQ(mismatch.error().code, ErrorCode::shape_mismatch);
}

TEST(OpsALoss, CrossEntropyBackward) {
  // Vocabularies across the 1024-wide tiles (a partial last tile: 1025, 5000), both reductions,
  // smoothing, ignored rows (under both ignore_index values), logits from flat to spread and large,
  // upstream gradients from tiny to large, special values among the logits.
  const std::vector<LogitFill> logits = ce_logit_fills();
  const std::vector<Json> attr_sets = {
      {{"reduction", "mean"}},
      {{"reduction", "sum"}, {"label_smoothing", 0.1}},
      {{"reduction", "mean"}, {"label_smoothing", 0.1}, {"ignore_index", 0}},
      // one upstream gradient per row: from tiny to large, zeros among them (appended last, so
      // the scenarios above draw what they drew before 'none' existed)
      {{"reduction", "none"}},
      {{"reduction", "none"}, {"label_smoothing", 0.1}, {"ignore_index", 0}}};
  const std::vector<std::pair<std::int64_t, std::int64_t>> shapes = {{64, 1000}, {6, 5000}, {33, 3}, {1, 1}, {9, 1025}};
  const double grads[] = {1.0, -0.37, 300.0, 1e-3};
  std::vector<Scenario> out;
  for (DType dt : k_dtypes) {
    Rng rng(derive_seed(0xceb, std::string(dtype_name(dt))));
    for (const auto& attrs : attr_sets)
      for (auto [n, c] : shapes)
        for (const auto& l : logits) {
          const std::int64_t ignore = attrs.contains("ignore_index") ? attrs["ignore_index"].get<std::int64_t>() : -100;
          std::vector<double> target(static_cast<std::size_t>(n));
          for (auto& t : target) t = static_cast<double>(rng.chance(1, 4) ? ignore : rng.integer(0, c - 1));
          const double g = round_to(dt, grads[rng.bounded(4)]);
          const bool per_row = attrs["reduction"] == "none";
          std::vector<double> gs = {g};
          if (per_row) {
            gs.assign(static_cast<std::size_t>(n), 0.0);
            for (auto& x : gs) x = rng.chance(1, 8) ? 0.0 : round_to(dt, grads[rng.bounded(4)] * (rng.chance(1, 2) ? -1.0 : 1.0));
          }
          out.push_back({l.name + " " + shape_to_string({n, c}) + (per_row ? " g per row" : " g=" + std::to_string(g)) + " " +
                             attrs.dump(),
                         make_ctx("cross_entropy_backward", dt,
                                  {{"grad_out", arg(dt, per_row ? Shape{n} : Shape{}, std::move(gs))},
                                   {"logits", arg(dt, {n, c}, l.fill(rng, n * c, dt))},
                                   {"target", arg(DType::int64, {n}, std::move(target))}},
                                  attrs)});
        }
  }
  score_op("cross_entropy_backward", out,
           {{"lowp_sum", DType::float32, "an fp32 input makes the 'low-precision' sum fp32: correct"}});
}

TEST(OpsALoss, Embedding) {
  std::vector<Scenario> out;
  const std::vector<std::pair<std::int64_t, std::int64_t>> tables = {
      {1000, 129}, {50, 1}, {7, 300}, {1, 16}};
  for (DType dt : k_dtypes) {
    Rng rng(derive_seed(0xe3b, std::string(dtype_name(dt))));
    for (auto [v, d] : tables)
      for (int values = 0; values < 2; ++values) {
        const std::int64_t b = 3, l = 37;
        std::vector<double> idx(static_cast<std::size_t>(b * l));
        for (auto& i : idx)
          i = static_cast<double>(rng.chance(1, 4) ? v - 1 : rng.integer(0, v - 1));
        auto w = values == 0 ? normal_values(rng, v * d, 0, 1, dt)
                             : wide_values(rng, v * d, -8, dt == DType::float16 ? 4 : 8, dt);
        out.push_back({std::string(values == 0 ? "normal" : "wide 1e-8..1e8") +
                           " V=" + std::to_string(v) + " D=" + std::to_string(d),
                       make_ctx("embedding", dt,
                                {{"weight", arg(dt, {v, d}, std::move(w))},
                                 {"indices", arg(DType::int64, {b, l}, std::move(idx))}})});
      }
  }
  score_op("embedding", out,
           {{"fp16_staging", DType::float16, "float16 staging of float16 rows is a plain copy"}});
}

}  // namespace
}  // namespace gpuemu::test_a
