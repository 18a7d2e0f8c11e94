// gpuemu coverage: what fuzzing has exercised per op (dtypes, value distributions, layouts, shape
// classes), from the run history in the daemon's store; text, JSON or a codecov-style file.
#include "daemon_link.hpp"

#include <fstream>
#include <iomanip>

namespace gpuemu::cli {

void register_coverage_commands(CLI::App& app, CliContext& ctx) {
  auto* cov =
      app.add_subcommand("coverage", "What fuzzing has exercised per op, and what it has not");
  static std::string op, codecov;
  static bool json = false, all = false;
  cov->add_option("--op", op, "only this op");
  cov->add_flag("--all", all, "also list ops never fuzzed");
  cov->add_option("--codecov", codecov,
                  "write a codecov-style JSON file (one line per coverage item)");
  cov->add_flag("--json", json, "JSON output");
  cov->callback([&ctx] {
    auto c = connect_daemon();
    const Json r = call_daemon(*c, wire::CoverageRequest{op, all});
    const Json ops = r.value("ops", Json::array());
    if (!codecov.empty()) {
      // codecov's JSON format: {"coverage": {file: {line: hits}}}; each op's schema file, one
      // "line" per coverage item in the order of `gpuemu coverage --json`'s items.
      Json files = Json::object();
      for (const auto& o : ops) {
        Json lines = Json::object();
        int line = 1;
        for (const auto& item : o["items"]) lines[std::to_string(line++)] = item.value("hits", 0);
        files["schemas/ops/" + o.value("op", "") + ".json"] = lines;
      }
      std::ofstream out(codecov);
      out << Json{{"coverage", files}}.dump(2) << "\n";
      if (!out) throw GpuemuException(make_error(ErrorCode::io_error, "cannot write " + codecov));
    }
    if (json) {
      std::cout << ops.dump(2) << "\n";
    } else if (ops.empty()) {
      std::cout << "nothing fuzzed yet through this daemon" << (op.empty() ? "" : " for " + op)
                << "\n";
    } else {
      for (const auto& o : ops) {
        std::cout << std::left << std::setw(20) << o.value("op", "") << std::right << std::setw(6)
                  << std::fixed << std::setprecision(1) << o.value("percent", 0.0) << "%  "
                  << o.value("exercised", 0) << "/" << o.value("total", 0) << " items, "
                  << o.value("cases", 0) << " cases in " << o.value("runs", 0) << " runs\n";
        for (const auto& m : o.value("missing", Json::array()))
          std::cout << "      never: " << m.get<std::string>() << "\n";
      }
    }
    ctx.exit_code = k_exit_ok;
  });
}

}  // namespace gpuemu::cli
