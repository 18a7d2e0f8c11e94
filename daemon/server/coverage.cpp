// Coverage accounting (docs/protocol.md, `runs` and `coverage`).
#include "gpuemu/engine/coverage.hpp"

#include "gpuemu/protocol/wire/coverage.hpp"

namespace gpuemu::server {

std::vector<std::string> shape_classes(std::int64_t n) {
  std::vector<std::string> c;
  if (n == 1) c.push_back("unit");
  if (n > 1 && n % 64 != 0) c.push_back("partial_tile");  // not a multiple of any common BLOCK
  if (n >= 64 && n % 64 == 0) c.push_back("full_tiles");
  if (n > 128) c.push_back("multi_block");
  if (n >= 1024) c.push_back("long");
  return c;
}

namespace {

void bump(Json& obj, const std::string& key, std::int64_t by = 1) {
  if (!obj.is_object()) obj = Json::object();
  obj[key] = obj.value(key, std::int64_t{0}) + by;
}

const char* k_distributions[] = {"regular", "boundary", "adversarial", "special"};
const char* k_classes[] = {"unit", "partial_tile", "full_tiles", "multi_block", "long"};

}  // namespace

void coverage_add(Json& cov, const TestCase& c) {
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
      bump(into, k, v.get<std::int64_t>());
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
  for (const char* d : k_distributions)
    check("distribution", d, cov.value("distributions", Json::object()));
  if (!schema.inputs.empty())
    for (const char* l : {"contiguous", "transposed"})
      check("layout", l, cov.value("layouts", Json::object()));
  for (const DimDomain& dim : schema.dims) {
    if (!dim.expr.empty()) continue;  // derived dims follow the others
    const Json shapes = cov.value("shapes", Json::object()).value(dim.name, Json::object());
    for (const char* cls : k_classes) {
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

namespace {

Result<wire::RunsReply> runs(DaemonContext& ctx, const wire::RunsRequest& p) {
  if (!ctx.store) return make_error(ErrorCode::unavailable, "this daemon has no store");
  const std::string& op = p.op;
  GPUEMU_TRY(auto list, ctx.store->list_runs(p.limit));
  wire::RunsReply out;
  // An op's runs include the gradients part of its backward=True runs (op <op>_backward,
  // part_of.op = op), which the report joins to their forward part.
  auto part_of_op = [&](const Json& r) {
    const auto it = r.find("part_of");
    return it != r.end() && it->is_object() && it->value("op", "") == op;
  };
  for (auto& r : list)
    if (op.empty() || r.value("op", "") == op || part_of_op(r)) out.runs.push_back(std::move(r));
  return out;
}

Result<wire::CoverageReply> coverage(DaemonContext& ctx, const wire::CoverageRequest& p) {
  if (!ctx.store) return make_error(ErrorCode::unavailable, "this daemon has no store");
  const std::string& only = p.op;
  if (!only.empty()) GPUEMU_TRY_STATUS(ctx.engine.catalogue().get(only));
  GPUEMU_TRY(auto list, ctx.store->list_runs(0));
  std::map<std::string, Json> by_op;
  std::map<std::string, std::int64_t> run_count;
  for (const auto& r : list) {
    const std::string op = r.value("op", "");
    if (op.empty() || (!only.empty() && op != only) || !r.contains("coverage")) continue;
    coverage_merge(by_op[op], r["coverage"]);
    ++run_count[op];
  }
  wire::CoverageReply out;
  Json& ops = out.ops;
  for (const OpSchema* s : ctx.engine.catalogue().all()) {
    if (!only.empty() && s->name != only) continue;
    if (only.empty() && !by_op.count(s->name) && !p.all) continue;
    Json rep = coverage_report(*s, by_op.count(s->name) ? by_op[s->name] : Json::object());
    rep["runs"] = run_count[s->name];
    ops.push_back(std::move(rep));
  }
  return out;
}

}  // namespace

void add_coverage_handlers(HandlerTable& out) {
  out["runs"] = typed(runs);
  out["coverage"] = typed(coverage);
}

}  // namespace gpuemu::server
