// The schema parser, the expression language and the catalogue.
#include "gpuemu/engine/catalogue.hpp"
#include "schema/expr.hpp"

#include "gpuemu/engine/tensor.hpp"

#include <gtest/gtest.h>

#include <limits>

namespace gpuemu {
namespace {

std::int64_t eval(const std::string& text) {
  auto e = Expr::parse(text);
  EXPECT_TRUE(e.ok()) << (e.ok() ? "" : e.error().message);
  auto v = e->eval([](const std::string& n, int idx) -> std::optional<std::int64_t> {
    if (n == "H") return 32;
    if (n == "Hkv") return 8;
    if (n == "stride") return idx == 1 ? 3 : 2;
    return std::nullopt;
  });
  EXPECT_TRUE(v.ok()) << (v.ok() ? "" : v.error().message);
  return v.ok() ? *v : -999;
}

TEST(Expr, Arithmetic) {
  EXPECT_EQ(eval("1 + 2 * 3"), 7);
  EXPECT_EQ(eval("(1 + 2) * 3"), 9);
  EXPECT_EQ(eval("H / Hkv"), 4);
  EXPECT_EQ(eval("H % Hkv == 0"), 1);
  EXPECT_EQ(eval("H < Hkv || H >= 32"), 1);
  EXPECT_EQ(eval("-H + 1"), -31);
  EXPECT_EQ(eval("stride[0] * 10 + stride[1]"), 23);
  EXPECT_EQ(eval("!(H == 32) && 1"), 0);
  EXPECT_EQ(eval("H != 3"), 1);
  EXPECT_EQ(eval("H <= 32"), 1);
}

// Dims may come from requests: arithmetic past int64 is an error, never a wrapped value (a pinned
// N = 2^62 with R = 512 once made 0 elements and slipped under the budget).
TEST(Expr, OverflowIsAnError) {
  auto lookup = [](const std::string& n, int) -> std::optional<std::int64_t> {
    return n == "N" ? std::int64_t{1} << 62 : n == "M" ? std::numeric_limits<std::int64_t>::min() : 512;
  };
  for (const char* text : {"N * R", "N + N", "0 - N - N - N", "-M", "M / (0 - 1)"}) {
    auto v = Expr::parse(text)->eval(lookup);
    ASSERT_FALSE(v.ok()) << text;
    EXPECT_NE(v.error().message.find("overflows a 64-bit integer"), std::string::npos) << v.error().message;
  }
  EXPECT_EQ(*Expr::parse("N / R")->eval(lookup), (std::int64_t{1} << 62) / 512);
  EXPECT_EQ(shape_numel({std::int64_t{1} << 62, 512}), std::numeric_limits<std::int64_t>::max());
}

TEST(Expr, Errors) {
  EXPECT_FALSE(Expr::parse("1 +").ok());
  EXPECT_FALSE(Expr::parse("(1").ok());
  EXPECT_FALSE(Expr::parse("1 $ 2").ok());
  // An index past int's range is an error, not an escaped std::out_of_range (fuzz_schema).
  auto big = Expr::parse("x[99999999999]");
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.error().message.find("index too large"), std::string::npos) << big.error().message;
  auto e = Expr::parse("H / (Hkv - 8)");
  ASSERT_TRUE(e.ok());
  auto v = e->eval([](const std::string& n, int) -> std::optional<std::int64_t> { return n == "H" ? 4 : 8; });
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.error().message.find("division by zero"), std::string::npos);
  auto missing = Expr::parse("Q + 1")->eval([](const std::string&, int) { return std::optional<std::int64_t>(); });
  EXPECT_FALSE(missing.ok());
}

