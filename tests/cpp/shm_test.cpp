// The shared-memory hand-off against a real daemon on a temporary home (docs/protocol.md, "Shared
// memory"): negotiation, bit-for-bit round trips at sizes around the threshold in both directions,
// verdicts equal to the inline path's, and every malformed descriptor refused with its reason while
// the daemon keeps serving. Crashes of either side: tests/python/test_shm.py.
#include "gpuemu/protocol/client.hpp"
#include "gpuemu/engine/engine.hpp"
#include "gpuemu/engine/catalogue.hpp"
#include "gpuemu/protocol/shm.hpp"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

namespace fs = std::filesystem;
using namespace gpuemu;

namespace {

constexpr std::size_t k_threshold = 4096;  // bytes: small, so that the sizes around it are cheap

// Sets an environment variable for the lifetime of the object (the client reads it at connect).
struct ScopedEnv {
  std::string name;
  std::optional<std::string> old;
  ScopedEnv(std::string n, const std::string& value) : name(std::move(n)) {
    if (const char* v = std::getenv(name.c_str())) old = v;
    ::setenv(name.c_str(), value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old) ::setenv(name.c_str(), old->c_str(), 1);
    else ::unsetenv(name.c_str());
  }
};

class ShmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpuemu-shm-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    m_home = tmpl;
    m_client = connect(true);
    ASSERT_TRUE(m_client);
  }

  void TearDown() override {
    if (HasFailure()) {
      std::ifstream log(m_home + "/logs/daemon.log");
      std::cerr << "---- daemon log ----\n" << log.rdbuf() << "\n";
    }
    if (m_client) (void)m_client->call_json("shutdown");
    m_client.reset();
    for (int i = 0; i < 500 && fs::exists(m_home + "/run/gpuemu.sock"); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    fs::remove_all(m_home);
  }

  std::unique_ptr<DaemonClient> connect(bool shm) {
    ScopedEnv on("GPUEMU_SHM", shm ? "1" : "0");
    ScopedEnv min("GPUEMU_SHM_MIN_BYTES", std::to_string(k_threshold));
    ClientOptions o;
    o.home = m_home;
    o.daemon_path = GPUEMU_BIN_DIR "/gpuemu-daemon";
    o.timeout = std::chrono::minutes(5);
    auto c = DaemonClient::connect(o);
    EXPECT_TRUE(c.ok()) << c.error().message;
    return c.ok() ? std::move(c).value() : nullptr;
  }

  // A raw request: the header's JSON (tensors described by the caller) and no payload.
  Json raw(const Json& header) {
    const std::string text = header.dump();
    std::vector<std::byte> bytes((8 + text.size() + 63) / 64 * 64);
    std::memcpy(bytes.data(), "GEMU", 4);
    const auto n = static_cast<std::uint32_t>(text.size());
    for (int i = 0; i < 4; ++i) bytes[4 + i] = static_cast<std::byte>((n >> (8 * i)) & 0xff);
    std::memcpy(bytes.data() + 8, text.data(), text.size());
    auto reply = m_client->call_raw(bytes);
    EXPECT_TRUE(reply.ok()) << reply.error().message;
    if (!reply) return Json();
    auto f = protocol::decode(*reply);
    EXPECT_TRUE(f.ok());
    return f ? f->header : Json();
  }

  static Json shm_tensor(std::int64_t pid, std::int64_t fd, std::uint64_t size,
                         std::uint64_t offset, std::size_t nbytes) {
    return {{"key", "x"},
            {"dtype", "float32"},
            {"shape", {nbytes / 4}},
            {"strides", {1}},
            {"offset", 0},
            {"storage_nbytes", nbytes},
            {"shm", {{"pid", pid}, {"fd", fd}, {"size", size}, {"offset", offset}}}};
  }

  static Json ping_with(Json tensors) {
    return {{"v", 1}, {"method", "ping"}, {"params", {{"echo", true}}}, {"tensors", tensors}};
  }

  void expect_refused(const Json& header, const std::string& says) {
    Json h = raw(header);
    EXPECT_EQ(h.value("ok", true), false) << h.dump();
    const std::string message = h.value("error", Json::object()).value("message", "");
    EXPECT_NE(message.find(says), std::string::npos) << message;
    EXPECT_EQ(h.value("error", Json::object()).value("code", ""), "protocol_error") << h.dump();
    // ... and the daemon goes on serving.
    EXPECT_TRUE(m_client->call_json("ping").ok());
  }

  std::string m_home;
  std::unique_ptr<DaemonClient> m_client;
};

