// The typed protocol layer (gpuemu/protocol/wire/): the registry against docs/protocol.md and the
// daemon's handlers, and the structs' JSON both ways (defaults, wrong types, loose input kept).
#include "gpuemu/protocol/wire/wire.hpp"

#include "gpuemu/protocol/protocol.hpp"

#include "server/daemon_context.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

namespace gpuemu::wire {
namespace {

std::string read_doc() {
  std::ifstream in(std::string(GPUEMU_SOURCE_DIR) + "/docs/protocol.md");
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The row of `method` in docs/protocol.md's table of requests ("| `NAME` | params | result |").
std::string doc_row(const std::string& doc, std::string_view method) {
  const std::string start = "\n| `" + std::string(method) + "` |";
  const auto at = doc.find(start);
  if (at == std::string::npos) return "";
  return doc.substr(at + 1, doc.find('\n', at + 1) - at - 1);
}

// Column `n` of a table row; a '|' inside `code` (`action: list | get`) is not a column's end.
std::string cell(const std::string& row, int n) {
  std::vector<std::string> cells(1);
  bool code = false;
  for (std::size_t i = 1; i < row.size(); ++i) {
    if (row[i] == '`') code = !code;
    if (row[i] == '|' && !code) {
      cells.emplace_back();
      continue;
    }
    cells.back() += row[i];
  }
  return n < static_cast<int>(cells.size()) ? cells[static_cast<std::size_t>(n)] : "";
}

TEST(Wire, DocsDescribeEveryMethodAndEveryRequestField) {
  const std::string doc = read_doc();
  ASSERT_FALSE(doc.empty());
  for (const MethodInfo& m : methods()) {
    const std::string row = doc_row(doc, m.name);
    EXPECT_FALSE(row.empty()) << "docs/protocol.md has no row '| `" << m.name << "` |'";
    if (row.empty() || !m.request_fields) continue;
    const std::string params = cell(row, 1);  // the row's second column
    for (const std::string& f : m.request_fields()) {
      const std::regex word("(^|[^A-Za-z0-9_])" + f + "([^A-Za-z0-9_]|$)");
      EXPECT_TRUE(std::regex_search(params, word))
          << "docs/protocol.md: the params of `" << m.name << "` do not name '" << f << "'";
    }
  }
}

// schemas/protocol.schema.json names the same methods, and only request fields their structs read.
TEST(Wire, TheProtocolSchemaNamesTheRegistrysMethodsAndFields) {
  std::ifstream in(std::string(GPUEMU_SOURCE_DIR) + "/schemas/protocol.schema.json");
  const Json schema = Json::parse(in);
  const Json& request = schema["$defs"]["request"];
  std::set<std::string> in_schema, in_registry;
  for (const auto& m : request["properties"]["method"]["enum"])
    in_schema.insert(m.get<std::string>());
  for (const MethodInfo& m : methods()) in_registry.emplace(m.name);
  EXPECT_EQ(in_schema, in_registry);
  for (const Json& rule : request["allOf"]) {
    const Json& method = rule["if"]["properties"]["method"];
    std::vector<std::string> names;
    if (method.contains("const")) names.push_back(method["const"].get<std::string>());
    for (const auto& n : method.value("enum", Json::array())) names.push_back(n.get<std::string>());
    const Json props = rule["then"]["properties"]["params"].value("properties", Json::object());
    for (const std::string& name : names) {
      const MethodInfo* m = find_method(name);
      ASSERT_NE(m, nullptr) << name;
      if (!m->request_fields) continue;
      const auto fields = m->request_fields();
      for (const auto& [field, _] : props.items())
        EXPECT_NE(std::find(fields.begin(), fields.end(), field), fields.end())
            << "schemas/protocol.schema.json: `" << name << "` has no request field '" << field
            << "'";
    }
  }
}

TEST(Wire, EveryMethodHasOneHandlerInRegistryOrder) {
  const auto& table = server::commands();
  ASSERT_EQ(table.size(), methods().size());
  for (std::size_t i = 0; i < table.size(); ++i) {
    EXPECT_EQ(table[i].name, methods()[i].name);
    EXPECT_EQ(table[i].fast, methods()[i].fast);
  }
  EXPECT_EQ(find_method("hello")->family, "info");
  EXPECT_EQ(find_method("no_such_method"), nullptr);
}

TEST(Wire, RequestsLeaveDefaultsOutAndKeepRequiredFields) {
  EXPECT_EQ(to_json(PingRequest{}), Json::object());
  EXPECT_EQ(to_json(DescribeOpRequest{"softmax"}), (Json{{"op", "softmax"}}));
  EXPECT_EQ(to_json(DescribeOpRequest{}), (Json{{"op", ""}}));
  EXPECT_EQ(to_json(HelloRequest{"gpuemu-cpp", 1}),
            (Json{{"client", "gpuemu-cpp"}, {"protocol", 1}}));
}

TEST(Wire, ARequiredStringIsNamedWhenAbsentEmptyOrOfTheWrongType) {
  for (const Json& p : {Json::object(), Json{{"op", ""}}, Json{{"op", 3}}, Json{{"op", nullptr}}}) {
    auto r = decode<DescribeOpRequest>(p);
    ASSERT_FALSE(r) << p;
    EXPECT_EQ(r.error().code, ErrorCode::invalid_argument);
    EXPECT_EQ(r.error().message, "the request needs a string 'op'");
  }
  auto ok = decode<DescribeOpRequest>(Json{{"op", "softmax"}, {"unknown", 1}});
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->op, "softmax");
}

TEST(Wire, RepliesRoundTripAndKeepEveryField) {
  PingReply p;
  p.uptime_s = 1.5;
  p.started_ms = 7;
  Json j = to_json(p);
  EXPECT_EQ(j, (Json{{"pong", true}, {"uptime_s", 1.5}, {"stopping", false}, {"started_ms", 7}}));
  p.changes = 3;
  auto back = decode<PingReply>(to_json(p));
  ASSERT_TRUE(back);
  EXPECT_EQ(back->changes, std::optional<std::uint64_t>(3));
  EXPECT_EQ(back->started_ms, 7);

  auto bad = decode<PingReply>(Json{{"uptime_s", "soon"}});
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message, "parameter 'uptime_s' has the wrong type");

