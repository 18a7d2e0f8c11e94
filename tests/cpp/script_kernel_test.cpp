// Script kernels (gpuemu/script/script_kernel.hpp, docs/script-kernels.md): real Python kernels in
// a temporary directory, run by the real runner through the engine. Correct kernels pass, buggy
// ones fail with their message; timeouts and crashes restart the process; the function sees the
// cases' real strides and exact low-precision values under numpy and torch.
#include "gpuemu/script/script_kernel.hpp"

#include "gpuemu/engine/engine.hpp"

#include <gtest/gtest.h>

#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

namespace gpuemu::script {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/gpuemu-script-kernel-XXXXXX";
    const char* p = ::mkdtemp(tmpl);
    EXPECT_NE(p, nullptr);
    m_path = p ? p : "/tmp";
  }
  ~TempDir() {
    std::error_code ec;
    if (m_path != "/tmp") fs::remove_all(m_path, ec);
  }
  const fs::path& path() const { return m_path; }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(m_path / name) << text;
    return (m_path / name).string();
  }
  std::string file(const std::string& name) const { return (m_path / name).string(); }

 private:
  fs::path m_path;
};

Engine& engine() {
  static Engine e = [] {
    auto r = Engine::create_default();
    EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
    return std::move(r).value();
  }();
  return e;
}

ScriptKernelSpec spec_of(const std::string& script, const std::string& function,
                         const std::string& framework = "numpy") {
  ScriptKernelSpec s;
  s.script = script;
  s.function = function;
  s.framework = framework;
  s.runner = GPUEMU_SOURCE_DIR "/python/gpuemu/_script_runner.py";
  return s;
}

bool torch_available() {
  static const bool ok = [] {
    const std::string python =
        default_script_python(GPUEMU_SOURCE_DIR "/python/gpuemu/_script_runner.py");
    return std::system((python + " -c 'import torch' >/dev/null 2>&1").c_str()) == 0;
  }();
  return ok;
}

// The first case of `op` in `dtype` whose input `input` has the layout `layout`.
TestCase case_with_layout(const std::string& op, DType dtype, const std::string& input,
                          const std::string& layout) {
  FuzzOptions o;
  o.dtypes = {dtype};
  o.dims["R"] = {3, 5, 7};
  o.dims["N"] = {33, 130};
  CaseGenerator gen(*engine().catalogue().find(op), o);
  for (std::int64_t i = 0; i < 500; ++i) {
    auto c = gen.generate(1234, i);
    EXPECT_TRUE(c.ok());
    if (c.ok() && c->layouts.at(input).kind == layout) return *c;
  }
  ADD_FAILURE() << "no " << layout << " case of " << op << " in 500";
  return {};
}

FuzzRequest softmax_request(DType dtype, std::int64_t iterations) {
  FuzzRequest req;
  req.op = "softmax";
  req.seed = 4242;
  req.iterations = iterations;
  req.options.dtypes = {dtype};
  req.diagnose = false;
  return req;
}

std::string failure_text(const FuzzReport& r) {
  return r.failures.empty() ? std::string() : r.failures[0].verdict.message;
}

const char* k_numpy_softmax = R"(import numpy as np

def softmax(inp):
    x = inp["x"]
    d = inp["dim"]
    x32 = x.astype(np.float32)
    e = np.exp(x32 - x32.max(axis=d, keepdims=True))
    out = e / e.sum(axis=d, keepdims=True, dtype=np.float32)
    # float16 stays float16; a bfloat16 case arrives (and returns) as exact float32 values.
    return out.astype(x.dtype)

def tail_bug(inp):
    x = np.moveaxis(inp["x"].astype(np.float32), inp["dim"], -1)
    n = x.shape[-1]
    full = n // 128 * 128 if n >= 128 else n
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    out = e / e[..., :full].sum(axis=-1, keepdims=True)   # the tail block never reaches the sum
    return np.moveaxis(out, -1, inp["dim"]).astype(inp["x"].dtype)
)";

