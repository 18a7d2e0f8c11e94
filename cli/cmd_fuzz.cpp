// gpuemu fuzz: through the daemon (which stores every failure) or in this process with
// --no-daemon; the kernel under test is a built-in emulated kernel (--kernel) or a Python function
// (--script FILE.py:FUNC). And gpuemu calibrate.
#include "cmd_fuzz.hpp"
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
void print_calibration(const Json& r, std::ostream& out) {
  out << std::left << std::setw(20) << r.value("op", "") << std::setw(14) << r.value("dtype", "")
      << " envelope " << std::setw(8) << fmt_number(r["envelope"]) << " p95 " << std::setw(8)
      << fmt_number(r["p95"]) << " max " << fmt_number(r["max"]) << "  (" << r.value("cases", 0)
      << " cases x " << r.value("controls", Json::array()).size() << " controls)\n";
}

// After a calibration: the lines not printed yet (`print_rows`, when not --json), the JSON, and
// the envelope table written to `write_path` with the command that produced it.
void finish_calibration(const Json& results, const CalibrateOptions& o, std::ostream& out,
                        bool print_rows = true) {
  const std::string& write_path = o.write_path;
  if (!o.json && print_rows)
    for (const auto& r : results) print_calibration(r, out);
  if (o.json) out << results.dump(2) << "\n";
  if (write_path.empty()) return;
  EnvelopeTable table;
  for (const auto& r : results)
    if (auto dt = parse_dtype(r.value("dtype", "")))
      table.set(r.value("op", ""), *dt, r["envelope"].get<double>(), r);
  Json j = table.to_json();
  j["generated_by"] = "gpuemu calibrate --cases " + std::to_string(o.cases) + " --seed " +
                      std::to_string(o.seed) + " --write " + write_path;
  std::ofstream file(write_path);
  file << j.dump(2) << "\n";
  if (!file) throw GpuemuException(make_error(ErrorCode::io_error, "cannot write " + write_path));
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

Json calibrate_through_daemon(const CalibrateOptions& o, const DaemonAddress& daemon) {
  auto client = connect_daemon(daemon);
  std::vector<std::string> names = o.ops;
  if (names.empty())
    for (const auto& op : call_daemon(*client, wire::ListOpsRequest{}).value("ops", Json::array()))
      names.push_back(op.value("name", ""));
  std::optional<ProjectConfig> cfg;
  Json results = Json::array();
  for (const auto& name : names) {
    wire::CalibrateRequest params;
    params.op = name;
    params.cases = o.cases;
    params.seed = o.seed;
    params.apply = true;
    params.dtypes = o.dtypes;
    if (const CustomOp* custom = find_custom_op(name, o.config, cfg)) {
      params.custom_op = custom->spec();
      if (const Json control = custom->control_spec(); !control.is_null())
        params.controls = Json::array({control});
    }
    const Json r = call_daemon_with_progress(daemon, *client, params, "calibrate " + name,
                                             progress_enabled(o.json));
    for (const auto& one : r.value("results", Json::array())) results.push_back(one);
  }
  return results;
}

// The kernel under test as the request's `kernel` spec: a built-in one, or a Python function.
Json kernel_spec_of(const FuzzCommandOptions& o) {
  if (o.kernel.empty() == o.script.empty())
    throw GpuemuException(make_error(ErrorCode::invalid_argument,
                                     "give either --kernel NAME or --script FILE.py:FUNC"));
  if (!o.kernel.empty()) return {{"kind", "builtin"}, {"name", o.kernel}};
  const auto colon = o.script.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == o.script.size())
    throw GpuemuException(make_error(ErrorCode::invalid_argument,
                                     "--script must be FILE.py:FUNC, got '" + o.script + "'"));
  std::error_code ec;
  const std::string file = std::filesystem::absolute(o.script.substr(0, colon), ec).string();
  if (!std::filesystem::exists(file))
    throw GpuemuException(make_error(ErrorCode::invalid_argument, "--script: no file " + file));
  Json spec = {{"kind", "script"},
               {"script", file},
               {"function", o.script.substr(colon + 1)},
               {"framework", o.framework},
               {"timeout_s", o.script_timeout_s},
               {"name", o.script.substr(colon + 1)},
               {"file", file}};
  if (!o.python.empty()) spec["python"] = o.python;
  return spec;
}

// --envelope X / DTYPE=X as the request's envelope overrides.
Json envelope_overrides(const std::vector<std::string>& flags) {
  Json envelope;
  for (const auto& e : flags) {
    const auto eq = e.find('=');
    try {
      if (eq == std::string::npos)
        envelope["*"] = std::stod(e);
      else
        envelope[e.substr(0, eq)] = std::stod(e.substr(eq + 1));
    } catch (const std::exception&) {
      throw GpuemuException(make_error(ErrorCode::invalid_argument,
                                       "--envelope must be X or DTYPE=X, got '" + e + "'"));
    }
  }
  return envelope;
}

