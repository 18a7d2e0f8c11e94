// gpuemu init, gpuemu ci, gpuemu report [verify]: the project-level commands (docs/ci.md).
#include "cmd_project.hpp"
#include "ci_shard.hpp"
#include "daemon_link.hpp"
#include "progress.hpp"
#include "gpuemu/project/project_loader.hpp"
#include "report_signing.hpp"
#include "report_stats.hpp"
#include "report_writers.hpp"

#include <gpuemu/protocol/protocol.hpp>
#include "gpuemu/lint/lint.hpp"

#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <random>
#include <tuple>

namespace gpuemu::cli {
namespace fs = std::filesystem;
namespace {

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  if (!out) throw GpuemuException(make_error(ErrorCode::io_error, "cannot write " + path));
}

// The line of `def FUNC(` in a script (1 when not found).
int function_line(const std::string& script, const std::string& function) {
  std::ifstream in(script);
  int n = 0;
  for (std::string line; std::getline(in, line);) {
    ++n;
    const auto p = line.find("def " + function + "(");
    if (p != std::string::npos && line.find_first_not_of(" \t") == p) return n;
  }
  return 1;
}

fs::path runs_file() {
  return fs::path(protocol::home_paths().home) / "reports" / "ci-runs.jsonl";
}

// The last `limit` CI runs recorded by `gpuemu ci` in this home.
Json recent_runs(std::size_t limit) {
  std::ifstream in(runs_file());
  std::vector<Json> all;
  for (std::string line; std::getline(in, line);) {
    try {
      all.push_back(Json::parse(line));
    } catch (const Json::exception&) {
    }
  }
  Json out = Json::array();
  for (std::size_t i = all.size() > limit ? all.size() - limit : 0; i < all.size(); ++i)
    out.push_back(all[i]);
  return out;
}

void record_run(const Json& run) {
  std::error_code ec;
  fs::create_directories(runs_file().parent_path(), ec);
  std::ofstream out(runs_file(), std::ios::app);
  out << run.dump() << "\n";
}

Json summarize(const Json& results) {
  int passed = 0, failed = 0, errors = 0;
  for (const auto& r : results) {
    const std::string s = r.value("status", "");
    (s == "passed" ? passed : s == "failed" ? failed : errors) += 1;
  }
  return {{"total", results.size()}, {"passed", passed}, {"failed", failed}, {"errors", errors}};
}

// The first failure of a daemon fuzz report, as a report document's `failure`.
Json failure_of(const Json& f) {
  const Json d = f.value("diagnosis", Json::object());
  const Json c = f.value("case", Json::object());
  return {{"id", f.value("id", Json())},
          {"message", f.value("message", Json())},
          {"bug_class", d.value("bug_class", Json())},
          {"summary", d.value("summary", Json())},
          {"max_error", f.value("max_error", Json())},
          {"envelope", f.value("envelope", Json())},
          {"seed", f.contains("seed") ? f["seed"] : c.value("seed", Json())},
          {"index", f.contains("index") ? f["index"] : c.value("index", Json())},
          {"repro", f.value("repro", Json())},
          {"replay", f.value("replay", Json())}};
}

// `gpuemu lint` over [ci].lint_paths with the [lint] policy: one passed result, or one failed
// result per error finding (located at its source line when known, else at the input).
Json lint_results(const ProjectConfig& cfg, DaemonClient* client) {
  Json out = Json::array();
  Json base = {{"op", "lint"}, {"dtype", ""}, {"kernel", "gpuemu lint"},
               {"file", cfg.file.string()}, {"line", cfg.lint_line}};
  auto policy = lint::parse_policy(cfg.text, cfg.file.string());
  auto error = [&](const std::string& message) {
    Json r = base;
    r["name"] = "lint";
    r["status"] = "error";
    r["error"] = message;
    out.push_back(r);
    return out;
  };
  if (!policy) return error(policy.error().message);
  lint::LintRequest request;
  for (const auto& p : cfg.lint_paths) request.inputs.emplace_back(p);
  request.arches = policy->arches;
  request.nvcc_flags = policy->nvcc_flags;
  std::optional<lint::Baseline> baseline;
  if (!cfg.lint_baseline.empty()) {
    auto loaded = lint::load_baseline(cfg.lint_baseline);
    if (!loaded) return error(loaded.error().message);
    baseline = std::move(*loaded);
  } else if (!cfg.lint_baseline_tag.empty()) {
    try {
      const Json stored =
          call_daemon(*client, wire::BaselinesRequest{"get", cfg.lint_baseline_tag, Json()});
      auto loaded = lint::baseline_from_json(stored.value("baseline", Json()));
      if (!loaded) return error("baseline tag '" + cfg.lint_baseline_tag + "': " + loaded.error().message);
      baseline = std::move(*loaded);
    } catch (const GpuemuException& e) {
      return error(e.error().message);
    }
  }
  const auto start = std::chrono::steady_clock::now();
  auto report = lint::analyze(request);
  if (!report) return error(report.error().message);
  const lint::LintVerdict verdict = lint::evaluate(*report, baseline ? &*baseline : nullptr, *policy);
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (const lint::Finding& f : verdict.findings) {
    if (f.severity != lint::Severity::error) continue;
    Json r = base;
    r["name"] = "lint " + (f.kernel.empty() ? f.input : f.kernel) + (f.arch.empty() ? "" : " [" + f.arch + "]");
    r["kernel"] = f.kernel.empty() ? "gpuemu lint" : f.kernel;
    r["status"] = "failed";
    r["file"] = f.location && !f.location->file.empty() ? f.location->file : f.input;
    r["line"] = f.location && f.location->line > 0 ? f.location->line : 1;
    r["elapsed"] = elapsed;
    r["failure"] = {{"message", "[" + f.rule + "] " + f.message},
                    {"bug_class", "lint-" + f.rule},
                    {"summary", f.message},
                    {"repro", "gpuemu lint --config " + cfg.file.string()}};
    out.push_back(r);
  }
  if (out.empty()) {
    Json r = base;
    r["name"] = "lint";
    r["status"] = "passed";
    r["cases"] = report->kernels.size();
    r["elapsed"] = elapsed;
    out.push_back(r);
  }
  return out;
}

// The preset a run takes: --preset, --quick, --thorough, else [ci] preset.
std::string ci_preset_name(const CiOptions& o, const ProjectConfig& cfg) {
  std::string preset_name = o.quick ? "quick" : o.thorough ? "thorough" : cfg.ci_preset;
  if (!o.preset.empty()) preset_name = o.preset;
  if (!cfg.presets.count(preset_name))
    throw GpuemuException(
        make_error(ErrorCode::invalid_argument, "unknown ci preset '" + preset_name + "'"));
  return preset_name;
}

// The shard this run is (none: the whole work); a sharded run needs a seed for every [[op]].
std::optional<ShardSpec> ci_shard(const CiOptions& o, const ProjectConfig& cfg) {
  std::optional<ShardSpec> shard;
  if (!o.shard.empty()) {
    auto sp = parse_shard(o.shard, o.shard_count, shard_environment());
    if (!sp) throw GpuemuException(sp.error());
    shard = *sp;
  } else if (o.shard_count) {
    throw GpuemuException(make_error(ErrorCode::invalid_argument, "--shard-count needs --shard auto"));
  }
  // Every shard must draw the same cases: a sharded run takes its seeds from the config or --seed.
  if (shard)
    for (const ProjectOp& op : cfg.ops)
      if (!op.seed && !o.seed)
        throw GpuemuException(make_error(
            ErrorCode::invalid_argument,
            "a sharded run needs the same seed on every shard, and [[op]] '" + op.op +
                "' has none: set seed in [defaults] or the [[op]], or pass --seed S (the CI run's "
                "id, say)"));
  return shard;
}

// The units of work (each [[op]] x dtype), their expected cost per case, the result row each
// starts from and its seed.
struct CiPlan {
  std::vector<ShardUnit> units;
  std::vector<Json> rows;
  std::vector<std::uint64_t> seeds;
};

// The dtypes of `op` (the entry's, the custom op's, else the daemon's description of the op) and
// its cost per case; nullopt (with an error row in `results`, from the first shard) when the
// daemon cannot describe an op whose dtypes are not given.
std::optional<std::vector<std::string>> ci_dtypes(const ProjectOp& op, const ProjectConfig& cfg,
                                                  const std::optional<ShardSpec>& shard,
                                                  DaemonClient& client, const Json& base,
                                                  double& case_cost, Json& results) {
  std::vector<std::string> dtypes = op.dtypes;
  const CustomOp* custom = cfg.custom_op(op.op);
  if (dtypes.empty() && custom) dtypes = custom->dtypes;
  case_cost = 1e5;  // an op the daemon cannot describe (a custom op): a middling case
  if (!dtypes.empty() && !shard) return dtypes;
  try {
    const Json d = call_daemon(client, wire::DescribeOpRequest{op.op});
    if (dtypes.empty())
      for (const auto& dt : d.value("dtypes", Json::array())) dtypes.push_back(dt);
    if (d.contains("max_elements") && d["max_elements"].is_number())
      case_cost = std::max(1.0, d["max_elements"].get<double>());
  } catch (const GpuemuException& e) {
    if (dtypes.empty()) {
      if (!shard || shard->index == 0) {  // reported once, by the first shard
        Json r = base;
        r["name"] = op.op;
        r["status"] = "error";
        r["error"] = e.error().message;
        results.push_back(r);
      }
      return std::nullopt;
    }
  }
  return dtypes;
}

CiPlan plan_ci(const CiOptions& o, const ProjectConfig& cfg, const CiPreset& preset,
               const std::optional<ShardSpec>& shard, DaemonClient& client, Json& results) {
  CiPlan plan;
  for (std::size_t entry = 0; entry < cfg.ops.size(); ++entry) {
    const ProjectOp& op = cfg.ops[entry];
    Json base = {{"op", op.op},
                 {"kernel", op.kernel_label()},
                 {"file", op.script.empty() ? cfg.file.string() : op.script},
                 {"line", op.script.empty() ? op.line : function_line(op.script, op.function)}};
    double case_cost = 0;
    const auto dtypes = ci_dtypes(op, cfg, shard, client, base, case_cost, results);
    if (!dtypes) continue;
    const auto iterations = std::max<std::int64_t>(
        preset.min_iterations,
        static_cast<std::int64_t>(std::llround(static_cast<double>(op.iterations) * preset.scale)));
    for (const std::string& dtype : *dtypes) {
      plan.units.push_back({entry, dtype, iterations, case_cost});
      Json r = base;
      r["name"] = op.op + "[" + dtype + "]";
      r["dtype"] = dtype;
      plan.rows.push_back(std::move(r));
      plan.seeds.push_back(op.seed ? *op.seed
                           : o.seed
                               ? *o.seed
                               : std::random_device{}() ^
                                     (static_cast<std::uint64_t>(std::random_device{}()) << 32));
    }
  }
  return plan;
}

// The pieces of the plan, in the plan's order: the shards' (all of them), or one per unit.
std::vector<ShardPiece> ci_pieces(const CiPlan& plan, const std::optional<ShardSpec>& shard) {
  std::vector<ShardPiece> pieces;
  if (shard) {
    pieces = plan_shards(plan.units, shard->count);
  } else {
    for (std::size_t u = 0; u < plan.units.size(); ++u)
      pieces.push_back({u, 0, plan.units[u].cases, 0});
  }
  std::stable_sort(pieces.begin(), pieces.end(), [](const ShardPiece& a, const ShardPiece& b) {
    return a.unit != b.unit ? a.unit < b.unit : a.start < b.start;
  });
  return pieces;
}

// One piece's fuzz run through the daemon, as its result row.
Json run_ci_piece(const ProjectConfig& cfg, const CiPlan& plan, const ShardPiece& piece,
                  bool sharded, const DaemonAddress& daemon, DaemonClient& client, bool bars) {
  const ProjectOp& op = cfg.ops[plan.units[piece.unit].entry];
  const std::string& dtype = plan.units[piece.unit].dtype;
  const CustomOp* custom = cfg.custom_op(op.op);
  Json r = plan.rows[piece.unit];
  const bool whole = piece.start == 0 && piece.end == plan.units[piece.unit].cases;
  if (!whole)
    r["name"] = r["name"].get<std::string>() + " cases " + std::to_string(piece.start) + "-" +
                std::to_string(piece.end - 1);
  if (sharded) r["cases_range"] = {piece.start, piece.end};
  const std::uint64_t seed = plan.seeds[piece.unit];
  r["seed"] = seed;
  wire::FuzzRequest params;
  params.op = op.op;
  params.kernel = op.kernel_spec();
  params.options = op.fuzz_options(dtype);
  params.seed = seed;
  params.iterations = piece.end - piece.start;
  params.fail_fast = false;
  params.minimize = cfg.ci_minimize;
  params.diagnose_limit = 1;
  params.repro_prefix = op.repro_prefix({dtype});
  params.client = {{"name", "gpuemu-ci"}, {"version", GPUEMU_VERSION_STRING}};
  params.start_index = piece.start;
  if (custom) params.custom_op = custom->spec();
  if (!op.envelope.empty()) {
    params.envelope = Json::object();
    for (const auto& [dt, v] : op.envelope) params.envelope[dt] = v;
  }
  try {
    const Json rep =
        call_daemon_with_progress(daemon, client, params, r["name"].get<std::string>(), bars);
    const Json failures = rep.value("failures", Json::array());
    r["cases"] = rep.value("total", 0);
    r["failed_cases"] = rep.value("failed", 0);
    r["elapsed"] = rep.value("elapsed", 0.0);
    r["status"] = failures.empty() ? "passed" : "failed";
    if (!failures.empty()) r["failure"] = failure_of(failures.front());
    if (rep.contains("run_id")) r["run_id"] = rep["run_id"];
    if (rep.contains("envelope") && rep["envelope"].contains(dtype))
      r["envelope"] = rep["envelope"][dtype];
  } catch (const GpuemuException& e) {
    r["status"] = "error";
    r["error"] = e.error().message;
  }
  return r;
}

// The run's report document (`gpuemu ci --json`).
Json ci_document(const ProjectConfig& cfg, const std::string& preset_name, const Json& results,
                 const CiPlan& plan, const std::vector<ShardPiece>& pieces,
                 const std::optional<ShardSpec>& shard) {
  Json doc = {{"tool", "gpuemu"},
              {"version", GPUEMU_VERSION_STRING},
              {"kind", "ci"},
              {"generated_ms", now_ms()},
              {"project", cfg.name},
              {"config", cfg.file.string()},
              {"srcroot", cfg.file.parent_path().string()},
              {"preset", preset_name},
              {"results", results},
              {"summary", summarize(results)},
              {"pass_rates", pass_rates_from_results(results)},
              {"first_failures", first_failures_from_results(results)},
              {"runs", Json::array()}};
  if (shard)
    doc["shard"] = {
        {"index", shard->index},
        {"count", shard->count},
        {"plan", plan_digest(plan.units, shard->count)},
        {"pieces", std::count_if(pieces.begin(), pieces.end(),
                                 [&](const ShardPiece& p) { return p.shard == shard->index; })}};
  return doc;
}

// The run recorded in this home's history, its reports written, printed; returns the exit code.
int finish_ci(const CiOptions& o, const ProjectConfig& cfg, const std::string& preset_name,
              const Json& doc, std::ostream& out) {
  const Json& s = doc["summary"];
  record_run({{"time_ms", doc["generated_ms"]},
              {"project", cfg.name},
              {"config", cfg.file.string()},
              {"srcroot", cfg.file.parent_path().string()},
              {"preset", preset_name},
              {"total", s["total"]},
              {"passed", s["passed"]},
              {"failed", s["failed"]},
              {"errors", s["errors"]}});
  if (!o.junit.empty()) write_text(o.junit, report_junit(doc));
  if (!o.sarif.empty()) write_text(o.sarif, report_sarif(doc));
  if (o.json)
    out << doc.dump(2) << "\n";
  else
    out << report_text(doc);
  if (s["errors"].get<int>() > 0) return k_exit_usage;
  return s["failed"].get<int>() > 0 ? k_exit_failed : k_exit_ok;
}

}  // namespace

