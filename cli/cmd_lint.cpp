// `gpuemu lint`: flags in, service call, document out. Everything else lives in gpuemu_lint
// (include/gpuemu/lint/lint.hpp); see docs/lint.md.
#include "cmd_lint.hpp"
#include "daemon_link.hpp"

#include "gpuemu/lint/lint.hpp"

#include <filesystem>
#include <fstream>
#include <memory>

namespace gpuemu::cli {
namespace {

namespace fs = std::filesystem;

// The policy: --config, else ./gpuemu.toml when present, else the defaults.
Result<lint::LintPolicy> load_policy_for(const LintOptions& o) {
  if (!o.config.empty()) return lint::load_policy(o.config);
  std::error_code ec;
  if (fs::is_regular_file("gpuemu.toml", ec)) return lint::load_policy("gpuemu.toml");
  return lint::LintPolicy{};
}

}  // namespace

int run_lint(const LintOptions& o, const DaemonAddress& daemon_address, std::ostream& out) {
  if (o.paths.empty())
    return print_error("lint: no input files (give .cu, .ptx, .cubin or a directory)");
  if (o.json && o.format != "text" && o.format != "json")
    return print_error("lint: --json conflicts with --format " + o.format);
  auto format = lint::parse_output_format(o.json ? "json" : o.format);
  if (!format) return print_error(format.error().message);
  auto policy = load_policy_for(o);
  if (!policy) return print_error(policy.error().message);

  lint::LintRequest request;
  for (const std::string& p : o.paths) request.inputs.emplace_back(p);
  request.arches = o.arches.empty() ? policy->arches : o.arches;
  request.nvcc_flags = policy->nvcc_flags;
  request.nvcc_flags.insert(request.nvcc_flags.end(), o.nvcc_flags.begin(), o.nvcc_flags.end());
  for (const std::string& d : o.tools_dirs) request.tool_dirs.emplace_back(d);
  request.sass_histogram = !o.no_disasm;
  request.line_info = !o.no_lineinfo;

  if (!o.baseline.empty() && !o.baseline_tag.empty())
    return print_error("lint: give --baseline FILE or --baseline-tag TAG, not both");
  std::optional<lint::Baseline> baseline;
  if (!o.baseline.empty()) {
    auto loaded = lint::load_baseline(o.baseline);
    if (!loaded) return print_error(loaded.error().message);
    baseline = std::move(*loaded);
  }
  std::unique_ptr<DaemonClient> daemon;
  if (!o.baseline_tag.empty() || !o.save_baseline_tag.empty())
    daemon = connect_daemon(daemon_address);
  if (!o.baseline_tag.empty()) {
    const Json stored = call_daemon(*daemon, wire::BaselinesRequest{"get", o.baseline_tag, Json()});
    auto loaded = lint::baseline_from_json(stored.value("baseline", Json()));
    if (!loaded)
      return print_error("baseline tag '" + o.baseline_tag + "': " + loaded.error().message);
    baseline = std::move(*loaded);
  }
  auto report = lint::analyze(request);
  if (!report) return print_error(report.error().message);
  lint::LintVerdict verdict = lint::evaluate(*report, baseline ? &*baseline : nullptr, *policy);

  std::string document = lint::render(*report, verdict, *format);
  if (o.output.empty()) {
    out << document << std::flush;
  } else {
    std::ofstream file(o.output, std::ios::binary | std::ios::trunc);
    if (!(file << document)) return print_error(o.output + ": cannot write the report");
  }
  if (!o.save_baseline.empty()) {
    Status saved = lint::save_baseline(lint::make_baseline(*report), o.save_baseline);
    if (!saved) return print_error(saved.error().message);
  }
  if (!o.save_baseline_tag.empty())
    call_daemon(*daemon, wire::BaselinesRequest{"put", o.save_baseline_tag,
                                                Json(lint::make_baseline(*report))});
  return verdict.failed() ? k_exit_failed : k_exit_ok;
}

void register_lint_commands(CLI::App& app, CliContext& ctx) {
  auto options = std::make_shared<LintOptions>();
  CLI::App* cmd = app.add_subcommand(
      "lint", "Static gate on compiled kernels: registers, spills, SASS size, instruction mix");
  cmd->add_option("paths", options->paths,
                  ".cu, .ptx or .cubin files, or Triton cache directories");
  cmd->add_option("--arch", options->arches,
                  "Target(s) for .cu/.ptx inputs, e.g. sm_90 (repeat or comma-separate)")
      ->delimiter(',')
      ->allow_extra_args(false);
  cmd->add_flag("--json", options->json, "Print the JSON report (same as --format json)");
  cmd->add_option("--format", options->format, "Output: text, json, sarif or junit")
      ->check(CLI::IsMember({"text", "json", "sarif", "junit"}));
  cmd->add_option("--output,-o", options->output, "Write the report to FILE instead of stdout");
  cmd->add_option("--save-baseline", options->save_baseline,
                  "Write the measured metrics as a baseline FILE");
  cmd->add_option("--baseline", options->baseline,
                  "Compare against a baseline FILE (exit 1 on regression)");
  cmd->add_option("--save-baseline-tag", options->save_baseline_tag,
                  "Also store the baseline in the daemon's store under TAG");
  cmd->add_option("--baseline-tag", options->baseline_tag,
                  "Compare against the baseline stored in the daemon under TAG");
  cmd->add_option("--config", options->config, "Policy file (default: ./gpuemu.toml when present)");
  // One value per occurrence, so that `--arch sm_90 k.cu` does not take k.cu as a second arch.
  cmd->add_option("--nvcc-flag", options->nvcc_flags,
                  "Extra nvcc argument for .cu inputs (repeatable; --nvcc-flag=-Iinc)")
      ->allow_extra_args(false);
  cmd->add_option("--tools-dir", options->tools_dirs,
                  "Look for nvcc/ptxas/cuobjdump only in DIR (repeatable)")
      ->allow_extra_args(false);
  cmd->add_flag("--no-disasm", options->no_disasm,
                "Skip the SASS opcode histogram even if cuobjdump is present");
  cmd->add_flag("--no-lineinfo", options->no_lineinfo, "Compile .cu without -lineinfo");
  cmd->callback([options, &ctx] { ctx.exit_code = run_lint(*options, ctx.daemon, std::cout); });
}

}  // namespace gpuemu::cli