TEST(ScriptKernel, NumpySoftmaxPassesInFloat32AndBfloat16) {
  TempDir dir;
  auto k = make_script_kernel(spec_of(dir.write("softmax_np.py", k_numpy_softmax), "softmax"));
  ASSERT_TRUE(k.ok()) << k.error().message;
  for (DType dt : {DType::float32, DType::bfloat16}) {
    auto r = engine().fuzz(softmax_request(dt, 10), *k);
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(r->total, 10);
    EXPECT_EQ(r->passed, r->total) << dtype_name(dt) << ": " << failure_text(*r);
  }
}

TEST(ScriptKernel, NumpyTailBugFails) {
  TempDir dir;
  auto k = make_script_kernel(spec_of(dir.write("softmax_np.py", k_numpy_softmax), "tail_bug"));
  ASSERT_TRUE(k.ok()) << k.error().message;
  auto req = softmax_request(DType::float32, 10);
  req.options.dims["N"] = {129, 300, 1000};
  auto r = engine().fuzz(req, *k);
  ASSERT_TRUE(r.ok()) << r.error().message;
  // Most cases fail (a tail of very negative values can hide the bug in a few).
  EXPECT_LE(r->passed, 3);
  ASSERT_FALSE(r->failures.empty());
  EXPECT_TRUE(r->failures[0].kernel_error.empty()) << r->failures[0].kernel_error;
  EXPECT_GT(r->failures[0].verdict.max_error, 100.0);
}

TEST(ScriptKernel, RaisingKernelIsAFailingCaseWithItsMessage) {
  TempDir dir;
  const std::string script = dir.write("raises.py", R"(
def helper(n):
    raise ValueError(f"tail block of {n} is not supported 4242")

def kernel(inp):
    return helper(inp["x"].shape[-1])
)");
  auto k = make_script_kernel(spec_of(script, "kernel"));
  ASSERT_TRUE(k.ok()) << k.error().message;
  auto r = engine().fuzz(softmax_request(DType::float32, 3), *k);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->passed, 0);
  ASSERT_EQ(r->failures.size(), 3u);
  const CaseResult& f = r->failures[0];
  EXPECT_NE(f.verdict.message.find("the kernel raised: ValueError: tail block of"),
            std::string::npos)
      << f.verdict.message;
  EXPECT_NE(f.verdict.message.find("is not supported 4242"), std::string::npos);
  EXPECT_NE(f.kernel_error.find("Traceback (most recent call last)"), std::string::npos)
      << f.kernel_error;
  EXPECT_NE(f.kernel_error.find("in helper"), std::string::npos) << f.kernel_error;
  // Called directly: the error code of a raising kernel.
  auto out = (*k)(f.test_case);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.error().code, ErrorCode::invalid_argument);
}

TEST(ScriptKernel, TimeoutKillsTheProcessAndTheNextCallRestartsIt) {
  TempDir dir;
  const std::string flag = dir.write("sleep.flag", "");
  const std::string script =
      dir.write("sleepy.py", "import os, time\nimport numpy as np\nFLAG = '" + flag + R"('

def kernel(inp):
    if os.path.exists(FLAG):
        time.sleep(30)
    x = inp["x"].astype(np.float64)
    e = np.exp(x - x.max(axis=inp["dim"], keepdims=True))
    return (e / e.sum(axis=inp["dim"], keepdims=True)).astype(np.float32)
)");
  auto spec = spec_of(script, "kernel");
  spec.timeout_s = 1.0;
  auto k = make_script_kernel(spec);
  ASSERT_TRUE(k.ok()) << k.error().message;
  const TestCase c = case_with_layout("softmax", DType::float32, "x", "contiguous");
  const auto t0 = std::chrono::steady_clock::now();
  auto out = (*k)(c);
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.error().code, ErrorCode::timeout);
  EXPECT_EQ(out.error().message, "the kernel script did not return within 1 s");
  EXPECT_GE(waited, 0.9);
  EXPECT_LT(waited, 5.0);
  fs::remove(flag);
  out = (*k)(c);
  ASSERT_TRUE(out.ok()) << out.error().message;
  auto v = engine().judge_case(c, *out);
  ASSERT_TRUE(v.ok()) << v.error().message;
  EXPECT_TRUE(v->passed) << v->message;
}

