#include "ops/gpu_oracle.hpp"

#include "cuda/oracle_abi.h"
#include "ops/attention_reference.hpp"
#include "ops/op_util.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <vector>

namespace gpuemu::ops::gpu_oracle {
namespace {

constexpr const char* k_library = "libgpuemu_oracle_cuda.so";

struct Loaded {
  const gpuemu_oracle_backend* api = nullptr;
  std::string description;
};

std::mutex g_mutex;                                    // select() and the first use
std::atomic<const gpuemu_oracle_backend*> g_active{nullptr};  // null: the CPU
Loaded g_loaded;                                       // kept once loaded (never unloaded)
std::once_flag g_env_once;
std::atomic<std::int64_t> g_min_macs{-1};
std::atomic<std::int64_t> g_gemms{0}, g_blocks{0}, g_failures{0};
std::atomic<bool> g_failure_reported{false};

// Where the library may be: $GPUEMU_ORACLE_CUDA_LIB; beside the binary or module holding the
// engine, or in ../lib from it (build/bin -> build/lib, /usr/bin -> /usr/lib); the build tree it
// was built in; then the loader's own search (LD_LIBRARY_PATH).
std::vector<std::string> candidates() {
  std::vector<std::string> out;
  if (const char* v = std::getenv("GPUEMU_ORACLE_CUDA_LIB"); v && *v) {
    out.emplace_back(v);
    return out;  // an explicit path is the only one tried
  }
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&candidates), &info) && info.dli_fname) {
    const std::filesystem::path here = std::filesystem::path(info.dli_fname).parent_path();
    out.push_back((here / k_library).string());
    out.push_back((here / ".." / "lib" / k_library).string());
  }
#ifdef GPUEMU_ORACLE_CUDA_BUILD_PATH
  out.emplace_back(GPUEMU_ORACLE_CUDA_BUILD_PATH);
#endif
  out.emplace_back(k_library);
  return out;
}

Status load_locked() {
  if (g_loaded.api) return {};
  std::string tried;
  void* handle = nullptr;
  for (const std::string& path : candidates()) {
    const bool bare = path.find('/') == std::string::npos;
    if (!bare && !std::filesystem::exists(path)) continue;
    handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle) break;
    tried += (tried.empty() ? "" : "; ") + path + ": " + dlerror();
  }
  if (!handle)
    return make_error(ErrorCode::tool_missing,
                      std::string("the CUDA oracle backend is not available: ") +
                          (tried.empty() ? std::string(k_library) +
                                               " was not built (CMake found no CUDA compiler) "
                                               "or is not installed beside gpuemu"
                                         : tried));
  using Entry = const gpuemu_oracle_backend* (*)();
  auto entry = reinterpret_cast<Entry>(dlsym(handle, "gpuemu_oracle_backend_v1"));
  const gpuemu_oracle_backend* api = entry ? entry() : nullptr;
  if (!api || api->abi_version != GPUEMU_ORACLE_ABI_VERSION) {
    dlclose(handle);
    return make_error(ErrorCode::tool_missing,
                      std::string(k_library) + " does not speak ABI version " +
                          std::to_string(GPUEMU_ORACLE_ABI_VERSION));
  }
  char desc[256] = {0}, err[512] = {0};
  if (api->init(desc, sizeof desc, err, sizeof err) != 0)
    // The library stays loaded (its CUDA runtime may not be unloadable); select() may try again.
    return make_error(ErrorCode::tool_missing,
                      std::string("the CUDA oracle backend could not start: ") + err);
  Dl_info info{};
  std::string where = k_library;
  if (dladdr(reinterpret_cast<void*>(entry), &info) && info.dli_fname) where = info.dli_fname;
  g_loaded = {api, std::string(desc) + " (" + where + ")"};
  return {};
}

Status select_locked(std::string_view name) {
  if (name == "cpu") {
    g_active.store(nullptr);
    return {};
  }
  if (name != "cuda")
    return make_error(ErrorCode::invalid_argument,
                      "unknown oracle backend '" + std::string(name) + "' (cpu | cuda)");
  GPUEMU_TRY_STATUS(load_locked());
  g_active.store(g_loaded.api);
  return {};
}

void apply_environment() {
  std::call_once(g_env_once, [] {
    const char* v = std::getenv("GPUEMU_ORACLE");
    if (!v || !*v) return;
    std::lock_guard<std::mutex> lock(g_mutex);
    if (Status st = select_locked(v); !st)
      std::fprintf(stderr, "gpuemu: GPUEMU_ORACLE=%s: %s; the fp64 oracle runs on the CPU\n", v,
                   st.error().message.c_str());
  });
}

const gpuemu_oracle_backend* active() {
  apply_environment();
  return g_active.load(std::memory_order_relaxed);
}