const char* k_good = R"({
  "name": "toy",
  "version": 2,
  "summary": "toy op",
  "family": "custom",
  "dtypes": ["float32", "bfloat16"],
  "dims": {"M": {"min": 1, "max": 64}, "G": {"values": [1, 2]}, "C": {"expr": "G * 4"}},
  "inputs": [{"name": "x", "shape": ["M", "C"], "dtype": "case", "layouts": ["transposed"]},
             {"name": "idx", "shape": ["M"], "dtype": ["int64", "int32"], "domain": "indices:C"}],
  "attrs": {"alpha": {"type": "float", "default": 1.0, "min": 0},
            "mode": {"type": "string", "default": "a", "values": ["a", "b"]},
            "scale": {"type": "float", "nullable": true}},
  "outputs": [{"name": "out", "shape": "like:x", "dtype": "case"}],
  "constraints": ["C % G == 0"],
  "reference": "builtin:toy"
})";

TEST(Schema, ParsesAllFields) {
  auto s = parse_op_schema(k_good, "toy.json");
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(s->name, "toy");
  EXPECT_EQ(s->version, 2);
  ASSERT_EQ(s->dims.size(), 3u);
  EXPECT_EQ(s->find_dim("C")->expr, "G * 4");
  EXPECT_EQ(s->find_dim("G")->max, 2);
  EXPECT_EQ(s->find_input("idx")->dtypes.size(), 2u);
  auto attrs = s->resolve_attrs({{"alpha", 2.5}});
  ASSERT_TRUE(attrs.ok());
  EXPECT_EQ((*attrs)["alpha"], 2.5);
  EXPECT_EQ((*attrs)["mode"], "a");
  EXPECT_TRUE((*attrs)["scale"].is_null());
}

struct BadCase {
  std::string from, to, expect;
  int line;
};

// Each case edits `good` (replaces `from` with `to`) and expects a schema_error whose message
// contains `expect` and starts with "bad.json:<line>:".
void expect_schema_errors(const std::string& good, const std::vector<BadCase>& cases) {
  for (const auto& c : cases) {
    std::string text = good;
    auto pos = text.find(c.from);
    ASSERT_NE(pos, std::string::npos) << c.from;
    text.replace(pos, c.from.size(), c.to);
    auto s = parse_op_schema(text, "bad.json");
    ASSERT_FALSE(s.ok()) << c.expect;
    EXPECT_EQ(s.error().code, ErrorCode::schema_error);
    EXPECT_NE(s.error().message.find(c.expect), std::string::npos) << s.error().message;
    EXPECT_EQ(s.error().message.rfind("bad.json:" + std::to_string(c.line) + ":", 0), 0u)
        << s.error().message;
  }
}

TEST(Schema, ErrorsNameFileAndLine) {
  const std::vector<BadCase> cases = {
      {"\"float32\", \"bfloat16\"", "\"float32\", \"bfloat17\"", "unknown dtype 'bfloat17'", 6},
      {"\"layouts\": [\"transposed\"]", "\"layouts\": [\"diagonal\"]", "unknown layout", 8},
      {"\"C % G == 0\"", "\"C % Q == 0\"", "'Q' in 'C % Q == 0' is neither a dim nor an attr", 14},
      {"\"min\": 0}", "\"min\": 0, \"colour\": 1}", "unknown key 'colour'", 10},
      {"\"summary\": \"toy op\",", "", "missing required key 'summary'", 1},
      {"\"default\": 1.0", "\"default\": \"one\"", "is not of type float", 10},
      {"\"custom\"", "\"weird\"", "unknown family", 5},
      {"\"max\": 64", "\"max\": 64 ,,", "invalid JSON", 7},
  };
  expect_schema_errors(k_good, cases);
  // Valid syntax nlohmann::json refuses with out_of_range, not parse_error (found by fuzz_schema:
  // it terminated the process): an error like any other.
  // Values of the wrong JSON type (fuzz_schema: value() threw type_error and terminated).
  std::string strings_as_inputs = k_good;
  strings_as_inputs.replace(strings_as_inputs.find("\"inputs\": ["), 11, "\"inputs\": [\"x\", ");
  auto typed = parse_op_schema(strings_as_inputs, "typed.json");
  ASSERT_FALSE(typed.ok());
  EXPECT_NE(typed.error().message.find("entries must be objects"), std::string::npos)
      << typed.error().message;
  std::string nullable_string = k_good;
  nullable_string.replace(nullable_string.find("\"nullable\": true"), 16, "\"nullable\": \"yes\"");
  auto wrong = parse_op_schema(nullable_string, "wrong.json");
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.error().code, ErrorCode::schema_error);
  auto huge = parse_op_schema("[1e999]", "huge.json");
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.error().code, ErrorCode::schema_error);
  EXPECT_NE(huge.error().message.find("huge.json: invalid JSON"), std::string::npos)
      << huge.error().message;
}