int run_ci(const CiOptions& o, const DaemonAddress& daemon, std::ostream& out) {
  auto cfg = load_project_config(o.config);
  if (!cfg) throw GpuemuException(cfg.error());
  const std::string preset_name = ci_preset_name(o, *cfg);
  const CiPreset preset = cfg->presets[preset_name];
  if (cfg->ops.empty() && cfg->lint_paths.empty())
    throw GpuemuException(
        make_error(ErrorCode::invalid_argument, cfg->file.string() + ": no [[op]] to run"));
  const std::optional<ShardSpec> shard = ci_shard(o, *cfg);
  auto client = connect_daemon(daemon);
  const bool bars = progress_enabled(o.json);
  Json results = Json::array();
  const CiPlan plan = plan_ci(o, *cfg, preset, shard, *client, results);
  const std::vector<ShardPiece> pieces = ci_pieces(plan, shard);
  for (const ShardPiece& piece : pieces) {
    if (shard && piece.shard != shard->index) continue;
    results.push_back(run_ci_piece(*cfg, plan, piece, shard.has_value(), daemon, *client, bars));
  }
  if (!cfg->lint_paths.empty() && (!shard || shard->index == 0))  // the lint: the first shard's
    for (const auto& r : lint_results(*cfg, client.get())) results.push_back(r);
  const Json doc = ci_document(*cfg, preset_name, results, plan, pieces, shard);
  return finish_ci(o, *cfg, preset_name, doc, out);
}

