// The daemon through the C++ client: a real gpuemu-daemon (started by the client's autostart) on a
// temporary GPUEMU_HOME with its own LMDB store. Client-side kernels via get_test_batch and
// submit_outputs, the input-mutation check, concurrent requests, shutdown. The daemon's log is
// printed when a test fails.
#include "gpuemu/protocol/client.hpp"
#include "gpuemu/engine/engine.hpp"
#include "gpuemu/protocol/wire/wire.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include <sys/wait.h>
#include <unistd.h>

namespace gpuemu {
namespace {
namespace fs = std::filesystem;

class DaemonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpuemu-daemon-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    m_home = tmpl;
    m_options.home = m_home;
    m_options.daemon_path = GPUEMU_BIN_DIR "/gpuemu-daemon";
    m_options.timeout = std::chrono::minutes(5);
    auto c = DaemonClient::connect(m_options);
    ASSERT_TRUE(c.ok()) << c.error().message;
    m_client = std::move(c).value();
  }

  void TearDown() override {
    if (HasFailure()) {
      std::ifstream log(m_home + "/logs/daemon.log");
      std::cerr << "---- daemon log ----\n" << log.rdbuf() << "\n";
    }
    if (m_client) (void)m_client->call_json("shutdown");
    m_client.reset();
    // Wait for the socket to go away before removing the home.
    for (int i = 0; i < 500 && fs::exists(m_home + "/run/gpuemu.sock"); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    fs::remove_all(m_home);
  }

  Json call(const std::string& method, Json params, protocol::Frame* reply = nullptr) {
    auto r = m_client->call_json(method, std::move(params), std::nullopt, reply);
    EXPECT_TRUE(r.ok()) << method << ": " << r.error().message;
    return r.ok() ? *r : Json();
  }

  static Engine& engine() {
    static Engine e = [] {
      auto cat = Catalogue::load({GPUEMU_SOURCE_DIR "/schemas/ops"});
      return Engine(*cat, EnvelopeTable{});
    }();
    return e;
  }

  // Runs a built-in kernel on each case of a batch and submits its outputs.
  Json run_batch(const std::string& op, const std::string& kernel, int count, std::uint64_t seed,
                 bool mutate_first_input = false) {
    protocol::Frame batch;
    Json b = call("get_test_batch", {{"op", op}, {"count", count}, {"seed", seed}}, &batch);
    auto runner = engine().builtin_kernel(op, kernel);
    EXPECT_TRUE(runner.ok());
    protocol::Frame req = protocol::make_request(
        "submit_outputs",
        {{"op", op},
         {"items", Json::array()},
         {"kernel", {{"kind", "client"}, {"name", kernel}, {"file", "kernels.cu"}, {"line", 42}}}});
    for (int i = 0; i < count; ++i) {
      auto c = protocol::case_from_frame(b["cases"][i], batch, "cases/" + std::to_string(i) + "/");
      EXPECT_TRUE(c.ok()) << c.error().message;
      auto outs = (*runner)(*c);
      EXPECT_TRUE(outs.ok());
      const std::string prefix = "items/" + std::to_string(i) + "/";
      req.header["params"]["items"].push_back({{"case", b["cases"][i]}});
      for (std::size_t k = 0; k < outs->size(); ++k)
        req.add(prefix + "outputs/" + std::to_string(k), (*outs)[k]);
      for (auto& [name, t] : c->inputs) {
        Tensor sent = t.contiguous();
        if (mutate_first_input && i == 0 && name == c->inputs.begin()->first)
          sent.set_flat(0, sent.get_flat(0) + 1.0);
        req.add(prefix + "inputs/" + name, sent);
      }
    }
    auto reply = m_client->call(std::move(req));
    EXPECT_TRUE(reply.ok());
    auto r = protocol::reply_result(*reply);
    EXPECT_TRUE(r.ok()) << r.error().message;
    return r.ok() ? *r : Json();
  }

  std::string m_home;
  ClientOptions m_options;
  std::unique_ptr<DaemonClient> m_client;
};

TEST_F(DaemonTest, AutostartHelloAndStats) {
  EXPECT_TRUE(m_client->started_daemon());
  const Json& hello = m_client->hello();
  EXPECT_EQ(hello["protocol"], protocol::k_protocol_version);
  EXPECT_EQ(hello["home"], m_home);
  EXPECT_NE(std::find(hello["capabilities"].begin(), hello["capabilities"].end(), "submit_outputs"),
            hello["capabilities"].end());
  Json s = call("stats", Json::object());
  EXPECT_GT(s["pid"].get<long>(), 0);
  EXPECT_EQ(s["store"]["failures"], 0);
  // A second client finds the running daemon instead of starting another.
  auto second = DaemonClient::connect(m_options);
  ASSERT_TRUE(second.ok());
  EXPECT_FALSE((*second)->started_daemon());
  EXPECT_EQ((*second)->hello()["pid"], hello["pid"]);
}

TEST_F(DaemonTest, ClientSideKernelsAreJudgedAndFailuresStored) {
  Json good = run_batch("softmax", "fp32_online", 8, 5);
  for (const auto& r : good["results"]) EXPECT_TRUE(r["passed"].get<bool>()) << r.dump();
  Json bad = run_batch("softmax", "tail_leak", 8, 5);
  int failed = 0;
  for (const auto& r : bad["results"])
    if (!r["passed"].get<bool>()) {
      ++failed;
      EXPECT_TRUE(r.contains("failure_id"));
      EXPECT_EQ(r["repro"], "gpuemu repro " + r["failure_id"].get<std::string>());
    }
  EXPECT_GT(failed, 0);
  Json list = call("failures", {{"action", "list"}});
  ASSERT_EQ(list["failures"].size(), static_cast<std::size_t>(failed));
  EXPECT_EQ(list["failures"][0]["kernel"]["file"], "kernels.cu");
  EXPECT_EQ(list["failures"][0]["kernel"]["line"], 42);
  // A client kernel cannot be re-run by the daemon: reproduce hands the exact case back.
  protocol::Frame rep;
  Json r = call("reproduce", {{"id", list["failures"][0]["id"]}}, &rep);
  EXPECT_TRUE(r["passed"].is_null());
  EXPECT_TRUE(r["regenerated_identical"].get<bool>());
  EXPECT_FALSE(rep.tensors.empty());
}

TEST_F(DaemonTest, InputsWrittenByTheKernelFailTheCase) {
  Json r = run_batch("softmax", "fp32_online", 3, 9, /*mutate_first_input=*/true);
  EXPECT_FALSE(r["results"][0]["passed"].get<bool>());
  EXPECT_NE(r["results"][0]["message"].get<std::string>().find("input mutated"), std::string::npos);
  EXPECT_TRUE(r["results"][1]["passed"].get<bool>());
}

TEST_F(DaemonTest, ValidateJudgesInputsTheClientChose) {
  Tensor x = Tensor::from_values(DType::float32, {2, 3}, std::vector<double>{1, 2, 3, -1, 0, 1});
  std::vector<double> out(6);
  for (int r = 0; r < 2; ++r) {
    double m = -1e300, s = 0;
    for (int c = 0; c < 3; ++c) m = std::max(m, x.get_flat(r * 3 + c));
    for (int c = 0; c < 3; ++c) s += std::exp(x.get_flat(r * 3 + c) - m);
    for (int c = 0; c < 3; ++c) out[r * 3 + c] = std::exp(x.get_flat(r * 3 + c) - m) / s;
  }
  for (bool wrong : {false, true}) {
    std::vector<double> o = out;
    if (wrong) o[2] *= 1.01;
    protocol::Frame req = protocol::make_request("validate", {{"op", "softmax"}});
    req.add("inputs/x", x);
    req.add("outputs/0", Tensor::from_values(DType::float32, {2, 3}, o));
    auto reply = m_client->call(std::move(req));
    ASSERT_TRUE(reply.ok());
    auto v = protocol::reply_result(*reply);
    ASSERT_TRUE(v.ok()) << v.error().message;
    EXPECT_EQ((*v)["passed"].get<bool>(), !wrong) << v->dump();
  }
}

TEST_F(DaemonTest, PingIsAnsweredWhileLongRequestsRun) {
  // Long enough to be running when the pings go out: 400 cases (about 2.5 s here; 40 took 0.27 s
  // once generation got faster, and the run had ended before the first ping)
  auto fuzz = std::async(std::launch::async, [&] {
    auto c = DaemonClient::connect(m_options);
    return (*c)->call_json("fuzz", {{"op", "softmax"},
                                    {"kernel", {{"kind", "builtin"}, {"name", "fp32_online"}}},
                                    {"iterations", 400},
                                    {"seed", 1}});
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  int pings = 0;
  while (fuzz.wait_for(std::chrono::milliseconds(0)) != std::future_status::ready && pings < 20) {
    auto p = m_client->call_json("ping", Json::object(), std::chrono::seconds(5));
    ASSERT_TRUE(p.ok()) << p.error().message;
    ++pings;
  }
  auto r = fuzz.get();
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ((*r)["total"], 400);
  EXPECT_GT(pings, 0);
}

TEST_F(DaemonTest, ProgressOfARunIsPolledFromAnotherConnection) {
  auto fuzz = std::async(std::launch::async, [&] {
    auto c = DaemonClient::connect(m_options);
    return (*c)->call_json("fuzz", {{"op", "softmax"},
                                    {"kernel", {{"kind", "builtin"}, {"name", "fp32_online"}}},
                                    {"iterations", 300},  // running for a while (~2 s)
                                    {"seed", 2},
                                    {"progress_token", "t1"}});
  });
  std::int64_t seen_total = 0;
  while (fuzz.wait_for(std::chrono::milliseconds(20)) != std::future_status::ready) {
    auto p = m_client->call_json("progress", {{"token", "t1"}}, std::chrono::seconds(5));
    ASSERT_TRUE(p.ok()) << p.error().message;
    if ((*p)["running"].get<bool>()) {
      EXPECT_LE((*p)["done"].get<std::int64_t>(), (*p)["total"].get<std::int64_t>());
      seen_total = (*p)["total"].get<std::int64_t>();
    }
  }
  ASSERT_TRUE(fuzz.get().ok());
  EXPECT_EQ(seen_total, 300);
  // Gone with the request.
  EXPECT_FALSE(call("progress", {{"token", "t1"}})["running"].get<bool>());
}

TEST_F(DaemonTest, EnvelopeOverridesAndCustomOpsAreCheckedWithCodes) {
  const Json kernel = {{"kind", "builtin"}, {"name", "tail_leak"}};
  auto e = m_client->call_json("fuzz", {{"op", "softmax"}, {"kernel", kernel}, {"envelope", -1}});
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().code, ErrorCode::invalid_argument);
  e = m_client->call_json("fuzz", {{"op", "softmax"}, {"kernel", kernel}, {"envelope", {{"float7", 3}}}});
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().message, "'envelope': unknown dtype 'float7'");
  // A custom op may not shadow a catalogue op; a schema error names the file and line.
  std::ifstream in(std::string(GPUEMU_SOURCE_DIR) + "/schemas/ops/softmax.json");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  e = m_client->call_json("fuzz", {{"op", "softmax"}, {"kernel", kernel},
                                   {"custom_op", {{"schema", text}, {"schema_file", "/x/softmax.json"}}}});
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().code, ErrorCode::conflict) << e.error().message;
  e = m_client->call_json("fuzz", {{"op", "softmax"}, {"kernel", kernel},
                                   {"custom_op", {{"schema", "{\n \"name\": 3\n}"},
                                                  {"schema_file", "/x/mine.json"}}}});
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.error().message.find("/x/mine.json:2"), std::string::npos) << e.error().message;
  // A passing override is reported as what judged the run.
  Json r = call("fuzz", {{"op", "softmax"}, {"kernel", kernel}, {"iterations", 3}, {"seed", 4},
                         {"options", {{"dtypes", {"float32"}}}}, {"envelope", {{"float32", 1e30}}}});
  EXPECT_EQ(r["failed"], 0);
  EXPECT_EQ(r["envelope"]["float32"]["source"], "override");
}

