// Coverage accounting (gpuemu/engine/coverage.hpp; docs/protocol.md, `runs` and `coverage`).
#include "gpuemu/engine/coverage.hpp"

namespace gpuemu {

std::vector<std::string> shape_classes(std::int64_t n) {
  std::vector<std::string> c;
  if (n == 1) c.push_back("unit");
  if (n > 1 && n % 64 != 0) c.push_back("partial_tile");  // not a multiple of any common BLOCK
  if (n >= 64 && n % 64 == 0) c.push_back("full_tiles");
  if (n > 128) c.push_back("multi_block");
  if (n >= 1024) c.push_back("long");
  return c;
}

// A named namespace: the engine is unity-built, and these names would meet its other files'.
namespace coverage_counts {

void bump(Json& obj, const std::string& key, std::int64_t by = 1) {
  if (!obj.is_object()) obj = Json::object();
  obj[key] = obj.value(key, std::int64_t{0}) + by;
}

const char* k_distributions[] = {"regular", "boundary", "adversarial", "special"};
const char* k_classes[] = {"unit", "partial_tile", "full_tiles", "multi_block", "long"};

}  // namespace coverage_counts

void coverage_add(Json& cov, const TestCase& c) {
  using coverage_counts::bump;
  bump(cov["dtypes"], std::string(dtype_name(c.dtype)));
  bump(cov["distributions"], std::string(distribution_name(c.distribution)));
  for (const auto& [name, l] : c.layouts) bump(cov["layouts"], l.kind);
  for (const auto& [dim, size] : c.dims)
    for (const auto& cls : shape_classes(size)) bump(cov["shapes"][dim], cls);
  bump(cov, "cases");
}

void coverage_merge(Json& into, const Json& add) {
  if (!add.is_object()) return;
  if (!into.is_object()) into = Json::object();
  for (const auto& [k, v] : add.items()) {
    if (v.is_number_integer())
      coverage_counts::bump(into, k, v.get<std::int64_t>());
    else if (v.is_object())
      coverage_merge(into[k], v);
  }
}

Json coverage_report(const OpSchema& schema, const Json& cov) {
  Json r = {{"op", schema.name},
            {"cases", cov.value("cases", 0)},
            {"missing", Json::array()},
            {"items", Json::array()},
            {"counts", cov}};
  int hit = 0, total = 0;
  auto check = [&](const std::string& what, const std::string& key, const Json& counts) {
    ++total;
    const std::int64_t hits = counts.is_object() ? counts.value(key, std::int64_t{0}) : 0;
    r["items"].push_back({{"item", what + " " + key}, {"hits", hits}});
    if (hits > 0)
      ++hit;
    else
      r["missing"].push_back(what + " " + key);
  };
  for (DType d : schema.dtypes)
    check("dtype", std::string(dtype_name(d)), cov.value("dtypes", Json::object()));
  for (const char* d : coverage_counts::k_distributions)
    check("distribution", d, cov.value("distributions", Json::object()));
  if (!schema.inputs.empty())
    for (const char* l : {"contiguous", "transposed"})
      check("layout", l, cov.value("layouts", Json::object()));
  for (const DimDomain& dim : schema.dims) {
    if (!dim.expr.empty()) continue;  // derived dims follow the others
    const Json shapes = cov.value("shapes", Json::object()).value(dim.name, Json::object());
    for (const char* cls : coverage_counts::k_classes) {
      // Only classes the dim's domain can reach count.
      bool reachable = false;
      if (!dim.values.empty()) {
        for (auto v : dim.values)
          for (const auto& c : shape_classes(v)) reachable = reachable || c == cls;
      } else {
        const std::string c = cls;
        reachable = c == "unit"           ? dim.min <= 1
                    : c == "partial_tile" ? dim.max > 1
                    : c == "full_tiles"   ? dim.max >= 64
                    : c == "multi_block"  ? dim.max > 128
                                          : dim.max >= 1024;
      }
      if (reachable) check("shape " + dim.name, cls, shapes);
    }
  }
  r["exercised"] = hit;
  r["total"] = total;
  r["percent"] = total ? 100.0 * hit / total : 100.0;
  return r;
}

}  // namespace gpuemu
