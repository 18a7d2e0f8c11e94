// The typed wire, every family (docs/protocol.md; docs/architecture.md, "The typed protocol
// layer"): one header per command family with a request and a reply struct per method, and the
// registry of every method.
#pragma once

#include "gpuemu/protocol/wire/coverage.hpp"
#include "gpuemu/protocol/wire/failures.hpp"
#include "gpuemu/protocol/wire/fuzz.hpp"
#include "gpuemu/protocol/wire/info.hpp"
#include "gpuemu/protocol/wire/lint.hpp"
#include "gpuemu/protocol/wire/registry.hpp"
#include "gpuemu/protocol/wire/scale.hpp"