namespace {

// The daemon store's run history (the `runs` request), newest first, as report rows.
Json daemon_runs(DaemonClient& client, const std::string& op, std::size_t limit) {
  const Json list = call_daemon(client, wire::RunsRequest{op, limit});
  Json out = Json::array();
  for (const auto& run : join_backward_parts(list.value("runs", Json::array()))) {
    const std::int64_t total = run.value("total", std::int64_t{0});
    const std::int64_t passed = run.value("passed", std::int64_t{0});
    const Json kernel = run.value("kernel", Json::object());
    std::string label = kernel.value("name", kernel.value("kind", std::string()));
    if (kernel.contains("file") && kernel["file"].is_string())
      label = fs::path(kernel["file"].get<std::string>()).filename().string() + ":" + label;
    out.push_back({{"id", run.value("id", Json())},
                   {"time_ms", run.value("started_ms", Json())},
                   {"kind", run.value("kind", Json())},
                   {"op", run.value("op", Json())},
                   {"kernel", label},
                   {"seed", run.value("seed", Json())},
                   {"total", total},
                   {"passed", passed},
                   {"failed", total - passed},
                   {"first_failure", run.value("first_failure", Json())},
                   {"elapsed", run.value("elapsed", Json())},
                   {"failure_ids", run.value("failure_ids", Json::array())}});
    // A backward=True run of the Python client: the case counts above are forward and gradients
    // together; its parts' own counts, and the link between the two runs.
    for (const char* key : {"forward", "gradients", "part_of"})
      if (run.contains(key)) out.back()[key] = run[key];
  }
  return out;
}

// How many of the newest daemon runs the pass rates of a failures report are computed over.
constexpr std::size_t k_stats_runs = 1000;

// The report document of the failures stored by the daemon, and the recent runs: `runs` = "ci"
// (gpuemu ci's client-side history), "daemon" (the store's run records) or "all".
Json stored_failures_report(const DaemonAddress& daemon, const std::string& op, std::size_t limit,
                            const std::string& runs, std::size_t runs_limit) {
  auto client = connect_daemon(daemon);
  const Json list = call_daemon(*client, wire::failures_list(op, limit));
  Json results = Json::array();
  for (const auto& item : list.value("failures", Json::array())) {
    Json rec = item;
    try {
      rec = call_daemon(*client, wire::failures_get(item.value("id", "")));
    } catch (const GpuemuException&) {
      // Deleted since it was listed: keep the list's summary.
    }
    const Json kernel = rec.value("kernel", Json::object());
    const Json d = rec.value("diagnosis", Json::object());
    std::string label = kernel.value("name", std::string("?"));
    if (kernel.value("kind", "") == "script" || kernel.contains("file"))
      label = fs::path(kernel.value("file", std::string())).filename().string() + ":" + label;
    Json r = {{"name",
               item.value("op", "") + "[" + item.value("dtype", "") + "] " + item.value("id", "")},
              {"op", item.value("op", "")},
              {"dtype", item.value("dtype", "")},
              {"kernel", label},
              {"status", "failed"},
              {"seed", item.value("master_seed", Json())},
              {"created_ms", item.value("created_ms", Json())},
              {"failure",
               {{"id", item.value("id", Json())},
                {"message", item.value("message", Json())},
                {"bug_class", item.value("bug_class", Json())},
                {"summary", d.value("summary", Json())},
                {"max_error", item.value("max_error", Json())},
                {"envelope", item.value("envelope", Json())},
                {"seed", item.value("seed", Json())},
                {"index", item.value("index", Json())},
                {"repro", "gpuemu repro " + item.value("id", std::string())}}}};
    if (rec.contains("error_map")) r["failure"]["error_map"] = rec["error_map"];
    if (rec.contains("shapes")) r["shapes"] = rec["shapes"];
    if (kernel.contains("file") && kernel["file"].is_string()) {
      r["file"] = kernel["file"];
      r["line"] = kernel.value("line", 0) > 0
                      ? kernel.value("line", 1)
                      : function_line(kernel["file"].get<std::string>(), kernel.value("name", ""));
    }
    results.push_back(r);
  }
  // Pass rates and cases-to-first-failure come from the daemon's run history, whatever --runs says.
  const Json history =
      join_backward_parts(call_daemon(*client, wire::RunsRequest{op, k_stats_runs}).value("runs", Json::array()));
  Json first_failures = first_failures_from_runs(history);
  if (first_failures.size() > runs_limit) first_failures.erase(first_failures.begin() + static_cast<std::ptrdiff_t>(runs_limit), first_failures.end());
  return {{"tool", "gpuemu"},
          {"version", GPUEMU_VERSION_STRING},
          {"kind", "failures"},
          {"generated_ms", now_ms()},
          {"project", ""},
          {"srcroot", fs::current_path().string()},
          {"filter", {{"op", op}, {"limit", limit}}},
          {"results", results},
          {"summary", summarize(results)},
          {"pass_rates", pass_rates_from_runs(history)},
          {"first_failures", first_failures},
          {"runs", runs == "daemon" ? Json::array() : recent_runs(runs_limit)},
          {"daemon_runs",
           runs == "ci" ? Json::array() : daemon_runs(*client, op, runs_limit)}};
}

// The shards of one sharded `gpuemu ci` (their --json documents) as one report: every shard of the
// plan present once, their results together (in the plan's order: [[op]], dtype, cases), the
// summary and rates recomputed. Refuses documents that are not shards of one plan.
Json merge_shards(const std::vector<std::string>& files) {
  std::vector<Json> docs;
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    if (!in) throw GpuemuException(make_error(ErrorCode::invalid_argument, "cannot read " + f));
    try {
      docs.push_back(Json::parse(in));
    } catch (const Json::exception& e) {
      throw GpuemuException(make_error(ErrorCode::invalid_argument,
                                       f + ": not a gpuemu ci --json document (" + e.what() + ")"));
    }
    const Json& d = docs.back();
    if (!d.is_object() || d.value("kind", "") != "ci" || !d.contains("shard") ||
        !d["shard"].is_object())
      throw GpuemuException(make_error(
          ErrorCode::invalid_argument,
          f + ": not the --json document of a sharded gpuemu ci (no \"shard\")"));
  }
  if (docs.empty())
    throw GpuemuException(make_error(ErrorCode::invalid_argument, "no shard documents to merge"));
  const Json& first = docs.front()["shard"];
  const int count = first.value("count", 0);
  std::vector<int> seen(static_cast<std::size_t>(std::max(count, 0)), -1);
  for (std::size_t i = 0; i < docs.size(); ++i) {
    const Json& sh = docs[i]["shard"];
    if (sh.value("plan", "") != first.value("plan", "") || sh.value("count", 0) != count ||
        docs[i].value("project", "") != docs.front().value("project", "") ||
        docs[i].value("preset", "") != docs.front().value("preset", ""))
      throw GpuemuException(make_error(
          ErrorCode::invalid_argument,
          files[i] + " is a shard of another run than " + files.front() +
              " (its plan, shard count, project or preset differ)"));
    const int idx = sh.value("index", -1);
    if (idx < 0 || idx >= count)
      throw GpuemuException(make_error(ErrorCode::invalid_argument, files[i] + ": bad shard index"));
    auto& slot = seen[static_cast<std::size_t>(idx)];
    if (slot >= 0)
      throw GpuemuException(make_error(ErrorCode::invalid_argument,
                                       "shard " + std::to_string(idx) + " appears twice (" +
                                           files[static_cast<std::size_t>(slot)] + ", " + files[i] + ")"));
    slot = static_cast<int>(i);
  }
  std::string missing;
  for (int k = 0; k < count; ++k)
    if (seen[static_cast<std::size_t>(k)] < 0) missing += (missing.empty() ? "" : ", ") + std::to_string(k);
  if (!missing.empty())
    throw GpuemuException(make_error(ErrorCode::invalid_argument,
                                     "shards missing of " + std::to_string(count) + ": " + missing));
  // The plan's order: the [[op]] entries as the file lists them, then dtype, then the first case;
  // the lint after.
  using Key = std::tuple<int, std::string, int, std::string, std::int64_t>;
  std::vector<std::pair<Key, Json>> keyed;
  for (int k = 0; k < count; ++k)
    for (const auto& r : docs[static_cast<std::size_t>(seen[static_cast<std::size_t>(k)])]["results"]) {
      const Json range = r.value("cases_range", Json::array({0, 0}));
      const std::int64_t start =
          range.is_array() && !range.empty() && range[0].is_number_integer() ? range[0].get<std::int64_t>() : 0;
      keyed.push_back({Key{r.value("op", "") == "lint" ? 1 : 0, r.value("file", ""), r.value("line", 0),
                           r.value("dtype", ""), start},
                       r});
    }
  std::stable_sort(keyed.begin(), keyed.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  Json ordered = Json::array();
  for (auto& kr : keyed) ordered.push_back(std::move(kr.second));
  Json doc = docs.front();
  doc.erase("shard");
  doc["generated_ms"] = now_ms();
  doc["results"] = ordered;
  doc["summary"] = summarize(ordered);
  doc["pass_rates"] = pass_rates_from_results(ordered);
  doc["first_failures"] = first_failures_from_results(ordered);
  doc["merged"] = {{"shards", count}, {"plan", first.value("plan", "")}, {"files", files}};
  return doc;
}

// A rendered report to `out`, or to `path` (signed next to it, FILE.sig, when `sign`).
void emit_report(const std::string& text, const std::string& path, bool sign, std::ostream& out) {
  if (path.empty()) {
    out << text;
    return;
  }
  write_text(path, text);
  if (!sign) return;
  auto s = sign_report_file(path);
  if (!s) throw GpuemuException(s.error());
  out << "signed " << path << " -> " << path << ".sig (public key " << s->public_key << ")\n";
}

Error sign_needs_output() {
  return make_error(ErrorCode::invalid_argument,
                    "--sign needs -o FILE (the signature goes to FILE.sig)");
}

}  // namespace

