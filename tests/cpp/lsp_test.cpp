// The language server's pure parts (cli/lsp/): which failures are current, where a kernel's def
// is, gpuemu.toml diagnostics, completion and hover, and the JSON-RPC framing. The server end to
// end, against a real daemon: tests/python/test_lsp.py.
#include "lsp/failure_index.hpp"
#include "lsp/json_rpc_transport.hpp"
#include "lsp/kernel_locator.hpp"
#include "lsp/toml_features.hpp"

#include <gtest/gtest.h>

#include <cstdio>

namespace gpuemu::lsp {
namespace {

Json client_kernel() {
  return {{"kind", "client"}, {"name", "my_softmax"}, {"file", "/p/k.py"}, {"line", 3}};
}

Json failure(const std::string& id, std::int64_t created, const std::string& dtype = "float32",
             Json kernel = client_kernel()) {
  return {{"id", id},         {"op", "softmax"}, {"dtype", dtype}, {"created_ms", created},
          {"kernel", kernel}, {"index", 0}};
}

Json run(const std::string& id, std::int64_t started, Json failure_ids, std::string kind = "client",
         Json seed = 7, std::int64_t first_index = 0, Json dtypes = Json::array(),
         Json kernel = client_kernel()) {
  return {{"id", id},
          {"op", "softmax"},
          {"kind", kind},
          {"kernel", kernel},
          {"seed", seed},
          {"first_index", first_index},
          {"started_ms", started},
          {"failure_ids", failure_ids},
          {"dtypes", dtypes},
          {"total", 10},
          {"passed", 10 - static_cast<int>(failure_ids.size())}};
}

TEST(FailureIndex, LaterBatchesOfTheSameClientSessionKeepFailures) {
  const Json failures = {failure("f1", 100)};
  const Json runs = {run("r1", 101, {"f1"}, "client", 7, 0),
                     run("r2", 200, Json::array(), "client", 7, 64)};
  auto groups = current_failure_groups(failures, runs);
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].representative()["id"], "f1");
  EXPECT_EQ(groups[0].kernel_key, "client|/p/k.py|my_softmax");
}

TEST(FailureIndex, ANewSessionSupersedesOlderFailures) {
  const Json failures = {failure("f1", 100)};
  // Another seed; the same seed started over; a daemon fuzz run of the same kernel.
  for (const Json& later : {run("r2", 200, Json::array(), "client", 8, 0),
                            run("r2", 200, Json::array(), "client", 7, 0),
                            run("r2", 200, Json::array(), "fuzz", 7, 0)}) {
    const Json runs = {run("r1", 101, {"f1"}, "client", 7, 0), later};
    EXPECT_TRUE(current_failure_groups(failures, runs).empty()) << later.dump();
  }
}

TEST(FailureIndex, OnlyRunsOfTheSameKernelOpAndDtypeSupersede) {
  const Json failures = {failure("f1", 100, "bfloat16")};
  Json other_kernel = client_kernel();
  other_kernel["name"] = "other";
  const Json runs = {run("r1", 101, {"f1"}),
                     run("r2", 200, Json::array(), "fuzz", 1, 0, Json::array({"float32"})),
                     run("r3", 300, Json::array(), "fuzz", 1, 0, Json::array(), other_kernel)};
  EXPECT_EQ(current_failure_groups(failures, runs).size(), 1u);
  // A run before the failure was stored supersedes nothing; a minimized failure (no run) stays.
  const Json minimized = {failure("f9", 500)};
  EXPECT_EQ(current_failure_groups(minimized, runs).size(), 1u);
}

TEST(FailureIndex, GroupsByKernelOpAndDtypeNewestFirst) {
  Json a = failure("fa", 100), b = failure("fb", 300), c = failure("fc", 200, "float16");
  auto groups = current_failure_groups({a, b, c}, Json::array());
  ASSERT_EQ(groups.size(), 2u);
  const auto& f32 = groups[0].dtype == "float32" ? groups[0] : groups[1];
  ASSERT_EQ(f32.failures.size(), 2u);
  EXPECT_EQ(f32.representative()["id"], "fb");
}

