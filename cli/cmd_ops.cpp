// gpuemu ops list|show, gpuemu cases: the catalogue and the fuzzer's generated cases.
#include "cmd_ops.hpp"

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

}  // namespace

int run_ops_list(const OpsListOptions& o, std::ostream& out) {
  auto cat = load_catalogue();
  if (o.json) {
    Json list = Json::array();
    for (const OpSchema* s : cat->all())
      list.push_back({{"name", s->name},
                      {"family", s->family},
                      {"summary", s->summary},
                      {"version", s->version},
                      {"source", s->source_file}});
    out << list.dump(2) << "\n";
    return k_exit_ok;
  }
  for (const OpSchema* s : cat->all())
    out << std::left << std::setw(22) << s->name << std::setw(13) << s->family << s->summary
        << "\n";
  return k_exit_ok;
}

int run_ops_show(const OpsShowOptions& o, std::ostream& out) {
  auto cat = load_catalogue();
  auto s = cat->get(o.op);
  if (!s) throw GpuemuException(s.error());
  const OpSchema& op = **s;
  if (o.json) {
    Json j = op.raw;
    j["source"] = op.source_file;
    out << j.dump(2) << "\n";
    return k_exit_ok;
  }
  out << op.name << " (v" << op.version << ", " << op.family << "): " << op.summary << "\n";
  out << "  dtypes:  " << join_dtypes(op.dtypes) << "\n  dims:\n";
  for (const auto& d : op.dims) {
    out << "    " << std::setw(6) << std::left << d.name;
    if (!d.expr.empty())
      out << "= " << d.expr;
    else if (!d.values.empty())
      out << "in " << Json(d.values).dump();
    else
      out << "in [" << d.min << ", " << d.max << "]";
    if (!d.role.empty()) out << "  (" << d.role << ")";
    out << "\n";
  }
  out << "  inputs:\n";
  for (const auto& in : op.inputs) {
    std::string shape;
    for (const auto& e : in.shape) shape += (shape.empty() ? "" : ", ") + e;
    out << "    " << in.name << "[" << shape << "] "
        << (in.dtype_rule == InputDtypeRule::case_dtype ? "case dtype" : join_dtypes(in.dtypes))
        << ", " << in.domain << (in.optional ? ", optional" : "")
        << (in.any_leading_dims ? ", any leading dims (" + in.shape.front() + " is their product)"
                                : "");
    for (const auto& [value, when] : in.shape_when) {
      std::string w;
      for (const auto& e : when) w += (w.empty() ? "" : ", ") + e;
      out << ", [" << w << "] when " << in.shape_attr << " = '" << value << "'";
    }
    if (!in.layouts.empty()) {
      std::string l;
      for (const auto& x : in.layouts) l += (l.empty() ? "" : ", ") + x;
      out << ", layouts: " << l;
    }
    out << "\n";
  }
  if (!op.attrs.empty()) {
    out << "  attrs:\n";
    for (const auto& a : op.attrs)
      out << "    " << a.name << ": " << a.type << (a.nullable ? "?" : "") << " = "
          << a.default_value.dump() << (a.values.empty() ? "" : "  in " + Json(a.values).dump())
          << (a.dim_of.empty() ? "" : "  (a dim of " + a.dim_of + ")") << "\n";
  }
  out << "  outputs:\n";
  for (const auto& output : op.outputs)
    out << "    " << output.name << ": shape "
        << (output.shape.is_string() ? output.shape.get<std::string>() : output.shape.dump())
        << ", dtype " << output.dtype << "\n";
  if (!op.reduced_dims.empty()) {
    std::string r;
    for (const auto& x : op.reduced_dims) r += (r.empty() ? "" : ", ") + x;
    out << "  reduced over: " << r << "\n";
  }
  for (const auto& c : op.constraints) out << "  constraint: " << c << "\n";
  out << "  reference: " << op.reference << "\n  schema: " << op.source_file << "\n";
  return k_exit_ok;
}

int run_cases(const CasesOptions& o, std::ostream& out) {
  auto cat = load_catalogue();
  auto s = cat->get(o.op);
  if (!s) throw GpuemuException(s.error());
  CaseGenerator gen(**s, o.flags.options(o.op));
  if (auto st = gen.validate(); !st) throw GpuemuException(st.error());
  Json all = Json::array();
  for (std::int64_t i = 0; i < o.count; ++i) {
    auto c = gen.generate(o.seed, i);
    if (!c) throw GpuemuException(c.error());
    Json d = c->describe();
    if (o.json) {
      all.push_back(d);
      continue;
    }
    out << "case " << i << "  seed " << c->seed << "  " << d["dtype"].get<std::string>() << "  ";
    for (const auto& [k, v] : c->dims) out << k << "=" << v << " ";
    out << " attrs " << c->attrs.dump() << "\n";
    for (const auto& [name, in] : d["inputs"].items())
      out << "    " << name << " " << in["dtype"].get<std::string>() << " " << in["shape"].dump()
          << " strides " << in["strides"].dump() << " offset " << in["offset"] << " "
          << in["layout"].get<std::string>() << " digest " << in["digest"].get<std::string>()
          << "\n";
  }
  if (o.json) out << all.dump(2) << "\n";
  return k_exit_ok;
}

void register_ops_commands(CLI::App& app, CliContext& ctx) {
  auto* ops = app.add_subcommand("ops", "The op catalogue");
  ops->require_subcommand(1);
  auto* list = ops->add_subcommand("list", "List every op");
  auto list_opts = std::make_shared<OpsListOptions>();
  list->add_flag("--json", list_opts->json, "JSON output");
  list->callback([&ctx, list_opts] { ctx.exit_code = run_ops_list(*list_opts, std::cout); });

  auto* show = ops->add_subcommand("show", "Show one op's schema");
  auto show_opts = std::make_shared<OpsShowOptions>();
  show->add_option("OP", show_opts->op, "op name")->required();
  show->add_flag("--json", show_opts->json, "JSON output");
  show->callback([&ctx, show_opts] { ctx.exit_code = run_ops_show(*show_opts, std::cout); });

  auto* cases = app.add_subcommand("cases", "Print the cases the fuzzer generates for an op");
  auto cases_opts = std::make_shared<CasesOptions>();
  cases->add_option("OP", cases_opts->op, "op name")->required();
  cases->add_option("--seed", cases_opts->seed, "master seed")->required();
  cases->add_option("--count", cases_opts->count, "number of cases")->check(CLI::Range(0, 100000));
  cases_opts->flags.add_to(*cases);
  cases->add_flag("--json", cases_opts->json, "JSON output");
  cases->callback([&ctx, cases_opts] { ctx.exit_code = run_cases(*cases_opts, std::cout); });
}

}  // namespace gpuemu::cli
