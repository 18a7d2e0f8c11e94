// Progress bars for long daemon-driven runs (gpuemu fuzz, ci, calibrate): drawn on stderr only
// when stderr is a terminal and the command prints no JSON; NO_COLOR turns their colour off.
//
// The daemon answers one request with one reply, so progress comes from a second connection: the
// long request carries a `progress_token` and a thread polls the fast `progress` request with it
// (docs/protocol.md) while the calling thread waits for the reply.
#pragma once

#include "daemon_link.hpp"

#include <string>

namespace gpuemu::cli {

// Whether a bar may be drawn: stderr is a TTY, TERM is not "dumb", and `json` is false.
bool progress_enabled(bool json);

// One bar line: "  label [#######.........]  40/100" (width 24), as drawn.
std::string progress_line(const std::string& label, std::int64_t done, std::int64_t total,
                          bool color);

// `request` (wire::FuzzRequest, wire::CalibrateRequest) on `client` (a client of the daemon at
// `where`), drawing a bar labelled `label` while it runs when `enabled` (the request then carries a
// progress_token, polled with `progress` from a second connection to `where`). Errors are thrown,
// as call_daemon's.
std::string new_progress_token();
Json call_daemon_with_progress(const DaemonAddress& where, DaemonClient& client,
                               const std::string& method, Json params, const std::string& token,
                               const std::string& label, bool enabled);
template <class Request>
Json call_daemon_with_progress(const DaemonAddress& where, DaemonClient& client, Request request,
                               const std::string& label, bool enabled) {
  if (enabled) request.progress_token = new_progress_token();
  const std::string token = request.progress_token;
  return call_daemon_with_progress(where, client, std::string(Request::k_method), to_json(request),
                                   token, label, enabled);
}

}  // namespace gpuemu::cli