TEST(FailureIndex, LastStatusAddsUpTheNewestClientSession) {
  const Json runs = {run("r3", 300, Json::array(), "client", 9, 64),
                     run("r2", 250, {"f2"}, "client", 9, 0),
                     run("r1", 100, Json::array(), "client", 7, 0)};
  auto s = last_statuses(runs);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_FALSE(s[0].passed);
  EXPECT_EQ(s[0].total, 20);
  EXPECT_EQ(s[0].run_id, "r3");
}

TEST(KernelLocator, FindsTheDefPastDecoratorsAndAfterEdits) {
  const std::string text =
      "import numpy as np\n\n@some.decorator\n@other\ndef my_softmax(x):\n    return x\n\n"
      "class K:\n    async def forward (self, x):\n        pass\n";
  auto r = locate_def(text, "my_softmax", 3);  // inspect's line: the first decorator
  ASSERT_TRUE(r);
  EXPECT_EQ(r->start.line, 4);
  EXPECT_EQ(r->start.character, 4);
  EXPECT_EQ(r->end.character, 14);
  auto moved = locate_def(text, "my_softmax", 1);
  ASSERT_TRUE(moved);
  EXPECT_EQ(moved->start.line, 4);
  auto method = locate_def(text, "K.forward", 0);
  ASSERT_TRUE(method);
  EXPECT_EQ(method->start.line, 8);
  EXPECT_FALSE(locate_def(text, "missing", 1));
  EXPECT_FALSE(locate_def(text, "<lambda>", 1));
}

OpCatalogue softmax_catalogue() {
  return catalogue_from({{"ops",
                          {{{"name", "softmax"},
                            {"summary", "softmax along dim"},
                            {"dtypes", {"float32", "float16", "bfloat16"}},
                            {"kernels", {"fp32_online", "tail_leak"}}}}}});
}

TEST(TomlDiagnostics, EveryUnknownKeyAndBadValueAtItsLine) {
  const std::string text =
      "[project]\nname = \"p\"\nfoo = 1\n\n[defaults]\nitrations = 5\nstrategy = \"wild\"\n\n"
      "[[op]]\nname = \"softmx\"\nkernel = \"tail_leak\"\ndtypes = [\"float32\", \"float99\"]\n"
      "tolerance = 3\n\n[[op]]\nname = \"softmax\"\nkernel = \"nope\"\niterations = -2\n";
  auto diags = toml_diagnostics(text, "/tmp/gpuemu.toml", softmax_catalogue());
  std::map<int, std::string> by_line;
  for (const auto& d : diags) by_line[d.range.start.line] += d.code + ":" + d.message + ";";
  EXPECT_NE(by_line[2].find("unknown key 'foo' in [project]"), std::string::npos) << by_line[2];
  EXPECT_NE(by_line[5].find("unknown key 'itrations' in [defaults]"), std::string::npos);
  EXPECT_NE(by_line[6].find("'strategy' must be one of regular, boundary, adversarial, special"),
            std::string::npos)
      << by_line[6];
  EXPECT_NE(by_line[9].find("unknown op 'softmx'"), std::string::npos) << by_line[9];
  EXPECT_NE(by_line[11].find("unknown dtype 'float99'"), std::string::npos) << by_line[11];
  EXPECT_NE(by_line[12].find("'tolerance' is not a key"), std::string::npos) << by_line[12];
  EXPECT_NE(by_line[16].find("no built-in kernel 'nope'"), std::string::npos) << by_line[16];
  EXPECT_NE(by_line[17].find("'iterations' must be a positive integer"), std::string::npos);
  for (const auto& d : diags) EXPECT_EQ(d.severity, Severity::error);
}

TEST(TomlDiagnostics, SyntaxErrorAndCleanFile) {
  auto bad = toml_diagnostics("[project\nname = 1\n", "/tmp/gpuemu.toml", softmax_catalogue());
  ASSERT_EQ(bad.size(), 1u);
  EXPECT_EQ(bad[0].code, "syntax");
  EXPECT_EQ(bad[0].range.start.line, 0);
  auto clean = toml_diagnostics("[[op]]\nname = \"softmax\"\nkernel = \"tail_leak\"\n",
                                "/tmp/gpuemu.toml", softmax_catalogue());
  EXPECT_TRUE(clean.empty()) << clean[0].message;
}

std::vector<std::string> labels(const Json& items) {
  std::vector<std::string> out;
  for (const auto& i : items) out.push_back(i["label"].get<std::string>());
  return out;
}