TEST(ScriptKernel, CrashReportsHowItEndedAndItsStderrThenRestarts) {
  TempDir dir;
  const std::string mode = dir.write("crash.mode", "exit");
  const std::string script =
      dir.write("crashy.py", "import os, signal, sys\nimport numpy as np\nMODE = '" + mode +
                                 R"('

def kernel(inp):
    what = open(MODE).read().strip() if os.path.exists(MODE) else ""
    if what == "exit":
        sys.stderr.write("about to exit 777\n")
        sys.stderr.flush()
        os._exit(3)
    if what == "segv":
        print("about to crash 888", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGSEGV)
    return inp["x"].astype(np.float32)
)");
  auto k = make_script_kernel(spec_of(script, "kernel"));
  ASSERT_TRUE(k.ok()) << k.error().message;
  TestCase c = case_with_layout("softmax", DType::float32, "x", "contiguous");
  auto out = (*k)(c);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.error().code, ErrorCode::invalid_argument);
  EXPECT_NE(out.error().message.find("exited with status 3"), std::string::npos)
      << out.error().message;
  EXPECT_NE(out.error().message.find("about to exit 777"), std::string::npos)
      << out.error().message;
  dir.write("crash.mode", "segv");
  out = (*k)(c);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.error().message.find("killed by signal 11"), std::string::npos)
      << out.error().message;
  EXPECT_NE(out.error().message.find("about to crash 888"), std::string::npos)
      << out.error().message;
  EXPECT_EQ(out.error().message.find("about to exit 777"), std::string::npos)
      << "a restart starts a new stderr";
  fs::remove(mode);
  out = (*k)(c);
  ASSERT_TRUE(out.ok()) << out.error().message;
  ASSERT_EQ(out->size(), 1u);
  EXPECT_EQ((*out)[0].to_f64(), c.inputs.at("x").to_f64());
}

// The process's resource limits: never a core file; with memory_limit_mb, an allocation past it
// is a MemoryError in the script (a failing case with its message), not the machine's memory,
// and the next case runs in the same process.
TEST(ScriptKernel, RunsUnderResourceLimits) {
  TempDir dir;
  const std::string mode = dir.write("alloc.mode", "big");
  const std::string script =
      dir.write("hungry.py", "import os, resource\nimport numpy as np\nMODE = '" + mode + R"('

def kernel(inp):
    if resource.getrlimit(resource.RLIMIT_CORE) != (0, 0):
        raise RuntimeError("core files allowed: %r" % (resource.getrlimit(resource.RLIMIT_CORE),))
    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    if soft != 256 << 20 or hard != 256 << 20:
        raise RuntimeError("data limit %r" % ((soft, hard),))
    if os.path.exists(MODE):
        hog = np.ones(1 << 30, dtype=np.uint8)  # 1 GiB, touched
        return hog[:0]
    return inp["x"].astype(np.float32)
)");
  auto spec = spec_of(script, "kernel");
  spec.memory_limit_mb = 256;
  auto k = make_script_kernel(spec);
  ASSERT_TRUE(k.ok()) << k.error().message;
  const TestCase c = case_with_layout("softmax", DType::float32, "x", "contiguous");
  auto out = (*k)(c);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.error().code, ErrorCode::invalid_argument);
  EXPECT_NE(out.error().message.find("MemoryError"), std::string::npos) << out.error().message;
  fs::remove(mode);
  out = (*k)(c);
  ASSERT_TRUE(out.ok()) << out.error().message;
  EXPECT_EQ((*out)[0].to_f64(), c.inputs.at("x").to_f64());
  // without a memory limit the data segment is the daemon's own (unlimited here); cores stay off
  const std::string probe = dir.write("probe.py", R"(import resource
import numpy as np

def kernel(inp):
    if resource.getrlimit(resource.RLIMIT_CORE) != (0, 0):
        raise RuntimeError("core files allowed")
    if resource.getrlimit(resource.RLIMIT_DATA)[0] == 256 << 20:
        raise RuntimeError("a memory limit nobody asked for")
    return inp["x"].astype(np.float32)
)");
  auto free_kernel = make_script_kernel(spec_of(probe, "kernel"));
  ASSERT_TRUE(free_kernel.ok()) << free_kernel.error().message;
  out = (*free_kernel)(c);
  ASSERT_TRUE(out.ok()) << out.error().message;
}

