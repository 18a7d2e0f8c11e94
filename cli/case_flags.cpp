#include "case_flags.hpp"

#include "cli_common.hpp"

#include <gpuemu/base/error.hpp>

#include <sstream>

namespace gpuemu::cli {
namespace {

Error usage(std::string message) {
  return make_error(ErrorCode::invalid_argument, std::move(message));
}

// "weight,bias" (and repeated flags) as names.
std::vector<std::string> split_names(const std::vector<std::string>& values, const char* flag) {
  std::vector<std::string> names;
  for (const auto& v : values) {
    std::stringstream ss(v);
    std::string item;
    while (std::getline(ss, item, ','))
      if (!item.empty()) names.push_back(item);
  }
  if (names.empty() && !values.empty())
    throw GpuemuException(usage(std::string(flag) + " wants input names (e.g. weight,bias)"));
  return names;
}

}  // namespace

void CaseFlags::add_to(CLI::App& cmd) {
  cmd.add_option("--dtype", dtypes, "restrict dtypes (repeatable)");
  cmd.add_option("--strategy", strategy, "regular | boundary | adversarial | special");
  cmd.add_option("--dims", dims, "restrict a dim: D=64,128 (repeatable; not below the dim's min)");
  cmd.add_option("--attr", attrs, "pin an attr: name=value (repeatable)");
  cmd.add_option("--vary-attr", vary, "vary an attr over its domain (repeatable)");
  cmd.add_flag("--no-layouts", no_layouts, "contiguous inputs only");
  cmd.add_option("--with", with, "optional inputs the kernel always takes: weight,bias (repeatable)");
  cmd.add_option("--without", without, "optional inputs the kernel never takes: bias (repeatable)");
  cmd.add_option("--precision", precision,
                 "reduced-precision GEMM operands declared on purpose: tf32 | tf32x3 | bf16x3, or "
                 "OP_OR_FAMILY=POLICY (repeatable; default ieee)");
}

FuzzOptions CaseFlags::options(const std::string& op) const {
  FuzzOptions o;
  for (const auto& d : dtypes) {
    auto dt = parse_dtype(d);
    if (!dt) throw GpuemuException(usage("unknown dtype '" + d + "'"));
    o.dtypes.push_back(*dt);
  }
  auto dist = parse_distribution(strategy);
  if (!dist)
    throw GpuemuException(usage("unknown strategy '" + strategy + "' (regular, boundary, adversarial, special)"));
  o.distribution = *dist;
  for (const auto& d : dims) {
    auto [name, sizes] = parse_dim_restriction(d);
    o.dims[name] = sizes;
  }
  for (const auto& a : attrs) {
    auto [name, value] = parse_attr_assignment(a);
    o.attrs[name] = value;
  }
  o.vary_attrs = vary;
  o.layouts = !no_layouts;
  for (const auto& n : split_names(with, "--with")) o.present[n] = true;
  for (const auto& n : split_names(without, "--without")) {
    if (auto it = o.present.find(n); it != o.present.end() && it->second)
      throw GpuemuException(usage("input '" + n + "' is given both --with and --without"));
    o.present[n] = false;
  }
  for (const auto& p : precision) {
    const auto eq = p.find('=');
    if (eq == std::string::npos) {
      o.precision[op] = p;
    } else if (eq == 0 || eq + 1 == p.size()) {
      throw GpuemuException(usage("--precision wants POLICY or OP=POLICY, got '" + p + "'"));
    } else {
      o.precision[p.substr(0, eq)] = p.substr(eq + 1);
    }
  }
  return o;
}

std::string CaseFlags::repro_flags() const {
  std::string f;
  if (strategy != "adversarial") f += " --strategy " + strategy;
  for (const auto& d : dtypes) f += " --dtype " + d;
  for (const auto& d : dims) f += " --dims " + d;
  for (const auto& a : attrs) f += " --attr " + a;
  for (const auto& v : vary) f += " --vary-attr " + v;
  if (no_layouts) f += " --no-layouts";
  for (const auto& w : with) f += " --with " + w;
  for (const auto& w : without) f += " --without " + w;
  for (const auto& p : precision) f += " --precision " + p;
  return f;
}

}  // namespace gpuemu::cli
