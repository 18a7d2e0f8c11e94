// gpuemu lint: a static gate on compiled GPU kernels (registers, spills, SASS size, instruction
// mix), with baselines and a policy. This umbrella header is the whole public API; see
// docs/lint.md for the command and the policy.
#pragma once

#include "gpuemu/lint/analyzer.hpp"
#include "gpuemu/lint/baseline.hpp"
#include "gpuemu/lint/diff.hpp"
#include "gpuemu/lint/metrics.hpp"
#include "gpuemu/lint/policy.hpp"
#include "gpuemu/lint/report.hpp"