TEST(Schema, AttrValidation) {
  auto s = parse_op_schema(k_good, "toy.json");
  ASSERT_TRUE(s.ok());
  EXPECT_FALSE(s->resolve_attrs({{"beta", 1}}).ok());
  EXPECT_FALSE(s->resolve_attrs({{"alpha", "x"}}).ok());
  EXPECT_FALSE(s->resolve_attrs({{"alpha", -1.0}}).ok());
  EXPECT_FALSE(s->resolve_attrs({{"mode", "c"}}).ok());
  EXPECT_TRUE(s->resolve_attrs({{"scale", nullptr}}).ok());
}

// any_leading_dims: the first entry stands for any number of leading dims; dim_of: an int attr
// checked against the rank of the input it names (the schema's rank, or the given tensor's).
const char* k_rows = R"({
  "name": "rows", "version": 1, "summary": "row op", "family": "custom", "dtypes": ["float32"],
  "dims": {"R": {"min": 1, "max": 8}, "N": {"min": 1, "max": 8}},
  "inputs": [{"name": "x", "shape": ["R", "N"], "any_leading_dims": true, "dtype": "case"},
             {"name": "w", "shape": ["N"], "dtype": "case"}],
  "attrs": {"dim": {"type": "int", "default": -1, "dim_of": "x", "values": [-1, 0]}},
  "outputs": [{"name": "out", "shape": "like:x", "dtype": "case"}],
  "reference": "builtin:toy"
})";

TEST(Schema, AnyLeadingDimsAndDimAttrs) {
  auto s = parse_op_schema(k_rows, "rows.json");
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_TRUE(s->find_input("x")->any_leading_dims);
  EXPECT_FALSE(s->find_input("w")->any_leading_dims);
  EXPECT_EQ(s->find_attr("dim")->dim_of, "x");
  auto rank = [](std::int64_t r) { return [r](const InputSpec&) { return r; }; };
  EXPECT_TRUE(s->check_dim_attrs({{"dim", 1}}, rank(2)).ok());
  EXPECT_TRUE(s->check_dim_attrs({{"dim", -2}}, rank(2)).ok());
  EXPECT_TRUE(s->check_dim_attrs({{"dim", 2}}, rank(-1)).ok());  // absent input: nothing to check
  auto bad = s->check_dim_attrs({{"dim", 2}}, rank(2));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, ErrorCode::invalid_argument);
  EXPECT_EQ(bad.error().message,
            "attr 'dim' of op 'rows' is 2, not a dim of the rank-2 input 'x' (it takes -2..1)");
  EXPECT_TRUE(s->check_dim_attrs({{"dim", 2}}, rank(3)).ok());
  EXPECT_TRUE(dim_in_rank(0, 0) && dim_in_rank(-1, 0) && !dim_in_rank(1, 0));

  // The given tensors bind R to the product of their leading dims (1 when there are none).
  auto x = [](Shape shape) { return Tensor::zeros(DType::float32, std::move(shape)); };
  auto ctx = make_ref_context(*s, {{"x", x({2, 3, 4})}, {"w", x({4})}}, Json::object());
  ASSERT_TRUE(ctx.ok()) << ctx.error().message;
  EXPECT_EQ(ctx->dims.at("R"), 6);
  EXPECT_EQ(ctx->dims.at("N"), 4);
  ctx = make_ref_context(*s, {{"x", x({4})}, {"w", x({4})}}, Json::object());
  ASSERT_TRUE(ctx.ok()) << ctx.error().message;
  EXPECT_EQ(ctx->dims.at("R"), 1);
  auto scalar = make_ref_context(*s, {{"x", x({})}, {"w", x({4})}}, Json::object());
  ASSERT_FALSE(scalar.ok());
  EXPECT_NE(scalar.error().message.find("must have rank at least 1, got shape []"), std::string::npos)
      << scalar.error().message;
  auto w_rank = make_ref_context(*s, {{"x", x({4})}, {"w", x({1, 4})}}, Json::object());
  ASSERT_FALSE(w_rank.ok());
  EXPECT_NE(w_rank.error().message.find("input 'w' of op 'rows' must have rank 1"), std::string::npos);
  auto n_differs = make_ref_context(*s, {{"x", x({2, 4})}, {"w", x({5})}}, Json::object());
  ASSERT_FALSE(n_differs.ok());
  EXPECT_EQ(n_differs.error().code, ErrorCode::shape_mismatch);
  auto dim3 = make_ref_context(*s, {{"x", x({2, 3, 4})}, {"w", x({4})}}, {{"dim", 2}});
  EXPECT_TRUE(dim3.ok());
  auto dim2 = make_ref_context(*s, {{"x", x({3, 4})}, {"w", x({4})}}, {{"dim", 2}});
  ASSERT_FALSE(dim2.ok());
  EXPECT_NE(dim2.error().message.find("not a dim of the rank-2 input 'x'"), std::string::npos);
}