TEST(TomlCompletion, KeysOpsKernelsDtypesAndHeaders) {
  const std::string text = "[[op]]\nname = \nkernel = \"\ndtypes = [\"\nit\n[";
  const auto cat = softmax_catalogue();
  auto ops = labels(toml_completion(text, {1, 7}, cat));
  EXPECT_EQ(ops, std::vector<std::string>{"softmax"});
  auto with_name = "[[op]]\nname = \"softmax\"\nkernel = \"\n";
  auto kernels = labels(toml_completion(with_name, {2, 10}, cat));
  EXPECT_EQ(kernels, (std::vector<std::string>{"fp32_online", "tail_leak"}));
  auto dtypes = labels(toml_completion(text, {3, 11}, cat));
  EXPECT_FALSE(dtypes.empty());
  EXPECT_NE(std::find(dtypes.begin(), dtypes.end(), "bfloat16"), dtypes.end());
  auto keys = labels(toml_completion(text, {4, 2}, cat));
  EXPECT_NE(std::find(keys.begin(), keys.end(), "iterations"), keys.end());
  EXPECT_NE(std::find(keys.begin(), keys.end(), "envelope"), keys.end());
  auto headers = labels(toml_completion(text, {5, 1}, cat));
  EXPECT_NE(std::find(headers.begin(), headers.end(), "[[op]]"), headers.end());
}

TEST(TomlHover, KeyMeaningTableMeaningAndOpSummary) {
  const std::string text = "[defaults]\niterations = 3\n[[op]]\nname = \"softmax\"\nbogus = 1\n";
  const auto cat = softmax_catalogue();
  auto key = toml_hover(text, {1, 3}, cat);
  ASSERT_TRUE(key);
  EXPECT_NE((*key)["contents"]["value"].get<std::string>().find("cases per op and dtype"),
            std::string::npos);
  auto table = toml_hover(text, {2, 2}, cat);
  ASSERT_TRUE(table);
  EXPECT_NE((*table)["contents"]["value"].get<std::string>().find("one kernel under test"),
            std::string::npos);
  auto op = toml_hover(text, {3, 10}, cat);
  ASSERT_TRUE(op);
  EXPECT_NE((*op)["contents"]["value"].get<std::string>().find("softmax along dim"),
            std::string::npos);
  auto unknown = toml_hover(text, {4, 1}, cat);
  ASSERT_TRUE(unknown);
  EXPECT_NE((*unknown)["contents"]["value"].get<std::string>().find("not a key"),
            std::string::npos);
}

TEST(JsonRpcTransport, FramesBothWaysAndReportsMalformedInput) {
  std::FILE* in = std::tmpfile();
  const std::string body = R"({"jsonrpc":"2.0","id":1,"method":"x"})";
  std::fprintf(in, "Content-Length: %zu\r\nContent-Type: application/vscode-jsonrpc\r\n\r\n%s",
               body.size(), body.c_str());
  std::fprintf(in, "Content-Length: 5\r\n\r\n{bad}");
  std::fprintf(in, "Content-Length: 7\r\n\r\n[1e999]");  // out_of_range, not parse_error
  std::fprintf(in, "Content-Length: 100\r\n\r\n{}");
  std::rewind(in);
  std::FILE* out = std::tmpfile();
  JsonRpcTransport t(in, out);
  auto first = t.read();
  ASSERT_TRUE(first.ok() && *first);
  EXPECT_EQ((**first)["method"], "x");
  auto second = t.read();
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.error().message.find("not JSON"), std::string::npos);
  auto huge = t.read();
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.error().message.find("not JSON"), std::string::npos);
  auto third = t.read();
  ASSERT_FALSE(third.ok());
  EXPECT_NE(third.error().message.find("ended inside a message body"), std::string::npos);
  t.reply(1, {{"ok", true}});
  std::rewind(out);
  char buf[256] = {};
  const std::size_t n = std::fread(buf, 1, sizeof buf - 1, out);
  const std::string written(buf, n);
  EXPECT_EQ(written.rfind("Content-Length: ", 0), 0u);
  EXPECT_NE(written.find("\r\n\r\n{\"id\":1,\"jsonrpc\":\"2.0\",\"result\":{\"ok\":true}}"),
            std::string::npos)
      << written;
  std::fclose(in);
  std::fclose(out);
}

}  // namespace
}  // namespace gpuemu::lsp
