// The fp64 oracle on the GPU against the CPU oracle of the same machine, in one run
// (evidence/gpu/oracle.md; scripts/gpu/run.sh oracle runs it on the H200).
//
//   bench_oracle_gpu [--quick]
//
// For each problem: the full reference (value and every error bound, as a verdict needs it) of
// bf16 inputs drawn from N(0, 1), on the CPU (OpenBLAS on every core, as the daemon runs it) and
// on the GPU backend (with pageable copies, then page-locked ones), the best of a few runs each
// after one warm-up, the ratios, and how far the
// two disagree (max |gpu - cpu| / (|cpu| + c_acc) over the values and over the bounds).
// The GPU's time includes the transfers of inputs and outputs between host and device.
#include "gpuemu/engine/catalogue.hpp"
#include "gpuemu/engine/dtype.hpp"
#include "gpuemu/engine/oracle_backend.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

using namespace gpuemu;

namespace {

RefArg draw(Shape shape, std::mt19937_64& rng) {
  RefArg a;
  a.dtype = DType::bfloat16;
  a.shape = std::move(shape);
  a.data.resize(static_cast<std::size_t>(a.numel()));
  std::normal_distribution<double> normal(0.0, 1.0);
  for (double& x : a.data) x = round_to(DType::bfloat16, normal(rng));
  return a;
}

double seconds_of(const OpSchema& s, const RefContext& ctx, std::vector<RefOutput>* out) {
  const auto t0 = std::chrono::steady_clock::now();
  auto r = run_reference(s, ctx);
  const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!r) {
    std::fprintf(stderr, "reference failed: %s\n", r.error().message.c_str());
    std::exit(1);
  }
  if (out) *out = std::move(r).value();
  return t;
}

double best_of(const OpSchema& s, const RefContext& ctx, int reps, std::vector<RefOutput>* out) {
  double best = 1e300;
  for (int i = 0; i < reps; ++i) best = std::min(best, seconds_of(s, ctx, i + 1 == reps ? out : nullptr));
  return best;
}

