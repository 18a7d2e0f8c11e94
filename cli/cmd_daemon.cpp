// gpuemu daemon start | stop | status | logs.
#include "cmd_daemon.hpp"
#include "daemon_link.hpp"

#include <unistd.h>
#include <csignal>
#include <deque>
#include <filesystem>
#include <fstream>
#include <thread>

namespace gpuemu::cli {
namespace {

std::unique_ptr<DaemonClient> try_connect() {
  ClientOptions o;
  o.autostart = false;
  auto c = DaemonClient::connect(o);
  if (!c) {
    if (c.error().code == ErrorCode::unavailable) return nullptr;
    throw GpuemuException(c.error());
  }
  return std::move(c).value();
}

// Running. A zombie that nobody reaped yet counts as gone (the daemon's parent may not reap it),
// but only once every thread of it has exited: the thread-group leader turns zombie as soon as its
// own thread ends, while the others may still be exiting and holding the process's descriptors
// and mappings (its store, its log), so "stopped" would come too early for anyone who then
// unmounts, remounts read-only or reopens the home.
bool process_alive(long pid) {
  if (pid <= 0 || kill(static_cast<pid_t>(pid), 0) != 0) return false;
  const std::string proc = "/proc/" + std::to_string(pid);
  std::ifstream stat(proc + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const auto close = text.rfind(')');
  if (close == std::string::npos || close + 2 >= text.size()) return true;
  const char state = text[close + 2];
  if (state != 'Z' && state != 'X') return true;
  std::error_code ec;
  std::size_t threads = 0;
  for (auto it = std::filesystem::directory_iterator(proc + "/task", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec))
    ++threads;
  return !ec && threads > 1;
}

Json status_json(DaemonClient& c) {
  Json s = call_daemon(c, wire::StatsRequest{});
  s["running"] = true;
  return s;
}

void print_status(const Json& s, std::ostream& out) {
  out << "gpuemu-daemon " << s.value("version", "") << " running\n"
      << "  pid:      " << s.value("pid", 0) << "\n"
      << "  socket:   " << s.value("socket", "") << "\n"
      << "  home:     " << s.value("home", "") << "\n"
      << "  uptime:   " << fmt_number(s.value("uptime_s", Json(0.0))) << " s\n"
      << "  requests: " << s.value("requests", 0) << " (" << s.value("in_flight", 0)
      << " in flight, " << s.value("errors", 0) << " errors)\n";
  if (s.contains("store"))
    out << "  store:    " << s["store"].value("failures", 0) << " failures, "
        << s["store"].value("calibrations", 0) << " calibrations, "
        << s["store"].value("baselines", 0) << " baselines, " << s["store"].value("runs", 0)
        << " runs (" << s["store"].value("dir", "") << ")\n";
}

}  // namespace

int run_daemon_start(const DaemonStartOptions& o, const DaemonAddress& daemon, std::ostream& out) {
  if (o.foreground) {
    const std::string bin = find_daemon_binary();
    if (bin.empty())
      throw GpuemuException(make_error(ErrorCode::tool_missing, "gpuemu-daemon not found"));
    execl(bin.c_str(), bin.c_str(), "--foreground", static_cast<char*>(nullptr));
    throw GpuemuException(make_error(ErrorCode::tool_missing, "cannot run " + bin));
  }
  auto c = connect_daemon(daemon, true);
  Json s = status_json(*c);
  s["started"] = c->started_daemon();
  if (o.json)
    out << s.dump(2) << "\n";
  else
    out << (c->started_daemon() ? "started" : "already running") << ": pid " << s.value("pid", 0)
        << " on " << s.value("socket", "") << "\n";
  return k_exit_ok;
}

int run_daemon_stop(const DaemonStopOptions& o, std::ostream& out) {
  auto c = try_connect();
  if (!c) {
    if (o.json)
      out << Json{{"running", false}, {"stopped", false}}.dump(2) << "\n";
    else
      out << "no daemon is running\n";
    return k_exit_ok;
  }
  const Json r = call_daemon(*c, wire::ShutdownRequest{});
  const long pid = r.value("pid", 0L);
  c.reset();
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<long>(o.wait_s * 1000));
  bool gone = false;
  while (std::chrono::steady_clock::now() < deadline) {
    if (!process_alive(pid)) {
      gone = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (o.json)
    out << Json{{"running", !gone}, {"stopped", gone}, {"pid", pid}}.dump(2) << "\n";
  else
    out << (gone ? "stopped" : "still stopping") << ": pid " << pid << "\n";
  return gone ? k_exit_ok : k_exit_failed;
}

int run_daemon_status(const DaemonStatusOptions& o, std::ostream& out) {
  auto c = try_connect();
  if (!c) {
    const auto paths = protocol::home_paths();
    if (o.json)
      out << Json{{"running", false}, {"socket", paths.socket}, {"home", paths.home}}.dump(2)
          << "\n";
    else
      out << "no daemon is running for " << paths.home << "\n";
    return k_exit_failed;
  }
  const Json s = status_json(*c);
  if (o.json)
    out << s.dump(2) << "\n";
  else
    print_status(s, out);
  return k_exit_ok;
}

int run_daemon_raw(const DaemonRawOptions& o, std::istream& in, std::ostream& out) {
  std::string message((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto c = try_connect();
  if (!c) throw GpuemuException(make_error(ErrorCode::unavailable, "no daemon is running"));
  auto r =
      c->call_raw(std::span(reinterpret_cast<const std::byte*>(message.data()), message.size()),
                  std::chrono::milliseconds(static_cast<long>(o.timeout_s * 1000)));
  if (!r) throw GpuemuException(r.error());
  out.write(reinterpret_cast<const char*>(r->data()), static_cast<std::streamsize>(r->size()));
  out.flush();
  return k_exit_ok;
}

int run_daemon_logs(const DaemonLogsOptions& o, std::ostream& out) {
  const std::string path = protocol::home_paths().logs_dir + "/daemon.log";
  std::ifstream in(path);
  if (!in) throw GpuemuException(make_error(ErrorCode::not_found, "no log at " + path));
  std::deque<std::string> tail;
  std::string line;
  while (std::getline(in, line)) {
    tail.push_back(line);
    if (tail.size() > o.lines) tail.pop_front();
  }
  for (const auto& l : tail) out << l << "\n";
  out << std::flush;
  while (o.follow) {
    in.clear();
    while (std::getline(in, line)) out << line << "\n" << std::flush;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return k_exit_ok;
}

void register_daemon_commands(CLI::App& app, CliContext& ctx) {
  auto* daemon =
      app.add_subcommand("daemon", "Start, stop and inspect the gpuemu daemon of $GPUEMU_HOME");
  daemon->require_subcommand(1);

  auto* start =
      daemon->add_subcommand("start", "Start the daemon (nothing to do when one is running)");
  auto start_opts = std::make_shared<DaemonStartOptions>();
  start->add_flag("--foreground", start_opts->foreground,
                  "run it in this terminal (logs on stderr)");
  start->add_flag("--json", start_opts->json, "JSON output");
  start->callback(
      [&ctx, start_opts] { ctx.exit_code = run_daemon_start(*start_opts, ctx.daemon, std::cout); });

  auto* stop =
      daemon->add_subcommand("stop", "Stop the daemon gracefully (in-flight requests finish)");
  auto stop_opts = std::make_shared<DaemonStopOptions>();
  stop->add_flag("--json", stop_opts->json, "JSON output");
  stop->add_option("--wait", stop_opts->wait_s, "seconds to wait for it to exit");
  stop->callback([&ctx, stop_opts] { ctx.exit_code = run_daemon_stop(*stop_opts, std::cout); });

  auto* status =
      daemon->add_subcommand("status", "Is a daemon running? pid, socket, version, uptime");
  auto status_opts = std::make_shared<DaemonStatusOptions>();
  status->add_flag("--json", status_opts->json, "JSON output");
  status->callback(
      [&ctx, status_opts] { ctx.exit_code = run_daemon_status(*status_opts, std::cout); });

  auto* raw = daemon->add_subcommand("raw",
                                     "Send one message read from stdin as is (a frame, or any "
                                     "bytes) and write the reply to stdout");
  auto raw_opts = std::make_shared<DaemonRawOptions>();
  raw->add_option("--timeout", raw_opts->timeout_s, "seconds to wait for the reply");
  raw->callback(
      [&ctx, raw_opts] { ctx.exit_code = run_daemon_raw(*raw_opts, std::cin, std::cout); });

  auto* logs = daemon->add_subcommand("logs", "Print the daemon's log");
  auto logs_opts = std::make_shared<DaemonLogsOptions>();
  logs->add_option("-n,--lines", logs_opts->lines, "last N lines");
  logs->add_flag("-f,--follow", logs_opts->follow, "keep printing as the log grows");
  logs->callback([&ctx, logs_opts] { ctx.exit_code = run_daemon_logs(*logs_opts, std::cout); });
}

}  // namespace gpuemu::cli