Tensor random_bits(std::size_t elements, std::uint64_t seed) {
  Tensor t = Tensor::zeros(DType::float32, {static_cast<std::int64_t>(elements)});
  std::mt19937_64 rng(seed);
  auto* p = reinterpret_cast<std::uint32_t*>(t.storage()->data());
  for (std::size_t i = 0; i < elements; ++i) p[i] = static_cast<std::uint32_t>(rng());  // NaNs too
  return t;
}

TEST_F(ShmTest, HelloNegotiatesSharedMemoryOnTheLocalSocketOnly) {
  EXPECT_TRUE(m_client->shm_enabled()) << m_client->shm_status();
  EXPECT_EQ(m_client->shm_status(), "on");
  const auto caps = m_client->hello().value("capabilities", Json::array());
  EXPECT_NE(std::find(caps.begin(), caps.end(), "tensors.shm"), caps.end());
  auto off = connect(false);
  ASSERT_TRUE(off);
  EXPECT_FALSE(off->shm_enabled());
  EXPECT_EQ(off->shm_status(), "off: GPUEMU_SHM=0");
}

TEST_F(ShmTest, TensorsRoundTripBitForBitAroundTheThresholdBothWays) {
  const std::size_t e = k_threshold / 4;
  protocol::Frame req = protocol::make_request("ping", {{"echo", true}});
  const std::vector<std::size_t> sizes = {e - 1, e, e + 1, 3 * e + 7, (std::size_t{3} << 20) / 4 + 5};
  std::size_t large = 0;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    req.add("t" + std::to_string(i), random_bits(sizes[i], i + 1));
    if (sizes[i] * 4 >= k_threshold) ++large;
  }
  // A non-contiguous view (a transpose) over a large storage keeps its strides and offset.
  auto base = random_bits(64 * 33 + 3, 99);
  auto view = Tensor::view(DType::float32, {33, 64}, {1, 33}, 3, base.storage());
  ASSERT_TRUE(view.ok());
  req.add("view", *view);
  ++large;
  const auto before = m_client->shm_counters();
  auto reply = m_client->call(req);
  ASSERT_TRUE(reply.ok()) << reply.error().message;
  ASSERT_TRUE(protocol::reply_result(*reply).ok());
  const auto after = m_client->shm_counters();
  EXPECT_EQ(after.sent_tensors - before.sent_tensors, large);      // client -> daemon
  EXPECT_EQ(after.received_tensors - before.received_tensors, large);  // daemon -> client
  ASSERT_EQ(reply->tensors.size(), req.tensors.size());
  for (const auto& [key, t] : req.tensors) {
    const Tensor& back = reply->tensors.at(key);
    EXPECT_EQ(back.shape(), t.shape()) << key;
    EXPECT_EQ(back.strides(), t.strides()) << key;
    EXPECT_EQ(back.offset(), t.offset()) << key;
    ASSERT_EQ(back.storage_bytes(), t.storage_bytes()) << key;
    EXPECT_EQ(std::memcmp(back.storage()->data(), t.storage()->data(), t.storage_bytes()), 0) << key;
  }
  // Kept shared: the reply's bytes stay in this client's arena, and are the same bits.
  auto kept = m_client->call(req, std::nullopt, /*keep_shared=*/true);
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(kept->shared.size(), large);
  for (const auto& [key, st] : kept->shared) {
    const Tensor& t = req.tensors.at(key);
    ASSERT_EQ(st.bytes.size(), t.storage_bytes());
    EXPECT_EQ(std::memcmp(st.bytes.data(), t.storage()->data(), st.bytes.size()), 0) << key;
  }
}

