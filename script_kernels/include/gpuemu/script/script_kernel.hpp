// Script kernels: a user's Python function `FILE.py:FUNC` run as the kernel under test, in a
// long-lived subprocess (python/gpuemu/_script_runner.py) spoken to over its stdin/stdout with
// length-prefixed gpuemu frames. docs/script-kernels.md is the spec of that exchange.
//
// Errors of a call, by code (the engine turns each into a failing case carrying the message):
//   invalid_argument  the function raised ("<type>: <message>" then the Python traceback), or the
//                     process died mid-case (exit status or signal, then the end of its stderr)
//   timeout           the function did not return within timeout_s (the process is killed and
//                     started again on the next call)
//   protocol_error    the runner answered something that is not a well-formed reply
// and, when the call has to start the process again, any error of make_script_kernel.
// make_script_kernel itself fails with tool_missing (no interpreter, no runner, numpy / torch
// not importable, or the interpreter exits before it says it is ready), invalid_argument (no such
// script, bad spec, the script fails to import: the message holds its traceback) or timeout (the
// script took longer than start_timeout_s to load).
#pragma once

#include "gpuemu/engine/catalogue.hpp"
#include "gpuemu/engine/engine.hpp"

#include <memory>
#include <string>

namespace gpuemu::script {

struct ScriptKernelSpec {
  std::string script;               // FILE.py (made absolute against the current directory)
  std::string function;             // FUNC: a name in the script's module ("Class.method" works)
  std::string framework = "numpy";  // numpy | torch: what the function's inputs are
  // The interpreter. Empty: $GPUEMU_PYTHON, else <source tree>/.venv/bin/python when it exists
  // (the tree the runner lives in, or GPUEMU_SOURCE_DIR), else /usr/bin/python3. A bare name is
  // looked up on PATH.
  std::string python;
  // _script_runner.py. Empty: $GPUEMU_PYTHON_DIR/gpuemu/_script_runner.py, else the source
  // tree's python/gpuemu/_script_runner.py.
  std::string runner;
  double timeout_s = 60.0;        // per case: sending the inputs, running, reading the outputs
  double start_timeout_s = 60.0;  // starting the interpreter and importing the script
  std::string device = "cpu";     // torch: the device inputs are moved to (numpy: cpu only)
  // "kernel": FUNC is a function called on each case's inputs. "torch_op": FUNC names a
  // gpuemu.torch_op in the script, whose reference answers each case (script_reference.hpp).
  std::string mode = "kernel";
  // The process's resource limits, set as it starts (before the script is imported): no core
  // files ever; its data segment (heap and private writable mappings, RLIMIT_DATA) at most this
  // many MiB, so that a runaway script gets a MemoryError instead of the machine's memory. 0: no
  // memory limit (CUDA maps large private areas, so the daemon leaves it to the operator).
  std::int64_t memory_limit_mb = 0;
  // Resolves each output's expected dtype (a float32/float64 output where a bfloat16 or fp8 one is
  // expected is rounded to it) and the optional inputs a case leaves out (passed as None). Empty:
  // the default catalogue, loaded once per process; an op it does not know expects the case dtype.
  std::shared_ptr<const Catalogue> catalogue;
};

// A kernel that runs FUNC in a long-lived subprocess, one case at a time (calls from several
// threads are serialised); restarts the process after a crash or a timeout. The subprocess is
// started (and the script imported) before this returns; it is stopped (SIGTERM, then SIGKILL)
// when the last copy of the runner is destroyed.
Result<KernelRunner> make_script_kernel(ScriptKernelSpec spec);

// Where make_script_kernel looks, resolved as above (tool_missing when no runner is found).
Result<std::string> locate_script_runner(const std::string& runner = {});
std::string default_script_python(const std::string& runner_path);

}  // namespace gpuemu::script
