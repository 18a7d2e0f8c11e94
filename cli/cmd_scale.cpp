// gpuemu push status | backlog | retry | rejected | wait, and gpuemu calibrations list | export |
// import: a worker daemon's queue towards its central daemon, and calibrations shared with their
// provenance (docs/scale.md).
#include "cmd_scale.hpp"
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

void print_push_status(const Json& s, std::ostream& out) {
  if (s.value("to", Json()).is_null()) {
    out << "this daemon pushes nowhere (gpuemu-daemon --push-to ADDRESS)\n";
  } else {
    out << "pushing to     " << s.value("to", "") << "\n";
  }
  out << "pending        " << s.value("pending", 0) << "\n"
      << "rejected       " << s.value("rejected", 0)
      << (s.value("rejected", 0) > 0 ? "  (gpuemu push rejected; gpuemu push retry)" : "") << "\n";
  if (s.value("to", Json()).is_null()) return;
  out << "pushed         " << s.value("pushed_failures", 0) << " failures, "
      << s.value("pushed_runs", 0) << " runs (" << s.value("already_present", 0)
      << " already there) in " << s.value("batches", 0) << " batches since the daemon started\n"
      << "last push      " << ago(s.value("last_ok_ms", std::int64_t{0})) << "\n";
  if (!s.value("last_error", "").empty())
    out << "last error     " << s.value("last_error", "") << " ("
        << ago(s.value("last_error_ms", std::int64_t{0})) << "; next try in "
        << s.value("backoff_ms", 0) << " ms)\n";
  const Json cal = s.value("calibrations", Json::object());
  out << "calibrations   synced " << ago(cal.value("last_sync_ms", std::int64_t{0})) << ", "
      << cal.value("applied", 0) << " applied";
  if (!cal.value("last_error", "").empty()) out << "; last error: " << cal.value("last_error", "");
  out << "\n";
}

}  // namespace

int run_push_status(const PushOptions& o, const DaemonAddress& daemon, std::ostream& out) {
  auto c = connect_daemon(daemon);
  const Json s = call_daemon(*c, wire::OutboxRequest{});
  if (o.json)
    out << s.dump(2) << "\n";
  else
    print_push_status(s, out);
  return k_exit_ok;
}

int run_push_backlog(const PushBacklogOptions& o, const DaemonAddress& daemon, std::ostream& out) {
  auto c = connect_daemon(daemon);
  wire::OutboxRequest req = wire::outbox_request("backlog");
  req.op = o.op;
  req.since_ms = o.since_ms;
  req.runs = !o.no_runs;
  const Json r = call_daemon(*c, req);
  if (o.json)
    out << r.dump(2) << "\n";
  else
    out << "queued " << r.value("queued", 0) << " stored records; "
        << r["status"].value("pending", 0) << " pending\n";
  return k_exit_ok;
}

int run_push_retry(const PushOptions& o, const DaemonAddress& daemon, std::ostream& out) {
  auto c = connect_daemon(daemon);
  const Json r = call_daemon(*c, wire::outbox_request("retry"));
  if (o.json)
    out << r.dump(2) << "\n";
  else
    out << "requeued " << r.value("requeued", 0) << " refused records\n";
  return k_exit_ok;
}

int run_push_rejected(const PushOptions& o, const DaemonAddress& daemon, std::ostream& out) {
  auto c = connect_daemon(daemon);
  const Json r = call_daemon(*c, wire::outbox_request("rejected"));
  const Json items = r.value("rejected", Json::array());
  if (o.json) {
    out << items.dump(2) << "\n";
  } else if (items.empty()) {
    out << "nothing was refused\n";
  } else {
    for (const auto& i : items)
      out << i.value("kind", "") << " " << i.value("id", "") << ": " << i.value("why", "") << "\n";
  }
  return k_exit_ok;
}

