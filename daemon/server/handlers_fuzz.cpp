// fuzz, get_test_batch, submit_outputs, validate, calibrate: the fuzz family
// (gpuemu/protocol/wire/fuzz.hpp).
#include "gpuemu/engine/coverage.hpp"
#include "gpuemu/engine/fuzz_run.hpp"
#include "gpuemu/engine/verdict.hpp"
#include "gpuemu/protocol/wire/fuzz.hpp"
#include "records.hpp"
#include "request_engine.hpp"
#include "supplied_reference.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

namespace gpuemu::server {
namespace {

using protocol::Frame;
using protocol::make_reply;

// A request's progress callback when it carries a `progress_token` (the client polls `progress`);
// the entry goes when the guard does.
struct ProgressEntry {
  ProgressBoard* board = nullptr;
  std::string token;
  ~ProgressEntry() {
    if (board) board->erase(token);
  }
};

std::function<void(std::int64_t, std::int64_t)> progress_reporter(DaemonContext& ctx,
                                                                  const std::string& token,
                                                                  ProgressEntry& entry) {
  if (token.empty()) return {};
  entry.board = &ctx.progress;
  entry.token = token;
  ProgressBoard* board = &ctx.progress;
  return [board, token](std::int64_t done, std::int64_t total) { board->set(token, done, total); };
}

// Cases and passes per dtype of a run (the run record's `by_dtype`: pass rates per op and dtype).
void count_case(Json& by_dtype, const TestCase& c, bool passed) {
  Json& d = by_dtype[std::string(dtype_name(c.dtype))];
  if (!d.is_object()) d = {{"total", 0}, {"passed", 0}};
  d["total"] = d["total"].get<std::int64_t>() + 1;
  d["passed"] = d["passed"].get<std::int64_t>() + (passed ? 1 : 0);
}

std::uint64_t random_seed() {
  std::random_device rd;
  return (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
}

// Stores failures in one transaction; returns their ids (empty strings when storing is off).
// `kernels` holds one identity per failure, or one for all.
// Failures a fuzz reply describes in full (all are stored and listed by id).
constexpr std::size_t k_reported_failures = 1000;

// The largest case `schema` can generate under `options` is over the daemon's element limit: the
// shape sampler keeps every case within max_elements × element_budget_scale (pinned dims too).
Status check_case_budget(const DaemonContext& ctx, const OpSchema& schema, const FuzzOptions& options) {
  const double budget = static_cast<double>(schema.max_elements) * options.element_budget_scale;
  if (budget > static_cast<double>(ctx.config.max_case_elements))
  {
    Error e = over_limit("the element budget of " + schema.name + "'s cases (max_elements " +
                             std::to_string(schema.max_elements) + " x element_budget_scale)",
                         static_cast<std::int64_t>(std::min(budget, 9.2e18)),
                         ctx.config.max_case_elements, "--max-case-elements");
    // Cases are never shrunk to fit quietly: the same seed must give the same case everywhere.
    e.message += "; ask for smaller cases (the option element_budget_scale, below 1) or raise the limit";
    return e;
  }
  return {};
}

// The elements of the request's tensors whose keys start with `prefix` (a case's inputs and
// outputs), checked against the element limit.
Status check_item_elements(const DaemonContext& ctx, const Frame& req, const std::string& prefix,
                           const std::string& what) {
  std::int64_t n = 0;
  for (auto it = req.tensors.lower_bound(prefix);
       it != req.tensors.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it)
    n += it->second.numel();
  if (n > ctx.config.max_case_elements)
    return over_limit("the number of elements in " + what, n, ctx.config.max_case_elements,
                      "--max-case-elements");
  return {};
}

Status check_batch_size(const DaemonContext& ctx, std::int64_t n, const std::string& what) {
  if (n > ctx.config.max_batch_cases)
    return over_limit(what, n, ctx.config.max_batch_cases, "--max-batch-cases");
  return {};
}

Result<std::vector<std::string>> store_failures(DaemonContext& ctx,
                                                const std::vector<CaseResult>& failures,
                                                const FuzzOptions& options,
                                                const std::vector<Json>& kernels,
                                                const Json& client, bool store,
                                                const RequestEngine& re,
                                                std::vector<std::vector<std::byte>>* snapshots = nullptr) {
  std::vector<std::string> ids(failures.size());
  if (!store || failures.empty() || !ctx.store) return ids;
  std::vector<FailureRecord> recs;
  for (std::size_t i = 0; i < failures.size(); ++i) {
    recs.push_back(make_failure_record(ctx, failures[i], options,
                                       kernels[std::min(i, kernels.size() - 1)], client, &re));
    if (snapshots) snapshots->push_back(recs.back().inputs);
  }
  GPUEMU_TRY(ids, ctx.store->put_failures(std::move(recs)));
  return ids;
}

Result<wire::FuzzReply> fuzz(DaemonContext& ctx, const wire::FuzzRequest& p) {
  if (p.iterations < 1 || p.iterations > 10'000'000)
    return make_error(ErrorCode::invalid_argument, "'iterations' must be in [1, 10000000]");
  if (p.start_index < 0 || p.start_index > (std::int64_t{1} << 53))
    return make_error(ErrorCode::invalid_argument, "'start_index' must be in [0, 2^53]");
  FuzzRequest fr = wire::engine_request(p, p.seed ? *p.seed : random_seed());
  const bool store = p.store;
  const Json& kernel = p.kernel;
  const Json& client = p.client;
  GPUEMU_TRY(RequestEngine re, RequestEngine::make(ctx, p.op, p.custom_op, p.envelope));
  GPUEMU_TRY(const OpSchema* fuzzed, re.engine().catalogue().get(fr.op));
  GPUEMU_TRY_STATUS(check_case_budget(ctx, *fuzzed, fr.options));
  GPUEMU_TRY(auto runner, resolve_kernel(ctx, fr.op, kernel, &re));
  if (!runner)
    return make_error(ErrorCode::invalid_argument,
                      "a client-side kernel cannot be fuzzed by the daemon: use get_test_batch and "
                      "submit_outputs");
  Json by_dtype = Json::object();
  fr.on_case = [&by_dtype](const CaseResult& r) {
    count_case(by_dtype, r.test_case, r.verdict.passed && r.kernel_error.empty());
  };
  ProgressEntry progress_entry;
  GPUEMU_TRY(
      FuzzReport report,
      re.engine().fuzz(fr, *runner, progress_reporter(ctx, p.progress_token, progress_entry)));
  std::vector<CaseResult>& failures = report.failures;
  GPUEMU_TRY(auto ids, store_failures(ctx, failures, fr.options, {kernel}, client, store, re));
  wire::FuzzReply j;
  j.report = report.to_json();
  j.failure_ids = ids;
  // Every failure is stored and named in failure_ids; the first k_reported_failures are described
  // in the reply too (a run of 30,000 cases failing half made 22 MiB of JSON, past the protocol's
  // 16 MiB: the report was lost). `gpuemu failures show ID` has the rest.
  const std::size_t described = std::min(failures.size(), k_reported_failures);
  for (std::size_t i = 0; i < described; ++i)
    j.failures.push_back(case_result_json(failures[i], ids[i]));
  if (described < failures.size()) j.failures_not_described = failures.size() - described;
  if (!failures.empty() && failures.front().minimized) j.minimized = failures.front().minimized->to_json();
  j.kernel = kernel_identity(kernel);
  j.options = fr.options;
  {  // what judged each dtype of the run, and why
    GPUEMU_TRY(const OpSchema* schema, re.engine().catalogue().get(fr.op));
    for (DType d : fr.options.dtypes.empty() ? schema->dtypes : fr.options.dtypes)
      j.envelope[std::string(dtype_name(d))] = re.envelope_source(fr.op, d);
  }
  if (!re.custom_op().is_null()) j.custom_op = re.custom_op().value("name", fr.op);
  if (store && ctx.store) {
    Json run = {{"kind", "fuzz"},
                {"op", fr.op},
                {"seed", fr.seed},
                {"first_index", fr.start_index},
                {"kernel", j.kernel},
                {"total", report.total},
                {"passed", report.passed},
                {"elapsed", report.elapsed_s},
                {"failure_ids", ids},
                {"first_failure", report.first_failure},
                {"dtypes", protocol::options_to_json(fr.options).value("dtypes", Json::array())},
                {"vary_attrs", fr.options.vary_attrs},
                {"by_dtype", by_dtype},
                {"coverage", report.coverage},
                {"envelope", j.envelope}};
    if (!re.custom_op().is_null()) run["custom_op"] = true;
    if (auto rid = ctx.store->put_run(run)) j.run_id = *rid;
  }
  return j;
}

// Cases of the daemon's own catalogue are kept between get_test_batch and submit_outputs
// (case_cache.hpp); a custom op's schema lives only as long as its request.
bool cacheable(const DaemonContext& ctx, const Json& custom_op) {
  return ctx.case_cache && ctx.case_cache->limit_bytes() > 0 && custom_op.is_null();
}

// The kept case a submitted item refers to, if it is still kept and is the same case (its seed).
std::shared_ptr<CaseCache::Entry> kept_case(CaseCache* cache, const std::string& op,
                                            const std::string& options_key, const Json& c,
                                            std::string& key) {
  if (cache == nullptr || !c.is_object() || !c.contains("master_seed") || !c.contains("index") ||
      !c["master_seed"].is_number_unsigned() || !c["index"].is_number_integer())
    return nullptr;
  const auto index = c["index"].get<std::int64_t>();
  if (index < 0) return nullptr;
  key = CaseCache::key(op, options_key, c["master_seed"].get<std::uint64_t>(), index);
  auto e = cache->find(key);
  if (e && c.contains("seed") &&
      !(c["seed"].is_number_unsigned() && c["seed"].get<std::uint64_t>() == e->test_case().seed))
    return nullptr;
  return e;
}

// Cases [start, start + count) of `op` under `master`: their tensors into `reply` under
// cases/<i>/, kept in the case cache for the submission that judges them; the batch's JSON
// (each input's digest only with `digests`).
Result<wire::CaseBatch> hand_out(DaemonContext& ctx, const Json& custom_op, const RequestEngine& re,
                                 const std::string& op, const OpSchema& schema,
                                 const FuzzOptions& options, std::uint64_t master,
                                 std::int64_t start, std::int64_t count, bool digests,
                                 Frame& reply) {
  if (count < 1) return make_error(ErrorCode::invalid_argument, "'count' must be >= 1");
  GPUEMU_TRY_STATUS(check_batch_size(ctx, count, "'count' (cases in one batch)"));
  if (start < 0) return make_error(ErrorCode::invalid_argument, "'start_index' must be >= 0");
  CaseGenerator gen(schema, options);
  GPUEMU_TRY_STATUS(gen.validate());
  wire::CaseBatch batch{op, master, Json::array(), options, std::nullopt};
  CaseCache* cache = cacheable(ctx, custom_op) ? ctx.case_cache.get() : nullptr;
  const std::string options_key = cache ? protocol::options_to_json(options).dump() : "";
  for (std::int64_t i = start; i < start + count; ++i) {
    const std::string key = cache ? CaseCache::key(op, options_key, master, i) : "";
    auto ahead = cache ? cache->peek(key) : nullptr;  // generated ahead (prefetch)
    GPUEMU_TRY(TestCase c, ahead ? Result<TestCase>(ahead->test_case()) : gen.generate(master, i));
    batch.cases.push_back(protocol::case_to_json(c, digests));
    protocol::add_case_tensors(reply, c, "cases/" + std::to_string(i - start) + "/");
    if (cache) cache->put(key, c, re.engine().catalogue_ptr(), &schema);
  }
  return batch;
}

// Cases [start, start + count) generated on the case cache's background thread and kept, so that
// the request that hands them out (the next chunk of a client-side run) finds them made while the
// client ran its kernel on this chunk. The same generator, options and seeds: the same bytes.
Status prefetch(DaemonContext& ctx, const Json& custom_op, const RequestEngine& re,
                const std::string& op, const OpSchema& schema, const FuzzOptions& options,
                std::uint64_t master, std::int64_t start, std::int64_t count) {
  if (count <= 0) return {};
  if (count > ctx.config.max_batch_cases || start < 0)
    return make_error(ErrorCode::invalid_argument,
                      "'prefetch' must be in [0, " + std::to_string(ctx.config.max_batch_cases) + "]");
  CaseCache* cache = cacheable(ctx, custom_op) ? ctx.case_cache.get() : nullptr;
  if (!cache) return {};
  cache->post([cache, catalogue = re.engine().catalogue_ptr(), op, schema = &schema, options,
               options_key = protocol::options_to_json(options).dump(), master, start, count] {
    CaseGenerator gen(*schema, options);
    for (std::int64_t i = start; i < start + count; ++i) {
      const std::string key = CaseCache::key(op, options_key, master, i);
      if (cache->peek(key)) continue;
      auto c = gen.generate(master, i);
      if (!c) return;  // the request that hands it out generates it and reports the error
      cache->put(key, *c, catalogue, schema);
    }
  });
  return {};
}

Result<Frame> get_test_batch(DaemonContext& ctx, const wire::GetTestBatchRequest& p, const Frame&) {
  if (p.count < 1) return make_error(ErrorCode::invalid_argument, "'count' must be >= 1");
  GPUEMU_TRY_STATUS(check_batch_size(ctx, p.count, "'count' (cases in one batch)"));
  if (p.start_index < 0)
    return make_error(ErrorCode::invalid_argument, "'start_index' must be >= 0");
  const std::uint64_t master = p.seed ? *p.seed : random_seed();
  GPUEMU_TRY(RequestEngine re, RequestEngine::make(ctx, p.op, p.custom_op, p.envelope));
  GPUEMU_TRY(const OpSchema* schema, re.engine().catalogue().get(p.op));
  GPUEMU_TRY_STATUS(check_case_budget(ctx, *schema, p.options));
  if (p.run && (p.run->iterations < 1 || p.run->iterations > 10'000'000))
    return make_error(ErrorCode::invalid_argument, "'run.iterations' must be in [1, 10000000]");
  Frame reply = protocol::make_reply();
  GPUEMU_TRY(wire::CaseBatch batch, hand_out(ctx, p.custom_op, re, p.op, *schema, p.options, master,
                                             p.start_index, p.count, p.digests, reply));
  GPUEMU_TRY_STATUS(prefetch(ctx, p.custom_op, re, p.op, *schema, p.options, master,
                             p.start_index + p.count, p.prefetch));
  if (p.run) {  // a client-side run: its books are the engine's FuzzRun, kept here
    FuzzRequest fr;
    fr.op = p.op;
    fr.options = p.options;
    fr.seed = master;
    fr.iterations = p.run->iterations;
    fr.start_index = p.start_index;
    fr.fail_fast = p.run->fail_fast;
    fr.diagnose_limit = std::max(p.run->diagnose_limit, 0);
    fr.repro_prefix = p.run->repro_prefix;
    auto run = std::make_shared<ClientRun>(std::move(fr));
    run->options_key = protocol::options_to_json(p.options).dump();
    run->run.take(p.count);
    batch.run_id = ctx.runs.open(std::move(run));
  }
  reply.header["result"] = to_json(batch);
  return reply;
}

// A client-side run's summary (submit_outputs's `run`).
Json run_summary(const std::string& id, const FuzzRun& run) {
  const FuzzReport& r = run.report();
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - run.started()).count();
  return {{"run_id", id},
          {"op", r.op},
          {"seed", r.master_seed},
          {"iterations", run.request().iterations},
          {"total", r.total},
          {"passed", r.passed},
          {"inconclusive", r.inconclusive},
          {"failed", r.total - r.passed - r.inconclusive},
          {"first_failure", r.first_failure},
          {"worst", Json{{"index", r.worst_index},
                         {"ratio", std::isfinite(r.worst_ratio) ? Json(r.worst_ratio) : Json("inf")}}},
          {"elapsed", elapsed},
          {"done", run.done()}};
}

// The case a submitted item refers to, regenerated from its seed (the daemon never trusts inputs a
// client sends back: a kernel may have written into them).
Result<TestCase> regenerate(const CaseGenerator& gen, const Json& c) {
  if (!c.is_object())
    return make_error(ErrorCode::invalid_argument, "each item needs a 'case' object");
  const auto master = c.value("master_seed", std::uint64_t{0});
  const auto index = c.value("index", std::int64_t{-1});
  const auto seed = c.value("seed", std::uint64_t{0});
  if (index >= 0) {
    GPUEMU_TRY(TestCase t, gen.generate(master, index));
    if (!c.contains("seed") || t.seed == seed) return t;
  }
  if (!c.contains("seed"))
    return make_error(ErrorCode::invalid_argument, "the case has neither 'index' nor 'seed'");
  return gen.generate_from_seed(seed);
}

// A diagnosis the client computed by re-running its own kernel on the probes (an item's optional
// `diagnosis`): {bug_class, summary, evidence}. Absent: nullopt.
Result<std::optional<Diagnosis>> client_diagnosis(const Json& diagnosis) {
  const Json* it = &diagnosis;
  if (it->is_null()) return std::optional<Diagnosis>();
  if (!it->is_object() || !it->contains("bug_class") || !(*it)["bug_class"].is_string())
    return make_error(ErrorCode::invalid_argument,
                      "an item's 'diagnosis' must be an object with a string 'bug_class'");
  Diagnosis d;
  d.bug_class = (*it)["bug_class"].get<std::string>();
  if (auto s = it->find("summary"); s != it->end() && s->is_string()) d.summary = s->get<std::string>();
  if (auto ev = it->find("evidence"); ev != it->end() && ev->is_array())
    for (const auto& e : *ev)
      if (e.is_string()) d.evidence.push_back(e.get<std::string>());
  return std::optional<Diagnosis>(std::move(d));
}

// Whether two tensors of the same dtype and shape hold the same bytes, element by element: one
// memcmp when both are contiguous (the usual case: a copy was not made per submitted input).
bool same_bytes(const Tensor& a, const Tensor& b) {
  if (a.is_contiguous() && b.is_contiguous()) {
    const std::size_t es = dtype_size(a.dtype());
    const auto n = static_cast<std::size_t>(a.numel()) * es;
    if (n == 0) return true;
    return std::memcmp(a.storage()->data() + static_cast<std::size_t>(a.offset()) * es,
                       b.storage()->data() + static_cast<std::size_t>(b.offset()) * es, n) == 0;
  }
  return a.contiguous_bytes() == b.contiguous_bytes();
}

// "input mutated" when the kernel changed an input it was given.
std::string mutation_message(const TestCase& c, const Frame& req, const std::string& prefix) {
  for (const auto& [name, t] : c.inputs) {
    auto sent = req.tensors.find(prefix + name);
    if (sent == req.tensors.end()) continue;
    if (sent->second.shape() != t.shape()) return "input mutated: '" + name + "' changed shape";
    if (sent->second.dtype() != t.dtype()) return "input mutated: '" + name + "' changed dtype";
    if (!same_bytes(sent->second, t)) {
      std::int64_t changed = 0;
      for (std::int64_t k = 0; k < t.numel(); ++k) {
        const double a = t.get_flat(k), b = sent->second.get_flat(k);
        if (!(a == b || (std::isnan(a) && std::isnan(b)))) ++changed;
      }
      return "input mutated: the kernel wrote into '" + name + "' (" + std::to_string(changed) +
             " of " + std::to_string(t.numel()) + " elements changed)";
    }
  }
  return "";
}

// The bytes a held submission keeps (its failing cases' inputs): what HeldBoard bounds.
std::size_t held_bytes(const HeldSubmission& h) {
  std::size_t n = 0;
  for (const CaseResult& r : h.failures)
    for (const auto& [name, t] : r.test_case.inputs)
      n += static_cast<std::size_t>(t.numel()) * dtype_size(t.dtype());
  return n;
}

// The diagnoses a client computed for a held submission's failures: `diagnoses` is
// [{"item": i, "diagnosis": {bug_class, summary, evidence}}, ...]; items not named keep the
// daemon's own diagnosis. Read whole before anything changes (a refused finish stays held).
using ItemDiagnoses = std::vector<std::pair<std::int64_t, Diagnosis>>;
Result<ItemDiagnoses> read_diagnoses(const Json& diagnoses) {
  ItemDiagnoses out;
  if (diagnoses.is_null()) return out;
  if (!diagnoses.is_array())
    return make_error(ErrorCode::invalid_argument,
                      "'diagnoses' must be an array of {\"item\": i, \"diagnosis\": {...}}");
  for (const Json& d : diagnoses) {
    if (!d.is_object() || !d.contains("item") || !d["item"].is_number_integer())
      return make_error(ErrorCode::invalid_argument,
                        "each of 'diagnoses' needs an integer 'item' (its index in the items)");
    GPUEMU_TRY(auto diag, client_diagnosis(d.value("diagnosis", Json())));
    if (diag) out.emplace_back(d["item"].get<std::int64_t>(), std::move(*diag));
  }
  return out;
}

Status check_diagnosed_items(const ItemDiagnoses& diagnoses, const HeldSubmission& h) {
  for (const auto& [i, d] : diagnoses)
    if (i < 0 || static_cast<std::size_t>(i) >= h.items)
      return make_error(ErrorCode::invalid_argument,
                        "'diagnoses' names item " + std::to_string(i) + " of a submission of " +
                            std::to_string(h.items));
  return {};
}

void apply_diagnoses(HeldSubmission& h, const ItemDiagnoses& diagnoses) {
  for (const auto& [i, d] : diagnoses)
    for (std::size_t f = 0; f < h.failures.size(); ++f)
      if (h.failure_item[f] == static_cast<std::size_t>(i)) {
        h.failures[f].diagnosis = d;
        h.results[static_cast<std::size_t>(i)]["diagnosis"] = d.to_json();
      }
}

// Judges the items of a submission (their outputs in `req`) into `h`. `undiagnosed`: a failure
// was judged that the client did not diagnose (what hold_for_diagnosis waits for).
Status judge_items(DaemonContext& ctx, const Frame& req, const wire::SubmitOutputsRequest& p,
                   const Engine& engine, const CaseGenerator& gen, const FuzzOptions& options,
                   const Json& kernel, HeldSubmission& h, bool& undiagnosed) {
  if (!p.items || p.items->empty())
    return make_error(ErrorCode::invalid_argument, "'items' must be a non-empty array");
  const std::vector<wire::SubmitItem>& items = *p.items;
  GPUEMU_TRY_STATUS(check_batch_size(ctx, static_cast<std::int64_t>(items.size()),
                                     "'items' (cases in one submission)"));
  for (std::size_t i = 0; i < items.size(); ++i)
    GPUEMU_TRY_STATUS(check_item_elements(ctx, req, "items/" + std::to_string(i) + "/",
                                          "item " + std::to_string(i) + " (its inputs and outputs)"));
  const std::string& op = h.op;
  h.items = items.size();
  h.results = Json::array();
  h.by_dtype = Json::object();
  h.coverage = Json::object();
  CaseCache* cache = cacheable(ctx, p.custom_op) ? ctx.case_cache.get() : nullptr;
  for (std::size_t i = 0; i < items.size(); ++i) {
    const wire::SubmitItem& item = items[i];
    const std::string prefix = "items/" + std::to_string(i) + "/";
    GPUEMU_TRY(auto from_client, client_diagnosis(item.diagnosis));
    std::string key;
    const auto kept = kept_case(cache, op, h.options_key, item.case_json, key);
    if (kept) h.used.push_back(key);
    GPUEMU_TRY(TestCase c,
               kept ? Result<TestCase>(kept->test_case()) : regenerate(gen, item.case_json));
    coverage_add(h.coverage, c);
    if (!h.master_seed) h.master_seed = c.master_seed;
    if (h.first_index < 0 || c.index < h.first_index) h.first_index = c.index;
    CaseResult r;
    r.test_case = c;
    const std::string& kernel_error = item.kernel_error;
    const std::string& contract = item.contract_error;
    const std::string mutated = mutation_message(c, req, prefix + "inputs/");
    if (!kernel_error.empty() || !contract.empty() || !mutated.empty()) {
      r.verdict.passed = false;
      r.verdict.max_error = std::numeric_limits<double>::infinity();
      r.verdict.envelope = engine.envelopes().get(op, c.dtype);
      r.kernel_error = kernel_error;
      r.verdict.message = !kernel_error.empty() ? "the kernel raised: " + kernel_error
                          : !contract.empty()   ? contract
                                                : mutated;
      // A kernel error is read for its cause (absent_input, unsupported_attr; else kernel_error).
      r.diagnosis = kernel_error.empty() ? Diagnosis{"contract", r.verdict.message, {}}
                                         : engine.diagnose(op, options, r, nullptr);
    } else {
      std::vector<Tensor> outs;
      for (int k = 0;; ++k) {
        auto t = req.tensors.find(prefix + "outputs/" + std::to_string(k));
        if (t == req.tensors.end()) break;
        outs.push_back(t->second);
      }
      if (outs.empty())
        return make_error(ErrorCode::invalid_argument,
                          "item " + std::to_string(i) + " carries no outputs");
      if (kept) {
        const auto& prepared = cache->prepared(*kept);
        if (!prepared) return prepared.error();
        r.verdict = judge(kept->schema(), prepared->ctx, prepared->reference, outs,
                          engine.envelopes().get(op, c.dtype), &prepared->rounded);
      } else {
        // An op from PyTorch code is judged by the reference its client sent with this item.
        const SuppliedReference* supplied = supplied_reference_of(gen.schema());
        if (supplied) supplied->point_at(&req, prefix);
        auto judged = engine.judge_case(c, outs);
        if (supplied) supplied->point_at(nullptr, {});
        if (!judged) return judged.error();
        r.verdict = std::move(judged).value();
      }
      if (!r.verdict.passed && from_client) {
        r.diagnosis = *from_client;
      } else if (!r.verdict.passed) {
        r.diagnosis = engine.diagnose(op, options, r, nullptr);
        undiagnosed = true;
      }
    }
    r.repro = repro_command(h.repro_prefix, op, c.master_seed, c.index);
    h.results.push_back({{"passed", r.verdict.passed},
                         {"max_error", r.verdict.to_json().value("max_error", Json())},
                         {"envelope", r.verdict.envelope},
                         {"message", r.verdict.message},
                         {"seed", c.seed},
                         {"index", c.index}});
    if (r.verdict.inconclusive) {  // neither passed nor failed: counted apart, with the reason
      h.results.back()["inconclusive"] = true;
      ++h.inconclusive;
    }
    count_case(h.by_dtype, c, r.verdict.passed && !r.verdict.inconclusive);
    if (r.verdict.passed) h.passes.emplace_back(c.index, r.verdict);
    if (!r.verdict.passed) {
      if (h.first_failure < 0 || c.index < h.first_failure) h.first_failure = c.index;
      h.results.back()["diagnosis"] = r.diagnosis.to_json();
      // The outputs that failed, by schema name (every output when none was judged: the kernel
      // raised, broke its contract or wrote its inputs).
      // (A verdict's outputs are the schema's, in its order; a one-output reference may call
      // its output "out" whatever the schema names it.)
      const auto& specs = gen.schema().outputs;
      Json failed_outputs = Json::array();
      for (std::size_t k = 0; k < r.verdict.outputs.size(); ++k)
        if (!r.verdict.outputs[k].passed)
          failed_outputs.push_back(k < specs.size() ? specs[k].name : r.verdict.outputs[k].name);
      if (failed_outputs.empty())
        for (const auto& o : gen.schema().outputs) failed_outputs.push_back(o.name);
      h.results.back()["failed_outputs"] = failed_outputs;
      h.failed_cases.push_back({{"index", c.index}, {"dtype", std::string(dtype_name(c.dtype))}, {"outputs", failed_outputs}});
      Json k = kernel;  // the request's kernel identity, refined per item (file, line)
      if (item.kernel.is_object()) k.update(item.kernel);
      h.failure_kernels.push_back(std::move(k));
      h.failures.push_back(std::move(r));
      h.failure_item.push_back(i);
    }
  }
  return {};
}

// Judges a client kernel's outputs (`items`, their tensors under items/<i>/), stores the failures
// and records the run. With `hold_for_diagnosis`, failures the client did not diagnose come back
// unstored (`held`) for the client to diagnose; it then sends the items again with their
// diagnoses or, when it asked for `hold_by_id`, only `held_id` and `diagnoses` (nothing judged
// twice, no tensor sent twice). `snapshots`: each stored failure's input snapshot comes back too,
// as the uint8 tensor snapshots/<item> (the bytes `failures get --snapshot` returns in base64).
// `next` ({count, start_index, seed, prefetch}): the next batch of cases comes back in the same
// reply (result `next`, tensors under cases/<i>/), so a client-side
// run makes one request per chunk.
Result<Frame> submit_outputs(DaemonContext& ctx, const wire::SubmitOutputsRequest& p,
                             const Frame& req) {
  const std::string& op = p.op;
  const FuzzOptions& options = p.options;
  const bool store = p.store, hold = p.hold_for_diagnosis, hold_by_id = p.hold_by_id,
             snapshots = p.snapshots;
  const std::string& held_id = p.held_id;
  const Json& kernel = p.kernel;
  const Json& client = p.client;
  GPUEMU_TRY(RequestEngine re, RequestEngine::make(ctx, op, p.custom_op, p.envelope));
  const Engine& engine = re.engine();
  GPUEMU_TRY(const OpSchema* schema, engine.catalogue().get(op));
  GPUEMU_TRY_STATUS(check_case_budget(ctx, *schema, options));
  CaseGenerator gen(*schema, options);
  GPUEMU_TRY_STATUS(gen.validate());
  const std::string options_key = protocol::options_to_json(options).dump();
  // A client-side run these items belong to: its books are kept here, in the engine's FuzzRun.
  std::shared_ptr<ClientRun> crun;
  std::unique_lock<std::mutex> run_lock;
  if (!p.run_id.empty()) {
    crun = ctx.runs.find(p.run_id);
    if (!crun)
      return make_error(ErrorCode::not_found,
                        "no client-side run '" + p.run_id + "' (a run is kept " +
                            std::to_string(RunBoard::k_ttl.count()) +
                            " min after its last submission, and not past a daemon restart)");
    run_lock = std::unique_lock(crun->mutex);
    if (crun->closed)
      return make_error(ErrorCode::invalid_argument, "client-side run '" + p.run_id + "' is over");
    if (crun->run.request().op != op ||
        (crun->options_key != options_key && crun->next_keys.count(options_key) == 0))
      return make_error(ErrorCode::invalid_argument,
                        "client-side run '" + p.run_id + "' fuzzes " + crun->run.request().op +
                            " under other options than this request's");
  }
  HeldSubmission h;
  if (!held_id.empty()) {
    if (p.items)
      return make_error(ErrorCode::invalid_argument,
                        "a submission with 'held_id' carries 'diagnoses', not 'items'");
    GPUEMU_TRY(ItemDiagnoses diagnoses, read_diagnoses(p.diagnoses));
    GPUEMU_TRY(auto taken, ctx.held.take(held_id, [&](const HeldSubmission& x) -> Status {
      if (x.op != op || x.options_key != options_key)
        return make_error(ErrorCode::invalid_argument,
                          "held submission '" + held_id + "' judged " + x.op +
                              " under other options than this request's");
      return check_diagnosed_items(diagnoses, x);
    }));
    if (!taken)
      return make_error(ErrorCode::not_found,
                        "no held submission '" + held_id + "' (one is kept for " +
                            std::to_string(HeldBoard<HeldSubmission>::k_ttl.count()) +
                            " min, and not past a daemon restart): submit the items again");
    h = std::move(*taken);
    apply_diagnoses(h, diagnoses);
  } else {
    h.op = op;
    h.options_key = options_key;
    if (crun) h.repro_prefix = crun->run.request().repro_prefix;
    bool undiagnosed = false;
    GPUEMU_TRY_STATUS(judge_items(ctx, req, p, engine, gen, options, kernel, h, undiagnosed));
    // The client diagnoses these failures by re-running its kernel on the probes, then finishes
    // the submission: nothing is stored and no run is recorded now.
    // In a run, its diagnosis budget names the failures the client diagnoses (`diagnose`), and a
    // submission with none to diagnose is not held.
    std::vector<std::size_t> to_diagnose;
    if (crun) {
      int left = crun->run.diagnoses_left();
      for (std::size_t f = 0; f < h.failures.size() && left > 0; ++f, --left) {
        const CaseResult& r = h.failures[f];
        const std::string& bug = r.diagnosis.bug_class;
        if (r.kernel_error.empty() && bug != "contract" && bug != "kernel_error")
          to_diagnose.push_back(h.failure_item[f]);
      }
    }
    if (hold && undiagnosed && (!crun || !to_diagnose.empty())) {
      wire::SubmitOutputsReply j;
      j.op = op;
      j.results = h.results;
      j.held = true;
      for (std::size_t item : to_diagnose) j.results[item]["diagnose"] = true;
      if (hold_by_id) {
        const std::size_t bytes = held_bytes(h);
        j.held_id = ctx.held.put(std::move(h), bytes);
      }
      return make_reply(to_json(j));
    }
  }
  CaseCache* cache = cacheable(ctx, p.custom_op) ? ctx.case_cache.get() : nullptr;
  if (cache)
    for (const auto& k : h.used) cache->erase(k);  // judged for good: the memory goes
  std::vector<std::vector<std::byte>> snaps;
  GPUEMU_TRY(auto ids, store_failures(ctx, h.failures, options, h.failure_kernels, client, store,
                                      re, snapshots ? &snaps : nullptr));
  Frame reply = make_reply();
  for (std::size_t f = 0; f < h.failures.size(); ++f)
    if (!ids[f].empty()) {
      Json& r = h.results[h.failure_item[f]];
      r["failure_id"] = ids[f];
      r["repro"] = "gpuemu repro " + ids[f];
      if (f < snaps.size()) {  // the stored snapshot's bytes, as `failures get` returns them
        const auto n = static_cast<std::int64_t>(snaps[f].size());
        GPUEMU_TRY(Tensor t, Tensor::view(DType::uint8, {n}, {1}, 0,
                                          std::make_shared<std::vector<std::byte>>(std::move(snaps[f]))));
        reply.tensors["snapshots/" + std::to_string(h.failure_item[f])] = std::move(t);
      }
    }
  if (store && ctx.store) {
    Json run = {{"kind", "client"},
                {"op", op},
                {"seed", h.master_seed ? Json(*h.master_seed) : Json()},
                {"first_index", h.first_index},
                {"kernel", kernel_identity(kernel)},
                {"total", h.items},
                {"passed", h.items - h.failures.size() - h.inconclusive},
                {"inconclusive", h.inconclusive},
                {"failure_ids", ids},
                {"first_failure", h.first_failure},
                {"dtypes", protocol::options_to_json(options).value("dtypes", Json::array())},
                {"vary_attrs", options.vary_attrs},
                {"by_dtype", h.by_dtype},
                {"coverage", h.coverage},
                {"failed_cases", h.failed_cases}};
    // A client-side run's records name it, and the part of a backward=True run they are
    // (`part_of`: the forward, or the gradients of the forward run named): the report joins the
    // two into one count of cases (cli/report_stats.hpp, join_backward_parts).
    if (!p.run_id.empty()) run["run_id"] = p.run_id;
    if (p.part_of.is_object() && !p.part_of.empty()) run["part_of"] = p.part_of;
    (void)ctx.store->put_run(run);
  }
  wire::SubmitOutputsReply j;
  j.op = op;
  j.results = std::move(h.results);
  if (crun) {
    for (auto& [index, verdict] : h.passes) {
      CaseResult r;
      r.test_case.index = index;
      r.verdict = std::move(verdict);
      crun->run.record(std::move(r));
    }
    for (std::size_t f = 0; f < h.failures.size(); ++f) crun->run.record(h.failures[f]);
    j.run = run_summary(p.run_id, crun->run);
    if (crun->run.done()) {
      crun->closed = true;
      ctx.runs.close(p.run_id);
    }
  }
  if (p.next && !(crun && crun->closed)) {
    const wire::NextBatch& next = *p.next;
    const std::uint64_t master = next.seed ? *next.seed : h.master_seed.value_or(0);
    // `next.options`: the chunk is drawn (and will be submitted) under other options; in a run,
    // the run's own but for vary_attrs (the attrs its kernel was seen to read).
    const FuzzOptions& next_options = next.options ? *next.options : options;
    if (next.options) {
      GPUEMU_TRY_STATUS(check_case_budget(ctx, *schema, next_options));
      const std::string next_key = protocol::options_to_json(next_options).dump();
      if (crun && next_key != crun->options_key) {
        auto but_vary = [](FuzzOptions o) {
          o.vary_attrs.clear();
          return protocol::options_to_json(o).dump();
        };
        if (but_vary(next_options) != but_vary(crun->run.request().options))
          return make_error(ErrorCode::invalid_argument,
                            "'next.options' of client-side run '" + p.run_id +
                                "' may differ from the run's options only in vary_attrs");
        crun->next_keys.insert(next_key);
      }
    }
    GPUEMU_TRY(j.next, hand_out(ctx, p.custom_op, re, op, *schema, next_options, master,
                                next.start_index, next.count, next.digests, reply));
    GPUEMU_TRY_STATUS(prefetch(ctx, p.custom_op, re, op, *schema, next_options, master,
                               next.start_index + next.count, next.prefetch));
  }
  reply.header["result"] = to_json(j);
  return reply;
}

Result<Frame> validate(DaemonContext& ctx, const wire::ValidateRequest& p, const Frame& req) {
  const std::string& op = p.op;
  GPUEMU_TRY_STATUS(check_item_elements(ctx, req, "", "the case (its inputs and outputs)"));
  GPUEMU_TRY(RequestEngine re, RequestEngine::make(ctx, op, p.custom_op, p.envelope));
  GPUEMU_TRY(const OpSchema* schema, re.engine().catalogue().get(op));
  TestCase c;
  c.op = op;
  std::vector<Tensor> outs;
  for (const auto& [key, t] : req.tensors) {
    if (key.rfind("inputs/", 0) == 0) c.inputs.emplace(key.substr(7), t);
  }
  for (int k = 0;; ++k) {
    auto t = req.tensors.find("outputs/" + std::to_string(k));
    if (t == req.tensors.end()) break;
    outs.push_back(t->second);
  }
  if (outs.empty())
    return make_error(ErrorCode::invalid_argument,
                      "validate needs the kernel's outputs as outputs/0, ...");
  const Json& attrs = p.attrs;
  std::optional<DType> dt;
  if (p.dtype) {
    dt = parse_dtype(*p.dtype);
    if (!dt) return make_error(ErrorCode::invalid_argument, "unknown dtype '" + *p.dtype + "'");
  }
  GPUEMU_TRY(RefContext rc, make_ref_context(*schema, c.inputs, attrs, dt));
  c.dims = rc.dims;
  c.attrs = rc.attrs;
  c.dtype = rc.case_dtype;
  GPUEMU_TRY(Verdict v, re.engine().judge_case(c, outs));
  return make_reply(to_json(wire::ValidateReply{v.to_json()}));
}

Result<wire::CalibrateReply> calibrate(DaemonContext& ctx, const wire::CalibrateRequest& p) {
  const std::string& op = p.op;
  const std::vector<std::string>& names = p.dtypes;
  const std::int64_t cases = p.cases;
  const std::uint64_t seed = p.seed;
  const bool apply = p.apply;
  if (cases < 1 || cases > 1000000)
    return make_error(ErrorCode::invalid_argument, "'cases' must be in [1, 1000000]");
  if (!p.controls.is_array())
    return make_error(ErrorCode::invalid_argument, "'controls' must be an array of kernel specs");
  const Json& control_specs = p.controls;
  // An envelope override has no place in a calibration.
  GPUEMU_TRY(RequestEngine re, RequestEngine::make(ctx, op, p.custom_op, Json()));
  GPUEMU_TRY(const OpSchema* schema, re.engine().catalogue().get(op));
  GPUEMU_TRY_STATUS(check_case_budget(ctx, *schema, FuzzOptions{}));
  std::vector<DType> dtypes;
  for (const auto& n : names) {
    auto d = parse_dtype(n);
    if (!d) return make_error(ErrorCode::invalid_argument, "unknown dtype '" + n + "'");
    dtypes.push_back(*d);
  }
  if (dtypes.empty()) dtypes = schema->dtypes;
  // The user's controls (a custom op's, or any op's): correct implementations, run like kernels.
  std::vector<std::pair<std::string, KernelRunner>> controls;
  Json control_ids = Json::array();
  for (const Json& spec : control_specs) {
    GPUEMU_TRY(auto runner, resolve_kernel(ctx, op, spec, &re));
    if (!runner)
      return make_error(ErrorCode::invalid_argument,
                        "a calibration control must run in the daemon (builtin or script)");
    const Json id = kernel_identity(spec);
    controls.emplace_back(id.value("name", id.value("function", "control")), std::move(*runner));
    control_ids.push_back(id);
  }
  if (controls.empty() && !re.custom_op().is_null() &&
      schema->reference.rfind("builtin:", 0) != 0)
    return make_error(ErrorCode::invalid_argument,
                      "custom op '" + op +
                          "' has no built-in controls: calibrate it against yours ('controls'; "
                          "gpuemu.toml: control = \"FILE.py:FUNC\")");
  ProgressEntry progress_entry;
  auto report_progress = progress_reporter(ctx, p.progress_token, progress_entry);
  const auto total = static_cast<std::int64_t>(dtypes.size()) * cases;
  if (report_progress) report_progress(0, total);
  Json results = Json::array();
  std::vector<std::pair<DType, Json>> done;
  for (DType d : dtypes) {
    GPUEMU_TRY(CalibrationResult r, re.engine().calibrate(op, d, cases, seed, controls));
    Json j = r.to_json();
    if (!control_ids.empty()) j["control_kernels"] = control_ids;
    if (!re.custom_op().is_null()) {
      const Json& c = re.custom_op();
      j["custom_op"] = {{"schema_file", c.value("schema_file", Json())},
                        {"schema_version", c.value("schema_version", Json())},
                        {"reference", c.value("reference", Json())}};
    }
    j["calibrated_ms"] = now_ms();
    results.push_back(j);
    done.emplace_back(d, std::move(j));
    if (report_progress) report_progress(static_cast<std::int64_t>(done.size()) * cases, total);
  }
  re.release();
  if (apply) {
    std::unique_lock lock(ctx.engine_mutex);
    for (const auto& [d, j] : done) ctx.engine.envelopes().set(op, d, j["envelope"].get<double>(), j);
  }
  if (apply && ctx.store)
    for (const auto& [d, j] : done)
      GPUEMU_TRY_STATUS(ctx.store->put_calibration(op, std::string(dtype_name(d)), j));
  return wire::CalibrateReply{op, apply, std::move(results)};
}

}  // namespace

void add_fuzz_handlers(HandlerTable& out) {
  out["fuzz"] = typed(fuzz);
  out["get_test_batch"] = typed(get_test_batch);
  out["submit_outputs"] = typed(submit_outputs);
  out["validate"] = typed(validate);
  out["calibrate"] = typed(calibrate);
}

}  // namespace gpuemu::server