TEST_F(DaemonTest, ParamsOfTheWrongTypeAreNamedAndLooseInputIsKept) {
  auto e = m_client->call_json("fuzz", {{"op", "softmax"},
                                        {"kernel", {{"kind", "builtin"}, {"name", "fp32_online"}}},
                                        {"iterations", "many"}});
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().code, ErrorCode::invalid_argument);
  EXPECT_EQ(e.error().message, "parameter 'iterations' has the wrong type");
  e = m_client->call_json("failures", {{"limit", "ten"}});  // was an internal error
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().code, ErrorCode::invalid_argument);
  EXPECT_EQ(e.error().message, "parameter 'limit' has the wrong type");
  e = m_client->call_json("describe_op", Json::object());
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().message, "the request needs a string 'op'");
  e = m_client->call_json("get_test_batch", {{"op", "softmax"}, {"seed", -3}});
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().message, "'seed' must be a non-negative integer");
  // A seed as a signed integer and a count as a float are read as before.
  const Json b =
      call("get_test_batch", {{"op", "softmax"}, {"seed", Json(std::int64_t{7})}, {"count", 2.0}});
  EXPECT_EQ(b["master_seed"], 7);
  EXPECT_EQ(b["cases"].size(), 2u);
  // The typed client call sends the struct.
  auto ops = m_client->request(wire::ListOpsRequest{});
  ASSERT_TRUE(ops.ok());
  EXPECT_FALSE((*ops)["ops"].empty());
  wire::GetTestBatchRequest g;
  g.op = "softmax";
  g.count = 1;
  g.seed = 7;
  auto again = m_client->request(g);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)["cases"][0], b["cases"][0]);
}