void report_failure(const char* what, const char* err) {
  g_failures.fetch_add(1);
  if (!g_failure_reported.exchange(true))
    std::fprintf(stderr,
                 "gpuemu: the CUDA oracle backend failed a %s (%s); computed on the CPU, as is "
                 "every later failure (not reported again)\n",
                 what, err);
}

bool large(std::int64_t a, std::int64_t b, std::int64_t c) {
  return static_cast<double>(a) * static_cast<double>(b) * static_cast<double>(c) >=
         static_cast<double>(oracle_backend::min_macs());
}

}  // namespace
}  // namespace gpuemu::ops::gpu_oracle

namespace gpuemu::oracle_backend {
using namespace gpuemu::ops::gpu_oracle;

Status select(std::string_view name) {
  std::call_once(g_env_once, [] {});  // an explicit choice overrides $GPUEMU_ORACLE
  std::lock_guard<std::mutex> lock(g_mutex);
  return select_locked(name);
}

std::string current() { return active() ? "cuda" : "cpu"; }

std::string description() {
  if (!active()) return "cpu (OpenBLAS)";
  std::lock_guard<std::mutex> lock(g_mutex);
  return "cuda: " + g_loaded.description;
}

std::int64_t min_macs() {
  std::int64_t v = g_min_macs.load(std::memory_order_relaxed);
  if (v >= 0) return v;
  v = std::int64_t{1} << 26;
  if (const char* e = std::getenv("GPUEMU_ORACLE_CUDA_MIN_MACS"); e && *e) {
    char* end = nullptr;
    const long long parsed = std::strtoll(e, &end, 10);
    if (end && *end == '\0' && parsed >= 0) v = parsed;
  }
  g_min_macs.store(v);
  return v;
}

void set_min_macs(std::int64_t macs) { g_min_macs.store(macs < 0 ? 0 : macs); }

Counters counters() {
  Counters c{g_gemms.load(), g_blocks.load(), g_failures.load()};
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_loaded.api) {
    double s[5] = {0, 0, 0, 0, 0};
    g_loaded.api->timings(s);
    c.seconds_in = s[0], c.seconds_compute = s[1], c.seconds_out = s[2], c.seconds_calls = s[3];
    c.seconds_pin = s[4];
  }
  return c;
}

}  // namespace gpuemu::oracle_backend

namespace gpuemu::ops::gpu_oracle {

// 0: done on the GPU; GPUEMU_ORACLE_DECLINED: inputs the GPU path does not take (the CPU's, not
// a failure); anything else: a failure, reported once and counted.
bool outcome(int rc, const char* what, const char* err, std::atomic<std::int64_t>& done) {
  if (rc == 0) {
    done.fetch_add(1);
    return true;
  }
  if (rc != GPUEMU_ORACLE_DECLINED) report_failure(what, err);
  return false;
}

bool dgemm(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K,
           const double* A, std::int64_t lda, const double* B, std::int64_t ldb, double* C,
           std::int64_t ldc, double beta) {
  const gpuemu_oracle_backend* api = active();
  if (!api || M <= 0 || N <= 0 || K <= 0 || !large(M, N, K) || !std::isfinite(beta)) return false;
  char err[512] = {0};
  return outcome(api->dgemm(trans_a, trans_b, M, N, K, A, lda, B, ldb, C, ldc, beta, err, sizeof err),
                 "GEMM", err, g_gemms);
}

bool gemm_abs(bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K, const double* A,
              const double* B, double lift_below, double growth_weight, double* C, double* C_abs) {
  const gpuemu_oracle_backend* api = active();
  if (!api || M <= 0 || N <= 0 || K <= 0 || !large(M, N, K) || !std::isfinite(growth_weight))
    return false;
  char err[512] = {0};
  return outcome(api->gemm_abs(trans_b, M, N, K, A, K, B, trans_b ? K : N, lift_below, growth_weight,
                               C, N, C_abs, N, err, sizeof err),
                 "GEMM", err, g_gemms);
}

bool attention(const AttentionBlock& blk) {
  const gpuemu_oracle_backend* api = active();
  if (!api || blk.lq <= 0 || blk.lk <= 0 || blk.d <= 0 || !large(blk.lq, blk.lk, blk.d) ||
      !std::isfinite(blk.scale))
    return false;
  const gpuemu_attention_block b{blk.q,      blk.k,           blk.v,         blk.lq,
                                 blk.lk,     blk.d,           blk.scale,     blk.causal ? 1 : 0,
                                 blk.p_min_normal, blk.p_flush_weight, blk.policy_weight,
                                 blk.out,    blk.c_acc,       blk.c_in,      blk.alt};
  char err[512] = {0};
  return outcome(api->attention(&b, err, sizeof err), "attention block", err, g_blocks);
}

}  // namespace gpuemu::ops::gpu_oracle
