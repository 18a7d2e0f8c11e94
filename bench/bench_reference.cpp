// fp64 reference oracle throughput against its peers measured in the same run:
//  - matmul reference (its value path, ops::matmul_reference_value_only: one dgemm into a fresh
//    output buffer) vs raw cblas_dgemm into a reused buffer, at 1024^3 and 2048^3 (goal >= 90%);
//    BM_matmul_reference_full is the whole reference the fuzzer runs (value plus the |a|@|b|
//    condition term: a second dgemm on absolute values), for information;
//  - softmax and layer_norm references (the whole reference, condition terms included) in GB/s of
//    what each must move: the fp64 input read plus every fp64 vector it returns written, i.e.
//    softmax 24 bytes per element (x; value, c_acc) and layer_norm 32 (x; value, c_acc, c_in);
//    the weight and bias (one row) are not counted. Peer: memcpy (16 bytes per element: read and
//    write) on one thread and on two (the references run on every core) (goal >= 30%). Each
//    benchmark reports its count as the counter `bytes_per_element`, which scripts/bench.sh uses.
//    BM_<op>_reference calls the reference over and over, as a fuzz run does: its outputs come
//    from the blocks the previous call freed (the reference heap, core/ref_heap.hpp), as memcpy's
//    destination is reused. BM_<op>_reference_cold empties that heap's cache before each call
//    (untimed), so every output is a fresh mapping: the first call at a size.
//  - BM_fresh_outputs/K/MODE: K fresh output vectors of 4096 x 4096 doubles (RefVec, as RefOutput
//    holds them; the heap's cache emptied before each repetition, untimed), made three ways: MODE 0 zeroed by ops::output_buffer (one thread fills them and
//    takes every page fault); MODE 1 from ops::uninit_output, as softmax and layer_norm now get
//    them: no element written, the pages faulted in by every core (the kernel's clearing of fresh
//    pages, which no allocation avoids); MODE 2 the same, then written once, rows claimed by every
//    core as the references' loops do (ops::parallel_rows): the floor of returning K outputs.
// Run: build/bin/bench_reference (or `make bench` / scripts/bench.sh, which prints the ratios).
#include "gpuemu/engine/catalogue.hpp"
#include "gpuemu/engine/rng.hpp"
#include "core/ref_heap.hpp"
#include "ops/gemm_blas.hpp"
#include "ops/op_util.hpp"

#include <benchmark/benchmark.h>
#include <cblas.h>

#include <algorithm>
#include <cstring>
#include <thread>
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
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0, a.data.data(), n,
                b.data.data(), n, 0.0, c.data(), n);
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * n * n * n, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_matmul_reference(benchmark::State& state) {
  const auto n = static_cast<std::int64_t>(state.range(0));
  auto ctx = context("matmul", {{"a", random_arg({n, n}, 1)}, {"b", random_arg({n, n}, 2)}});
  for (auto _ : state) {
    auto r = ops::matmul_reference_value_only(ctx);
    if (!r) {
      state.SkipWithError(r.error().message.c_str());
      break;
    }
    benchmark::DoNotOptimize(r->front().value.data());
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * n * n * n, benchmark::Counter::kIsIterationInvariantRate);
}

// Calls the reference over and over; with `cold`, the reference heap's cache is emptied before
// each call (untimed), so its outputs are fresh mappings whose pages fault in during the call.
void run_reference_loop(benchmark::State& state, const RefContext& ctx, bool cold) {
  for (auto _ : state) {
    if (cold) {
      state.PauseTiming();
      detail::ref_heap().release_cache();
      state.ResumeTiming();
    }
    auto r = run_reference(*ctx.schema, ctx);
    if (!r) {
      state.SkipWithError(r.error().message.c_str());
      break;
    }
    benchmark::DoNotOptimize(r);
  }
}

void BM_matmul_reference_full(benchmark::State& state) {
  const auto n = static_cast<std::int64_t>(state.range(0));
  auto ctx = context("matmul", {{"a", random_arg({n, n}, 1)}, {"b", random_arg({n, n}, 2)}});
  run_reference_loop(state, ctx, false);
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * n * n * n, benchmark::Counter::kIsIterationInvariantRate);
}

constexpr std::int64_t k_rows = 4096, k_cols = 4096;