TEST_F(DaemonTest, ErrorsCarryTheirCodesAndShutdownStopsTheDaemon) {
  auto e = m_client->call_json("describe_op", {{"op", "sofmax"}});
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().code, ErrorCode::unknown_op);
  e = m_client->call_json("failures", {{"action", "get"}, {"id", "f0123456789abcdef"}});
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().code, ErrorCode::not_found);
  e = m_client->call_json("fuzz", {{"op", "softmax"}, {"kernel", {{"kind", "cuda"}}}});
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().code, ErrorCode::invalid_argument);
  e = m_client->call_json("nonsense");
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().code, ErrorCode::protocol_error);
  ASSERT_TRUE(m_client->call_json("shutdown").ok());
  m_client.reset();
  ClientOptions no_start = m_options;
  no_start.autostart = false;
  bool gone = false;
  for (int i = 0; i < 500 && !gone; ++i) {
    auto c = DaemonClient::connect(no_start);
    gone = !c.ok() && c.error().code == ErrorCode::unavailable;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(gone);
}

TEST(DaemonStart, ADaemonThatCannotStartIsAClearError) {
  ClientOptions o;
  o.home = "/tmp/gpuemu-daemon-test-nostart";
  o.daemon_path = "/bin/false";
  o.start_timeout = std::chrono::seconds(2);
  auto c = DaemonClient::connect(o);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().code, ErrorCode::unavailable);
  EXPECT_NE(c.error().message.find("/bin/false"), std::string::npos);
  o.daemon_path = "/nonexistent/gpuemu-daemon";
  c = DaemonClient::connect(o);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().code, ErrorCode::tool_missing);
  std::filesystem::remove_all(o.home);
}

}  // namespace
}  // namespace gpuemu

