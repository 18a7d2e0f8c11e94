// The daemon's transport and validation throughput, each against a named peer measured in the same
// run (scripts/bench_protocol.sh prints the ratios; docs/performance.md records them):
//   BM_daemon_ping            vs BM_raw_nng_roundtrip   (an in-process NNG rep echo on ipc)
//   BM_daemon_tensor/<bytes>  vs BM_raw_nng_bytes/<bytes> and BM_memcpy/<bytes>
//   BM_validate/<op>/<size>   cases/s of submit_outputs (fp64 reference + verdict) through the
//                             daemon vs BM_judge_in_process/<op>/<size> (the same work, no
//                             transport)
#include "gpuemu/protocol/client.hpp"
#include "gpuemu/engine/engine.hpp"

#include <benchmark/benchmark.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/protocol/reqrep0/req.h>

#include <cstring>
#include <filesystem>
#include <thread>

using namespace gpuemu;

namespace {

std::string g_home;

DaemonClient& client() {
  static std::unique_ptr<DaemonClient> c = [] {
    char tmpl[] = "/tmp/gpuemu-bench-XXXXXX";
    g_home = mkdtemp(tmpl);
    ClientOptions o;
    o.home = g_home;
    o.daemon_path = GPUEMU_BIN_DIR "/gpuemu-daemon";
    auto r = DaemonClient::connect(o);
    if (!r) {
      std::fprintf(stderr, "cannot start the daemon: %s\n", r.error().message.c_str());
      std::exit(2);
    }
    return std::move(r).value();
  }();
  return *c;
}

Engine& engine() {
  static Engine e = [] {
    auto cat = Catalogue::load({GPUEMU_SOURCE_DIR "/schemas/ops"});
    return Engine(*cat, EnvelopeTable{});
  }();
  return e;
}

// An in-process NNG rep server that echoes every message, on its own ipc socket.
struct EchoServer {
  nng_socket rep{}, req{};
  std::thread thread;
  std::string url;
  EchoServer() {
    url = "ipc:///tmp/gpuemu-bench-echo-" + std::to_string(getpid()) + ".sock";
    nng_rep0_open(&rep);
    nng_socket_set_size(rep, NNG_OPT_RECVMAXSZ, 0);
    nng_listen(rep, url.c_str(), nullptr, 0);
    thread = std::thread([this] {
      for (;;) {
        nng_msg* m = nullptr;
        if (nng_recvmsg(rep, &m, 0) != 0) return;
        if (nng_sendmsg(rep, m, 0) != 0) nng_msg_free(m);
      }
    });
    nng_req0_open(&req);
    nng_socket_set_size(req, NNG_OPT_RECVMAXSZ, 0);
    nng_dial(req, url.c_str(), nullptr, 0);
  }
  ~EchoServer() {
    nng_close(req);
    nng_close(rep);
    thread.join();
  }
  void roundtrip(const void* data, std::size_t n) {
    nng_msg* m = nullptr;
    nng_msg_alloc(&m, n);
    if (n) std::memcpy(nng_msg_body(m), data, n);
    nng_sendmsg(req, m, 0);
    nng_recvmsg(req, &m, 0);
    nng_msg_free(m);
  }
};

EchoServer& echo() {
  static EchoServer e;
  return e;
}

void BM_raw_nng_roundtrip(benchmark::State& st) {
  const char msg[64] = {};
  for (auto _ : st) echo().roundtrip(msg, sizeof msg);
}

void BM_daemon_ping(benchmark::State& st) {
  auto& c = client();
  for (auto _ : st) {
    auto r = c.call_json("ping");
    if (!r) st.SkipWithError(r.error().message.c_str());
  }
}

void BM_raw_nng_bytes(benchmark::State& st) {
  std::vector<char> buf(static_cast<std::size_t>(st.range(0)), 1);
  for (auto _ : st) echo().roundtrip(buf.data(), buf.size());
  st.SetBytesProcessed(st.iterations() * st.range(0));
}

// A ping that carries one tensor: the daemon receives and decodes the whole frame (bytes copied
// into the tensor's storage) and answers.
void BM_daemon_tensor(benchmark::State& st) {
  auto& c = client();
  const std::int64_t n = st.range(0) / 4;
  Tensor t = Tensor::zeros(DType::float32, {n});
  for (auto _ : st) {
    protocol::Frame f = protocol::make_request("ping");
    f.add("payload", t);
    auto r = c.call(std::move(f));
    if (!r) st.SkipWithError(r.error().message.c_str());
  }
  st.SetBytesProcessed(st.iterations() * st.range(0));
}

void BM_memcpy(benchmark::State& st) {
  std::vector<char> a(static_cast<std::size_t>(st.range(0)), 1), b(a.size());
  for (auto _ : st) {
    std::memcpy(b.data(), a.data(), a.size());
    benchmark::DoNotOptimize(b.data());
  }
  st.SetBytesProcessed(st.iterations() * st.range(0));
}

struct ValidationCase {
  Json batch;
  protocol::Frame frame;
  std::vector<std::vector<Tensor>> outputs;
};

// Cases of `op` with pinned dims and the outputs of its first built-in control.
ValidationCase make_cases(const std::string& op, const Json& dims, int count) {
  ValidationCase v;
  Json params = {
      {"op", op}, {"count", count}, {"seed", 1}, {"options", {{"dims", dims}, {"layouts", false}}}};
  auto r = client().call_json("get_test_batch", params, std::nullopt, &v.frame);
  if (!r) {
    std::fprintf(stderr, "%s\n", r.error().message.c_str());
    std::exit(2);
  }
  v.batch = *r;
  auto runner = engine().builtin_kernel(op, engine().builtin_kernel_names(op).front());
  for (int i = 0; i < count; ++i) {
    auto c =
        protocol::case_from_frame(v.batch["cases"][i], v.frame, "cases/" + std::to_string(i) + "/");
    v.outputs.push_back(*(*runner)(*c));
  }
  return v;
}

Json dims_of(const std::string& op, bool large) {
  // "large" sits at each schema's per-case budget (max_elements / max_work).
  if (op == "softmax")
    return large ? Json{{"R", {64}}, {"N", {4096}}} : Json{{"R", {4}}, {"N", {129}}};
  if (op == "matmul")
    return large ? Json{{"M", {256}}, {"N", {256}}, {"K", {256}}}
                 : Json{{"M", {16}}, {"N", {16}}, {"K", {33}}};
  return large
             ? Json{{"B", {1}}, {"H", {1}}, {"Hkv", {1}}, {"Lq", {256}}, {"Lk", {256}}, {"D", {64}}}
             : Json{{"B", {1}}, {"H", {1}}, {"Hkv", {1}}, {"Lq", {16}}, {"Lk", {17}}, {"D", {32}}};
}

const char* k_ops[] = {"softmax", "matmul", "flash_attention"};

void BM_validate(benchmark::State& st) {
  const std::string op = k_ops[st.range(0)];
  const int count = st.range(1) ? 2 : 16;
  ValidationCase v = make_cases(op, dims_of(op, st.range(1) != 0), count);
  for (auto _ : st) {
    protocol::Frame req = protocol::make_request(
        "submit_outputs",
        {{"op", op},
         {"store", false},
         {"items", Json::array()},
         {"options", {{"dims", dims_of(op, st.range(1) != 0)}, {"layouts", false}}}});
    for (int i = 0; i < count; ++i) {
      req.header["params"]["items"].push_back({{"case", v.batch["cases"][i]}});
      for (std::size_t k = 0; k < v.outputs[i].size(); ++k)
        req.add("items/" + std::to_string(i) + "/outputs/" + std::to_string(k), v.outputs[i][k]);
    }
    auto r = client().call(std::move(req));
    if (!r || !protocol::reply_result(*r)) st.SkipWithError("submit_outputs failed");
  }
  st.SetItemsProcessed(st.iterations() * count);
  st.SetLabel(op + (st.range(1) ? " large" : " small"));
}

void BM_judge_in_process(benchmark::State& st) {
  const std::string op = k_ops[st.range(0)];
  const int count = st.range(1) ? 2 : 16;
  ValidationCase v = make_cases(op, dims_of(op, st.range(1) != 0), count);
  std::vector<TestCase> cases;
  for (int i = 0; i < count; ++i)
    cases.push_back(*protocol::case_from_frame(v.batch["cases"][i], v.frame,
                                               "cases/" + std::to_string(i) + "/"));
  for (auto _ : st)
    for (int i = 0; i < count; ++i)
      benchmark::DoNotOptimize(engine().judge_case(cases[i], v.outputs[i]));
  st.SetItemsProcessed(st.iterations() * count);
  st.SetLabel(op + (st.range(1) ? " large" : " small"));
}

}  // namespace

BENCHMARK(BM_raw_nng_roundtrip)->UseRealTime();
BENCHMARK(BM_daemon_ping)->UseRealTime();
BENCHMARK(BM_raw_nng_bytes)->Arg(64 << 10)->Arg(8 << 20)->UseRealTime();
BENCHMARK(BM_daemon_tensor)->Arg(64 << 10)->Arg(8 << 20)->UseRealTime();
BENCHMARK(BM_memcpy)->Arg(64 << 10)->Arg(8 << 20)->UseRealTime();
BENCHMARK(BM_validate)
    ->ArgsProduct({{0, 1, 2}, {0, 1}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_judge_in_process)
    ->ArgsProduct({{0, 1, 2}, {0, 1}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  (void)client().call_json("shutdown");
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  std::filesystem::remove_all(g_home);
  return 0;
}