TEST_F(ShmTest, ArenasAreReusedNotCreatedPerRequest) {
  protocol::Frame req = protocol::make_request("ping", {{"echo", true}});
  req.add("x", random_bits(std::size_t{2} << 20, 7));  // 8 MiB
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(m_client->call(req).ok());
  const auto warm = m_client->shm_counters();
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(m_client->call(req).ok());
  const auto later = m_client->shm_counters();
  EXPECT_EQ(later.arenas, warm.arenas);
  EXPECT_EQ(later.mapped_bytes, warm.mapped_bytes);
  EXPECT_EQ(later.sent_tensors - warm.sent_tensors, 10u);
  EXPECT_EQ(later.received_tensors - warm.received_tensors, 10u);
}

TEST_F(ShmTest, FloatRequestTensorsAreReadInTheArenaAndIntegerOnesCopied) {
  auto shm_stats = [&] {
    auto s = m_client->call_json("stats");
    EXPECT_TRUE(s.ok());
    return s.ok() ? s->value("shm", Json::object()) : Json::object();
  };
  const Tensor x = random_bits(std::size_t{1} << 20, 3);  // 4 MiB of float32
  Tensor idx = Tensor::zeros(DType::int64, {4096});       // 32 KiB
  for (std::int64_t i = 0; i < idx.numel(); ++i) idx.set_flat(i, static_cast<double>(i));
  const Json before = shm_stats();
  protocol::Frame req = protocol::make_request("ping");
  req.add("x", x);
  req.add("idx", idx);
  ASSERT_TRUE(m_client->call(req).ok());
  const Json after = shm_stats();
  const auto delta = [&](const char* k) { return after.value(k, 0) - before.value(k, 0); };
  EXPECT_EQ(delta("borrowed_tensors"), 1) << after.dump();
  EXPECT_EQ(delta("borrowed_bytes"), 4 << 20);
  EXPECT_EQ(delta("copied_tensors"), 1);
  EXPECT_EQ(delta("copied_bytes"), 32 << 10);
  EXPECT_EQ(delta("owned_tensors"), 0);  // a plain ping keeps nothing
  // An echo's reply holds the request's tensor: it is written into the reply from the arena, and
  // let go before the reply is sent (nothing kept, nothing owned); it comes back bit for bit.
  // (What a handler keeps past its request is owned: Frame.BorrowedStoragesReadTheArena...)
  protocol::Frame echo = protocol::make_request("ping", {{"echo", true}});
  echo.add("x", x);
  auto r = m_client->call(echo);
  ASSERT_TRUE(r.ok()) << r.error().message;
  const Json owned = shm_stats();
  EXPECT_EQ(owned.value("borrowed_tensors", 0) - after.value("borrowed_tensors", 0), 1);
  EXPECT_EQ(owned.value("owned_tensors", 0) - after.value("owned_tensors", 0), 0);
  auto back = r->tensor("x");
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(std::memcmp(back->storage()->data(), x.storage()->data(), x.storage_bytes()), 0);
}