  DescribeOpReply d;
  d.schema = {{"name", "softmax"}, {"dims", Json::array()}};
  d.source = "softmax.json";
  d.kernels = {"tail_leak"};
  const Json dj = to_json(d);
  EXPECT_EQ(dj["name"], "softmax");
  EXPECT_EQ(dj["source"], "softmax.json");
  EXPECT_EQ(dj["kernels"], Json::array({"tail_leak"}));
  EXPECT_EQ(dj["envelopes"], Json::object());
}

TEST(Wire, FuzzRequestsKeepTheDaemonsDefaultsAndLooseInput) {
  auto r = decode<FuzzRequest>(Json{{"op", "softmax"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->iterations, 100);
  EXPECT_EQ(r->diagnose_limit, 3);
  EXPECT_TRUE(r->minimize);
  EXPECT_TRUE(r->store);
  EXPECT_FALSE(r->seed);
  EXPECT_EQ(r->client, Json::object());
  EXPECT_TRUE(r->kernel.is_null());
  // A seed given as a signed integer, an integer param given as a float, nulls as absent.
  r = decode<FuzzRequest>(Json{{"op", "softmax"},
                               {"seed", Json(std::int64_t{7})},
                               {"iterations", 3.0},
                               {"store", nullptr},
                               {"options", nullptr}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->seed, std::optional<std::uint64_t>(7));
  EXPECT_EQ(r->iterations, 3);
  EXPECT_TRUE(r->store);
  auto bad = decode<FuzzRequest>(Json{{"op", "softmax"}, {"seed", -1}});
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, ErrorCode::invalid_argument);
  EXPECT_EQ(bad.error().message, "'seed' must be a non-negative integer");
  bad = decode<FuzzRequest>(Json{{"op", "softmax"}, {"iterations", "many"}});
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message, "parameter 'iterations' has the wrong type");
  bad = decode<FuzzRequest>(Json{{"op", "softmax"}, {"options", {{"dtypes", {"float7"}}}}});
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message, "unknown dtype 'float7'");  // options_from_json's own words

  FuzzRequest f;
  f.op = "softmax";
  f.seed = 7;
  f.kernel = {{"kind", "builtin"}, {"name", "tail_leak"}};
  EXPECT_EQ(to_json(f), (Json{{"op", "softmax"}, {"seed", 7}, {"kernel", f.kernel}}));
  f.iterations = 5;
  f.options.dtypes = {DType::bfloat16};
  const Json j = to_json(f);
  EXPECT_EQ(j["iterations"], 5);
  EXPECT_EQ(j["options"], protocol::options_to_json(f.options));
  auto back = decode<FuzzRequest>(j);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->options.dtypes, f.options.dtypes);
  const gpuemu::FuzzRequest e = engine_request(*back, 11);
  EXPECT_EQ(e.seed, 11u);
  EXPECT_EQ(e.iterations, 5);
  EXPECT_EQ(e.op, "softmax");
}