void run(const Catalogue& cat, const std::string& label, const std::string& op,
         std::map<std::string, RefArg, std::less<>> inputs, const AttrMap& attrs, int cpu_reps,
         int gpu_reps) {
  if (gpu_reps < 1) gpu_reps = 1;
  const OpSchema& s = *cat.find(op);
  auto ctx = make_ref_context(s, std::move(inputs), attrs, DType::bfloat16);
  if (!ctx) {
    std::fprintf(stderr, "%s: %s\n", label.c_str(), ctx.error().message.c_str());
    std::exit(1);
  }
  std::vector<RefOutput> cpu, gpu;
  (void)oracle_backend::select("cpu");
  const double t_cpu = best_of(s, *ctx, cpu_reps, &cpu);
  (void)oracle_backend::select("cuda");
  seconds_of(s, *ctx, nullptr);  // warm-up: the arena's allocation, cuBLAS's first kernels
  // The GPU with pageable copies, then with page-locked ones (GPUEMU_ORACLE_CUDA_PIN, read by
  // the backend at each call).
  struct Gpu {
    double best = 1e300, in = 0, compute = 0, out = 0, pin = 0, host = 0;
  } modes[2];
  std::int64_t gemms = 0, blocks = 0;
  for (int mode = 0; mode < 2; ++mode) {
    setenv("GPUEMU_ORACLE_CUDA_PIN", mode == 0 ? "0" : "1", 1);
    const auto before = oracle_backend::counters();
    double total = 0.0;
    for (int i = 0; i < gpu_reps; ++i) {
      const double t = seconds_of(s, *ctx, mode == 1 && i + 1 == gpu_reps ? &gpu : nullptr);
      modes[mode].best = std::min(modes[mode].best, t);
      total += t;
    }
    const auto after = oracle_backend::counters();
    // Per GPU run, on average: the backend's copies in, compute, copies out, page-locking and
    // unlocking the host buffers (which faults in fresh output pages), and the reference's own
    // work on the host around the backend's calls (per-element terms the GPU does not compute).
    const double per = 1.0 / gpu_reps;
    modes[mode].in = (after.seconds_in - before.seconds_in) * per;
    modes[mode].compute = (after.seconds_compute - before.seconds_compute) * per;
    modes[mode].out = (after.seconds_out - before.seconds_out) * per;
    modes[mode].pin = (after.seconds_pin - before.seconds_pin) * per;
    modes[mode].host = total * per - (after.seconds_calls - before.seconds_calls) * per - modes[mode].pin;
    gemms = (after.gemms - before.gemms) / gpu_reps;
    blocks = (after.attention_blocks - before.attention_blocks) / gpu_reps;
  }
  unsetenv("GPUEMU_ORACLE_CUDA_PIN");
  double worst_value = 0.0, worst_bound = 0.0;
  for (std::size_t k = 0; k < cpu.size(); ++k) {
    for (std::size_t e = 0; e < cpu[k].value.size(); ++e) {
      const double acc = cpu[k].c_acc.empty() ? 0.0 : cpu[k].c_acc[e];
      const double scale = std::fabs(cpu[k].value[e]) + acc;
      if (scale > 0) worst_value = std::max(worst_value, std::fabs(gpu[k].value[e] - cpu[k].value[e]) / scale);
    }
    for (const auto* b : {&cpu[k].c_acc, &cpu[k].c_in}) {
      const RefVec& g_b = b == &cpu[k].c_acc ? gpu[k].c_acc : gpu[k].c_in;
      for (std::size_t e = 0; e < b->size(); ++e) {
        const double scale = std::fabs((*b)[e]) + (cpu[k].c_acc.empty() ? 0.0 : cpu[k].c_acc[e]);
        if (scale > 0) worst_bound = std::max(worst_bound, std::fabs(g_b[e] - (*b)[e]) / scale);
      }
    }
  }
  std::printf("| %s | %.3f | %.4f (%.1fx) | %.4f (%.1fx) | %.4f / %.4f / %.4f / %.4f / %.4f | %lld, %lld | %.1e | %.1e |\n",
              label.c_str(), t_cpu, modes[0].best, t_cpu / modes[0].best, modes[1].best,
              t_cpu / modes[1].best, modes[1].in, modes[1].compute, modes[1].out, modes[1].pin, modes[1].host,
              static_cast<long long>(gemms), static_cast<long long>(blocks), worst_value,
              worst_bound);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  auto cat = Catalogue::load({GPUEMU_SOURCE_DIR "/schemas/ops"});
  if (!cat) {
    std::fprintf(stderr, "%s\n", cat.error().message.c_str());
    return 1;
  }
  if (Status st = oracle_backend::select("cuda"); !st) {
    std::fprintf(stderr, "bench_oracle_gpu: %s\n", st.error().message.c_str());
    return 1;
  }
  std::printf("GPU: %s\n\n", oracle_backend::description().c_str());
  std::printf("| problem (bf16 inputs, full reference) | CPU s | GPU s, pageable copies (CPU/GPU) | GPU s, page-locked copies (CPU/GPU) | page-locked run: copies in / compute / copies out / page-locking / other host work, s | GPU GEMMs, attention blocks a run | max diff, values | max diff, bounds |\n|---|---:|---:|---:|---|---:|---:|---:|\n");
  std::mt19937_64 rng(20261203);
  const std::vector<std::int64_t> sizes = quick ? std::vector<std::int64_t>{1024} : std::vector<std::int64_t>{2048, 4096, 8192};
  for (std::int64_t n : sizes) {
    std::map<std::string, RefArg, std::less<>> in;
    in.emplace("a", draw({n, n}, rng));
    in.emplace("b", draw({n, n}, rng));
    run(**cat, "matmul " + std::to_string(n) + "^3", "matmul", std::move(in), AttrMap::object(),
        n >= 8192 ? 1 : 2, 3);
  }
  struct Attn {
    std::int64_t B, H, Hkv, L, D;
    bool causal;
  };
  const std::vector<Attn> attn = quick ? std::vector<Attn>{{1, 2, 2, 1024, 64, false}}
                                       : std::vector<Attn>{{1, 8, 8, 4096, 128, false},
                                                           {1, 8, 8, 4096, 128, true},
                                                           {1, 32, 8, 4096, 128, true}};
  for (const Attn& a : attn) {
    std::map<std::string, RefArg, std::less<>> in;
    in.emplace("q", draw({a.B, a.H, a.L, a.D}, rng));
    in.emplace("k", draw({a.B, a.Hkv, a.L, a.D}, rng));
    in.emplace("v", draw({a.B, a.Hkv, a.L, a.D}, rng));
    AttrMap attrs = AttrMap::object();
    attrs["causal"] = a.causal;
    attrs["enable_gqa"] = a.Hkv != a.H;
    const std::string label = "flash_attention B" + std::to_string(a.B) + " H" + std::to_string(a.H) +
                              " Hkv" + std::to_string(a.Hkv) + " L" + std::to_string(a.L) + " D" +
                              std::to_string(a.D) + (a.causal ? " causal" : "");
    run(**cat, label, "flash_attention", std::move(in), attrs, 1, 3);
  }
  return 0;
}