TEST_F(ShmTest, UnansweredRequestsDoNotGiveTheirArenasBack) {
  // The daemon may still read an unanswered request's arena (it borrows float storages) or write
  // a late reply into the one offered: neither may serve another request. The unanswered request:
  // a fuzz run of seconds carrying an 8 MiB tensor, given 50 ms (an echo of 64 MiB given 1 ms was
  // answered in time on a loaded machine, whose timer fired late).
  protocol::Frame slow = protocol::make_request(
      "fuzz", {{"op", "softmax"}, {"kernel", {{"kind", "builtin"}, {"name", "fp32_online"}}},
               {"iterations", 3000}, {"seed", 5}, {"minimize", false}, {"store", false}});
  slow.add("x", random_bits(std::size_t{2} << 20, 5));
  for (int i = 0; i < 2; ++i) {  // warm: the request arena and a reply arena in the pool
    protocol::Frame echo = protocol::make_request("ping", {{"echo", true}});
    echo.add("x", random_bits(std::size_t{2} << 20, 4));
    ASSERT_TRUE(m_client->call(echo).ok());
  }
  const auto warm = m_client->shm_counters();
  auto late = m_client->call(slow, std::chrono::milliseconds(50));
  ASSERT_FALSE(late.ok()) << "a fuzz run of 3,000 cases was answered within 50 ms";
  EXPECT_EQ(late.error().code, ErrorCode::timeout) << late.error().message;
  const auto retired = m_client->shm_counters();
  EXPECT_EQ(retired.arenas + 2, warm.arenas) << warm.mapped_bytes << " " << retired.mapped_bytes;
  // The connection goes on: the next request gets fresh arenas and its own reply, bit for bit.
  protocol::Frame again = protocol::make_request("ping", {{"echo", true}});
  const Tensor y = random_bits(std::size_t{2} << 20, 6);
  again.add("x", y);
  auto r = m_client->call(again);
  ASSERT_TRUE(r.ok()) << r.error().message;
  auto back = r->tensor("x");
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(std::memcmp(back->storage()->data(), y.storage()->data(), y.storage_bytes()), 0);
}

TEST_F(ShmTest, VerdictsAndCasesAreThoseOfTheInlinePath) {
  auto inline_client = connect(false);
  ASSERT_TRUE(inline_client);
  auto cat = Catalogue::load({GPUEMU_SOURCE_DIR "/schemas/ops"});
  ASSERT_TRUE(cat.ok());
  Engine engine(*cat, EnvelopeTable{});
  auto run = [&](DaemonClient& c, const std::string& kernel) {
    protocol::Frame batch;
    Json params = {{"op", "softmax"}, {"count", 6}, {"seed", 11}, {"digests", true}};
    auto b = c.call_json("get_test_batch", params, std::nullopt, &batch);
    EXPECT_TRUE(b.ok());
    auto runner = engine.builtin_kernel("softmax", kernel);
    EXPECT_TRUE(runner.ok());
    protocol::Frame req = protocol::make_request(
        "submit_outputs", {{"op", "softmax"},
                           {"items", Json::array()},
                           {"store", false},
                           {"kernel", {{"kind", "client"}, {"name", kernel}}}});
    for (int i = 0; i < 6; ++i) {
      auto cs = protocol::case_from_frame((*b)["cases"][i], batch, "cases/" + std::to_string(i) + "/");
      EXPECT_TRUE(cs.ok());
      auto outs = (*runner)(*cs);
      EXPECT_TRUE(outs.ok());
      req.header["params"]["items"].push_back({{"case", (*b)["cases"][i]}});
      for (std::size_t k = 0; k < outs->size(); ++k)
        req.add("items/" + std::to_string(i) + "/outputs/" + std::to_string(k), (*outs)[k]);
      for (auto& [name, t] : cs->inputs)
        req.add("items/" + std::to_string(i) + "/inputs/" + name, t);
    }
    auto reply = c.call(std::move(req));
    EXPECT_TRUE(reply.ok());
    auto r = protocol::reply_result(*reply);
    EXPECT_TRUE(r.ok()) << r.error().message;
    return std::make_pair(*b, r.ok() ? *r : Json());
  };
  for (const std::string kernel : {"fp32_online", "tail_leak"}) {
    const auto before = m_client->shm_counters();
    auto [cases_shm, verdict_shm] = run(*m_client, kernel);
    const auto after = m_client->shm_counters();
    auto [cases_inline, verdict_inline] = run(*inline_client, kernel);
    EXPECT_GT(after.sent_tensors, before.sent_tensors) << "nothing went through shared memory";
    EXPECT_GT(after.received_tensors, before.received_tensors);
    EXPECT_EQ(cases_shm, cases_inline);  // with digests: every input byte
    ASSERT_EQ(verdict_shm["results"].size(), 6u);
    for (std::size_t i = 0; i < 6; ++i) {
      const Json& a = verdict_shm["results"][i];
      const Json& b = verdict_inline["results"][i];
      EXPECT_EQ(a["passed"], b["passed"]);
      EXPECT_EQ(a["max_error"], b["max_error"]);
      EXPECT_EQ(a["message"], b["message"]);
    }
  }
}

