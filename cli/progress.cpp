// Progress bars over the daemon's `progress` request (progress.hpp).
#include "progress.hpp"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>

namespace gpuemu::cli {

bool progress_enabled(bool json) {
  if (json || !isatty(2)) return false;
  const char* term = std::getenv("TERM");
  return !(term && std::strcmp(term, "dumb") == 0);
}

std::string progress_line(const std::string& label, std::int64_t done, std::int64_t total,
                          bool color) {
  constexpr int k_width = 24;
  const double f = total > 0 ? std::min(1.0, static_cast<double>(done) / static_cast<double>(total))
                             : 0.0;
  const int filled = static_cast<int>(f * k_width);
  std::string bar = std::string(static_cast<std::size_t>(filled), '#');
  std::string rest = std::string(static_cast<std::size_t>(k_width - filled), '.');
  if (color) bar = "\033[32m" + bar + "\033[0m";
  return "  " + label + " [" + bar + rest + "] " + std::to_string(done) + "/" +
         std::to_string(total);
}

std::string new_progress_token() {
  std::random_device rd;
  return "p" + std::to_string(rd()) + std::to_string(rd());
}

Json call_daemon_with_progress(const DaemonAddress& where, DaemonClient& client,
                               const std::string& method, Json params, const std::string& token,
                               const std::string& label, bool enabled) {
  if (!enabled) return call_daemon(client, method, std::move(params));
  const bool color = !std::getenv("NO_COLOR");
  std::mutex m;
  std::condition_variable cv;
  bool finished = false;
  std::cerr << "  " << label << " ...\r" << std::flush;
  std::thread poller([&] {
    std::unique_ptr<DaemonClient> watcher;
    try {
      watcher = connect_daemon(where, false);
    } catch (const GpuemuException&) {
      return;  // no bar, the run goes on
    }
    std::unique_lock lock(m);
    while (!cv.wait_for(lock, std::chrono::milliseconds(200), [&] { return finished; })) {
      lock.unlock();
      auto r = watcher->request(wire::ProgressRequest{token});
      lock.lock();
      if (finished) break;
      if (r && r->value("running", false))
        std::cerr << "\r" << progress_line(label, r->value("done", std::int64_t{0}),
                                           r->value("total", std::int64_t{0}), color)
                  << "\033[K" << std::flush;
    }
  });
  auto finish = [&] {
    {
      std::lock_guard lock(m);
      finished = true;
    }
    cv.notify_all();
    poller.join();
    std::cerr << "\r\033[K" << std::flush;
  };
  try {
    Json r = call_daemon(client, method, std::move(params));
    finish();
    return r;
  } catch (...) {
    finish();
    throw;
  }
}

}  // namespace gpuemu::cli
