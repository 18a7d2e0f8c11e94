// The fp64 oracle's CUDA backend (engine/ops/gpu_oracle.hpp, engine/cuda/oracle_cuda.cu).
//
// Here (no GPU) the backend's selection must say why "cuda" is unavailable and leave the CPU in
// charge. On a machine with a GPU (scripts/gpu/run.sh oracle sets GPUEMU_REQUIRE_CUDA_ORACLE=1,
// which turns the skip below into a failure) every op's reference, for cases of every strategy,
// must agree with the CPU's to 1e-12, and the GEMM-shaped and attention ops must actually have run
// on the GPU.
#include "gpuemu/engine/engine.hpp"
#include "gpuemu/engine/oracle_backend.hpp"
#include "source_engine.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>

namespace gpuemu {
namespace {

Engine& engine() { return testing_support::source_engine(); }

bool cuda_required() {
  const char* v = std::getenv("GPUEMU_REQUIRE_CUDA_ORACLE");
  return v && std::string(v) == "1";
}

// Restores the CPU backend and the default size threshold when a test ends.
struct CpuAfter {
  ~CpuAfter() {
    (void)oracle_backend::select("cpu");
    oracle_backend::set_min_macs(std::int64_t{1} << 26);
  }
};

TEST(GpuOracle, AnUnknownBackendIsAnInvalidArgumentAndChangesNothing) {
  CpuAfter restore;
  ASSERT_TRUE(oracle_backend::select("cpu").ok());
  const Status st = oracle_backend::select("tpu");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code, ErrorCode::invalid_argument);
  EXPECT_NE(st.error().message.find("cpu | cuda"), std::string::npos) << st.error().message;
  EXPECT_EQ(oracle_backend::current(), "cpu");
  EXPECT_EQ(oracle_backend::description(), "cpu (OpenBLAS)");
}

TEST(GpuOracle, CudaEitherStartsOrSaysWhyAndLeavesTheCpuInCharge) {
  CpuAfter restore;
  const Status st = oracle_backend::select("cuda");
  if (st.ok()) {  // a GPU machine
    EXPECT_EQ(oracle_backend::current(), "cuda");
    EXPECT_EQ(oracle_backend::description().rfind("cuda: ", 0), 0u) << oracle_backend::description();
    return;
  }
  EXPECT_FALSE(cuda_required()) << st.error().message;
  EXPECT_EQ(st.error().code, ErrorCode::tool_missing);
  EXPECT_NE(st.error().message.find("CUDA oracle backend"), std::string::npos) << st.error().message;
  EXPECT_EQ(oracle_backend::current(), "cpu");
  // The references still run, on the CPU.
  const OpSchema& mm = *engine().catalogue().find("matmul");
  CaseGenerator gen(mm, FuzzOptions{});
  auto c = gen.generate(5, 0);
  ASSERT_TRUE(c.ok()) << c.error().message;
  auto ctx = make_ref_context(mm, c->inputs, c->attrs, c->dtype);
  ASSERT_TRUE(ctx.ok());
  ASSERT_TRUE(run_reference(mm, *ctx).ok());
  EXPECT_EQ(oracle_backend::counters().gemms, 0);
}

// |gpu - cpu| <= tol * scale, NaN against NaN and equal infinities included.
bool agrees(double gpu, double cpu, double scale, double tol) {
  if (std::isnan(cpu) || std::isnan(gpu)) return std::isnan(cpu) && std::isnan(gpu);
  if (std::isinf(cpu) || std::isinf(gpu)) return gpu == cpu;
  return std::fabs(gpu - cpu) <= tol * scale;
}

TEST(GpuOracle, AgreesWithTheCpuOnEveryOpAndStrategy) {
  CpuAfter restore;
  if (const Status st = oracle_backend::select("cuda"); !st.ok()) {
    if (cuda_required()) FAIL() << st.error().message;
    GTEST_SKIP() << "no CUDA oracle here: " << st.error().message;
  }
  (void)oracle_backend::select("cpu");
  oracle_backend::set_min_macs(0);  // every GEMM and attention block of the fuzzer's sizes
  constexpr double k_tol = 1e-12;
  const std::set<std::string> must_use_gpu = {"matmul", "bmm", "linear", "conv1d", "conv2d",
                                              "flash_attention", "decode_attention",
                                              "matmul_backward", "scaled_fp8_matmul"};
  std::printf("| op | cases | GEMMs on the GPU | attention blocks on the GPU | max |gpu-cpu|/(|cpu|+c_acc), values | the same, bounds |\n|---|---:|---:|---:|---:|---:|\n");
  for (const OpSchema* s : engine().catalogue().all()) {
    if (s->reference.rfind("builtin:", 0) != 0) continue;
    const oracle_backend::Counters before = oracle_backend::counters();
    double worst_value = 0.0, worst_bound = 0.0;
    int cases = 0;
    for (auto dist : {Distribution::regular, Distribution::boundary, Distribution::adversarial,
                      Distribution::special}) {
      FuzzOptions o;
      o.distribution = dist;
      for (const auto& attr : s->attrs)
        if (!attr.values.empty()) o.vary_attrs.push_back(attr.name);
      CaseGenerator gen(*s, o);
      for (std::int64_t i = 0; i < 3; ++i) {
        auto c = gen.generate(91, i);
        ASSERT_TRUE(c.ok()) << s->name << ": " << c.error().message;
        auto ctx = make_ref_context(*s, c->inputs, c->attrs, c->dtype);
        ASSERT_TRUE(ctx.ok()) << s->name << ": " << ctx.error().message;
        ASSERT_TRUE(oracle_backend::select("cpu").ok());
        auto cpu = run_reference(*s, *ctx);
        ASSERT_TRUE(oracle_backend::select("cuda").ok());
        auto gpu = run_reference(*s, *ctx);
        ASSERT_TRUE(cpu.ok() && gpu.ok()) << s->name;
        ASSERT_EQ(cpu->size(), gpu->size()) << s->name;
        ++cases;
        const std::string where = s->name + " case " + std::to_string(i) + " (" +
                                  std::string(distribution_name(dist)) + ")";
        for (std::size_t k = 0; k < cpu->size(); ++k) {
          const RefOutput &C = (*cpu)[k], &G = (*gpu)[k];
          ASSERT_EQ(C.shape, G.shape) << where;
          ASSERT_EQ(C.value.size(), G.value.size()) << where;
          ASSERT_EQ(C.c_acc.size(), G.c_acc.size()) << where;
          ASSERT_EQ(C.c_in.size(), G.c_in.size()) << where;
          EXPECT_EQ(C.alt_nonfinite, G.alt_nonfinite) << where << ": output " << C.name;
          for (std::size_t e = 0; e < C.value.size(); ++e) {
            const double acc = C.c_acc.empty() ? 0.0 : C.c_acc[e];
            const double scale = std::fabs(C.value[e]) + (std::isfinite(acc) ? acc : 0.0);
            ASSERT_TRUE(agrees(G.value[e], C.value[e], scale, k_tol))
                << where << ": " << C.name << "[" << e << "] gpu " << G.value[e] << " cpu "
                << C.value[e] << " c_acc " << acc;
            if (std::isfinite(C.value[e]) && scale > 0)
              worst_value = std::max(worst_value, std::fabs(G.value[e] - C.value[e]) / scale);
          }
          for (const auto* pair : {&C.c_acc, &C.c_in}) {
            const RefVec& cb = *pair;
            const RefVec& gb = pair == &C.c_acc ? G.c_acc : G.c_in;
            for (std::size_t e = 0; e < cb.size(); ++e) {
              // A bound derived from the value (c_in = |product| before a bias) carries the
              // value's own fp64 rounding: judged on the value's scale, as the verdict does.
              const double acc = C.c_acc.empty() || !std::isfinite(C.c_acc[e]) ? 0.0 : C.c_acc[e];
              const double scale = std::fabs(cb[e]) + acc;
              ASSERT_TRUE(agrees(gb[e], cb[e], scale, k_tol))
                  << where << ": " << C.name << (pair == &C.c_acc ? " c_acc[" : " c_in[") << e
                  << "] gpu " << gb[e] << " cpu " << cb[e];
              if (std::isfinite(cb[e]) && scale > 0)
                worst_bound = std::max(worst_bound, std::fabs(gb[e] - cb[e]) / scale);
            }
          }
        }
      }
    }
    const oracle_backend::Counters after = oracle_backend::counters();
    const std::int64_t gemms = after.gemms - before.gemms,
                       blocks = after.attention_blocks - before.attention_blocks;
    EXPECT_EQ(after.failures, before.failures) << s->name;
    if (must_use_gpu.count(s->name)) {
      EXPECT_GT(gemms + blocks, 0) << s->name << " never ran on the GPU";
    }
    if (gemms + blocks > 0)
      std::printf("| %s | %d | %lld | %lld | %.2e | %.2e |\n", s->name.c_str(), cases,
                  static_cast<long long>(gemms), static_cast<long long>(blocks), worst_value,
                  worst_bound);
  }
}

// The growth term of a GEMM's accumulation (scale_by_growth) where it matters: near-equal
// products (rows of a and columns of b constant along K, as expanded inputs give), where G grows
// far past sqrt(K), beside rows of varied values and bf16 subnormals (the growth reads the raw
// operands; the lift only |a|·|b|). On the GPU the growth runs on the device (gemm_abs).
TEST(GpuOracle, TheGrowthOfNearEqualProductsAgreesWithTheCpu) {
  CpuAfter restore;
  if (const Status st = oracle_backend::select("cuda"); !st.ok()) {
    if (cuda_required()) FAIL() << st.error().message;
    GTEST_SKIP() << "no CUDA oracle here: " << st.error().message;
  }
  oracle_backend::set_min_macs(0);
  constexpr std::int64_t M = 96, K = 1031, N = 80;
  const auto fill = [](std::int64_t rows, std::int64_t cols, bool constant_rows, unsigned salt) {
    RefArg x;
    x.dtype = DType::bfloat16;
    x.shape = {rows, cols};
    x.data.resize(static_cast<std::size_t>(rows * cols));
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < cols; ++c) {
        const unsigned h = static_cast<unsigned>(r * 7919 + (constant_rows && r % 3 ? 0 : c) * 104729) ^ salt;
        double v = 0.5 + static_cast<double>(h % 1000) / 997.0;
        if (r % 11 == 5 && c % 17 == 3) v = 0x1p-130;  // a bf16 subnormal
        x.data[static_cast<std::size_t>(r * cols + c)] = round_to(DType::bfloat16, (h & 1) && !constant_rows ? -v : v);
      }
    return x;
  };
  for (const std::string op : {"matmul", "linear"}) {
    const OpSchema* s = engine().catalogue().find(op);
    ASSERT_NE(s, nullptr);
    std::map<std::string, RefArg, std::less<>> in;
    if (op == "matmul") {
      in.emplace("a", fill(M, K, true, 17));
      RefArg bt = fill(N, K, true, 29), b = bt;  // b's columns constant along K
      b.shape = {K, N};
      for (std::int64_t k = 0; k < K; ++k)
        for (std::int64_t j = 0; j < N; ++j) b.data[k * N + j] = bt.data[j * K + k];
      in.emplace("b", std::move(b));
    } else {
      in.emplace("x", fill(M, K, true, 17));
      in.emplace("weight", fill(N, K, true, 29));  // [N, K]: b transposed
    }
    auto ctx = make_ref_context(*s, std::move(in), AttrMap::object(), DType::bfloat16);
    ASSERT_TRUE(ctx.ok()) << ctx.error().message;
    ASSERT_TRUE(oracle_backend::select("cpu").ok());
    auto cpu = run_reference(*s, *ctx);
    ASSERT_TRUE(oracle_backend::select("cuda").ok());
    const auto before = oracle_backend::counters();
    auto gpu = run_reference(*s, *ctx);
    ASSERT_TRUE(cpu.ok() && gpu.ok()) << op;
    EXPECT_EQ(oracle_backend::counters().gemms, before.gemms + 1) << op << " did not run on the GPU";
    const RefOutput &C = (*cpu)[0], &G = (*gpu)[0];
    double most_growth = 0.0;
    for (std::size_t e = 0; e < C.c_acc.size(); ++e) {
      ASSERT_TRUE(agrees(G.c_acc[e], C.c_acc[e], std::fabs(C.c_acc[e]), 1e-12))
          << op << " c_acc[" << e << "] gpu " << G.c_acc[e] << " cpu " << C.c_acc[e];
      ASSERT_TRUE(agrees(G.value[e], C.value[e], std::fabs(C.value[e]) + C.c_acc[e], 1e-12)) << op;
      most_growth = std::max(most_growth, C.c_acc[e] / (std::fabs(C.value[e]) + 1e-300));
    }
    // Constant rows against constant columns: the growth is far past sqrt(K) ≈ 32 there.
    EXPECT_GT(most_growth, 4 * std::sqrt(static_cast<double>(K))) << op;
  }
}

}  // namespace
}  // namespace gpuemu
