// fp64 reference oracle throughput against its peers measured in the same run:
//  - matmul reference vs raw cblas_dgemm at 1024^3 and 2048^3 (goal >= 90%);
//  - softmax and layer_norm references in GB/s vs memcpy of the same bytes (goal >= 30%).
// Run: build/bin/bench_reference (or `make bench`, which also prints the ratios).
#include "gpuemu/catalogue.hpp"
#include "gpuemu/rng.hpp"

#include <benchmark/benchmark.h>
#include <cblas.h>

#include <cstring>
#include <vector>

namespace {

using namespace gpuemu;

const Catalogue& catalogue() {
  static auto cat = Catalogue::load({GPUEMU_SOURCE_DIR "/schemas/ops"}).value();
  return *cat;
}

RefArg random_arg(Shape shape, std::uint64_t seed, DType dtype = DType::float32) {
  RefArg a;
  a.dtype = dtype;
  a.shape = std::move(shape);
  a.data.resize(static_cast<std::size_t>(a.numel()));
  Rng rng(seed);
  for (auto& x : a.data) x = round_to(dtype, rng.normal());
  return a;
}

RefContext context(const std::string& op, std::map<std::string, RefArg, std::less<>> inputs) {
  RefContext ctx;
  ctx.schema = catalogue().find(op);
  ctx.attrs = ctx.schema->resolve_attrs(Json::object()).value();
  ctx.inputs = std::move(inputs);
  return ctx;
}

void BM_dgemm_raw(benchmark::State& state) {
  const auto n = static_cast<int>(state.range(0));
  auto a = random_arg({n, n}, 1), b = random_arg({n, n}, 2);
  std::vector<double> c(static_cast<std::size_t>(n) * n);
  for (auto _ : state) {
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0, a.data.data(), n, b.data.data(), n, 0.0,
                c.data(), n);
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * n * n * n, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_matmul_reference(benchmark::State& state) {
  const auto n = static_cast<std::int64_t>(state.range(0));
  auto ctx = context("matmul", {{"a", random_arg({n, n}, 1)}, {"b", random_arg({n, n}, 2)}});
  const OpSchema& s = *ctx.schema;
  for (auto _ : state) {
    auto r = run_reference(s, ctx);
    benchmark::DoNotOptimize(r);
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * n * n * n, benchmark::Counter::kIsIterationInvariantRate);
}

constexpr std::int64_t k_rows = 4096, k_cols = 4096;

void BM_memcpy(benchmark::State& state) {
  // The reference reads its fp64 input and writes the fp64 output: 16 bytes per element.
  std::vector<double> src(k_rows * k_cols, 1.0), dst(k_rows * k_cols);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), src.size() * sizeof(double));
    benchmark::DoNotOptimize(dst.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * k_rows * k_cols * 16);
}

void BM_softmax_reference(benchmark::State& state) {
  auto ctx = context("softmax", {{"x", random_arg({k_rows, k_cols}, 3)}});
  for (auto _ : state) {
    auto r = run_reference(*ctx.schema, ctx);
    benchmark::DoNotOptimize(r);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * k_rows * k_cols * 16);
}

void BM_layer_norm_reference(benchmark::State& state) {
  auto ctx = context("layer_norm", {{"x", random_arg({k_rows, k_cols}, 4)},
                                    {"weight", random_arg({k_cols}, 5)},
                                    {"bias", random_arg({k_cols}, 6)}});
  for (auto _ : state) {
    auto r = run_reference(*ctx.schema, ctx);
    benchmark::DoNotOptimize(r);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * k_rows * k_cols * 16);
}

}  // namespace

BENCHMARK(BM_dgemm_raw)->Arg(1024)->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_matmul_reference)->Arg(1024)->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_memcpy)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_softmax_reference)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_layer_norm_reference)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_MAIN();
