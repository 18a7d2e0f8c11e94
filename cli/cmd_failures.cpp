// gpuemu failures list | show | export | import | rm, gpuemu repro ID, gpuemu minimize ID.
#include "cmd_failures.hpp"
#include "daemon_link.hpp"

#include <ctime>
#include <fstream>
#include <iomanip>
#include <iterator>
#include <sstream>

namespace gpuemu::cli {
namespace {

std::string when(std::int64_t ms) {
  const std::time_t t = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  localtime_r(&t, &tm);
  std::ostringstream os;
  os << std::put_time(&tm, "%Y-%m-%d %H:%M:%S");
  return os.str();
}

void print_failure_table(const Json& items, std::ostream& out) {
  out << std::left << std::setw(19) << "ID" << std::setw(20) << "OP" << std::setw(10) << "DTYPE"
      << std::setw(22) << "SEED" << std::setw(12) << "ERROR" << std::setw(18) << "CLASS"
      << "WHEN\n";
  for (const auto& f : items)
    out << std::setw(19) << f.value("id", "") << std::setw(20) << f.value("op", "") << std::setw(10)
        << f.value("dtype", "") << std::setw(22) << f.value("seed", Json()).dump() << std::setw(12)
        << fmt_number(f.value("max_error", Json())) << std::setw(18) << f.value("bug_class", "")
        << when(f.value("created_ms", std::int64_t{0})) << "\n";
}

// An export's records: its JSON document's, or one per line of JSON Lines. `file` names it in
// errors.
Json read_failure_records(const std::string& text, const std::string& file) {
  const Json whole = Json::parse(text, nullptr, false);
  if (!whole.is_discarded() && whole.is_object() && whole.contains("records")) {
    if (!whole["records"].is_array())
      throw GpuemuException(
          make_error(ErrorCode::invalid_argument, file + ": 'records' is not an array"));
    return whole["records"];
  }
  Json records = Json::array();
  std::istringstream lines(text);
  int n = 0;
  for (std::string line; std::getline(lines, line);) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    Json rec = Json::parse(line, nullptr, false);
    if (rec.is_discarded())
      throw GpuemuException(make_error(
          ErrorCode::invalid_argument,
          file + ":" + std::to_string(n) + ": not a JSON record (gpuemu failures export --jsonl)"));
    records.push_back(std::move(rec));
  }
  return records;
}

// Stores `records` in batches well under a request's 16 MiB of JSON; each is one transaction, and
// a batch sent again (a retry) stores nothing twice. Returns {"imported": [...], "present": [...]}.
Json import_in_batches(DaemonClient& c, const Json& records) {
  Json imported = Json::array(), present = Json::array();
  Json batch = Json::array();
  std::size_t bytes = 0;
  auto flush = [&] {
    if (batch.empty()) return;
    const Json r = call_daemon(c, wire::failures_import(batch));
    for (const auto& id : r.value("imported", Json::array())) imported.push_back(id);
    for (const auto& id : r.value("present", Json::array())) present.push_back(id);
    batch = Json::array();
    bytes = 0;
  };
  for (const auto& rec : records) {
    const std::size_t n = rec.dump().size();
    if (bytes + n > (std::size_t{8} << 20)) flush();
    batch.push_back(rec);
    bytes += n;
  }
  flush();
  return {{"imported", imported}, {"present", present}};
}

}  // namespace

int run_failures_list(const FailuresListOptions& o, const DaemonAddress& daemon,
                      std::ostream& out) {
  auto c = connect_daemon(daemon);
  const Json r = call_daemon(*c, wire::failures_list(o.op, o.limit));
  const Json items = r.value("failures", Json::array());
  if (r.value("truncated", false))
    std::cerr << "gpuemu: listed the newest " << items.size() << " of "
              << r.value("matching", Json()).dump()
              << " stored failures (a reply holds at most 12 MiB): narrow with --op or --limit\n";
  if (o.json)
    out << items.dump(2) << "\n";
  else if (items.empty())
    out << "no stored failures\n";
  else
    print_failure_table(items, out);
  return k_exit_ok;
}