int run_init(const InitOptions& o, std::ostream& out) {
  std::error_code ec;
  if (fs::exists(o.path, ec) && !o.force)
    throw GpuemuException(
        make_error(ErrorCode::conflict, o.path + " exists: pass --force to overwrite it"));
  write_text(o.path, project::example_project_config());
  out << "wrote " << o.path << " (gpuemu ci runs it; docs/ci.md lists every key)\n";
  return k_exit_ok;
}

int run_report(const ReportOptions& o, const DaemonAddress& daemon, std::ostream& out) {
  if (o.sign && o.output.empty()) throw GpuemuException(sign_needs_output());
  // A signed report is the JSON document unless another format is asked for explicitly.
  const std::string format = o.sign && !o.format_given ? "json" : o.format;
  const Json doc = stored_failures_report(daemon, o.op, o.limit, o.runs, o.runs_limit);
  emit_report(render_report(doc, format), o.output, o.sign, out);
  return k_exit_ok;
}

int run_report_merge(const ReportMergeOptions& o, std::ostream& out) {
  if (o.sign && o.output.empty()) throw GpuemuException(sign_needs_output());
  const Json doc = merge_shards(o.files);
  const std::string format = o.sign && !o.format_given ? "json" : o.format;
  emit_report(render_report(doc, format), o.output, o.sign, out);
  const Json& sm = doc["summary"];
  return sm["errors"].get<int>() > 0   ? k_exit_usage
         : sm["failed"].get<int>() > 0 ? k_exit_failed
                                       : k_exit_ok;
}

