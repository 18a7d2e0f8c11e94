// Why a kernel raised on a case, when the reason is its signature rather than its numerics: an
// optional input the case left out (a layer norm written as my_ln(x, weight, bias, eps) that never
// takes weight=None), or an attr value it does not handle (approximate='tanh'). Such a failure is
// classified `absent_input` / `unsupported_attr`, and its summary names the input or attr and the
// restriction that excludes it (present / --with / with = [...], attrs / --attr).
#pragma once

#include "gpuemu/engine/engine.hpp"

#include <optional>
#include <string>

namespace gpuemu {

// `kernel_error` is what the kernel raised on `c`. Static evidence: the error names an absent
// optional input, or speaks of None while one is absent. With `kernel`, probes re-run the case
// with each absent input present, then with each non-default attr at its default, and the first
// change that stops the error names the cause. nullopt when neither explains the error.
std::optional<Diagnosis> signature_diagnosis(const Engine& engine, const OpSchema& schema,
                                             const FuzzOptions& options, const TestCase& c,
                                             const std::string& kernel_error,
                                             const KernelRunner* kernel);

}  // namespace gpuemu