int run_push_wait(const PushWaitOptions& o, const DaemonAddress& daemon, std::ostream& out) {
  auto c = connect_daemon(daemon);
  wire::OutboxRequest req = wire::outbox_request("wait");
  req.timeout_s = o.timeout_s;
  const Json r = call_daemon(*c, req);
  const bool drained = r.value("drained", false);
  if (o.json) {
    out << r.dump(2) << "\n";
  } else {
    out << (drained ? "everything stored here has been pushed\n"
                    : red("still pending after the timeout") + "\n");
    if (!drained) print_push_status(r["status"], out);
  }
  return drained ? k_exit_ok : k_exit_failed;
}

int run_calibrations_list(const CalibrationsListOptions& o, const DaemonAddress& daemon,
                          std::ostream& out) {
  auto c = connect_daemon(daemon);
  const Json r = call_daemon(*c, wire::calibrations_request("list", o.op));
  const Json items = r.value("calibrations", Json::array());
  if (o.json) {
    out << items.dump(2) << "\n";
    return k_exit_ok;
  }
  if (items.empty()) {
    out << "no stored calibrations (the shipped envelopes apply: docs/calibration.md)\n";
    return k_exit_ok;
  }
  out << std::left << std::setw(22) << "OP" << std::setw(10) << "DTYPE" << std::setw(10)
      << "ENVELOPE" << std::setw(8) << "CASES" << std::setw(12) << "SEED"
      << "FROM\n";
  for (const auto& i : items) {
    std::string from = i.value("synced_from", i.value("imported_from", ""));
    if (from.empty()) from = "calibrated here";
    out << std::setw(22) << i.value("op", "") << std::setw(10) << i.value("dtype", "")
        << std::setw(10) << fmt_number(i.value("envelope", Json())) << std::setw(8)
        << i.value("cases", Json()).dump() << std::setw(12) << i.value("seed", Json()).dump()
        << from << "\n";
  }
  return k_exit_ok;
}

int run_calibrations_export(const CalibrationsExportOptions& o, const DaemonAddress& daemon,
                            std::ostream& out) {
  auto c = connect_daemon(daemon);
  const Json r = call_daemon(*c, wire::calibrations_request("export", o.op));
  const Json items = r.value("calibrations", Json::array());
  const std::string text =
      Json{{"format", "gpuemu-calibrations"}, {"version", 1}, {"calibrations", items}}.dump(2) +
      "\n";
  write_export(o.output, text, items.size(), "calibrations", out);
  return k_exit_ok;
}

int run_calibrations_import(const CalibrationsImportOptions& o, const DaemonAddress& daemon,
                            std::ostream& out) {
  const Json whole = Json::parse(read_input_file(o.file), nullptr, false);
  if (whole.is_discarded() || !whole.is_object() || !whole.contains("calibrations"))
    throw GpuemuException(
        make_error(ErrorCode::invalid_argument, o.file + ": not a calibrations export (gpuemu "
                                                         "calibrations export writes one)"));
  auto c = connect_daemon(daemon);
  wire::CalibrationsRequest req = wire::calibrations_request("import");
  req.calibrations = whole["calibrations"];
  req.replace = o.replace ? "always" : "newer";
  req.source = o.file;
  const Json r = call_daemon(*c, req);
  if (o.json) {
    out << r.dump(2) << "\n";
    return k_exit_ok;
  }
  out << "imported " << r["imported"].size() << " calibrations; " << r["unchanged"].size()
      << " were stored already";
  if (!r["kept_newer"].empty())
    out << "; kept " << r["kept_newer"].size() << " newer stored ones (" << r["kept_newer"].dump()
        << ": --replace takes the file's)";
  out << "\n";
  return k_exit_ok;
}