TEST(ScriptKernel, LoadFailuresAreClearErrors) {
  TempDir dir;
  // The script's import fails: the error carries the Python traceback.
  auto k = make_script_kernel(spec_of(dir.write("broken.py",
                                                "import numpy\nimport gpuemu_no_such_module_xyz\n"
                                                "def kernel(inp):\n    return inp['x']\n"),
                                      "kernel"));
  ASSERT_FALSE(k.ok());
  EXPECT_EQ(k.error().code, ErrorCode::invalid_argument);
  EXPECT_NE(k.error().message.find("could not be loaded: ModuleNotFoundError"), std::string::npos)
      << k.error().message;
  EXPECT_NE(k.error().message.find("gpuemu_no_such_module_xyz"), std::string::npos);
  EXPECT_NE(k.error().message.find("Traceback (most recent call last)"), std::string::npos);
  EXPECT_NE(k.error().message.find("broken.py\", line 2"), std::string::npos) << k.error().message;
  // A syntax error, a missing function, a missing file, a missing interpreter, a bad framework.
  k = make_script_kernel(
      spec_of(dir.write("syntax.py", "def kernel(inp)\n    return 1\n"), "kernel"));
  ASSERT_FALSE(k.ok());
  EXPECT_NE(k.error().message.find("SyntaxError"), std::string::npos) << k.error().message;
  k = make_script_kernel(
      spec_of(dir.write("fine.py", "def kernel(inp):\n    return inp['x']\n"), "nope"));
  ASSERT_FALSE(k.ok());
  EXPECT_EQ(k.error().code, ErrorCode::invalid_argument);
  EXPECT_NE(k.error().message.find("has no function 'nope'"), std::string::npos)
      << k.error().message;
  k = make_script_kernel(spec_of(dir.file("missing.py"), "kernel"));
  ASSERT_FALSE(k.ok());
  EXPECT_EQ(k.error().code, ErrorCode::invalid_argument);
  EXPECT_NE(k.error().message.find("does not exist"), std::string::npos) << k.error().message;
  auto spec = spec_of(dir.file("fine.py"), "kernel");
  spec.python = dir.file("no-such-python");
  k = make_script_kernel(spec);
  ASSERT_FALSE(k.ok());
  EXPECT_EQ(k.error().code, ErrorCode::tool_missing) << k.error().message;
  spec.python = "/bin/false";  // starts, then exits without a hello
  k = make_script_kernel(spec);
  ASSERT_FALSE(k.ok());
  EXPECT_EQ(k.error().code, ErrorCode::tool_missing) << k.error().message;
  EXPECT_NE(k.error().message.find("exited with status 1 before it said it was ready"),
            std::string::npos)
      << k.error().message;
  spec = spec_of(dir.file("fine.py"), "kernel", "jax");
  k = make_script_kernel(spec);
  ASSERT_FALSE(k.ok());
  EXPECT_EQ(k.error().code, ErrorCode::invalid_argument);
}

TEST(ScriptKernel, WritesToStdoutDoNotCorruptTheProtocol) {
  TempDir dir;
  const std::string script = dir.write("chatty.py", std::string(R"(import os, sys
import numpy as np
print("GEMU" * 50000)
)") + k_numpy_softmax + R"(
def kernel(inp):
    print("GEMU\x00\x00 chatty kernel", "x" * 100000)
    sys.stdout.write("more\n")
    os.write(1, b"GEMU raw bytes on fd 1\n")
    return softmax(inp)
)");
  auto k = make_script_kernel(spec_of(script, "kernel"));
  ASSERT_TRUE(k.ok()) << k.error().message;
  auto r = engine().fuzz(softmax_request(DType::float32, 5), *k);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->passed, r->total) << failure_text(*r);
}