namespace gpuemu {
namespace {

// Runs gpuemu-daemon with arguments (it detaches itself once it serves); returns its exit status.
int run_daemon(const std::vector<std::string>& args) {
  std::string cmd = GPUEMU_BIN_DIR "/gpuemu-daemon";
  for (const auto& a : args) cmd += " '" + a + "'";
  cmd += " 2>/dev/null";
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

TEST(DaemonTcp, TokenGatedListener) {
  char tmpl[] = "/tmp/gpuemu-daemon-tcp-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string home = tmpl;
  const std::string token_file = home + "/token";
  { std::ofstream(token_file) << "short\n"; }
  const std::string url = "tcp://127.0.0.1:" + std::to_string(20000 + getpid() % 20000);
  // A token under 16 characters is refused before anything listens.
  EXPECT_NE(run_daemon({"--home", home, "--tcp", url, "--token-file", token_file}), 0);
  { std::ofstream(token_file) << "0123456789abcdef-secret\n"; }
  ASSERT_EQ(run_daemon({"--home", home, "--tcp", url, "--token-file", token_file}), 0);
  ClientOptions tcp;
  tcp.url = url;
  tcp.autostart = false;
  tcp.token = "0123456789abcdef-secret";
  auto good = DaemonClient::connect(tcp);
  ASSERT_TRUE(good.ok()) << good.error().message;
  EXPECT_TRUE((*good)->call_json("ping").ok());
  tcp.token = "0123456789abcdef-wrong!";
  auto bad = DaemonClient::connect(tcp);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, ErrorCode::invalid_argument);
  EXPECT_NE(bad.error().message.find("token"), std::string::npos);
  // The local socket needs no token.
  ClientOptions local;
  local.home = home;
  local.autostart = false;
  auto ipc = DaemonClient::connect(local);
  ASSERT_TRUE(ipc.ok()) << ipc.error().message;
  ASSERT_TRUE((*ipc)->call_json("shutdown").ok());
  for (int i = 0; i < 500 && fs::exists(home + "/run/gpuemu.sock"); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  fs::remove_all(home);
}

TEST(DaemonLocal, RefusesOtherUsersEvenWhenTheSocketIsOpenedUp) {
  // Another uid needs root to become (setpriv); CI runs as root.
  if (geteuid() != 0 || std::system("command -v setpriv >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "needs root and setpriv to act as another user";
  char tmpl[] = "/tmp/gpuemu-daemon-peer-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string home = tmpl;
  ASSERT_EQ(run_daemon({"--home", home}), 0);
  // Open the directory and the socket to everyone: the peer's uid still decides.
  fs::permissions(home, fs::perms::all & ~fs::perms::others_write & ~fs::perms::group_write);
  fs::permissions(home + "/run", fs::perms::all & ~fs::perms::others_write & ~fs::perms::group_write);
  fs::permissions(home + "/run/gpuemu.sock", fs::perms::all);
  const std::string out = home + "/other.txt";
  const std::string cmd = "GPUEMU_HOME='" + home + "' setpriv --reuid=65534 --regid=65534 " +
                          "--clear-groups " GPUEMU_BIN_DIR "/gpuemu daemon status > /dev/null 2> '" +
                          out + "'";
  const int rc = std::system(cmd.c_str());
  EXPECT_NE(rc, 0);
  std::ifstream in(out);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("serves only its own user"), std::string::npos) << text;
  // Its own user is served.
  ClientOptions local;
  local.home = home;
  local.autostart = false;
  auto own = DaemonClient::connect(local);
  ASSERT_TRUE(own.ok()) << own.error().message;
  ASSERT_TRUE((*own)->call_json("shutdown").ok());
  for (int i = 0; i < 500 && fs::exists(home + "/run/gpuemu.sock"); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  fs::remove_all(home);
}

// A frame of raw bytes: the magic, the header's length, the header, zero padding to 64, then
// `payload` bytes.
std::vector<std::byte> raw_frame(const std::string& header, std::size_t payload = 0) {
  std::string raw = "GEMU";
  for (int i = 0; i < 4; ++i) raw += static_cast<char>((header.size() >> (8 * i)) & 0xff);
  raw += header;
  raw.resize((raw.size() + 63) / 64 * 64 + payload, '\0');
  std::vector<std::byte> out(raw.size());
  std::memcpy(out.data(), raw.data(), raw.size());
  return out;
}

TEST(DaemonTcp, RemoteClientsAreBoundedAndMayNotRunScriptsOrShutDown) {
  char tmpl[] = "/tmp/gpuemu-daemon-remote-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string home = tmpl;
  const std::string secret = "0123456789abcdef-remote";
  const std::string token_file = home + "/token";
  { std::ofstream(token_file) << secret << "\n"; }
  const std::string url = "tcp://127.0.0.1:" + std::to_string(20000 + (getpid() + 7919) % 20000);
  // A short $GPUEMU_TOKEN is refused as a short token file is, when a tcp listener would use it.
  setenv("GPUEMU_TOKEN", "short-token", 1);
  EXPECT_NE(run_daemon({"--home", home, "--tcp", url}), 0);
  unsetenv("GPUEMU_TOKEN");
  ASSERT_EQ(run_daemon({"--home", home, "--tcp", url, "--token-file", token_file,
                        "--tcp-max-message-mb", "1"}),
            0);
  ClientOptions tcp;
  tcp.url = url;
  tcp.autostart = false;
  tcp.token = secret;
  auto c = DaemonClient::connect(tcp);
  ASSERT_TRUE(c.ok()) << c.error().message;
  auto& remote = *c;
  // The token is checked before anything but the header is decoded: a frame whose tensor
  // descriptor is malformed gets the token error with a wrong token, the descriptor's with the
  // right one.
  const std::string bad_tensor = R"("method":"ping","v":1,"tensors":[{"dtype":"float32"}]})";
  for (const auto& [token, expect] : {std::pair{std::string("0123456789abcdef-wrong!!"), "token"},
                                      std::pair{secret, "descriptor"}}) {
    auto reply = remote->call_raw(raw_frame(R"({"token":")" + token + "\"," + bad_tensor),
                                  std::chrono::seconds(10));
    ASSERT_TRUE(reply.ok()) << reply.error().message;
    auto frame = protocol::decode(*reply);
    ASSERT_TRUE(frame.ok());
    auto result = protocol::reply_result(*frame);
    ASSERT_FALSE(result.ok());
    EXPECT_NE(result.error().message.find(expect), std::string::npos) << result.error().message;
  }
  // Over the limit (1 MiB): dropped unread, and the daemon goes on serving.
  auto big = remote->call_raw(
      raw_frame(R"({"token":")" + secret + R"(","method":"ping","v":1})", std::size_t{2} << 20),
      std::chrono::seconds(3));
  EXPECT_FALSE(big.ok());
  auto again = DaemonClient::connect(tcp);
  ASSERT_TRUE(again.ok()) << again.error().message;
  EXPECT_TRUE((*again)->call_json("ping").ok());
  // No script kernel and no shutdown for a tcp client.
  auto script = (*again)->call_json(
      "fuzz", {{"op", "softmax"},
               {"kernel", {{"kind", "script"}, {"script", home + "/k.py"}, {"function", "f"}}},
               {"iterations", 2}});
  ASSERT_FALSE(script.ok());
  EXPECT_NE(script.error().message.find("--allow-remote-scripts"), std::string::npos)
      << script.error().message;
  auto stop = (*again)->call_json("shutdown");
  ASSERT_FALSE(stop.ok());
  EXPECT_NE(stop.error().message.find("--allow-remote-shutdown"), std::string::npos);
  EXPECT_TRUE((*again)->call_json("ping").ok());
  // The local socket may do both.
  ClientOptions local;
  local.home = home;
  local.autostart = false;
  auto ipc = DaemonClient::connect(local);
  ASSERT_TRUE(ipc.ok()) << ipc.error().message;
  auto local_script = (*ipc)->call_json(
      "fuzz", {{"op", "softmax"},
               {"kernel", {{"kind", "script"}, {"script", home + "/k.py"}, {"function", "f"}}},
               {"iterations", 2}});
  if (!local_script.ok()) {  // (the script does not exist: any error but the remote one)
    EXPECT_EQ(local_script.error().message.find("--allow-remote-scripts"), std::string::npos);
  }
  ASSERT_TRUE((*ipc)->call_json("shutdown").ok());
  for (int i = 0; i < 500 && fs::exists(home + "/run/gpuemu.sock"); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  // Started with --allow-remote-shutdown, the tcp client may stop it.
  ASSERT_EQ(run_daemon({"--home", home, "--tcp", url, "--token-file", token_file,
                        "--allow-remote-shutdown"}),
            0);
  auto allowed = DaemonClient::connect(tcp);
  ASSERT_TRUE(allowed.ok()) << allowed.error().message;
  EXPECT_TRUE((*allowed)->call_json("shutdown").ok());
  for (int i = 0; i < 500 && fs::exists(home + "/run/gpuemu.sock"); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_FALSE(fs::exists(home + "/run/gpuemu.sock"));
  fs::remove_all(home);
}

// tls+tcp://: the token and the tensors travel encrypted; the client checks the daemon's
// certificate against $GPUEMU_TLS_CA (ClientOptions::tls_ca) and the URL's host name, and the
// token is still required inside. Test identities: tests/data/tls/README.md.
TEST(DaemonTcp, TlsListenerIsVerifiedByItsClientsAndStillWantsTheToken) {
  const std::string certs = GPUEMU_SOURCE_DIR "/tests/data/tls/";
  char tmpl[] = "/tmp/gpuemu-daemon-tls-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string home = tmpl;
  const std::string secret = "0123456789abcdef-tls-token";
  const std::string token_file = home + "/token";
  { std::ofstream(token_file) << secret << "\n"; }
  std::string port = std::to_string(20000 + (getpid() + 104729) % 20000);
  std::string listen = "tls+tcp://127.0.0.1:" + port;
  // A tls+tcp listener without its identity, or with a key that is not the certificate's, does
  // not start.
  EXPECT_NE(run_daemon({"--home", home, "--tcp", listen, "--token-file", token_file}), 0);
  EXPECT_NE(run_daemon({"--home", home, "--tcp", listen, "--token-file", token_file, "--tls-cert",
                        certs + "localhost.pem", "--tls-key", certs + "other.key"}),
            0);
  // With both it starts; the port, derived from the pid, may be taken (by an ephemeral port of
  // another connection: once in a full run), so a few are tried.
  int started = -1;
  for (int attempt = 0; attempt < 5 && started != 0; ++attempt) {
    if (attempt > 0) {
      port = std::to_string(20000 + (getpid() + 104729 + 997 * attempt) % 20000);
      listen = "tls+tcp://127.0.0.1:" + port;
    }
    started = run_daemon({"--home", home, "--tcp", listen, "--token-file", token_file,
                          "--tls-cert", certs + "localhost.pem", "--tls-key",
                          certs + "localhost.key"});
  }
  ASSERT_EQ(started, 0);
  ClientOptions tls;
  tls.url = "tls+tcp://localhost:" + port;
  tls.autostart = false;
  tls.token = secret;
  tls.tls_ca = certs + "localhost.pem";
  auto good = DaemonClient::connect(tls);
  ASSERT_TRUE(good.ok()) << good.error().message;
  EXPECT_TRUE((*good)->call_json("ping").ok());
  // Remote rules hold inside TLS: the token, and no shutdown.
  auto stop = (*good)->call_json("shutdown");
  ASSERT_FALSE(stop.ok());
  EXPECT_NE(stop.error().message.find("--allow-remote-shutdown"), std::string::npos);
  ClientOptions wrong_token = tls;
  wrong_token.token = "0123456789abcdef-not-it";
  auto refused = DaemonClient::connect(wrong_token);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("token"), std::string::npos) << refused.error().message;
  // A client that trusts another certificate, or none, does not talk to it.
  ClientOptions other = tls;
  other.tls_ca = certs + "other.pem";
  auto untrusted = DaemonClient::connect(other);
  ASSERT_FALSE(untrusted.ok());
  EXPECT_NE(untrusted.error().message.find("failed TLS verification"), std::string::npos)
      << untrusted.error().message;
  ClientOptions none = tls;
  none.tls_ca = "";
  unsetenv("GPUEMU_TLS_CA");
  auto no_ca = DaemonClient::connect(none);
  ASSERT_FALSE(no_ca.ok());
  EXPECT_NE(no_ca.error().message.find("GPUEMU_TLS_CA"), std::string::npos);
  // A plain tcp client gets nothing from a TLS listener; the daemon goes on serving.
  ClientOptions plain = tls;
  plain.url = "tcp://127.0.0.1:" + port;
  EXPECT_FALSE(DaemonClient::connect(plain).ok());
  ASSERT_TRUE(DaemonClient::connect(tls).ok());
  ClientOptions local;
  local.home = home;
  local.autostart = false;
  auto ipc = DaemonClient::connect(local);
  ASSERT_TRUE(ipc.ok()) << ipc.error().message;
  ASSERT_TRUE((*ipc)->call_json("shutdown").ok());
  for (int i = 0; i < 500 && fs::exists(home + "/run/gpuemu.sock"); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  // A daemon whose certificate names another host is refused by a client that trusts it. Its
  // socket gone, the daemon before may still hold its lock and port for a moment: the restart
  // on the same port is retried until that one has let go.
  int restarted = -1;
  for (int attempt = 0; attempt < 50 && restarted != 0; ++attempt) {
    if (attempt > 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    restarted = run_daemon({"--home", home, "--tcp", listen, "--token-file", token_file, "--tls-cert",
                            certs + "wrong-host.pem", "--tls-key", certs + "wrong-host.key"});
  }
  ASSERT_EQ(restarted, 0);
  ClientOptions misnamed = tls;
  misnamed.tls_ca = certs + "wrong-host.pem";
  auto mismatch = DaemonClient::connect(misnamed);
  ASSERT_FALSE(mismatch.ok());
  EXPECT_NE(mismatch.error().message.find("failed TLS verification"), std::string::npos)
      << mismatch.error().message;
  auto ipc2 = DaemonClient::connect(local);
  ASSERT_TRUE(ipc2.ok()) << ipc2.error().message;
  ASSERT_TRUE((*ipc2)->call_json("shutdown").ok());
  for (int i = 0; i < 500 && fs::exists(home + "/run/gpuemu.sock"); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  fs::remove_all(home);
}

}  // namespace
}  // namespace gpuemu