int run_failures_show(const FailuresShowOptions& o, const DaemonAddress& daemon,
                      std::ostream& out) {
  auto c = connect_daemon(daemon);
  const Json r = call_daemon(*c, wire::failures_get(o.id));
  if (o.json) {
    out << r.dump(2) << "\n";
    return k_exit_ok;
  }
  out << r.value("id", "") << "  " << r.value("op", "") << "  stored "
      << when(r.value("created_ms", std::int64_t{0})) << "  kernel "
      << r.value("kernel", Json::object()).dump() << "\n";
  Json f = r;
  f["repro"] = "gpuemu repro " + r.value("id", "");
  f.erase("id");
  print_failure_json(f, nullptr, out);
  out << "  snapshot:   " << r.value("snapshot_bytes", 0) << " bytes of exact inputs\n";
  return k_exit_ok;
}

int run_failures_export(const FailuresExportOptions& o, const DaemonAddress& daemon,
                        std::ostream& out) {
  auto c = connect_daemon(daemon);
  // Page by page (a reply holds at most 12 MiB of records), newest first.
  Json records = Json::array();
  for (std::size_t offset = 0;;) {
    const Json r = call_daemon(*c, wire::failures_export(o.op, offset));
    for (const auto& rec : r.value("records", Json::array())) records.push_back(rec);
    if (!r.value("truncated", false)) break;
    const std::size_t next = r.value("next_offset", offset);
    if (next == offset)  // one record over a reply's limit: it cannot be exported this way
      throw GpuemuException(make_error(
          ErrorCode::invalid_argument,
          "failure " + std::to_string(offset) +
              " of the export (newest first) is larger than "
              "one reply can carry (12 MiB of JSON): a push moves it, its snapshot as binary "
              "(docs/scale.md)"));
    offset = next;
  }
  std::string text;
  if (o.jsonl) {
    for (const auto& rec : records) text += rec.dump() + "\n";
  } else {
    text = Json{{"format", "gpuemu-failures"}, {"version", 1}, {"records", records}}.dump(2) + "\n";
  }
  write_export(o.output, text, records.size(), "failures", out);
  return k_exit_ok;
}

int run_failures_import(const FailuresImportOptions& o, const DaemonAddress& daemon,
                        std::ostream& out) {
  const Json records = read_failure_records(read_input_file(o.file), o.file);
  auto c = connect_daemon(daemon);
  const Json r = import_in_batches(*c, records);
  if (o.json)
    out << r.dump(2) << "\n";
  else
    out << "imported " << r["imported"].size() << " failures; " << r["present"].size()
        << " were stored already\n";
  return k_exit_ok;
}

int run_failures_rm(const FailuresRmOptions& o, const DaemonAddress& daemon, std::ostream& out) {
  auto c = connect_daemon(daemon);
  Json deleted = Json::array();
  for (const auto& id : o.ids) {
    call_daemon(*c, wire::failures_delete(id));
    deleted.push_back(id);
    if (!o.json) out << "deleted " << id << "\n";
  }
  if (o.json) out << Json{{"deleted", deleted}}.dump(2) << "\n";
  return k_exit_ok;
}

int run_repro(const ReproOptions& o, const DaemonAddress& daemon, std::ostream& out) {
  auto c = connect_daemon(daemon);
  const Json r = call_daemon(*c, wire::ReproduceRequest{o.id});
  const bool identical = r.value("regenerated_identical", false);
  if (o.json) {
    Json doc = r;
    doc.erase("case");
    out << doc.dump(2) << "\n";
  } else {
    out << "failure " << o.id << " (" << r.value("op", "") << ", seed "
        << r.value("seed", Json()).dump() << ")\n"
        << "  snapshot:     " << r.value("snapshot_bytes", 0) << " bytes\n"
        << "  from seed:    "
        << (identical ? "byte-identical to the snapshot" : red("DIFFERS from the snapshot"))
        << "\n";
    if (r["passed"].is_null())
      out << "  kernel:       " << r.value("message", "") << "\n";
    else if (r["passed"].get<bool>())
      out << "  replay:       " << green("PASSES now") << ": " << r.value("message", "") << "\n";
    else
      out << "  replay:       " << red("still FAILS") << ": " << r.value("message", "") << "\n";
  }
  // Exit 1 while the failure reproduces (or the regeneration differs): CI can gate on a fix.
  const bool passes = r["passed"].is_boolean() && r["passed"].get<bool>();
  return passes && identical ? k_exit_ok : k_exit_failed;
}