// One request, whichever path runs it: the daemon's `fuzz`, or this process's engine
// (wire::engine_request, as the daemon's handler turns it into the engine's request).
wire::FuzzRequest fuzz_request_of(const FuzzCommandOptions& o) {
  const Json kernel_spec = kernel_spec_of(o);
  const std::string kernel_flags =
      !o.kernel.empty()
          ? " --kernel " + o.kernel
          : " --script " + o.script + (o.framework != "numpy" ? " --framework " + o.framework : "");
  wire::FuzzRequest wreq;
  wreq.op = o.op;
  wreq.options = o.flags.options(o.op);
  wreq.seed =
      o.seed ? *o.seed
             : std::random_device{}() ^ (static_cast<std::uint64_t>(std::random_device{}()) << 32);
  wreq.iterations = o.iterations;
  wreq.fail_fast = o.fail_fast;
  wreq.minimize = o.minimize && o.only_case < 0;
  wreq.kernel = kernel_spec;
  wreq.client = {{"name", "gpuemu-cli"}, {"version", GPUEMU_VERSION_STRING}};
  std::string prefix = "gpuemu fuzz " + o.op + kernel_flags + (o.no_daemon ? " --no-daemon" : "");
  prefix += o.flags.repro_flags();
  std::optional<ProjectConfig> cfg;
  if (const CustomOp* custom = find_custom_op(o.op, o.config, cfg)) {
    wreq.custom_op = custom->spec();
    prefix += " --config " + cfg->file.string();
  }
  wreq.repro_prefix = prefix;
  Json envelope = envelope_overrides(o.envelope);
  if (!envelope.is_null()) wreq.envelope = std::move(envelope);
  return wreq;
}

Result<KernelRunner> make_runner(Engine& engine, const FuzzCommandOptions& o,
                                 const Json& kernel_spec) {
  if (!o.kernel.empty()) return engine.builtin_kernel(o.op, o.kernel);
  script::ScriptKernelSpec spec;
  spec.script = kernel_spec["script"].get<std::string>();
  spec.function = kernel_spec["function"].get<std::string>();
  spec.framework = o.framework;
  spec.python = o.python;
  spec.timeout_s = o.script_timeout_s;
  return script::make_script_kernel(spec);
}

// The run in this process's engine: a whole run (--no-daemon), or its case --case I alone through
// the same loop (diagnosed, with its repro).
int fuzz_in_process(const FuzzCommandOptions& o, const wire::FuzzRequest& wreq, std::ostream& out) {
  FuzzRequest req = wire::engine_request(wreq, *wreq.seed);
  Engine engine = make_engine();
  Result<KernelRunner> runner = make_runner(engine, o, wreq.kernel);
  if (!runner) throw GpuemuException(runner.error());
  const bool one_case = o.only_case >= 0;
  if (one_case) {
    req.start_index = o.only_case;
    req.iterations = 1;
    req.minimize = 0;
  }
  std::optional<CaseResult> replayed;
  if (one_case) req.on_case = [&replayed](const CaseResult& r) { replayed = r; };
  const bool tty = isatty(2) && !o.json && !one_case;
  auto report = engine.fuzz(req, *runner, [&](std::int64_t done, std::int64_t total) {
    if (tty) std::cerr << "\r  " << done << "/" << total << std::flush;
  });
  if (tty) std::cerr << "\r\033[K";
  if (!report) throw GpuemuException(report.error());
  const std::string label = o.kernel.empty() ? o.script : o.kernel;
  if (!one_case || !replayed)
    return print_fuzz_report(report->to_json(), o.json, o.op, label, o.flags.strategy, req.seed,
                             false, out);
  const CaseResult& one = report->failures.empty() ? *replayed : report->failures.front();
  if (o.json)
    out << one.to_json(true).dump(2) << "\n";
  else if (one.verdict.passed)
    out << green("PASS") << " case " << o.only_case << ": " << one.verdict.message << "\n";
  else
    print_failure_json(one.to_json(false), nullptr, out);
  return one.verdict.passed ? k_exit_ok : k_exit_failed;
}

// gpuemu calibrate --no-daemon: every (op, dtype) in this process; the rows printed as they come.
Json calibrate_in_process(const CalibrateOptions& o, std::ostream& out) {
  Engine engine = make_engine();
  std::vector<std::string> ops = o.ops;
  if (ops.empty())
    for (const OpSchema* s : engine.catalogue().all()) ops.push_back(s->name);
  Json results = Json::array();
  for (const auto& name : ops) {
    auto schema = engine.catalogue().get(name);
    if (!schema) throw GpuemuException(schema.error());
    std::vector<DType> dts;
    for (const auto& d : o.dtypes) {
      auto dt = parse_dtype(d);
      if (!dt)
        throw GpuemuException(make_error(ErrorCode::invalid_argument, "unknown dtype '" + d + "'"));
      dts.push_back(*dt);
    }
    if (dts.empty()) dts = (*schema)->dtypes;
    for (DType dt : dts) {
      auto r = engine.calibrate(name, dt, o.cases, o.seed);
      if (!r) throw GpuemuException(r.error());
      results.push_back(r->to_json());
      if (!o.json) print_calibration(results.back(), out);
    }
  }
  return results;
}

}  // namespace