TEST(Schema, AnyLeadingDimsAndDimOfErrors) {
  const std::vector<BadCase> cases = {
      {"\"any_leading_dims\": true", "\"any_leading_dims\": 1", "any_leading_dims must be a bool", 4},
      {"\"shape\": [\"R\", \"N\"], \"any_leading_dims\"", "\"shape\": [\"2 * R\", \"N\"], \"any_leading_dims\"",
       "any_leading_dims needs a shape whose first entry is a dim name", 4},
      {"\"dim_of\": \"x\"", "\"dim_of\": \"y\"", "dim_of names no input 'y'", 6},
      {"\"values\": [-1, 0]", "\"values\": [-1, 2]", "value 2 is not a dim of the rank-2 input 'x'", 6},
      {"\"type\": \"int\", \"default\": -1", "\"type\": \"float\", \"default\": -1", "dim_of needs an int attr", 6},
  };
  expect_schema_errors(k_rows, cases);
}

// An input whose shape depends on a string attr ("shape_when"): a loss's upstream gradient.
const char* k_per_row = R"({
  "name": "per_row", "version": 1, "summary": "loss backward", "family": "custom", "dtypes": ["float32"],
  "dims": {"N": {"min": 1, "max": 8}, "C": {"min": 1, "max": 8}},
  "inputs": [{"name": "g", "shape": [], "shape_when": {"reduction": {"none": ["N"], "pairs": ["N", 2]}}, "dtype": "case"},
             {"name": "x", "shape": ["N", "C"], "dtype": "case"}],
  "attrs": {"reduction": {"type": "string", "default": "mean", "values": ["mean", "none", "pairs"]}},
  "outputs": [{"name": "out", "shape": "like:x", "dtype": "case"}],
  "reference": "builtin:toy"
})";

