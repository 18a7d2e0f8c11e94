// gpuemu fuzz: through the daemon (which stores every failure) or in this process with
// --no-daemon; the kernel under test is a built-in emulated kernel (--kernel) or a Python function
// (--script FILE.py:FUNC). And gpuemu calibrate.
#include "case_flags.hpp"
#include "cli_common.hpp"
#include "daemon_link.hpp"
#include "progress.hpp"
#include "gpuemu/project/project_loader.hpp"

#include <gpuemu/engine/engine.hpp>
#include <gpuemu/engine/malloc_tuning.hpp>
#include "gpuemu/script/script_kernel.hpp"

#include <unistd.h>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <random>

namespace gpuemu::cli {
namespace {

Engine make_engine() {
  tune_malloc_for_cases(MallocTuning::unless_environment_says);  // the run's cases are made here
  auto e = Engine::create_default();
  if (!e) throw GpuemuException(e.error());
  return std::move(e).value();
}

// One calibration result (CalibrationResult::to_json, or the daemon's) as a line for humans.
void print_calibration(const Json& r) {
  std::cout << std::left << std::setw(20) << r.value("op", "") << std::setw(14)
            << r.value("dtype", "") << " envelope " << std::setw(8) << fmt_number(r["envelope"])
            << " p95 " << std::setw(8) << fmt_number(r["p95"]) << " max " << fmt_number(r["max"])
            << "  (" << r.value("cases", 0) << " cases x "
            << r.value("controls", Json::array()).size() << " controls)\n";
}

// After a calibration: the lines not printed yet (`print_rows`, when not --json), the JSON, and
// the envelope table written to `write_path` with the command that produced it.
void finish_calibration(const Json& results, bool json, std::int64_t cases, std::uint64_t seed,
                        const std::string& write_path, bool print_rows = true) {
  if (!json && print_rows)
    for (const auto& r : results) print_calibration(r);
  if (json) std::cout << results.dump(2) << "\n";
  if (write_path.empty()) return;
  EnvelopeTable table;
  for (const auto& r : results)
    if (auto dt = parse_dtype(r.value("dtype", "")))
      table.set(r.value("op", ""), *dt, r["envelope"].get<double>(), r);
  Json j = table.to_json();
  j["generated_by"] = "gpuemu calibrate --cases " + std::to_string(cases) + " --seed " +
                      std::to_string(seed) + " --write " + write_path;
  std::ofstream out(write_path);
  out << j.dump(2) << "\n";
  if (!out) throw GpuemuException(make_error(ErrorCode::io_error, "cannot write " + write_path));
}


// The custom op `op` of the project's gpuemu.toml (--config, else the nearest one), or null. A
// missing or broken gpuemu.toml only matters when --config names it.
const CustomOp* find_custom_op(const std::string& op, const std::string& config,
                               std::optional<ProjectConfig>& holder) {
  auto cfg = load_project_config(config);
  if (!cfg) {
    if (!config.empty()) throw GpuemuException(cfg.error());
    return nullptr;
  }
  holder = std::move(cfg).value();
  return holder->custom_op(op);
}

Json calibrate_through_daemon(const std::vector<std::string>& ops, const std::vector<std::string>& dtypes,
                              std::int64_t cases, std::uint64_t seed, const std::string& config,
                              bool json) {
  auto client = connect_daemon();
  std::vector<std::string> names = ops;
  if (names.empty())
    for (const auto& o : call_daemon(*client, wire::ListOpsRequest{}).value("ops", Json::array()))
      names.push_back(o.value("name", ""));
  std::optional<ProjectConfig> cfg;
  Json results = Json::array();
  for (const auto& name : names) {
    wire::CalibrateRequest params;
    params.op = name;
    params.cases = cases;
    params.seed = seed;
    params.apply = true;
    params.dtypes = dtypes;
    if (const CustomOp* custom = find_custom_op(name, config, cfg)) {
      params.custom_op = custom->spec();
      if (const Json control = custom->control_spec(); !control.is_null())
        params.controls = Json::array({control});
    }
    const Json r =
        call_daemon_with_progress(*client, params, "calibrate " + name, progress_enabled(json));
    for (const auto& one : r.value("results", Json::array())) results.push_back(one);
  }
  return results;
}

}  // namespace

void register_fuzz_commands(CLI::App& app, CliContext& ctx) {
  auto* fuzz = app.add_subcommand("fuzz", "Fuzz an op against a kernel and judge every case");
  static std::string op, kernel, script, framework = "numpy", python, fuzz_config;
  static std::vector<std::string> envelope_flags;
  static CaseFlags flags;
  static double script_timeout = 60.0;
  static std::int64_t iterations = 100, only_case = -1;
  static std::optional<std::uint64_t> seed;
  static bool json = false, no_daemon = false, fail_fast = false,
              do_minimize = true;
  fuzz->add_option("OP", op, "op name (gpuemu ops list)")->required();
  fuzz->add_option("--kernel", kernel,
                   "a built-in emulated kernel of the op (a control or a known bug)");
  fuzz->add_option("--script", script, "a Python function as the kernel: FILE.py:FUNC");
  fuzz->add_option("--framework", framework, "what --script's function receives: numpy | torch")
      ->check(CLI::IsMember({"numpy", "torch"}));
  fuzz->add_option("--python", python, "interpreter for --script (default: the project's .venv)");
  fuzz->add_option("--timeout", script_timeout, "seconds --script's function may take per case")
      ->check(CLI::PositiveNumber);
  fuzz->add_flag("--no-daemon", no_daemon, "run the engine in this process");
  fuzz->add_option("--iterations,-n", iterations, "number of cases")
      ->check(CLI::Range(1, 10000000));
  fuzz->add_option("--seed", seed, "master seed (random when absent; printed)");
  fuzz->add_option("--case", only_case, "replay only this case index of the run");
  flags.add_to(*fuzz);
  fuzz->add_flag("--fail-fast", fail_fast, "stop at the first failing case");
  fuzz->add_flag("!--no-minimize", do_minimize, "do not minimise the first failure");
  fuzz->add_flag("--json", json, "JSON output");
  fuzz->add_option("--envelope", envelope_flags,
                   "override the envelope: X, or DTYPE=X (repeatable; through the daemon)");
  fuzz->add_option("--config", fuzz_config,
                   "gpuemu.toml holding OP when it is a custom op (default: the nearest one)");
  fuzz->callback([&ctx] {
    if (kernel.empty() == script.empty())
      throw GpuemuException(make_error(ErrorCode::invalid_argument,
                                       "give either --kernel NAME or --script FILE.py:FUNC"));
    Json kernel_spec;
    if (!kernel.empty()) {
      kernel_spec = {{"kind", "builtin"}, {"name", kernel}};
    } else {
      const auto colon = script.rfind(':');
      if (colon == std::string::npos || colon == 0 || colon + 1 == script.size())
        throw GpuemuException(make_error(ErrorCode::invalid_argument,
                                         "--script must be FILE.py:FUNC, got '" + script + "'"));
      std::error_code ec;
      const std::string file = std::filesystem::absolute(script.substr(0, colon), ec).string();
      if (!std::filesystem::exists(file))
        throw GpuemuException(make_error(ErrorCode::invalid_argument, "--script: no file " + file));
      kernel_spec = {{"kind", "script"},
                     {"script", file},
                     {"function", script.substr(colon + 1)},
                     {"framework", framework},
                     {"timeout_s", script_timeout},
                     {"name", script.substr(colon + 1)},
                     {"file", file}};
      if (!python.empty()) kernel_spec["python"] = python;
    }
    const std::string kernel_flags =
        !kernel.empty()
            ? " --kernel " + kernel
            : " --script " + script + (framework != "numpy" ? " --framework " + framework : "");
    // One request, whichever path runs it: the daemon's `fuzz`, or this process's engine
    // (wire::engine_request, as the daemon's handler turns it into the engine's request).
    wire::FuzzRequest wreq;
    wreq.op = op;
    wreq.options = flags.options(op);
    wreq.seed =
        seed ? *seed
             : std::random_device{}() ^ (static_cast<std::uint64_t>(std::random_device{}()) << 32);
    wreq.iterations = iterations;
    wreq.fail_fast = fail_fast;
    wreq.minimize = do_minimize && only_case < 0;
    wreq.kernel = kernel_spec;
    wreq.client = {{"name", "gpuemu-cli"}, {"version", GPUEMU_VERSION_STRING}};
    std::string prefix = "gpuemu fuzz " + op + kernel_flags + (no_daemon ? " --no-daemon" : "");
    prefix += flags.repro_flags();
    std::optional<ProjectConfig> cfg;
    if (const CustomOp* custom = find_custom_op(op, fuzz_config, cfg)) {
      wreq.custom_op = custom->spec();
      prefix += " --config " + cfg->file.string();
    }
    wreq.repro_prefix = prefix;
    for (const auto& e : envelope_flags) {
      const auto eq = e.find('=');
      try {
        if (eq == std::string::npos) {
          wreq.envelope["*"] = std::stod(e);
        } else {
          wreq.envelope[e.substr(0, eq)] = std::stod(e.substr(eq + 1));
        }
      } catch (const std::exception&) {
        throw GpuemuException(make_error(ErrorCode::invalid_argument,
                                         "--envelope must be X or DTYPE=X, got '" + e + "'"));
      }
    }
    const bool extra = !wreq.custom_op.is_null() || !wreq.envelope.is_null();
    FuzzRequest req = wire::engine_request(wreq, *wreq.seed);
    if (no_daemon && extra)
      throw GpuemuException(make_error(ErrorCode::invalid_argument,
                                       "custom ops and --envelope run through the daemon: drop "
                                       "--no-daemon"));
    if (!no_daemon && only_case < 0) {
      ctx.exit_code =
          fuzz_through_daemon(wreq, json, kernel.empty() ? script : kernel, flags.strategy);
      return;
    }
    if (extra)
      throw GpuemuException(make_error(ErrorCode::invalid_argument,
                                       "--case replays in this process, which has no custom ops "
                                       "or envelope overrides: use gpuemu repro ID"));
    Engine engine = make_engine();
    Result<KernelRunner> runner = [&]() -> Result<KernelRunner> {
      if (!kernel.empty()) return engine.builtin_kernel(op, kernel);
      script::ScriptKernelSpec spec;
      spec.script = kernel_spec["script"].get<std::string>();
      spec.function = kernel_spec["function"].get<std::string>();
      spec.framework = framework;
      spec.python = python;
      spec.timeout_s = script_timeout;
      return script::make_script_kernel(spec);
    }();
    if (!runner) throw GpuemuException(runner.error());
    // --case I: the run's case I alone, through the same loop (diagnosed, with its repro).
    if (only_case >= 0) {
      req.start_index = only_case;
      req.iterations = 1;
      req.minimize = 0;
    }
    std::optional<CaseResult> replayed;
    if (only_case >= 0) req.on_case = [&replayed](const CaseResult& r) { replayed = r; };
    const bool tty = isatty(2) && !json && only_case < 0;
    auto report = engine.fuzz(req, *runner, [&](std::int64_t done, std::int64_t total) {
      if (tty) std::cerr << "\r  " << done << "/" << total << std::flush;
    });
    if (tty) std::cerr << "\r\033[K";
    if (!report) throw GpuemuException(report.error());
    if (only_case >= 0 && replayed) {
      const CaseResult& one = report->failures.empty() ? *replayed : report->failures.front();
      if (json)
        std::cout << one.to_json(true).dump(2) << "\n";
      else if (one.verdict.passed)
        std::cout << green("PASS") << " case " << only_case << ": " << one.verdict.message << "\n";
      else
        print_failure_json(one.to_json(false), nullptr);
      ctx.exit_code = one.verdict.passed ? k_exit_ok : k_exit_failed;
      return;
    }
    ctx.exit_code = print_fuzz_report(report->to_json(), json, op, kernel.empty() ? script : kernel,
                                      flags.strategy, req.seed, false);
  });

  auto* cal = app.add_subcommand("calibrate", "Calibrate envelopes from correct controls");
  static std::vector<std::string> cal_ops, cal_dtypes;
  static std::int64_t cal_cases = 200;
  static std::uint64_t cal_seed = 0xC0FFEE;
  static std::string write_path;
  static bool cal_json = false, cal_no_daemon = false;
  static std::string cal_config;
  cal->add_option("OP", cal_ops, "ops (default: every op)");
  cal->add_option("--dtype", cal_dtypes, "dtypes (default: each the op allows)");
  cal->add_option("--cases", cal_cases, "cases per (op, dtype)")->check(CLI::Range(1, 1000000));
  cal->add_option("--seed", cal_seed, "calibration seed");
  cal->add_option("--write", write_path, "write the envelope table to this file");
  cal->add_flag("--json", cal_json, "JSON output");
  cal->add_flag("--no-daemon", cal_no_daemon,
                "calibrate in this process (nothing is applied to the daemon or stored)");
  cal->add_option("--config", cal_config, "gpuemu.toml with the custom ops (default: the nearest)");
  cal->callback([&ctx] {
    if (!cal_no_daemon) {
      // The daemon calibrates, applies the envelopes and stores them with their provenance.
      const Json results =
          calibrate_through_daemon(cal_ops, cal_dtypes, cal_cases, cal_seed, cal_config, cal_json);
      finish_calibration(results, cal_json, cal_cases, cal_seed, write_path);
      ctx.exit_code = k_exit_ok;
      return;
    }
    Engine engine = make_engine();
    std::vector<std::string> ops = cal_ops;
    if (ops.empty())
      for (const OpSchema* s : engine.catalogue().all()) ops.push_back(s->name);
    Json results = Json::array();
    for (const auto& name : ops) {
      auto schema = engine.catalogue().get(name);
      if (!schema) throw GpuemuException(schema.error());
      std::vector<DType> dts;
      for (const auto& d : cal_dtypes) {
        auto dt = parse_dtype(d);
        if (!dt)
          throw GpuemuException(
              make_error(ErrorCode::invalid_argument, "unknown dtype '" + d + "'"));
        dts.push_back(*dt);
      }
      if (dts.empty()) dts = (*schema)->dtypes;
      for (DType dt : dts) {
        auto r = engine.calibrate(name, dt, cal_cases, cal_seed);
        if (!r) throw GpuemuException(r.error());
        results.push_back(r->to_json());
        if (!cal_json) print_calibration(results.back());
      }
    }
    finish_calibration(results, cal_json, cal_cases, cal_seed, write_path, false);
    ctx.exit_code = k_exit_ok;
  });
}

}  // namespace gpuemu::cli