void BM_memcpy(benchmark::State& state) {
  // The reference reads its fp64 input and writes the fp64 output: 16 bytes per element. Arg: the
  // number of threads, each copying its contiguous share (one thread per core is the peer of the
  // references, which split their rows over every core).
  const auto threads = static_cast<std::size_t>(state.range(0));
  const std::size_t n = k_rows * k_cols;
  std::vector<double> src(n, 1.0), dst(n);
  auto copy = [&](std::size_t t) {
    const std::size_t b = n * t / threads, e = n * (t + 1) / threads;
    std::memcpy(dst.data() + b, src.data() + b, (e - b) * sizeof(double));
  };
  for (auto _ : state) {
    std::vector<std::thread> pool;
    for (std::size_t t = 1; t < threads; ++t) pool.emplace_back(copy, t);
    copy(0);
    for (auto& th : pool) th.join();
    benchmark::DoNotOptimize(dst.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * k_rows * k_cols * 16);
  state.counters["bytes_per_element"] = 16;
}

// The bytes a reference moves: its input read once, and each output vector written once.
void count_bytes(benchmark::State& state, int bytes_per_element) {
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * k_rows * k_cols *
                          bytes_per_element);
  state.counters["bytes_per_element"] = bytes_per_element;
}

void BM_fresh_outputs(benchmark::State& state) {
  const auto count = static_cast<std::size_t>(state.range(0));
  const auto mode = state.range(1);  // 0 zeroed, 1 uninit_output, 2 uninit_output written once
  for (auto _ : state) {
    state.PauseTiming();
    detail::ref_heap().release_cache();  // fresh mappings, not the last iteration's blocks
    state.ResumeTiming();
    std::vector<RefVec> outs;
    for (std::size_t i = 0; i < count; ++i)
      outs.push_back(mode == 0 ? ops::output_buffer(k_rows * k_cols)
                               : ops::uninit_output(k_rows * k_cols));
    if (mode == 2)
      ops::parallel_rows(k_rows, (1 << 14) / k_cols, [&](std::int64_t b, std::int64_t e) {
        for (auto& o : outs) std::fill(o.data() + b * k_cols, o.data() + e * k_cols, 1.0);
      });
    benchmark::DoNotOptimize(outs.back().data());
  }
  count_bytes(state, static_cast<int>(8 * count));
}

void BM_softmax_reference(benchmark::State& state, bool cold) {
  auto ctx = context("softmax", {{"x", random_arg({k_rows, k_cols}, 3)}});
  run_reference_loop(state, ctx, cold);
  count_bytes(state, 8 + 2 * 8);  // x; value, c_acc
}

void BM_layer_norm_reference(benchmark::State& state, bool cold) {
  auto ctx = context("layer_norm", {{"x", random_arg({k_rows, k_cols}, 4)},
                                    {"weight", random_arg({k_cols}, 5)},
                                    {"bias", random_arg({k_cols}, 6)}});
  run_reference_loop(state, ctx, cold);
  count_bytes(state, 8 + 3 * 8);  // x; value, c_acc, c_in
}

// The fastest repetition next to the median: on a shared machine interference only adds time, so
// the minimum is the better estimate of what the code can do (scripts/bench.sh prints both).
double fastest(const std::vector<double>& v) {
  return v.empty() ? 0.0 : *std::min_element(v.begin(), v.end());
}

}  // namespace

BENCHMARK(BM_dgemm_raw)
    ->Arg(1024)
    ->Arg(2048)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->ComputeStatistics("min", fastest);
BENCHMARK(BM_matmul_reference)
    ->Arg(1024)
    ->Arg(2048)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->ComputeStatistics("min", fastest);
BENCHMARK(BM_matmul_reference_full)
    ->Arg(1024)
    ->Arg(2048)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->ComputeStatistics("min", fastest);
BENCHMARK(BM_memcpy)
    ->Arg(1)
    ->Arg(2)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->ComputeStatistics("min", fastest);
BENCHMARK(BM_fresh_outputs)
    ->ArgsProduct({{2, 3}, {0, 1, 2}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->ComputeStatistics("min", fastest);
BENCHMARK_CAPTURE(BM_softmax_reference, warm, false)
    ->Name("BM_softmax_reference")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->ComputeStatistics("min", fastest);
BENCHMARK_CAPTURE(BM_softmax_reference, cold, true)
    ->Name("BM_softmax_reference_cold")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->ComputeStatistics("min", fastest);
BENCHMARK_CAPTURE(BM_layer_norm_reference, warm, false)
    ->Name("BM_layer_norm_reference")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->ComputeStatistics("min", fastest);
BENCHMARK_CAPTURE(BM_layer_norm_reference, cold, true)
    ->Name("BM_layer_norm_reference_cold")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->ComputeStatistics("min", fastest);
BENCHMARK_MAIN();