TEST(Schema, ShapeWhenPicksAnInputShapeByAttr) {
  auto s = parse_op_schema(k_per_row, "per_row.json");
  ASSERT_TRUE(s.ok()) << s.error().message;
  const InputSpec& g = *s->find_input("g");
  EXPECT_EQ(g.shape_attr, "reduction");
  EXPECT_TRUE(g.shape_for({{"reduction", "mean"}}).empty());
  EXPECT_EQ(g.shape_for({{"reduction", "none"}}), (std::vector<std::string>{"N"}));
  EXPECT_EQ(g.shape_for({{"reduction", "pairs"}}), (std::vector<std::string>{"N", "2"}));
  EXPECT_TRUE(g.shape_for(Json::object()).empty());  // attr absent: `shape`
  EXPECT_EQ(g.all_shapes().size(), 3u);
  EXPECT_EQ(s->find_input("x")->shape_for({{"reduction", "none"}}), (std::vector<std::string>{"N", "C"}));

  // make_ref_context checks the rank the attr picks and binds N from it.
  auto t = [](Shape shape) { return Tensor::zeros(DType::float32, std::move(shape)); };
  auto mean = make_ref_context(*s, {{"g", t({})}, {"x", t({3, 4})}}, {{"reduction", "mean"}});
  ASSERT_TRUE(mean.ok()) << mean.error().message;
  auto none = make_ref_context(*s, {{"g", t({3})}, {"x", t({3, 4})}}, {{"reduction", "none"}});
  ASSERT_TRUE(none.ok()) << none.error().message;
  EXPECT_EQ(none->dims.at("N"), 3);
  auto rank = make_ref_context(*s, {{"g", t({})}, {"x", t({3, 4})}}, {{"reduction", "none"}});
  ASSERT_FALSE(rank.ok());
  EXPECT_NE(rank.error().message.find("input 'g' of op 'per_row' must have rank 1, got shape []"), std::string::npos)
      << rank.error().message;
  auto n_differs = make_ref_context(*s, {{"g", t({2})}, {"x", t({3, 4})}}, {{"reduction", "none"}});
  ASSERT_FALSE(n_differs.ok());
  EXPECT_EQ(n_differs.error().code, ErrorCode::shape_mismatch);
  // A scalar's shape checks no rank (a reference reads numel 1, as one-element tensors have).
  EXPECT_TRUE(make_ref_context(*s, {{"g", t({1})}, {"x", t({3, 4})}}, Json::object()).ok());
}

TEST(Schema, ShapeWhenErrors) {
  const std::vector<BadCase> cases = {
      {"\"shape_when\": {\"reduction\"", "\"shape_when\": {\"nope\"", "'nope' is not an attr", 4},
      {"\"none\": [\"N\"]", "\"never\": [\"N\"]", "'never' is not a value of attr 'reduction'", 4},
      {"\"none\": [\"N\"]", "\"none\": [\"M\"]", "'M' in 'M' is neither a dim nor an attr", 4},
      {"\"none\": [\"N\"]", "\"none\": \"N\"", "shape must be a list", 4},
      {"\"shape_when\": {\"reduction\": {\"none\": [\"N\"], \"pairs\": [\"N\", 2]}}",
       "\"shape_when\": {\"reduction\": {}}", "shape_when must be", 4},
      {"\"type\": \"string\", \"default\": \"mean\"", "\"type\": \"int\", \"default\": 0",
       "'reduction' must be a string attr", 4},
  };
  // (the string-attr case also fails the values' type first where values are listed: drop them)
  std::string no_values = k_per_row;
  no_values.replace(no_values.find(", \"values\": [\"mean\", \"none\", \"pairs\"]"),
                    std::string(", \"values\": [\"mean\", \"none\", \"pairs\"]").size(), "");
  expect_schema_errors(k_per_row, {cases.begin(), cases.end() - 1});
  expect_schema_errors(no_values, {cases.back()});
}

TEST(Catalogue, BuiltinSchemasAllLoadAndHaveReferences) {
  auto cat = Catalogue::load({GPUEMU_SOURCE_DIR "/schemas/ops"});
  ASSERT_TRUE(cat.ok()) << cat.error().message;
  ASSERT_NE((*cat)->find("softmax"), nullptr);
  for (const OpSchema* s : (*cat)->all()) {
    ASSERT_EQ(s->reference.rfind("builtin:", 0), 0u) << s->name;
    EXPECT_NE(BuiltinRegistry::instance().find(s->reference.substr(8)), nullptr) << s->name;
  }
  auto unknown = (*cat)->get("sofmax");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.error().code, ErrorCode::unknown_op);
  EXPECT_NE(unknown.error().message.find("did you mean 'softmax'"), std::string::npos);
}

}  // namespace
}  // namespace gpuemu
