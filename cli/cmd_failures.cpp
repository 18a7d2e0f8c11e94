// gpuemu failures list | show | export | rm, gpuemu repro ID, gpuemu minimize ID.
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

}  // namespace

void register_failure_commands(CLI::App& app, CliContext& ctx) {
  auto* failures = app.add_subcommand("failures", "Failures stored by the daemon");
  failures->require_subcommand(1);

  auto* list = failures->add_subcommand("list", "List stored failures, newest first");
  static std::string list_op;
  static std::size_t list_limit = 0;
  static bool list_json = false;
  list->add_option("--op", list_op, "only this op");
  list->add_option("--limit", list_limit, "at most N");
  list->add_flag("--json", list_json, "JSON output");
  list->callback([&ctx] {
    auto c = connect_daemon();
    const Json r = call_daemon(*c, wire::failures_list(list_op, list_limit));
    const Json items = r.value("failures", Json::array());
    if (r.value("truncated", false))
      std::cerr << "gpuemu: listed the newest " << items.size() << " of "
                << r.value("matching", Json()).dump()
                << " stored failures (a reply holds at most 12 MiB): narrow with --op or --limit\n";
    if (list_json) {
      std::cout << items.dump(2) << "\n";
    } else if (items.empty()) {
      std::cout << "no stored failures\n";
    } else {
      std::cout << std::left << std::setw(19) << "ID" << std::setw(20) << "OP" << std::setw(10)
                << "DTYPE" << std::setw(22) << "SEED" << std::setw(12) << "ERROR" << std::setw(18)
                << "CLASS"
                << "WHEN\n";
      for (const auto& f : items)
        std::cout << std::setw(19) << f.value("id", "") << std::setw(20) << f.value("op", "")
                  << std::setw(10) << f.value("dtype", "") << std::setw(22)
                  << f.value("seed", Json()).dump() << std::setw(12)
                  << fmt_number(f.value("max_error", Json())) << std::setw(18)
                  << f.value("bug_class", "") << when(f.value("created_ms", std::int64_t{0}))
                  << "\n";
    }
    ctx.exit_code = k_exit_ok;
  });

  auto* show = failures->add_subcommand("show", "Everything stored about one failure");
  static std::string show_id;
  static bool show_json = false;
  show->add_option("ID", show_id, "failure id")->required();
  show->add_flag("--json", show_json, "JSON output");
  show->callback([&ctx] {
    auto c = connect_daemon();
    const Json r = call_daemon(*c, wire::failures_get(show_id));
    if (show_json) {
      std::cout << r.dump(2) << "\n";
    } else {
      std::cout << r.value("id", "") << "  " << r.value("op", "") << "  stored "
                << when(r.value("created_ms", std::int64_t{0})) << "  kernel "
                << r.value("kernel", Json::object()).dump() << "\n";
      Json f = r;
      f["repro"] = "gpuemu repro " + r.value("id", "");
      f.erase("id");
      print_failure_json(f, nullptr);
      std::cout << "  snapshot:   " << r.value("snapshot_bytes", 0) << " bytes of exact inputs\n";
    }
    ctx.exit_code = k_exit_ok;
  });

  auto* exp = failures->add_subcommand(
      "export", "Export stored failures (with their input snapshots, base64) as JSON");
  static std::string exp_op, exp_out;
  static bool exp_jsonl = false;
  exp->add_option("--op", exp_op, "only this op");
  exp->add_option("-o,--output", exp_out, "file (default: stdout)");
  exp->add_flag("--jsonl", exp_jsonl, "JSON Lines: one failure per line (what import reads too)");
  exp->callback([&ctx] {
    auto c = connect_daemon();
    // Page by page (a reply holds at most 12 MiB of records), newest first.
    Json records = Json::array();
    for (std::size_t offset = 0;;) {
      const Json r = call_daemon(*c, wire::failures_export(exp_op, offset));
      for (const auto& rec : r.value("records", Json::array())) records.push_back(rec);
      if (!r.value("truncated", false)) break;
      const std::size_t next = r.value("next_offset", offset);
      if (next == offset)  // one record over a reply's limit: it cannot be exported this way
        throw GpuemuException(make_error(
            ErrorCode::invalid_argument,
            "failure " + std::to_string(offset) + " of the export (newest first) is larger than "
            "one reply can carry (12 MiB of JSON): a push moves it, its snapshot as binary "
            "(docs/scale.md)"));
      offset = next;
    }
    std::string text;
    if (exp_jsonl) {
      for (const auto& rec : records) text += rec.dump() + "\n";
    } else {
      text = Json{{"format", "gpuemu-failures"}, {"version", 1}, {"records", records}}.dump(2) + "\n";
    }
    write_export(exp_out, text, records.size(), "failures");
    ctx.exit_code = k_exit_ok;
  });

  auto* imp = failures->add_subcommand(
      "import", "Store exported failures here (idempotent: what is stored already stays as it is)");
  static std::string imp_file;
  static bool imp_json = false;
  imp->add_option("FILE", imp_file, "gpuemu failures export's JSON or JSON Lines (- : stdin)")
      ->required();
  imp->add_flag("--json", imp_json, "JSON output");
  imp->callback([&ctx] {
    const std::string text = read_input_file(imp_file);
    Json records = Json::array();
    const Json whole = Json::parse(text, nullptr, false);
    if (!whole.is_discarded() && whole.is_object() && whole.contains("records")) {
      records = whole["records"];
    } else {  // JSON Lines
      std::istringstream lines(text);
      int n = 0;
      for (std::string line; std::getline(lines, line);) {
        ++n;
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        Json rec = Json::parse(line, nullptr, false);
        if (rec.is_discarded())
          throw GpuemuException(make_error(ErrorCode::invalid_argument,
                                           imp_file + ":" + std::to_string(n) +
                                               ": not a JSON record (gpuemu failures export --jsonl)"));
        records.push_back(std::move(rec));
      }
    }
    if (!records.is_array())
      throw GpuemuException(make_error(ErrorCode::invalid_argument, imp_file + ": 'records' is not an array"));
    auto c = connect_daemon();
    Json imported = Json::array(), present = Json::array();
    // Batches well under a request's 16 MiB of JSON; each is one transaction, and a batch sent
    // again (a retry) stores nothing twice.
    Json batch = Json::array();
    std::size_t bytes = 0;
    auto flush = [&] {
      if (batch.empty()) return;
      const Json r = call_daemon(*c, wire::failures_import(batch));
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
    if (imp_json)
      std::cout << Json{{"imported", imported}, {"present", present}}.dump(2) << "\n";
    else
      std::cout << "imported " << imported.size() << " failures; " << present.size()
                << " were stored already\n";
    ctx.exit_code = k_exit_ok;
  });

  auto* rm = failures->add_subcommand("rm", "Delete stored failures");
  static std::vector<std::string> rm_ids;
  static bool rm_json = false;
  rm->add_option("ID", rm_ids, "failure ids")->required();
  rm->add_flag("--json", rm_json, "JSON output");
  rm->callback([&ctx] {
    auto c = connect_daemon();
    Json deleted = Json::array();
    for (const auto& id : rm_ids) {
      call_daemon(*c, wire::failures_delete(id));
      deleted.push_back(id);
      if (!rm_json) std::cout << "deleted " << id << "\n";
    }
    if (rm_json) std::cout << Json{{"deleted", deleted}}.dump(2) << "\n";
    ctx.exit_code = k_exit_ok;
  });

  auto* repro = app.add_subcommand(
      "repro", "Replay a stored failure from its exact bytes, and regenerate it from its seed");
  static std::string repro_id;
  static bool repro_json = false;
  repro->add_option("ID", repro_id, "failure id")->required();
  repro->add_flag("--json", repro_json, "JSON output");
  repro->callback([&ctx] {
    auto c = connect_daemon();
    const Json r = call_daemon(*c, wire::ReproduceRequest{repro_id});
    const bool identical = r.value("regenerated_identical", false);
    if (repro_json) {
      Json out = r;
      out.erase("case");
      std::cout << out.dump(2) << "\n";
    } else {
      std::cout << "failure " << repro_id << " (" << r.value("op", "") << ", seed "
                << r.value("seed", Json()).dump() << ")\n"
                << "  snapshot:     " << r.value("snapshot_bytes", 0) << " bytes\n"
                << "  from seed:    "
                << (identical ? "byte-identical to the snapshot" : red("DIFFERS from the snapshot"))
                << "\n";
      if (r["passed"].is_null())
        std::cout << "  kernel:       " << r.value("message", "") << "\n";
      else if (r["passed"].get<bool>())
        std::cout << "  replay:       " << green("PASSES now") << ": " << r.value("message", "")
                  << "\n";
      else
        std::cout << "  replay:       " << red("still FAILS") << ": " << r.value("message", "")
                  << "\n";
    }
    // Exit 1 while the failure reproduces (or the regeneration differs): CI can gate on a fix.
    const bool passes = r["passed"].is_boolean() && r["passed"].get<bool>();
    ctx.exit_code = passes && identical ? k_exit_ok : k_exit_failed;
  });

  auto* mini = app.add_subcommand("minimize",
                                  "Shrink a stored failure to the smallest case that still fails");
  static std::string mini_id;
  static int mini_evals = 200;
  static bool mini_json = false;
  mini->add_option("ID", mini_id, "failure id")->required();
  mini->add_option("--max-evaluations", mini_evals, "kernel runs the search may spend");
  mini->add_flag("--json", mini_json, "JSON output");
  mini->callback([&ctx] {
    auto c = connect_daemon();
    const Json r = call_daemon(*c, wire::MinimizeRequest{mini_id, mini_evals});
    if (mini_json)
      std::cout << r.dump(2) << "\n";
    else {
      std::cout << "minimized " << mini_id << ": " << r.value("summary", "") << " ("
                << r.value("evaluations", 0) << " evaluations)\n";
      if (r.contains("minimized_id"))
        std::cout << "  stored:  " << r["minimized_id"].get<std::string>()
                  << "\n  repro:   " << r.value("repro", "") << "\n";
    }
    ctx.exit_code = k_exit_ok;
  });
}

}  // namespace gpuemu::cli