int run_minimize(const MinimizeOptions& o, const DaemonAddress& daemon, std::ostream& out) {
  auto c = connect_daemon(daemon);
  const Json r = call_daemon(*c, wire::MinimizeRequest{o.id, o.max_evaluations});
  if (o.json) {
    out << r.dump(2) << "\n";
    return k_exit_ok;
  }
  out << "minimized " << o.id << ": " << r.value("summary", "") << " (" << r.value("evaluations", 0)
      << " evaluations)\n";
  if (r.contains("minimized_id"))
    out << "  stored:  " << r["minimized_id"].get<std::string>()
        << "\n  repro:   " << r.value("repro", "") << "\n";
  return k_exit_ok;
}

namespace {

void register_failures_subcommands(CLI::App& failures, CliContext& ctx) {
  auto* list = failures.add_subcommand("list", "List stored failures, newest first");
  auto list_opts = std::make_shared<FailuresListOptions>();
  list->add_option("--op", list_opts->op, "only this op");
  list->add_option("--limit", list_opts->limit, "at most N");
  list->add_flag("--json", list_opts->json, "JSON output");
  list->callback(
      [&ctx, list_opts] { ctx.exit_code = run_failures_list(*list_opts, ctx.daemon, std::cout); });

  auto* show = failures.add_subcommand("show", "Everything stored about one failure");
  auto show_opts = std::make_shared<FailuresShowOptions>();
  show->add_option("ID", show_opts->id, "failure id")->required();
  show->add_flag("--json", show_opts->json, "JSON output");
  show->callback(
      [&ctx, show_opts] { ctx.exit_code = run_failures_show(*show_opts, ctx.daemon, std::cout); });

  auto* exp = failures.add_subcommand(
      "export", "Export stored failures (with their input snapshots, base64) as JSON");
  auto exp_opts = std::make_shared<FailuresExportOptions>();
  exp->add_option("--op", exp_opts->op, "only this op");
  exp->add_option("-o,--output", exp_opts->output, "file (default: stdout)");
  exp->add_flag("--jsonl", exp_opts->jsonl,
                "JSON Lines: one failure per line (what import reads too)");
  exp->callback(
      [&ctx, exp_opts] { ctx.exit_code = run_failures_export(*exp_opts, ctx.daemon, std::cout); });

  auto* imp = failures.add_subcommand(
      "import", "Store exported failures here (idempotent: what is stored already stays as it is)");
  auto imp_opts = std::make_shared<FailuresImportOptions>();
  imp->add_option("FILE", imp_opts->file, "gpuemu failures export's JSON or JSON Lines (- : stdin)")
      ->required();
  imp->add_flag("--json", imp_opts->json, "JSON output");
  imp->callback(
      [&ctx, imp_opts] { ctx.exit_code = run_failures_import(*imp_opts, ctx.daemon, std::cout); });

  auto* rm = failures.add_subcommand("rm", "Delete stored failures");
  auto rm_opts = std::make_shared<FailuresRmOptions>();
  rm->add_option("ID", rm_opts->ids, "failure ids")->required();
  rm->add_flag("--json", rm_opts->json, "JSON output");
  rm->callback(
      [&ctx, rm_opts] { ctx.exit_code = run_failures_rm(*rm_opts, ctx.daemon, std::cout); });
}

void register_repro_command(CLI::App& app, CliContext& ctx) {
  auto* repro = app.add_subcommand(
      "repro", "Replay a stored failure from its exact bytes, and regenerate it from its seed");
  auto o = std::make_shared<ReproOptions>();
  repro->add_option("ID", o->id, "failure id")->required();
  repro->add_flag("--json", o->json, "JSON output");
  repro->callback([&ctx, o] { ctx.exit_code = run_repro(*o, ctx.daemon, std::cout); });
}

void register_minimize_command(CLI::App& app, CliContext& ctx) {
  auto* mini = app.add_subcommand("minimize",
                                  "Shrink a stored failure to the smallest case that still fails");
  auto o = std::make_shared<MinimizeOptions>();
  mini->add_option("ID", o->id, "failure id")->required();
  mini->add_option("--max-evaluations", o->max_evaluations, "kernel runs the search may spend");
  mini->add_flag("--json", o->json, "JSON output");
  mini->callback([&ctx, o] { ctx.exit_code = run_minimize(*o, ctx.daemon, std::cout); });
}

}  // namespace

void register_failure_commands(CLI::App& app, CliContext& ctx) {
  auto* failures = app.add_subcommand("failures", "Failures stored by the daemon");
  failures->require_subcommand(1);
  register_failures_subcommands(*failures, ctx);
  register_repro_command(app, ctx);
  register_minimize_command(app, ctx);
}

}  // namespace gpuemu::cli