TEST(Wire, SubmitOutputsNamesWhatIsWrongAtItsLevel) {
  auto r = decode<SubmitOutputsRequest>(Json{{"op", "softmax"}, {"next", "soon"}});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message, "'next' must be an object {count, start_index, seed}");
  r = decode<SubmitOutputsRequest>(Json{{"op", "softmax"}, {"next", {{"count", "x"}}}});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message, "parameter 'count' has the wrong type");
  r = decode<SubmitOutputsRequest>(Json{{"op", "softmax"}, {"items", "all"}});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message, "'items' must be a non-empty array");
  r = decode<SubmitOutputsRequest>(Json::parse(R"({"op": "softmax", "next": {"start_index": 16},
      "items": [{"case": {"index": 3}, "kernel_error": "boom"}]})"));
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_TRUE(r->next);
  EXPECT_EQ(r->next->count, 16);
  EXPECT_EQ(r->next->start_index, 16);
  ASSERT_TRUE(r->items);
  ASSERT_EQ(r->items->size(), 1u);
  EXPECT_EQ((*r->items)[0].case_json, (Json{{"index", 3}}));
  EXPECT_EQ((*r->items)[0].kernel_error, "boom");
  EXPECT_EQ(r->kernel, (Json{{"kind", "client"}}));
  // held_id with items present (even empty) is told apart from no items.
  r = decode<SubmitOutputsRequest>(Json{{"op", "softmax"}, {"items", Json::array()}});
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->items && r->items->empty());
}

TEST(Wire, ActionRequestsSendOnlyWhatTheyAskFor) {
  EXPECT_EQ(to_json(failures_list()), Json::object());
  EXPECT_EQ(to_json(failures_get("f1")), (Json{{"action", "get"}, {"id", "f1"}}));
  EXPECT_EQ(to_json(failures_export("softmax", 40)),
            (Json{{"action", "export"}, {"op", "softmax"}, {"offset", 40}}));
  auto id = decode<FailuresRequest>(Json{{"action", "get"}, {"id", 3}});
  ASSERT_FALSE(id);
  EXPECT_EQ(id.error().message, "the request needs a string 'id'");
  EXPECT_EQ(to_json(outbox_request("status")), Json::object());
  EXPECT_EQ(to_json(calibrations_request("list", "softmax")), (Json{{"op", "softmax"}}));
  auto lint = decode<LintRequest>(Json{{"paths", {"k.cu"}}, {"policy_toml", 3}});
  ASSERT_TRUE(lint);  // a policy_toml that is not a string is ignored, as before
  EXPECT_FALSE(lint->arches);
}

TEST(Wire, AFieldAnActionDoesNotReadIsNotCheckedAsBefore) {
  // `failures get` never read `limit`: a wrong type there is ignored, as the daemon did.
  auto r = decode<FailuresRequest>(Json{{"action", "get"}, {"id", "f1"}, {"limit", "ten"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->limit, 0u);
  auto list = decode<FailuresRequest>(Json{{"action", nullptr}, {"limit", "ten"}});  // null: list
  ASSERT_FALSE(list);
  EXPECT_EQ(list.error().message, "parameter 'limit' has the wrong type");
  EXPECT_TRUE(decode<OutboxRequest>(Json{{"timeout_s", "long"}}));  // status never read it
  auto wait = decode<OutboxRequest>(Json{{"action", "wait"}, {"timeout_s", "long"}});
  ASSERT_FALSE(wait);
  EXPECT_EQ(wait.error().message, "parameter 'timeout_s' has the wrong type");
  EXPECT_TRUE(decode<BaselinesRequest>(Json{{"name", 3}}));  // list never read it
  EXPECT_TRUE(decode<CalibrationsRequest>(
      Json{{"action", "import"}, {"op", 3}, {"calibrations", Json::array()}}));
  // lint reads policy_source only with a policy; coverage reads `all` only without an op.
  EXPECT_TRUE(decode<LintRequest>(Json{{"paths", {"k.cu"}}, {"policy_source", 3}}));
  EXPECT_FALSE(decode<LintRequest>(
      Json{{"paths", {"k.cu"}}, {"policy_toml", "[lint]"}, {"policy_source", 3}}));
  EXPECT_TRUE(decode<CoverageRequest>(Json{{"op", "softmax"}, {"all", "yes"}}));
  EXPECT_FALSE(decode<CoverageRequest>(Json{{"all", "yes"}}));
  // hello's params are informative, of any type.
  EXPECT_TRUE(decode<HelloRequest>(Json{{"client", {{"name", "x"}}}, {"protocol", "1"}}));
}

}  // namespace
}  // namespace gpuemu::wire
