// gpuemu push status | backlog | retry | rejected | wait, and gpuemu calibrations list | export |
// import: a worker daemon's queue towards its central daemon, and calibrations shared with their
// provenance (docs/scale.md).
#include "daemon_link.hpp"

#include <iomanip>

namespace gpuemu::cli {
namespace {

std::string ago(std::int64_t ms) {
  if (ms <= 0) return "never";
  const auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
  const double s = static_cast<double>(now - ms) / 1000.0;
  std::ostringstream os;
  os << std::fixed << std::setprecision(s < 10 ? 1 : 0) << s << " s ago";
  return os.str();
}

void print_status(const Json& s) {
  if (s.value("to", Json()).is_null()) {
    std::cout << "this daemon pushes nowhere (gpuemu-daemon --push-to ADDRESS)\n";
  } else {
    std::cout << "pushing to     " << s.value("to", "") << "\n";
  }
  std::cout << "pending        " << s.value("pending", 0) << "\n"
            << "rejected       " << s.value("rejected", 0)
            << (s.value("rejected", 0) > 0 ? "  (gpuemu push rejected; gpuemu push retry)" : "")
            << "\n";
  if (s.value("to", Json()).is_null()) return;
  std::cout << "pushed         " << s.value("pushed_failures", 0) << " failures, "
            << s.value("pushed_runs", 0) << " runs (" << s.value("already_present", 0)
            << " already there) in " << s.value("batches", 0) << " batches since the daemon started\n"
            << "last push      " << ago(s.value("last_ok_ms", std::int64_t{0})) << "\n";
  if (!s.value("last_error", "").empty())
    std::cout << "last error     " << s.value("last_error", "") << " ("
              << ago(s.value("last_error_ms", std::int64_t{0})) << "; next try in "
              << s.value("backoff_ms", 0) << " ms)\n";
  const Json cal = s.value("calibrations", Json::object());
  std::cout << "calibrations   synced " << ago(cal.value("last_sync_ms", std::int64_t{0})) << ", "
            << cal.value("applied", 0) << " applied";
  if (!cal.value("last_error", "").empty()) std::cout << "; last error: " << cal.value("last_error", "");
  std::cout << "\n";
}

}  // namespace

void register_scale_commands(CLI::App& app, CliContext& ctx) {
  auto* push = app.add_subcommand(
      "push", "What this daemon has still to push to its central daemon (gpuemu-daemon --push-to)");
  push->require_subcommand(1);
  static bool json = false;

  auto* status = push->add_subcommand("status", "Pending and rejected records, the last push");
  status->add_flag("--json", json, "JSON output");
  status->callback([&ctx] {
    auto c = connect_daemon();
    const Json s = call_daemon(*c, wire::OutboxRequest{});
    if (json)
      std::cout << s.dump(2) << "\n";
    else
      print_status(s);
    ctx.exit_code = k_exit_ok;
  });

  auto* backlog = push->add_subcommand(
      "backlog", "Queue what was stored before pushing was on (failures, and runs unless --no-runs)");
  static std::string backlog_op;
  static std::int64_t backlog_since = 0;
  static bool backlog_no_runs = false;
  backlog->add_option("--op", backlog_op, "only this op");
  backlog->add_option("--since-ms", backlog_since, "only what was stored at or after (unix ms)");
  backlog->add_flag("--no-runs", backlog_no_runs, "failures only");
  backlog->add_flag("--json", json, "JSON output");
  backlog->callback([&ctx] {
    auto c = connect_daemon();
    wire::OutboxRequest req = wire::outbox_request("backlog");
    req.op = backlog_op;
    req.since_ms = backlog_since;
    req.runs = !backlog_no_runs;
    const Json r = call_daemon(*c, req);
    if (json)
      std::cout << r.dump(2) << "\n";
    else
      std::cout << "queued " << r.value("queued", 0) << " stored records; "
                << r["status"].value("pending", 0) << " pending\n";
    ctx.exit_code = k_exit_ok;
  });

  auto* retry = push->add_subcommand("retry", "Queue the records the central daemon refused again");
  retry->add_flag("--json", json, "JSON output");
  retry->callback([&ctx] {
    auto c = connect_daemon();
    const Json r = call_daemon(*c, wire::outbox_request("retry"));
    if (json)
      std::cout << r.dump(2) << "\n";
    else
      std::cout << "requeued " << r.value("requeued", 0) << " refused records\n";
    ctx.exit_code = k_exit_ok;
  });

  auto* rejected = push->add_subcommand("rejected", "The records the central daemon refused, and why");
  rejected->add_flag("--json", json, "JSON output");
  rejected->callback([&ctx] {
    auto c = connect_daemon();
    const Json r = call_daemon(*c, wire::outbox_request("rejected"));
    const Json items = r.value("rejected", Json::array());
    if (json) {
      std::cout << items.dump(2) << "\n";
    } else if (items.empty()) {
      std::cout << "nothing was refused\n";
    } else {
      for (const auto& i : items)
        std::cout << i.value("kind", "") << " " << i.value("id", "") << ": " << i.value("why", "")
                  << "\n";
    }
    ctx.exit_code = k_exit_ok;
  });

  auto* wait = push->add_subcommand(
      "wait", "Wait until everything stored here has reached the central daemon (exit 1: timeout)");
  static double wait_timeout = 300;
  wait->add_option("--timeout", wait_timeout, "seconds (default 300)");
  wait->add_flag("--json", json, "JSON output");
  wait->callback([&ctx] {
    auto c = connect_daemon();
    wire::OutboxRequest req = wire::outbox_request("wait");
    req.timeout_s = wait_timeout;
    const Json r = call_daemon(*c, req);
    const bool drained = r.value("drained", false);
    if (json) {
      std::cout << r.dump(2) << "\n";
    } else {
      std::cout << (drained ? "everything stored here has been pushed\n"
                            : red("still pending after the timeout") + "\n");
      if (!drained) print_status(r["status"]);
    }
    ctx.exit_code = drained ? k_exit_ok : k_exit_failed;
  });

  auto* cal = app.add_subcommand(
      "calibrations", "Calibrations stored by the daemon, with their provenance: share them");
  cal->require_subcommand(1);
  auto* list = cal->add_subcommand("list", "Stored calibrations and where they came from");
  static std::string list_op;
  list->add_option("--op", list_op, "only this op");
  list->add_flag("--json", json, "JSON output");
  list->callback([&ctx] {
    auto c = connect_daemon();
    const Json r = call_daemon(*c, wire::calibrations_request("list", list_op));
    const Json items = r.value("calibrations", Json::array());
    if (json) {
      std::cout << items.dump(2) << "\n";
    } else if (items.empty()) {
      std::cout << "no stored calibrations (the shipped envelopes apply: docs/calibration.md)\n";
    } else {
      std::cout << std::left << std::setw(22) << "OP" << std::setw(10) << "DTYPE" << std::setw(10)
                << "ENVELOPE" << std::setw(8) << "CASES" << std::setw(12) << "SEED"
                << "FROM\n";
      for (const auto& i : items) {
        std::string from = i.value("synced_from", i.value("imported_from", ""));
        if (from.empty()) from = "calibrated here";
        std::cout << std::setw(22) << i.value("op", "") << std::setw(10) << i.value("dtype", "")
                  << std::setw(10) << fmt_number(i.value("envelope", Json())) << std::setw(8)
                  << i.value("cases", Json()).dump() << std::setw(12) << i.value("seed", Json()).dump()
                  << from << "\n";
      }
    }
    ctx.exit_code = k_exit_ok;
  });

  auto* exp = cal->add_subcommand("export", "Write stored calibrations (with provenance) as JSON");
  static std::string exp_op, exp_out;
  exp->add_option("--op", exp_op, "only this op");
  exp->add_option("-o,--output", exp_out, "file (default: stdout)");
  exp->callback([&ctx] {
    auto c = connect_daemon();
    const Json r = call_daemon(*c, wire::calibrations_request("export", exp_op));
    const Json items = r.value("calibrations", Json::array());
    const std::string text =
        Json{{"format", "gpuemu-calibrations"}, {"version", 1}, {"calibrations", items}}.dump(2) + "\n";
    write_export(exp_out, text, items.size(), "calibrations");
    ctx.exit_code = k_exit_ok;
  });

  auto* imp = cal->add_subcommand(
      "import", "Store and apply exported calibrations (a newer stored one is kept unless --replace)");
  static std::string imp_file;
  static bool imp_replace = false;
  imp->add_option("FILE", imp_file, "gpuemu calibrations export's JSON (- : stdin)")->required();
  imp->add_flag("--replace", imp_replace, "take the file's even where a newer one is stored");
  imp->add_flag("--json", json, "JSON output");
  imp->callback([&ctx] {
    const Json whole = Json::parse(read_input_file(imp_file), nullptr, false);
    if (whole.is_discarded() || !whole.is_object() || !whole.contains("calibrations"))
      throw GpuemuException(make_error(ErrorCode::invalid_argument,
                                       imp_file + ": not a calibrations export (gpuemu "
                                                  "calibrations export writes one)"));
    auto c = connect_daemon();
    wire::CalibrationsRequest req = wire::calibrations_request("import");
    req.calibrations = whole["calibrations"];
    req.replace = imp_replace ? "always" : "newer";
    req.source = imp_file;
    const Json r = call_daemon(*c, req);
    if (json) {
      std::cout << r.dump(2) << "\n";
    } else {
      std::cout << "imported " << r["imported"].size() << " calibrations; "
                << r["unchanged"].size() << " were stored already";
      if (!r["kept_newer"].empty())
        std::cout << "; kept " << r["kept_newer"].size() << " newer stored ones ("
                  << r["kept_newer"].dump() << ": --replace takes the file's)";
      std::cout << "\n";
    }
    ctx.exit_code = k_exit_ok;
  });
}

}  // namespace gpuemu::cli
