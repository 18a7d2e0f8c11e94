// The LSP methods and gpuemu's own requests (docs/protocol.md, "The editor's requests").
#include "lsp/lsp_server.hpp"
#include "lsp/op_runner.hpp"
#include "lsp/registered_ops.hpp"

#include <algorithm>
#include <cstdlib>

namespace gpuemu::lsp {
namespace {

// The path of params.textDocument.uri.
Result<std::string> document_path(const Json& params) {
  GPUEMU_TRY(const Json* doc, object_at(params, "textDocument", "params"));
  GPUEMU_TRY(std::string uri, string_at(*doc, "uri", "params.textDocument"));
  return uri_to_path(uri);
}

Result<std::string> first_string_argument(const Json& params) {
  const Json args = params.value("arguments", Json::array());
  if (!args.is_array() || args.empty() || !args[0].is_string())
    return make_error(ErrorCode::invalid_argument,
                      "params.arguments[0]: expected a failure id (a string)");
  return args[0].get<std::string>();
}

}  // namespace

Result<Json> LspServer::initialize(const Json& params) {
  std::string root;
  if (params.contains("rootUri") && params["rootUri"].is_string())
    root = uri_to_path(params["rootUri"].get<std::string>());
  else if (params.contains("rootPath") && params["rootPath"].is_string())
    root = params["rootPath"].get<std::string>();
  else if (params.contains("workspaceFolders") && params["workspaceFolders"].is_array() &&
           !params["workspaceFolders"].empty())
    root = uri_to_path(params["workspaceFolders"][0].value("uri", ""));
  m_workspace.set_root(root);
  const Json init = params.value("initializationOptions", Json::object());
  if (init.is_object()) {
    if (init.contains("home") && init["home"].is_string() &&
        !init["home"].get<std::string>().empty())
      m_options.home = init["home"].get<std::string>();
    if (init.contains("python") && init["python"].is_string() &&
        !init["python"].get<std::string>().empty())
      m_actions.python = init["python"].get<std::string>();
    if (init.contains("pollIntervalMs") && init["pollIntervalMs"].is_number_integer())
      m_options.poll_ms = std::max(50, init["pollIntervalMs"].get<int>());
  }
  const Json caps = params.value("capabilities", Json::object());
  m_show_document = caps.is_object() && caps.value("window", Json::object()).is_object() &&
                    caps.value("window", Json::object())
                        .value("showDocument", Json::object())
                        .value("support", false);
  m_daemon = std::make_unique<DaemonSession>(m_options.home, m_options.daemon_path);
  m_initialized = true;
  return Json{{"capabilities",
               {{"textDocumentSync",
                 {{"openClose", true}, {"change", 1}, {"save", {{"includeText", false}}}}},
                {"codeActionProvider", {{"codeActionKinds", {"quickfix"}}}},
                {"executeCommandProvider", {{"commands", {k_cmd_reproduce, k_cmd_minimize}}}},
                {"completionProvider", {{"triggerCharacters", {"[", "=", "\"", " ", ","}}}},
                {"hoverProvider", true}}},
              {"serverInfo", {{"name", "gpuemu lsp"}, {"version", GPUEMU_VERSION_STRING}}}};
}

void LspServer::handle_request(const std::string& method, const Json& id, const Json& params) {
  if (method == "initialize") return reply_result(id, initialize(params));
  if (!m_initialized)
    return m_transport.reply_error(id, k_server_not_initialized, "initialize first");
  if (method == "shutdown") {
    m_shutdown = true;
    m_stop = true;
    m_jobs_cv.notify_all();
    return m_transport.reply(id, nullptr);
  }
  if (method == "textDocument/codeAction") {
    const Json ctx = params.value("context", Json::object());
    return m_transport.reply(id, failure_code_actions(ctx.value("diagnostics", Json::array())));
  }
  if (method == "textDocument/completion" || method == "textDocument/hover") {
    auto path = document_path(params);
    if (!path) return reply_result(id, path.error());
    auto pos = position_at(params, "position", "params");
    if (!pos) return reply_result(id, pos.error());
    if (!is_project_file(*path)) return m_transport.reply(id, nullptr);
    const std::string text = m_workspace.text(*path);
    if (method == "textDocument/completion")
      return m_transport.reply(
          id, {{"isIncomplete", false}, {"items", toml_completion(text, *pos, catalogue())}});
    auto hover = toml_hover(text, *pos, catalogue());
    return m_transport.reply(id, hover ? *hover : Json());
  }
  if (method == "workspace/executeCommand") {
    auto command = string_at(params, "command", "params");
    if (!command) return reply_result(id, command.error());
    if (*command != k_cmd_reproduce && *command != k_cmd_minimize)
      return m_transport.reply_error(id, k_invalid_params, "unknown command '" + *command + "'");
    auto fid = first_string_argument(params);
    if (!fid) return reply_result(id, fid.error());
    const bool reproduce = *command == k_cmd_reproduce;
    return post([this, id, reproduce, f = *fid] {
      auto r = reproduce ? reproduce_failure(*m_daemon, f, m_actions)
                         : minimize_failure(*m_daemon, f, m_actions);
      if (r) {
        m_transport.notify(
            "window/showMessage",
            {{"type", 3}, {"message", "gpuemu: " + r->value("summary", std::string())}});
        if (r->contains("uri") && m_show_document)
          m_transport.request("window/showDocument", {{"uri", (*r)["uri"]}, {"takeFocus", true}});
      } else {
        m_transport.notify("window/showMessage",
                           {{"type", 1}, {"message", "gpuemu: " + r.error().message}});
      }
      reply_result(id, r);
      if (refresh(false)) publish();
    });
  }
  if (method == "gpuemu/ops") {
    std::lock_guard lock(m_state);
    return m_transport.reply(id, registered_ops(m_workspace, m_runs, m_groups));
  }
  if (method == "gpuemu/failures") {
    std::lock_guard lock(m_state);
    return m_transport.reply(id, {{"groups", failures_view(m_groups)}});
  }
  if (method == "gpuemu/failure") {
    auto fid = string_at(params, "id", "params");
    if (!fid) return reply_result(id, fid.error());
    return post([this, id, f = *fid] {
      auto r = m_daemon->call(wire::failures_get(f), true);
      if (r) {
        r->erase("case");  // its tensors stay with the daemon; the webview needs the meta
        for (const char* k : {"seed", "master_seed"})  // 64-bit: text for JavaScript
          if (r->contains(k) && (*r)[k].is_number()) (*r)[k] = (*r)[k].dump();
      }
      reply_result(id, r);
    });
  }
  if (method == "gpuemu/runOps") {
    const Json ids = params.value("ids", Json());
    const bool quick = params.value("quick", false);
    return post([this, id, ids, quick] {
      auto cfg = m_workspace.runnable_config();
      if (!cfg) return reply_result(id, cfg.error());
      Json results = Json::array();
      for (std::size_t i = 0; i < cfg->ops.size(); ++i) {
        const std::string eid = entry_id(cfg->ops[i], i);
        if (ids.is_array() && std::find(ids.begin(), ids.end(), Json(eid)) == ids.end()) continue;
        results.push_back(run_entry(*m_daemon, *cfg, i, RunOptions{quick}));
      }
      if (refresh(true)) publish();
      reply_result(id, Json{{"results", results}});
    });
  }
  if (method == "gpuemu/daemon") {
    const std::string action = params.value("action", "status");
    return post([this, id, action] {
      Result<Json> r =
          make_error(ErrorCode::invalid_argument, "params.action: expected status, start or stop");
      // stats and shutdown are answered on the daemon's transport thread at once: a daemon that
      // does not answer within the bound is not serving (it may be stuck going away).
      const std::chrono::seconds bound{10};
      if (action == "status") {
        r = m_daemon->call(wire::StatsRequest{}, false, bound);
        if (r)
          (*r)["running"] = true;
        else
          r = Json{{"running", false}, {"home", m_daemon->home()}};
      } else if (action == "start") {
        r = m_daemon->call(wire::StatsRequest{}, true);
        if (r) (*r)["running"] = true;
      } else if (action == "stop") {
        r = m_daemon->call(wire::ShutdownRequest{}, false, bound);
        m_daemon->disconnect();
      }
      reply_result(id, r);
    });
  }
  m_transport.reply_error(id, k_method_not_found, "unknown method '" + method + "'");
}

void LspServer::handle_notification(const std::string& method, const Json& params) {
  if (method == "initialized") {
    if (!m_poller.joinable() && m_daemon) {
      post([this] {
        // Connect to (or start) the workspace's daemon once; the poller takes over from there.
        (void)m_daemon->call(wire::HelloRequest{"gpuemu-lsp", protocol::k_protocol_version}, true);
      });
      m_poller = std::thread([this] { poll_loop(); });
    }
    return;
  }
  if (!m_initialized) return;
  if (method == "textDocument/didOpen") {
    const Json doc = params.value("textDocument", Json::object());
    if (!doc.is_object() || !doc.contains("uri") || !doc.contains("text")) return;
    return did_open_or_change(uri_to_path(doc.value("uri", "")), doc.value("text", ""));
  }
  if (method == "textDocument/didChange") {
    auto path = document_path(params);
    const Json changes = params.value("contentChanges", Json::array());
    if (!path || !changes.is_array() || changes.empty()) return;
    return did_open_or_change(*path, changes.back().value("text", ""));
  }
  if (method == "textDocument/didClose") {
    if (auto path = document_path(params)) m_workspace.close(*path);
    return;
  }
  if (method == "textDocument/didSave") {
    if (auto path = document_path(params)) did_save(*path);
    return;
  }
}

void LspServer::did_open_or_change(const std::string& path, std::string text) {
  m_workspace.open(path, std::move(text));
  post([this] { publish(); });  // a def may have moved; gpuemu.toml re-checked
}

void LspServer::did_save(const std::string& path) {
  if (is_project_file(path)) {
    post([this] { publish(); });
    return;
  }
  post([this, path] {
    auto cfg = m_workspace.runnable_config();
    if (!cfg) return;
    const auto entries = entries_for_script(*cfg, path);
    if (entries.empty()) return;
    Json results = Json::array();
    for (std::size_t i : entries)
      results.push_back(run_entry(*m_daemon, *cfg, i, RunOptions{true}));
    if (refresh(true)) publish();
    m_transport.notify("gpuemu/validated", {{"uri", path_to_uri(path)}, {"results", results}});
  });
}

}  // namespace gpuemu::lsp
