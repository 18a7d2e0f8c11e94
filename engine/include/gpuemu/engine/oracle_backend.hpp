// The fp64 oracle's backend: the CPU, or the optional CUDA backend (docs/gpu.md, "The fp64 oracle
// on the GPU"; evidence/gpu/oracle.md). Which one computes a reference is a speed choice: a verdict never depends on it.
// The references' hooks are in engine/ops/gpu_oracle.hpp, which says what runs where.
#pragma once

#include "gpuemu/base/error.hpp"

#include <cstdint>
#include <string>
#include <string_view>

namespace gpuemu::oracle_backend {

// Selects the backend: "cpu", or "cuda" (loads the library, initialises device 0). An error says
// why "cuda" is not available here (not built, the library not found, no device) or names an
// unknown backend; the backend then stays as it was.
Status select(std::string_view name);

// The backend in use, "cpu" or "cuda". The first call of anything in this header applies
// $GPUEMU_ORACLE (cpu | cuda) when select() was not called before: an unavailable or unknown
// value is reported on stderr once and the CPU is used.
std::string current();

// "cpu (OpenBLAS)", or "cuda: <device, compute capability, memory, cuBLAS version> (<library>)".
std::string description();

// Problems of at least this many multiply-adds go to the GPU (a GEMM's M·N·K, an attention
// block's Lq·Lk·D); smaller ones stay on the CPU. $GPUEMU_ORACLE_CUDA_MIN_MACS, else 2^26.
std::int64_t min_macs();
void set_min_macs(std::int64_t macs);

// How many GEMMs and attention blocks the GPU computed, and how many calls it failed (each then
// computed on the CPU), since the process started.
struct Counters {
  std::int64_t gemms = 0, attention_blocks = 0, failures = 0;
  // Where the GPU's time went, summed over its calls: inputs copied to the device, computing,
  // outputs copied back, the calls' wall time on the host once their buffers are page-locked,
  // and page-locking and unlocking those buffers (0 on the CPU backend).
  double seconds_in = 0, seconds_compute = 0, seconds_out = 0, seconds_calls = 0, seconds_pin = 0;
};
Counters counters();

}  // namespace gpuemu::oracle_backend