TEST(ScriptKernel, OptionalInputsTheCaseLeavesOutArriveAsNone) {
  TempDir dir;
  const std::string log = dir.file("seen.log");
  const std::string script = dir.write("layer_norm.py", "import numpy as np\nLOG = '" + log + R"('

def kernel(inp):
    x = inp["x"].astype(np.float32)
    w, b = inp["weight"], inp["bias"]          # present, or None
    with open(LOG, "a") as f:
        f.write(f"weight={'None' if w is None else 'tensor'} bias={'None' if b is None else 'tensor'}\n")
    mean = x.mean(axis=-1, keepdims=True, dtype=np.float32)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True, dtype=np.float32)
    out = (x - mean) / np.sqrt(var + np.float32(inp["eps"]))
    if w is not None:
        out = out * w.astype(np.float32)
    if b is not None:
        out = out + b.astype(np.float32)
    return out.astype(inp["x"].dtype)
)");
  auto k = make_script_kernel(spec_of(script, "kernel"));
  ASSERT_TRUE(k.ok()) << k.error().message;
  FuzzRequest req;
  req.op = "layer_norm";
  req.seed = 99;
  req.iterations = 20;
  req.options.dtypes = {DType::float32};
  req.options.distribution = Distribution::regular;
  req.diagnose = false;
  auto r = engine().fuzz(req, *k);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->passed, r->total) << failure_text(*r);
  std::ifstream in(log);
  const std::string seen((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(seen.find("weight=None"), std::string::npos) << seen;
  EXPECT_NE(seen.find("weight=tensor"), std::string::npos) << seen;
}

const char* k_probe = R"(import numpy as np

def numpy_probe(inp):
    x = inp["x"]
    base = x
    while isinstance(base.base, np.ndarray):
        base = base.base
    offset = (x.__array_interface__["data"][0] - base.__array_interface__["data"][0]) // x.itemsize
    layout = [s // x.itemsize for s in x.strides] + [offset, int(x.flags.c_contiguous)]
    return x, np.array(layout, dtype=np.int64), np.array([x.dtype.itemsize], dtype=np.int32)

def torch_probe(inp):
    import torch
    x = inp["x"]
    layout = list(x.stride()) + [x.storage_offset(), int(x.is_contiguous())]
    return x, torch.tensor(layout, dtype=torch.int64), torch.tensor([x.element_size()], dtype=torch.int32)
)";

std::vector<double> ints_of(const Tensor& t) {
  return t.to_f64();
}

std::vector<double> expected_layout(const Tensor& x) {
  std::vector<double> v(x.strides().begin(), x.strides().end());
  v.push_back(static_cast<double>(x.offset()));
  v.push_back(x.is_contiguous() ? 1.0 : 0.0);
  return v;
}

void expect_same_values(const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.dtype(), want.dtype());
  ASSERT_EQ(got.shape(), want.shape());
  const auto a = got.to_f64(), b = want.to_f64();
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(b[i])) {
      EXPECT_TRUE(std::isnan(a[i])) << i;
    } else {
      EXPECT_EQ(a[i], b[i]) << i;
      EXPECT_EQ(std::signbit(a[i]), std::signbit(b[i])) << i;
    }
  }
}

TEST(ScriptKernel, NumpySeesRealStridesAndExactBfloat16Values) {
  TempDir dir;
  auto k = make_script_kernel(spec_of(dir.write("probe.py", k_probe), "numpy_probe"));
  ASSERT_TRUE(k.ok()) << k.error().message;
  for (const char* layout : {"transposed", "offset", "strided"}) {
    const TestCase c = case_with_layout("softmax", DType::bfloat16, "x", layout);
    const Tensor& x = c.inputs.at("x");
    auto out = (*k)(c);
    ASSERT_TRUE(out.ok()) << out.error().message;
    ASSERT_EQ(out->size(), 3u);
    // bfloat16 arrives as exact float32 values and its float32 return is rounded back: unchanged.
    expect_same_values((*out)[0], x.contiguous());
    EXPECT_EQ(ints_of((*out)[1]), expected_layout(x)) << layout;
    EXPECT_EQ(ints_of((*out)[2]), std::vector<double>{4.0});
  }
}

