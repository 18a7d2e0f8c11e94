// Every method of the wire, in one table: its name, its family (the header under
// gpuemu/protocol/wire/ that holds its request and reply structs), whether the daemon answers it on
// the transport's thread, a one-line summary, and the field names of its request and reply (from
// the structs' maps). The daemon's command table is this one with a handler per name
// (daemon/server/dispatch.cpp); `hello` lists these names in this order; tests/cpp/wire_test.cpp
// checks that docs/protocol.md documents each method and each request field.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace gpuemu::wire {

struct MethodInfo {
  std::string_view name;
  std::string_view family;  // info, fuzz, failures, coverage, lint, scale
  bool fast = false;        // answered on the transport's thread (never blocks)
  std::string_view summary;
  std::vector<std::string> (*request_fields)() = nullptr;
  std::vector<std::string> (*reply_fields)() = nullptr;
};

const std::vector<MethodInfo>& methods();
const MethodInfo* find_method(std::string_view name);

}  // namespace gpuemu::wire