int run_fuzz(const FuzzCommandOptions& o, const DaemonAddress& daemon, std::ostream& out) {
  const wire::FuzzRequest wreq = fuzz_request_of(o);
  const bool extra = !wreq.custom_op.is_null() || !wreq.envelope.is_null();
  if (o.no_daemon && extra)
    throw GpuemuException(make_error(ErrorCode::invalid_argument,
                                     "custom ops and --envelope run through the daemon: drop "
                                     "--no-daemon"));
  if (!o.no_daemon && o.only_case < 0)
    return fuzz_through_daemon(daemon, wreq, o.json, o.kernel.empty() ? o.script : o.kernel,
                               o.flags.strategy, out);
  if (extra)
    throw GpuemuException(make_error(ErrorCode::invalid_argument,
                                     "--case replays in this process, which has no custom ops "
                                     "or envelope overrides: use gpuemu repro ID"));
  return fuzz_in_process(o, wreq, out);
}

int run_calibrate(const CalibrateOptions& o, const DaemonAddress& daemon, std::ostream& out) {
  if (!o.no_daemon) {
    // The daemon calibrates, applies the envelopes and stores them with their provenance.
    finish_calibration(calibrate_through_daemon(o, daemon), o, out);
    return k_exit_ok;
  }
  finish_calibration(calibrate_in_process(o, out), o, out, false);
  return k_exit_ok;
}

namespace {

void register_fuzz_command(CLI::App& app, CliContext& ctx) {
  auto* fuzz = app.add_subcommand("fuzz", "Fuzz an op against a kernel and judge every case");
  auto o = std::make_shared<FuzzCommandOptions>();
  fuzz->add_option("OP", o->op, "op name (gpuemu ops list)")->required();
  fuzz->add_option("--kernel", o->kernel,
                   "a built-in emulated kernel of the op (a control or a known bug)");
  fuzz->add_option("--script", o->script, "a Python function as the kernel: FILE.py:FUNC");
  fuzz->add_option("--framework", o->framework, "what --script's function receives: numpy | torch")
      ->check(CLI::IsMember({"numpy", "torch"}));
  fuzz->add_option("--python", o->python,
                   "interpreter for --script (default: the project's .venv)");
  fuzz->add_option("--timeout", o->script_timeout_s,
                   "seconds --script's function may take per case")
      ->check(CLI::PositiveNumber);
  fuzz->add_flag("--no-daemon", o->no_daemon, "run the engine in this process");
  fuzz->add_option("--iterations,-n", o->iterations, "number of cases")
      ->check(CLI::Range(1, 10000000));
  fuzz->add_option("--seed", o->seed, "master seed (random when absent; printed)");
  fuzz->add_option("--case", o->only_case, "replay only this case index of the run");
  o->flags.add_to(*fuzz);
  fuzz->add_flag("--fail-fast", o->fail_fast, "stop at the first failing case");
  fuzz->add_flag("!--no-minimize", o->minimize, "do not minimise the first failure");
  fuzz->add_flag("--json", o->json, "JSON output");
  fuzz->add_option("--envelope", o->envelope,
                   "override the envelope: X, or DTYPE=X (repeatable; through the daemon)");
  fuzz->add_option("--config", o->config,
                   "gpuemu.toml holding OP when it is a custom op (default: the nearest one)");
  fuzz->callback([&ctx, o] { ctx.exit_code = run_fuzz(*o, ctx.daemon, std::cout); });
}

void register_calibrate_command(CLI::App& app, CliContext& ctx) {
  auto* cal = app.add_subcommand("calibrate", "Calibrate envelopes from correct controls");
  auto o = std::make_shared<CalibrateOptions>();
  cal->add_option("OP", o->ops, "ops (default: every op)");
  cal->add_option("--dtype", o->dtypes, "dtypes (default: each the op allows)");
  cal->add_option("--cases", o->cases, "cases per (op, dtype)")->check(CLI::Range(1, 1000000));
  cal->add_option("--seed", o->seed, "calibration seed");
  cal->add_option("--write", o->write_path, "write the envelope table to this file");
  cal->add_flag("--json", o->json, "JSON output");
  cal->add_flag("--no-daemon", o->no_daemon,
                "calibrate in this process (nothing is applied to the daemon or stored)");
  cal->add_option("--config", o->config, "gpuemu.toml with the custom ops (default: the nearest)");
  cal->callback([&ctx, o] { ctx.exit_code = run_calibrate(*o, ctx.daemon, std::cout); });
}

}  // namespace

void register_fuzz_commands(CLI::App& app, CliContext& ctx) {
  register_fuzz_command(app, ctx);
  register_calibrate_command(app, ctx);
}

}  // namespace gpuemu::cli
