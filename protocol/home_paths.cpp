// Where a daemon lives: $GPUEMU_HOME and the paths under it (docs/protocol.md, "Discovery").
#include "gpuemu/protocol/protocol.hpp"

#include <pwd.h>
#include <unistd.h>
#include <cstdlib>

namespace gpuemu::protocol {

HomePaths home_paths(const std::string& home) {
  HomePaths p;
  p.home = home;
  p.run_dir = home + "/run";
  p.socket = p.run_dir + "/gpuemu.sock";
  p.url = "ipc://" + p.socket;
  p.lock = p.run_dir + "/gpuemu.lock";
  p.info = p.run_dir + "/daemon.json";
  p.logs_dir = home + "/logs";
  p.store_dir = home + "/store";
  return p;
}

HomePaths home_paths() {
  if (const char* h = std::getenv("GPUEMU_HOME"); h && *h) return home_paths(std::string(h));
  std::string user_home;
  if (const char* h = std::getenv("HOME"); h && *h) user_home = h;
  else if (const passwd* pw = getpwuid(getuid())) user_home = pw->pw_dir;
  else user_home = "/tmp";
  return home_paths(user_home + "/.gpuemu");
}

}  // namespace gpuemu::protocol
