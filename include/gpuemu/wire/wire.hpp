// The typed wire, every family (docs/protocol.md; docs/architecture.md, "The typed protocol
// layer"): one header per command family with a request and a reply struct per method, and the
// registry of every method.
#pragma once

#include "gpuemu/wire/coverage.hpp"
#include "gpuemu/wire/failures.hpp"
#include "gpuemu/wire/fuzz.hpp"
#include "gpuemu/wire/info.hpp"
#include "gpuemu/wire/lint.hpp"
#include "gpuemu/wire/registry.hpp"
#include "gpuemu/wire/scale.hpp"
