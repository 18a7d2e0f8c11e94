// Process-wide malloc settings for gpuemu's workload: buffers of 0.1-32 MiB made and freed per case.
#pragma once

namespace gpuemu {

enum class MallocTuning {
  always,                   // the daemon: its process is gpuemu's own
  unless_environment_says,  // a process gpuemu shares (the CLI's in-process runs, the Python module)
};

// glibc hands a freed block of 128 KiB or more back to the kernel (its own mapping, or a heap top
// it trims), so every case's buffers were written into fresh pages, each faulted in at a cost
// above its copy on these VMs (a fifth to a quarter of a run's time: evidence/race/history.md). This
// keeps blocks up to 32 MiB on the heap (glibc's most) and its top up to 64 MiB. In a shared
// process it does nothing when GPUEMU_KEEP_MALLOC, MALLOC_MMAP_THRESHOLD_ or
// MALLOC_TRIM_THRESHOLD_ is set (the process chose its own). Applied once per process; returns
// whether it was.
bool tune_malloc_for_cases(MallocTuning mode);

}  // namespace gpuemu
