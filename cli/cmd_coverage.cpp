// gpuemu coverage: what fuzzing has exercised per op (dtypes, value distributions, layouts, shape
// classes), from the run history in the daemon's store; text, JSON or a codecov-style file.
#include "cmd_coverage.hpp"
#include "daemon_link.hpp"

#include <fstream>
#include <iomanip>

namespace gpuemu::cli {
namespace {

// codecov's JSON format: {"coverage": {file: {line: hits}}}; each op's schema file, one "line" per
// coverage item in the order of `gpuemu coverage --json`'s items.
void write_codecov(const Json& ops, const std::string& path) {
  Json files = Json::object();
  for (const auto& o : ops) {
    Json lines = Json::object();
    int line = 1;
    for (const auto& item : o["items"]) lines[std::to_string(line++)] = item.value("hits", 0);
    files["schemas/ops/" + o.value("op", "") + ".json"] = lines;
  }
  std::ofstream out(path);
  out << Json{{"coverage", files}}.dump(2) << "\n";
  if (!out) throw GpuemuException(make_error(ErrorCode::io_error, "cannot write " + path));
}

}  // namespace

int run_coverage(const CoverageOptions& o, const DaemonAddress& daemon, std::ostream& out) {
  auto c = connect_daemon(daemon);
  const Json r = call_daemon(*c, wire::CoverageRequest{o.op, o.all});
  const Json ops = r.value("ops", Json::array());
  if (!o.codecov.empty()) write_codecov(ops, o.codecov);
  if (o.json) {
    out << ops.dump(2) << "\n";
  } else if (ops.empty()) {
    out << "nothing fuzzed yet through this daemon" << (o.op.empty() ? "" : " for " + o.op) << "\n";
  } else {
    for (const auto& op : ops) {
      out << std::left << std::setw(20) << op.value("op", "") << std::right << std::setw(6)
          << std::fixed << std::setprecision(1) << op.value("percent", 0.0) << "%  "
          << op.value("exercised", 0) << "/" << op.value("total", 0) << " items, "
          << op.value("cases", 0) << " cases in " << op.value("runs", 0) << " runs\n";
      for (const auto& m : op.value("missing", Json::array()))
        out << "      never: " << m.get<std::string>() << "\n";
    }
  }
  return k_exit_ok;
}

void register_coverage_commands(CLI::App& app, CliContext& ctx) {
  auto* cov =
      app.add_subcommand("coverage", "What fuzzing has exercised per op, and what it has not");
  auto o = std::make_shared<CoverageOptions>();
  cov->add_option("--op", o->op, "only this op");
  cov->add_flag("--all", o->all, "also list ops never fuzzed");
  cov->add_option("--codecov", o->codecov,
                  "write a codecov-style JSON file (one line per coverage item)");
  cov->add_flag("--json", o->json, "JSON output");
  cov->callback([&ctx, o] { ctx.exit_code = run_coverage(*o, ctx.daemon, std::cout); });
}

}  // namespace gpuemu::cli
