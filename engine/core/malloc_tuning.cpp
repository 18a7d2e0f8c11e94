#include "gpuemu/engine/malloc_tuning.hpp"

#include <malloc.h>

#include <cstdlib>

namespace gpuemu {

bool tune_malloc_for_cases(MallocTuning mode) {
  static const bool applied = [mode] {
    const auto set = [](const char* name) {
      const char* v = std::getenv(name);
      return v != nullptr && *v != '\0';
    };
    if (mode == MallocTuning::unless_environment_says &&
        (set("GPUEMU_KEEP_MALLOC") || set("MALLOC_MMAP_THRESHOLD_") || set("MALLOC_TRIM_THRESHOLD_")))
      return false;
    ::mallopt(M_MMAP_THRESHOLD, 32 << 20);
    ::mallopt(M_TRIM_THRESHOLD, 64 << 20);
    return true;
  }();
  return applied;
}

}  // namespace gpuemu