TEST_F(ShmTest, MalformedDescriptorsAreRefusedWithTheirReasonAndTheDaemonServes) {
  const auto me = static_cast<std::int64_t>(::getpid());
  auto arena = shm::Arena::create(shm::k_min_arena_bytes);
  ASSERT_TRUE(arena.ok());
  const int fd = (*arena)->fd();
  const std::uint64_t size = (*arena)->size();
  // Another process's segment: never this connection's peer.
  expect_refused(ping_with({shm_tensor(1, fd, size, 0, 4096)}), "is not this connection's peer");
  // A descriptor number with nothing open behind it.
  expect_refused(ping_with({shm_tensor(me, 4000, size, 0, 4096)}), "has no open segment at fd 4000");
  // A file outside the namespace (a regular file; a memfd of another name).
  char path[] = "/tmp/gpuemu-shm-not-a-segment-XXXXXX";
  const int file = ::mkstemp(path);
  ASSERT_GE(file, 0);
  ASSERT_EQ(::ftruncate(file, static_cast<off_t>(size)), 0);
  expect_refused(ping_with({shm_tensor(me, file, size, 0, 4096)}), "outside gpuemu's segments");
  ::close(file);
  ::unlink(path);
  const int other = ::memfd_create("not-gpuemu", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  ASSERT_EQ(::ftruncate(other, static_cast<off_t>(size)), 0);
  ASSERT_EQ(::fcntl(other, F_ADD_SEALS, F_SEAL_SHRINK), 0);
  expect_refused(ping_with({shm_tensor(me, other, size, 0, 4096)}), "outside gpuemu's segments");
  ::close(other);
  // A segment that could shrink under the daemon's mapping (SIGBUS) is never mapped.
  const int unsealed = ::memfd_create(shm::k_name_prefix, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  ASSERT_EQ(::ftruncate(unsealed, static_cast<off_t>(size)), 0);
  expect_refused(ping_with({shm_tensor(me, unsealed, size, 0, 4096)}), "not sealed against shrinking");
  // ... and a sealed one cannot be truncated under it.
  EXPECT_NE(::ftruncate(fd, 4096), 0);
  EXPECT_EQ(errno, EPERM);
  // The claimed size is the segment's; the bytes lie inside it.
  expect_refused(ping_with({shm_tensor(me, fd, size * 2, 0, 4096)}),
                 "claims a segment of " + std::to_string(size * 2) + " bytes, the segment has " +
                     std::to_string(size));
  expect_refused(ping_with({shm_tensor(me, fd, size, size - 64, 4096)}), "run past the segment");
  expect_refused(ping_with({shm_tensor(me, fd, size, 100, 4096)}), "shm.offset is not 64-byte aligned");
  Json both = shm_tensor(me, fd, size, 0, 4096);
  both["data_offset"] = 0;
  expect_refused(ping_with({both}), "has both 'data_offset' and 'shm'");
  Json bad = shm_tensor(me, fd, size, 0, 4096);
  bad["shm"]["fd"] = "three";
  expect_refused(ping_with({bad}), "shm.fd must be a non-negative integer");
  // A reply arena offered that the daemon cannot use: refused before the request runs.
  Json offer = {{"v", 1}, {"method", "ping"}, {"params", Json::object()},
                {"shm_reply", {{"pid", me}, {"fd", unsealed}, {"size", size}}}};
  expect_refused(offer, "shm_reply: shared-memory tensor: the segment at fd");
  ::close(unsealed);
  // A good descriptor through the same raw path is served: the refusals above were the rules.
  std::memset((*arena)->data(), 0x3c, 4096);
  Json ok = raw(ping_with({shm_tensor(me, fd, size, 0, 4096)}));
  EXPECT_EQ(ok.value("ok", false), true) << ok.dump();
  // A daemon that never heard of shared memory is what an inline client sees: tested by the
  // inline client above (GPUEMU_SHM=0), whose requests carry no shm field at all.
}

}  // namespace