namespace {

// A push subcommand that takes only --json.
void add_push_subcommand(CLI::App& push, CliContext& ctx, const char* name, const char* help,
                         int (*run)(const PushOptions&, const DaemonAddress&, std::ostream&)) {
  auto* cmd = push.add_subcommand(name, help);
  auto o = std::make_shared<PushOptions>();
  cmd->add_flag("--json", o->json, "JSON output");
  cmd->callback([&ctx, o, run] { ctx.exit_code = run(*o, ctx.daemon, std::cout); });
}

void register_push_commands(CLI::App& app, CliContext& ctx) {
  auto* push = app.add_subcommand(
      "push", "What this daemon has still to push to its central daemon (gpuemu-daemon --push-to)");
  push->require_subcommand(1);
  add_push_subcommand(*push, ctx, "status", "Pending and rejected records, the last push",
                      run_push_status);

  auto* backlog = push->add_subcommand(
      "backlog", "Queue what was stored before pushing was on (failures, and runs unless --no-runs)");
  auto backlog_opts = std::make_shared<PushBacklogOptions>();
  backlog->add_option("--op", backlog_opts->op, "only this op");
  backlog->add_option("--since-ms", backlog_opts->since_ms,
                      "only what was stored at or after (unix ms)");
  backlog->add_flag("--no-runs", backlog_opts->no_runs, "failures only");
  backlog->add_flag("--json", backlog_opts->json, "JSON output");
  backlog->callback([&ctx, backlog_opts] {
    ctx.exit_code = run_push_backlog(*backlog_opts, ctx.daemon, std::cout);
  });

  add_push_subcommand(*push, ctx, "retry", "Queue the records the central daemon refused again",
                      run_push_retry);
  add_push_subcommand(*push, ctx, "rejected", "The records the central daemon refused, and why",
                      run_push_rejected);

  auto* wait = push->add_subcommand(
      "wait", "Wait until everything stored here has reached the central daemon (exit 1: timeout)");
  auto wait_opts = std::make_shared<PushWaitOptions>();
  wait->add_option("--timeout", wait_opts->timeout_s, "seconds (default 300)");
  wait->add_flag("--json", wait_opts->json, "JSON output");
  wait->callback(
      [&ctx, wait_opts] { ctx.exit_code = run_push_wait(*wait_opts, ctx.daemon, std::cout); });
}

void register_calibrations_commands(CLI::App& app, CliContext& ctx) {
  auto* cal = app.add_subcommand(
      "calibrations", "Calibrations stored by the daemon, with their provenance: share them");
  cal->require_subcommand(1);
  auto* list = cal->add_subcommand("list", "Stored calibrations and where they came from");
  auto list_opts = std::make_shared<CalibrationsListOptions>();
  list->add_option("--op", list_opts->op, "only this op");
  list->add_flag("--json", list_opts->json, "JSON output");
  list->callback([&ctx, list_opts] {
    ctx.exit_code = run_calibrations_list(*list_opts, ctx.daemon, std::cout);
  });

  auto* exp = cal->add_subcommand("export", "Write stored calibrations (with provenance) as JSON");
  auto exp_opts = std::make_shared<CalibrationsExportOptions>();
  exp->add_option("--op", exp_opts->op, "only this op");
  exp->add_option("-o,--output", exp_opts->output, "file (default: stdout)");
  exp->callback([&ctx, exp_opts] {
    ctx.exit_code = run_calibrations_export(*exp_opts, ctx.daemon, std::cout);
  });

  auto* imp = cal->add_subcommand(
      "import", "Store and apply exported calibrations (a newer stored one is kept unless --replace)");
  auto imp_opts = std::make_shared<CalibrationsImportOptions>();
  imp->add_option("FILE", imp_opts->file, "gpuemu calibrations export's JSON (- : stdin)")
      ->required();
  imp->add_flag("--replace", imp_opts->replace, "take the file's even where a newer one is stored");
  imp->add_flag("--json", imp_opts->json, "JSON output");
  imp->callback([&ctx, imp_opts] {
    ctx.exit_code = run_calibrations_import(*imp_opts, ctx.daemon, std::cout);
  });
}

}  // namespace

void register_scale_commands(CLI::App& app, CliContext& ctx) {
  register_push_commands(app, ctx);
  register_calibrations_commands(app, ctx);
}

}  // namespace gpuemu::cli
