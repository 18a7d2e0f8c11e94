// The engine the engine-level tests share: the source tree's op schemas and shipped envelopes
// (schemas/envelopes.json), built once per test binary.
#pragma once

#include "gpuemu/engine/engine.hpp"

#include <gtest/gtest.h>

namespace gpuemu::testing_support {

inline Engine& source_engine() {
  static Engine e = [] {
    auto cat = Catalogue::load({GPUEMU_SOURCE_DIR "/schemas/ops"});
    EXPECT_TRUE(cat.ok());
    auto env = EnvelopeTable::load_file(GPUEMU_SOURCE_DIR "/schemas/envelopes.json");
    return Engine(*cat, env ? *env : EnvelopeTable{});
  }();
  return e;
}

}  // namespace gpuemu::testing_support
