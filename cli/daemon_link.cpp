// Connecting to the daemon and printing its results.
#include "daemon_link.hpp"

#include <fstream>
#include <iterator>
#include "progress.hpp"

#include <unistd.h>
#include <cmath>
#include <iomanip>
#include <sstream>

namespace gpuemu::cli {

std::unique_ptr<DaemonClient> connect_daemon(const DaemonAddress& where, bool autostart) {
  ClientOptions o;
  o.autostart = autostart;
  o.url = where.url;
  o.token_file = where.token_file;
  o.timeout = std::chrono::milliseconds(0);  // fuzz runs may be long: no per-call limit by default
  if (const char* t = std::getenv("GPUEMU_TIMEOUT_S"))
    o.timeout = std::chrono::milliseconds(static_cast<long>(std::atof(t) * 1000));
  auto c = DaemonClient::connect(o);
  if (!c) throw GpuemuException(c.error());
  return std::move(c).value();
}

Json call_daemon(DaemonClient& client, const std::string& method, Json params,
                 protocol::Frame* reply) {
  auto r = client.call_json(method, std::move(params), std::nullopt, reply);
  if (!r) throw GpuemuException(r.error());
  return std::move(r).value();
}

bool use_color() {
  return isatty(1) && !std::getenv("NO_COLOR");
}
std::string red(const std::string& s) {
  return use_color() ? "\033[31m" + s + "\033[0m" : s;
}
std::string green(const std::string& s) {
  return use_color() ? "\033[32m" + s + "\033[0m" : s;
}

std::string read_input_file(const std::string& path) {
  std::ifstream file;
  std::istream* in = &std::cin;
  if (path != "-") {
    file.open(path, std::ios::binary);
    if (!file) throw GpuemuException(make_error(ErrorCode::invalid_argument, "cannot read " + path));
    in = &file;
  }
  return std::string((std::istreambuf_iterator<char>(*in)), std::istreambuf_iterator<char>());
}

void write_export(const std::string& path, const std::string& text, std::size_t count,
                  const std::string& what, std::ostream& out) {
  if (path.empty()) {
    out << text;
    return;
  }
  std::ofstream file(path);
  file << text;
  if (!file) throw GpuemuException(make_error(ErrorCode::io_error, "cannot write " + path));
  std::cerr << "exported " << count << " " << what << " to " << path << "\n";
}

std::string fmt_number(const Json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_number()) return v.dump();
  std::ostringstream os;
  os << std::setprecision(4) << v.get<double>();
  return os.str();
}

namespace {

std::string dims_text(const Json& dims) {
  std::string s;
  for (const auto& [k, v] : dims.items()) s += (s.empty() ? "" : " ") + k + "=" + v.dump();
  return s;
}

std::string layouts_text(const Json& layouts) {
  std::string s;
  for (const auto& [k, v] : layouts.items())
    if (v.is_string() && v.get<std::string>() != "contiguous")
      s += (s.empty() ? "" : " ") + k + "=" + v.get<std::string>();
  return s.empty() ? "contiguous" : s;
}

}  // namespace

void print_failure_json(const Json& f, const Json* minimized, std::ostream& out) {
  out << "\n"
      << red("FAIL") << " case " << f.value("index", Json()).dump() << "  seed "
      << f.value("seed", Json()).dump() << "  " << f.value("dtype", "") << "  "
      << dims_text(f.value("dims", Json::object()))
      << "  layouts: " << layouts_text(f.value("layouts", Json::object())) << "\n";
  if (f.contains("attrs") && !f["attrs"].empty())
    out << "  attrs:      " << f["attrs"].dump() << "\n";
  out << "  verdict:    " << f.value("message", "") << "\n";
  const Json verdict = f.value("verdict", Json::object());
  for (const auto& o : verdict.value("outputs", Json::array())) {
    if (o.value("passed", true) || o.value("worst_index", -1) < 0) continue;
    std::string coords;
    for (const auto& x : o["worst_coords"]) coords += (coords.empty() ? "" : ", ") + x.dump();
    out << "  worst:      " << o.value("name", "") << "[" << coords << "] got "
        << fmt_number(o["worst_out"]) << ", expected " << fmt_number(o["worst_ref"]) << " (error "
        << fmt_number(o["max_error"]) << " vs envelope "
        << fmt_number(verdict.value("envelope", Json())) << ", " << o.value("failing", 0)
        << " failing elements)\n";
  }
  const Json d = f.value("diagnosis", Json::object());
  out << "  diagnosis:  " << d.value("bug_class", "") << ": " << d.value("summary", "") << "\n";
  for (const auto& e : d.value("evidence", Json::array()))
    out << "              - " << e.get<std::string>() << "\n";
  if (minimized) out << "  minimized:  " << minimized->value("summary", "") << "\n";
  if (f.contains("id")) out << "  stored:     " << f["id"].get<std::string>() << "\n";
  out << "  repro:      " << f.value("repro", "") << "\n";
  if (f.contains("replay")) out << "  replay:     " << f["replay"].get<std::string>() << "\n";
}

int print_fuzz_report(const Json& r, bool json, const std::string& op,
                      const std::string& kernel_label, const std::string& strategy,
                      std::uint64_t seed, bool stored, std::ostream& out) {
  const auto failures = r.value("failures", Json::array());
  if (json) {
    out << r.dump(2) << "\n";
    return failures.empty() ? k_exit_ok : k_exit_failed;
  }
  out << "gpuemu fuzz " << op << "  kernel " << kernel_label << "  strategy " << strategy
      << "  seed " << seed << "  cases " << r.value("total", 0) << "\n";
  if (failures.empty()) {
    out << green("PASSED") << " " << r.value("passed", 0) << "/" << r.value("total", 0)
        << " cases in " << fmt_number(r.value("elapsed", Json(0.0))) << " s\n";
    return k_exit_ok;
  }
  out << red("FAILED") << " " << r.value("failed", 0) << "/" << r.value("total", 0)
      << " cases (first failure at case " << r.value("first_failure", -1) << ") in "
      << fmt_number(r.value("elapsed", Json(0.0))) << " s\n";
  const Json* minimized = r.contains("minimized") ? &r["minimized"] : nullptr;
  print_failure_json(failures.front(), minimized, out);
  if (failures.size() > 1) {
    out << "\n  other failing cases:";
    for (std::size_t i = 1; i < failures.size() && i < 12; ++i)
      out << " " << failures[i].value("index", Json()).dump();
    if (failures.size() > 12) out << " ...";
    out << "\n";
    if (stored) out << "  all stored: gpuemu failures list --op " << op << "\n";
  }
  return k_exit_failed;
}

int fuzz_through_daemon(const DaemonAddress& where, const wire::FuzzRequest& req, bool json,
                        const std::string& kernel_label, const std::string& strategy,
                        std::ostream& out) {
  auto client = connect_daemon(where);
  const Json r = call_daemon_with_progress(where, *client, req, req.op, progress_enabled(json));
  return print_fuzz_report(r, json, req.op, kernel_label, strategy, req.seed.value_or(0), req.store,
                           out);
}

}  // namespace gpuemu::cli