// Every fp8 bit pattern, in a transposed view, through a kernel that returns its input.
void check_fp8_identity(KernelRunner& k, DType dt) {
  auto storage = std::make_shared<std::vector<std::byte>>(256);
  for (int i = 0; i < 256; ++i) (*storage)[static_cast<std::size_t>(i)] = static_cast<std::byte>(i);
  auto x = Tensor::view(dt, {16, 16}, {1, 16}, 0, storage);
  ASSERT_TRUE(x.ok());
  TestCase c;
  c.op = "gpuemu_test_identity";  // no schema: the output is expected in the case dtype
  c.dtype = dt;
  c.inputs.emplace("x", *x);
  c.layouts["x"] = InputLayout{"transposed", 0};
  auto out = k(c);
  ASSERT_TRUE(out.ok()) << out.error().message;
  expect_same_values((*out)[0], x->contiguous());
  EXPECT_EQ(ints_of((*out)[1]), (std::vector<double>{1, 16, 0, 0}));
}

TEST(ScriptKernel, NumpyDecodesEveryFp8BitPatternExactly) {
  TempDir dir;
  auto k = make_script_kernel(spec_of(dir.write("probe.py", k_probe), "numpy_probe"));
  ASSERT_TRUE(k.ok()) << k.error().message;
  check_fp8_identity(*k, DType::float8_e4m3fn);
  check_fp8_identity(*k, DType::float8_e5m2);
}

TEST(ScriptKernel, TorchSeesBfloat16WithTheRealLayout) {
  if (!torch_available()) GTEST_SKIP() << "torch does not import";
  TempDir dir;
  auto k = make_script_kernel(spec_of(dir.write("probe.py", k_probe), "torch_probe", "torch"));
  ASSERT_TRUE(k.ok()) << k.error().message;
  for (const char* layout : {"transposed", "offset", "strided", "expanded"}) {
    const TestCase c = case_with_layout("softmax", DType::bfloat16, "x", layout);
    const Tensor& x = c.inputs.at("x");
    auto out = (*k)(c);
    ASSERT_TRUE(out.ok()) << out.error().message;
    ASSERT_EQ(out->size(), 3u);
    EXPECT_EQ((*out)[0].dtype(), DType::bfloat16);  // torch.bfloat16, sent as its bits
    EXPECT_EQ((*out)[0].contiguous_bytes(), x.contiguous_bytes()) << layout;
    EXPECT_EQ(ints_of((*out)[1]), expected_layout(x)) << layout;
    EXPECT_EQ(ints_of((*out)[2]), std::vector<double>{2.0});
  }
  check_fp8_identity(*k, DType::float8_e4m3fn);  // float8 dtypes or exact float32 values
  check_fp8_identity(*k, DType::float8_e5m2);
}

TEST(ScriptKernel, TorchSoftmaxPassesInBfloat16) {
  if (!torch_available()) GTEST_SKIP() << "torch does not import";
  TempDir dir;
  const std::string script = dir.write("softmax_torch.py", R"(import torch

def softmax(inp):
    x = inp["x"]
    assert x.dtype in (torch.float32, torch.float16, torch.bfloat16), x.dtype
    return torch.softmax(x.float(), dim=inp["dim"]).to(x.dtype)
)");
  auto k = make_script_kernel(spec_of(script, "softmax", "torch"));
  ASSERT_TRUE(k.ok()) << k.error().message;
  auto r = engine().fuzz(softmax_request(DType::bfloat16, 10), *k);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->passed, r->total) << failure_text(*r);
}

TEST(ScriptKernel, CallsFromSeveralThreadsAreSerialised) {
  TempDir dir;
  auto k = make_script_kernel(spec_of(dir.write("softmax_np.py", k_numpy_softmax), "softmax"));
  ASSERT_TRUE(k.ok()) << k.error().message;
  const TestCase a = case_with_layout("softmax", DType::float32, "x", "contiguous");
  const TestCase b = case_with_layout("softmax", DType::float16, "x", "transposed");
  bool ok[2] = {true, true};
  auto work = [&](int who) {
    const TestCase& c = who == 0 ? a : b;
    KernelRunner mine = *k;  // copies share the process
    for (int i = 0; i < 5; ++i) {
      auto out = mine(c);
      auto v = out.ok() ? engine().judge_case(c, *out) : Result<Verdict>(out.error());
      ok[who] = ok[who] && v.ok() && v->passed;
    }
  };
  std::thread t0(work, 0), t1(work, 1);
  t0.join();
  t1.join();
  EXPECT_TRUE(ok[0]);
  EXPECT_TRUE(ok[1]);
}

}  // namespace
}  // namespace gpuemu::script