int run_report_verify(const ReportVerifyOptions& o, std::ostream& out) {
  auto v = verify_report_file(o.file, o.key);
  if (!v) throw GpuemuException(v.error());
  if (o.json)
    out << Json{{"valid", v->valid},
                {"public_key", v->public_key},
                {"key_pinned", v->key_pinned},
                {"reason", v->reason}}
               .dump(2)
        << "\n";
  else if (v->valid)
    out << "valid: " << o.file << " signed by " << v->public_key
        << (v->key_pinned ? "" : " (the key in the .sig file; pin it with --key)") << "\n";
  else
    std::cerr << "gpuemu: error: invalid signature: " << v->reason << "\n";
  return v->valid ? k_exit_ok : k_exit_failed;
}

namespace {

void register_init_command(CLI::App& app, CliContext& ctx) {
  auto* init = app.add_subcommand("init", "Write a commented gpuemu.toml in this directory");
  auto o = std::make_shared<InitOptions>();
  init->add_flag("--force", o->force, "overwrite an existing file");
  init->add_option("--config", o->path, "where to write it (default ./gpuemu.toml)");
  init->callback([&ctx, o] { ctx.exit_code = run_init(*o, std::cout); });
}

void register_ci_command(CLI::App& app, CliContext& ctx) {
  auto* ci = app.add_subcommand("ci", "Fuzz every [[op]] of gpuemu.toml; exit 1 when any fails");
  auto o = std::make_shared<CiOptions>();
  ci->add_option("--config", o->config, "the gpuemu.toml (default: search upward)");
  auto* quick = ci->add_flag("--quick", o->quick, "preset: iterations / 4, at least 10");
  auto* thorough = ci->add_flag("--thorough", o->thorough, "preset: iterations x 4");
  auto* preset = ci->add_option("--preset", o->preset, "a preset of [ci.presets]");
  quick->excludes(thorough);
  preset->excludes(quick)->excludes(thorough);
  ci->add_option("--junit", o->junit, "write JUnit XML here");
  ci->add_option("--sarif", o->sarif, "write SARIF 2.1.0 here");
  ci->add_flag("--json", o->json, "JSON output");
  ci->add_option("--shard", o->shard,
                 "run one shard of the work: I/N (0 <= I < N), or auto (from GPUEMU_SHARD_INDEX/"
                 "COUNT, a Slurm array, a Kubernetes indexed Job; docs/ci.md)");
  ci->add_option("--shard-count", o->shard_count,
                 "the number of shards, for --shard auto where the environment lacks it")
      ->check(CLI::Range(1, 100000));
  ci->add_option("--seed", o->seed,
                 "the seed of every [[op]] that sets none (a sharded run needs one)");
  ci->callback([&ctx, o] { ctx.exit_code = run_ci(*o, ctx.daemon, std::cout); });
}

CLI::App* register_report_merge(CLI::App& report, CliContext& ctx) {
  auto* merge = report.add_subcommand(
      "merge", "Combine the --json documents of a sharded gpuemu ci into one report");
  auto o = std::make_shared<ReportMergeOptions>();
  merge->add_option("FILES", o->files, "every shard's `gpuemu ci --shard I/N --json` output")
      ->required();
  merge->add_option("--format", o->format, "text | json | junit | sarif | html")
      ->check(CLI::IsMember({"text", "json", "junit", "sarif", "html"}));
  merge->add_option("-o,--output", o->output, "write to FILE instead of stdout");
  merge->add_flag("--sign", o->sign, "sign it (ed25519): writes FILE.sig next to -o FILE");
  merge->callback([&ctx, o, merge] {
    o->format_given = merge->count("--format") > 0;
    ctx.exit_code = run_report_merge(*o, std::cout);
  });
  return merge;
}

CLI::App* register_report_verify(CLI::App& report, CliContext& ctx) {
  auto* verify = report.add_subcommand("verify", "Check a signed report offline");
  auto o = std::make_shared<ReportVerifyOptions>();
  verify->add_option("FILE", o->file, "the report (FILE.sig next to it)")->required();
  verify->add_option("--key", o->key, "the signer's public key (base64) to pin");
  verify->add_flag("--json", o->json, "JSON output");
  verify->callback([&ctx, o] { ctx.exit_code = run_report_verify(*o, std::cout); });
  return verify;
}

void register_report_command(CLI::App& app, CliContext& ctx) {
  auto* report = app.add_subcommand("report", "A report of the stored failures and recent runs");
  auto o = std::make_shared<ReportOptions>();
  report->add_option("--format", o->format, "text | json | junit | sarif | html")
      ->check(CLI::IsMember({"text", "json", "junit", "sarif", "html"}));
  report->add_option("--op", o->op, "only this op");
  report->add_option("--limit", o->limit, "at most N failures (newest first)");
  report->add_option("--runs", o->runs, "run history: ci (gpuemu ci's), daemon (the store's), all")
      ->check(CLI::IsMember({"ci", "daemon", "all"}));
  report->add_option("--runs-limit", o->runs_limit, "at most N runs of each history (default 20)");
  report->add_option("-o,--output", o->output, "write to FILE instead of stdout");
  report->add_flag("--sign", o->sign, "sign it (ed25519): writes FILE.sig next to -o FILE");
  CLI::App* merge = register_report_merge(*report, ctx);
  CLI::App* verify = register_report_verify(*report, ctx);
  report->callback([&ctx, o, report, verify, merge] {
    if (verify->parsed() || merge->parsed()) return;
    o->format_given = report->count("--format") > 0;
    ctx.exit_code = run_report(*o, ctx.daemon, std::cout);
  });
}

}  // namespace

void register_project_commands(CLI::App& app, CliContext& ctx) {
  register_init_command(app, ctx);
  register_ci_command(app, ctx);
  register_report_command(app, ctx);
}

}  // namespace gpuemu::cli
