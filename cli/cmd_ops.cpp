// gpuemu ops list|show, gpuemu cases: the catalogue and the fuzzer's generated cases.
#include "case_flags.hpp"
#include "cli_common.hpp"

#include <gpuemu/engine/catalogue.hpp>
#include <gpuemu/engine/fuzz.hpp>

#include <iomanip>

namespace gpuemu::cli {
namespace {

std::shared_ptr<const Catalogue> load_catalogue() {
  auto cat = Catalogue::load_default();
  if (!cat) throw GpuemuException(cat.error());
  return *cat;
}

std::string join_dtypes(const std::vector<DType>& v) {
  std::string s;
  for (auto d : v) s += (s.empty() ? "" : ", ") + std::string(dtype_name(d));
  return s;
}

void ops_list(bool json) {
  auto cat = load_catalogue();
  if (json) {
    Json out = Json::array();
    for (const OpSchema* s : cat->all())
      out.push_back({{"name", s->name},
                     {"family", s->family},
                     {"summary", s->summary},
                     {"version", s->version},
                     {"source", s->source_file}});
    std::cout << out.dump(2) << "\n";
    return;
  }
  for (const OpSchema* s : cat->all())
    std::cout << std::left << std::setw(22) << s->name << std::setw(13) << s->family << s->summary
              << "\n";
}

void ops_show(const std::string& name, bool json) {
  auto cat = load_catalogue();
  auto s = cat->get(name);
  if (!s) throw GpuemuException(s.error());
  const OpSchema& op = **s;
  if (json) {
    Json j = op.raw;
    j["source"] = op.source_file;
    std::cout << j.dump(2) << "\n";
    return;
  }
  std::cout << op.name << " (v" << op.version << ", " << op.family << "): " << op.summary << "\n";
  std::cout << "  dtypes:  " << join_dtypes(op.dtypes) << "\n  dims:\n";
  for (const auto& d : op.dims) {
    std::cout << "    " << std::setw(6) << std::left << d.name;
    if (!d.expr.empty())
      std::cout << "= " << d.expr;
    else if (!d.values.empty())
      std::cout << "in " << Json(d.values).dump();
    else
      std::cout << "in [" << d.min << ", " << d.max << "]";
    if (!d.role.empty()) std::cout << "  (" << d.role << ")";
    std::cout << "\n";
  }
  std::cout << "  inputs:\n";
  for (const auto& in : op.inputs) {
    std::string shape;
    for (const auto& e : in.shape) shape += (shape.empty() ? "" : ", ") + e;
    std::cout << "    " << in.name << "[" << shape << "] "
              << (in.dtype_rule == InputDtypeRule::case_dtype ? "case dtype"
                                                              : join_dtypes(in.dtypes))
              << ", " << in.domain << (in.optional ? ", optional" : "")
              << (in.any_leading_dims ? ", any leading dims (" + in.shape.front() + " is their product)"
                                      : "");
    for (const auto& [value, when] : in.shape_when) {
      std::string w;
      for (const auto& e : when) w += (w.empty() ? "" : ", ") + e;
      std::cout << ", [" << w << "] when " << in.shape_attr << " = '" << value << "'";
    }
    if (!in.layouts.empty()) {
      std::string l;
      for (const auto& x : in.layouts) l += (l.empty() ? "" : ", ") + x;
      std::cout << ", layouts: " << l;
    }
    std::cout << "\n";
  }
  if (!op.attrs.empty()) {
    std::cout << "  attrs:\n";
    for (const auto& a : op.attrs)
      std::cout << "    " << a.name << ": " << a.type << (a.nullable ? "?" : "") << " = "
                << a.default_value.dump()
                << (a.values.empty() ? "" : "  in " + Json(a.values).dump())
                << (a.dim_of.empty() ? "" : "  (a dim of " + a.dim_of + ")") << "\n";
  }
  std::cout << "  outputs:\n";
  for (const auto& o : op.outputs)
    std::cout << "    " << o.name << ": shape "
              << (o.shape.is_string() ? o.shape.get<std::string>() : o.shape.dump()) << ", dtype "
              << o.dtype << "\n";
  if (!op.reduced_dims.empty()) {
    std::string r;
    for (const auto& x : op.reduced_dims) r += (r.empty() ? "" : ", ") + x;
    std::cout << "  reduced over: " << r << "\n";
  }
  for (const auto& c : op.constraints) std::cout << "  constraint: " << c << "\n";
  std::cout << "  reference: " << op.reference << "\n  schema: " << op.source_file << "\n";
}

}  // namespace

void register_ops_commands(CLI::App& app, CliContext& ctx) {
  auto* ops = app.add_subcommand("ops", "The op catalogue");
  ops->require_subcommand(1);
  auto* list = ops->add_subcommand("list", "List every op");
  static bool list_json = false;
  list->add_flag("--json", list_json, "JSON output");
  list->callback([&ctx] {
    ops_list(list_json);
    ctx.exit_code = k_exit_ok;
  });
  auto* show = ops->add_subcommand("show", "Show one op's schema");
  static std::string show_name;
  static bool show_json = false;
  show->add_option("OP", show_name, "op name")->required();
  show->add_flag("--json", show_json, "JSON output");
  show->callback([&ctx] { ops_show(show_name, show_json); });

  auto* cases = app.add_subcommand("cases", "Print the cases the fuzzer generates for an op");
  static std::string op;
  static std::uint64_t seed = 0;
  static std::int64_t count = 5;
  static bool json = false;
  static CaseFlags flags;
  cases->add_option("OP", op, "op name")->required();
  cases->add_option("--seed", seed, "master seed")->required();
  cases->add_option("--count", count, "number of cases")->check(CLI::Range(0, 100000));
  flags.add_to(*cases);
  cases->add_flag("--json", json, "JSON output");
  cases->callback([&ctx] {
    auto cat = load_catalogue();
    auto s = cat->get(op);
    if (!s) throw GpuemuException(s.error());
    CaseGenerator gen(**s, flags.options(op));
    if (auto st = gen.validate(); !st) throw GpuemuException(st.error());
    Json out = Json::array();
    for (std::int64_t i = 0; i < count; ++i) {
      auto c = gen.generate(seed, i);
      if (!c) throw GpuemuException(c.error());
      Json d = c->describe();
      if (json) {
        out.push_back(d);
        continue;
      }
      std::cout << "case " << i << "  seed " << c->seed << "  " << d["dtype"].get<std::string>()
                << "  ";
      for (const auto& [k, v] : c->dims) std::cout << k << "=" << v << " ";
      std::cout << " attrs " << c->attrs.dump() << "\n";
      for (const auto& [name, in] : d["inputs"].items())
        std::cout << "    " << name << " " << in["dtype"].get<std::string>() << " "
                  << in["shape"].dump() << " strides " << in["strides"].dump() << " offset "
                  << in["offset"] << " " << in["layout"].get<std::string>() << " digest "
                  << in["digest"].get<std::string>() << "\n";
    }
    if (json) std::cout << out.dump(2) << "\n";
    ctx.exit_code = k_exit_ok;
  });
}

}  // namespace gpuemu::cli
