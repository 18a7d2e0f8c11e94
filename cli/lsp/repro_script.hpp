// A standalone repro script for a failure of a kernel that ran in a Python client (the daemon
// cannot run it): written next to the kernel's file as gpuemu_repro_<id>.py. It imports the
// kernel from its file, replays the stored case through gpuemu.Client().reproduce (or, with
// --minimize, shrinks it with Client().minimize) and prints the result as one JSON line.
#pragma once

#include <gpuemu/base/error.hpp>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace gpuemu::lsp {

using Json = nlohmann::json;

struct ReproScript {
  std::string path;  // where it was written
  std::string text;
};

// `record`: the failure's `failures get` result (id, op, kernel, ...); `inputs`: the op's input
// names in schema order (the kernel is called with them positionally); `home`: the GPUEMU_HOME
// that stored the failure. Writes the file (replacing an older one of the same failure).
Result<ReproScript> write_repro_script(const Json& record, const std::vector<std::string>& inputs,
                                       const std::string& home);

// Runs `python script [args...]` with GPUEMU_HOME set; the last line of its stdout parsed as
// JSON, or an error carrying its stderr's tail.
Result<Json> run_repro_script(const std::string& python, const std::string& script,
                              const std::vector<std::string>& args, const std::string& home,
                              int timeout_s);

}  // namespace gpuemu::lsp
