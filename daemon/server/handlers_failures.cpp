// failures (list | get | delete | export | import), push, reproduce, minimize, diagnose: the
// failures family (gpuemu/protocol/wire/failures.hpp).
#include "records.hpp"
#include "request_engine.hpp"

#include "gpuemu/protocol/wire/failures.hpp"

#include <spdlog/spdlog.h>

#include <optional>
#include <string_view>

namespace gpuemu::server {
namespace {

// Where a failures listing (or export) stops, well under the protocol's 16 MiB of reply JSON.
constexpr std::size_t k_listing_bytes = std::size_t{12} << 20;

using protocol::Frame;
using protocol::make_reply;

std::string base64(std::span<const std::byte> in) {
  static constexpr char k[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const auto v = (std::to_integer<unsigned>(in[i]) << 16) |
                   (std::to_integer<unsigned>(in[i + 1]) << 8) |
                   std::to_integer<unsigned>(in[i + 2]);
    out += {k[v >> 18], k[(v >> 12) & 63], k[(v >> 6) & 63], k[v & 63]};
  }
  if (i < in.size()) {
    unsigned v = std::to_integer<unsigned>(in[i]) << 16;
    if (i + 1 < in.size()) v |= std::to_integer<unsigned>(in[i + 1]) << 8;
    out += {k[v >> 18], k[(v >> 12) & 63], i + 1 < in.size() ? k[(v >> 6) & 63] : '=', '='};
  }
  return out;
}

// RFC 4648 base64 (padded, as base64() writes it) back to bytes; nullopt when it is not that.
std::optional<std::vector<std::byte>> from_base64(std::string_view text) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  if (text.size() % 4 != 0) return std::nullopt;
  std::vector<std::byte> out;
  out.reserve(text.size() / 4 * 3);
  for (std::size_t i = 0; i < text.size(); i += 4) {
    int v[4];
    int pad = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = text[i + static_cast<std::size_t>(k)];
      if (c == '=' && i + 4 == text.size() && k >= 2) {
        v[k] = 0;
        ++pad;
        continue;
      }
      if (pad > 0 || (v[k] = value(c)) < 0) return std::nullopt;
    }
    const unsigned n = static_cast<unsigned>(v[0] << 18 | v[1] << 12 | v[2] << 6 | v[3]);
    out.push_back(static_cast<std::byte>(n >> 16));
    if (pad < 2) out.push_back(static_cast<std::byte>((n >> 8) & 0xff));
    if (pad < 1) out.push_back(static_cast<std::byte>(n & 0xff));
  }
  return out;
}

// Keys of a failure's meta that say where a copy came from, not what it is.
constexpr const char* k_copy_keys[] = {"id", "op", "created_ms", "snapshot", "snapshot_tensor",
                                       "pushed_from"};

// Exported failure records (`failures export`: meta with id, op, created_ms and the base64
// snapshot, or `snapshot_tensor` naming a uint8 tensor of the request: a push) into this store,
// each under its own id: a record already stored with the same content is left as it is (an
// import is idempotent: importing a file twice, or a file whose records came from here, or a push
// retried after its reply was lost, stores nothing new); one stored with other content under the
// same id is a conflict. Every record is checked (its snapshot restores as a case) before any is
// stored. `origin` (a push's worker) is kept in each new record's meta as `pushed_from`.
Result<Json> import_failures(Store& store, const Json& records, const Frame& req,
                             const Json& origin = Json()) {
  if (!records.is_array())
    return make_error(ErrorCode::invalid_argument, "'records' must be an array of exported failures");
  std::vector<FailureRecord> fresh;
  Json present = Json::array();
  for (std::size_t i = 0; i < records.size(); ++i) {
    const Json& r = records[i];
    const std::string where = "record " + std::to_string(i);
    const bool inline_snapshot = r.is_object() && r.contains("snapshot") && r["snapshot"].is_string();
    const bool tensor_snapshot =
        r.is_object() && r.contains("snapshot_tensor") && r["snapshot_tensor"].is_string();
    if (!r.is_object() || !r.contains("id") || !r["id"].is_string() || !r.contains("op") ||
        !r["op"].is_string() || !(inline_snapshot || tensor_snapshot))
      return make_error(ErrorCode::invalid_argument,
                        where + ": an exported failure needs string 'id', 'op' and 'snapshot' "
                                "(gpuemu failures export writes them)");
    FailureRecord rec;
    rec.id = r["id"].get<std::string>();
    rec.op = r["op"].get<std::string>();
    if (r.contains("created_ms") && !r["created_ms"].is_number_integer())
      return make_error(ErrorCode::invalid_argument, where + ": 'created_ms' must be an integer");
    rec.created_ms = r.value("created_ms", std::int64_t{0});
    if (inline_snapshot) {
      auto bytes = from_base64(r["snapshot"].get<std::string>());
      if (!bytes)
        return make_error(ErrorCode::invalid_argument,
                          where + " (" + rec.id + "): 'snapshot' is not base64");
      rec.inputs = std::move(*bytes);
    } else {
      auto t = req.tensor(r["snapshot_tensor"].get<std::string>());
      if (!t || t->dtype() != DType::uint8 || t->shape().size() != 1)
        return make_error(ErrorCode::invalid_argument,
                          where + " (" + rec.id + "): 'snapshot_tensor' names no 1-d uint8 tensor "
                                                  "of the request");
      rec.inputs = t->contiguous_bytes();
    }
    auto restored = protocol::restore_case(rec.inputs);
    if (!restored)
      return make_error(ErrorCode::invalid_argument,
                        where + " (" + rec.id + "): its snapshot is not a case: " + restored.error().message);
    if (restored->op != rec.op)
      return make_error(ErrorCode::invalid_argument,
                        where + " (" + rec.id + "): its snapshot is a case of " + restored->op +
                            ", the record says " + rec.op);
    // The meta as stored: export adds id, created_ms and the snapshot (and writes op, which a
    // record's meta also holds, with the same value).
    rec.meta = r;
    for (const char* k : {"id", "created_ms", "snapshot", "snapshot_tensor"}) rec.meta.erase(k);
    if (!origin.is_null()) rec.meta["pushed_from"] = origin;
    auto stored = store.get_failure(rec.id);
    if (stored) {
      auto same_meta = [](Json a, Json b) {
        for (Json* m : {&a, &b})
          for (const char* k : k_copy_keys) m->erase(k);
        return a == b;
      };
      if (stored->op != rec.op || stored->inputs != rec.inputs || !same_meta(stored->meta, rec.meta))
        return make_error(ErrorCode::conflict,
                          where + ": failure " + rec.id +
                              " is stored here with other content: nothing was imported");
      present.push_back(rec.id);
      continue;
    }
    if (stored.error().code != ErrorCode::not_found) return stored.error();
    for (const auto& f : fresh)
      if (f.id == rec.id)
        return make_error(ErrorCode::invalid_argument, where + ": failure " + rec.id + " appears twice");
    fresh.push_back(std::move(rec));
  }
  GPUEMU_TRY(auto ids, store.put_failures(std::move(fresh)));
  return Json{{"imported", ids}, {"present", present}};
}

Result<Store*> store_of(DaemonContext& ctx) {
  if (!ctx.store) return make_error(ErrorCode::unavailable, "this daemon has no failure store");
  return ctx.store.get();
}

// A worker daemon's push (docs/scale.md): its failures (snapshots as tensors) and run summaries,
// taken whole or not at all for the failures; each run is stored unless the same run is here.
Result<Frame> push(DaemonContext& ctx, const wire::PushRequest& p, const Frame& req) {
  GPUEMU_TRY(Store * store, store_of(ctx));
  const Json& origin = p.origin;
  if (!origin.is_object())
    return make_error(ErrorCode::invalid_argument, "'origin' must be an object");
  const Json& runs = p.runs;
  if (!runs.is_array()) return make_error(ErrorCode::invalid_argument, "'runs' must be an array");
  for (std::size_t i = 0; i < runs.size(); ++i)
    if (!runs[i].is_object() || !runs[i].contains("id") || !runs[i]["id"].is_string() ||
        !runs[i].contains("started_ms") || !runs[i]["started_ms"].is_number_integer())
      return make_error(ErrorCode::invalid_argument,
                        "run " + std::to_string(i) + ": a pushed run needs 'id' and 'started_ms'");
  GPUEMU_TRY(Json failures, import_failures(*store, p.records, req, origin));
  Json imported = Json::array(), present = Json::array();
  for (const Json& r : runs) {
    Json run = r;
    run["pushed_from"] = origin;
    GPUEMU_TRY(bool fresh, store->import_run(run, {"pushed_from"}));
    (fresh ? imported : present).push_back(run["id"]);
  }
  return make_reply(
      to_json(wire::PushReply{failures, Json{{"imported", imported}, {"present", present}}}));
}

Result<Frame> failures(DaemonContext& ctx, const wire::FailuresRequest& p, const Frame& req) {
  GPUEMU_TRY(Store * store, store_of(ctx));
  const std::string& action = p.action;
  if (action == "list" || action == "export") {
    FailureQuery q;
    q.op = p.op;
    q.since_ms = p.since_ms;
    q.limit = p.limit;
    GPUEMU_TRY(auto list, store->list_failures(q));
    Json items = Json::array();
    // A reply's JSON is bounded (16 MiB, docs/protocol.md): a listing stops before it and says so.
    std::size_t bytes = 0;
    bool truncated = false;
    auto fits = [&](const Json& item) {
      bytes += item.dump().size() + 1;
      truncated = bytes > k_listing_bytes;
      return !truncated;
    };
    // An export is read in pages: `offset` skips that many of the matching failures (newest
    // first), and a truncated page says where the next one starts.
    const std::size_t offset = std::min(p.offset, list.size());
    std::size_t next = offset;
    for (std::size_t k = offset; k < list.size(); ++k, ++next) {
      const auto& s = list[k];
      if (action == "list") {
        Json item = failure_list_item(s);
        if (!fits(item)) break;
        items.push_back(std::move(item));
        continue;
      }
      GPUEMU_TRY(FailureRecord rec, store->get_failure(s.id));
      Json m = rec.meta;
      m["id"] = rec.id;
      m["op"] = rec.op;
      m["created_ms"] = rec.created_ms;
      m["snapshot"] = base64(rec.inputs);  // export only: never on the hot path
      if (!fits(m)) break;
      items.push_back(std::move(m));
    }
    wire::FailuresReply result;
    result.count = items.size();
    (action == "list" ? result.failures : result.records) = std::move(items);
    if (truncated) {
      result.truncated = true;
      result.matching = list.size();
      result.next_offset = next;
    }
    return make_reply(to_json(result));
  }
  if (action == "import") {
    GPUEMU_TRY(Json imported, import_failures(*store, p.records, req));
    wire::FailuresReply result;
    result.imported = imported["imported"];
    result.present = imported["present"];
    return make_reply(to_json(result));
  }
  if (p.id.empty()) return wire::missing_string("id");
  const std::string& id = p.id;
  if (action == "get") {
    GPUEMU_TRY(FailureRecord rec, store->get_failure(id));
    GPUEMU_TRY(TestCase c, protocol::restore_case(rec.inputs));
    Frame reply = make_reply();
    Json m = rec.meta;
    m["id"] = rec.id;
    m["op"] = rec.op;
    m["created_ms"] = rec.created_ms;
    m["case"] = protocol::case_to_json(c);
    m["snapshot_bytes"] = rec.inputs.size();
    if (p.snapshot) m["snapshot"] = base64(rec.inputs);
    protocol::add_case_tensors(reply, c);
    wire::FailuresReply result;
    result.record = std::move(m);
    reply.header["result"] = to_json(result);
    return reply;
  }
  if (action == "delete") {
    GPUEMU_TRY_STATUS(store->delete_failure(id));
    wire::FailuresReply result;
    result.deleted = id;
    return make_reply(to_json(result));
  }
  return make_error(ErrorCode::invalid_argument,
                    "failures action '" + action + "' is not one of list, get, delete, export, import");
}

// Runs a stored failure's kernel on its case (or says it cannot: a client-side kernel).
struct Rerun {
  std::optional<KernelRunner> runner;
  std::optional<CaseResult> result;
};

Result<Rerun> rerun(DaemonContext& ctx, const RequestEngine& re, const StoredCase& sc,
                    const TestCase& c) {
  Rerun r;
  GPUEMU_TRY(r.runner, resolve_kernel(ctx, c.op, sc.meta.value("kernel", Json::object()), &re));
  if (r.runner) {
    GPUEMU_TRY(CaseResult cr, re.engine().run_case(c.op, sc.options, c, *r.runner));
    r.result = std::move(cr);
  }
  return r;
}

Result<Frame> reproduce(DaemonContext& ctx, const wire::ReproduceRequest& p, const Frame&) {
  const std::string& id = p.id;
  GPUEMU_TRY(StoredCase sc, load_stored_case(ctx, id));
  GPUEMU_TRY(Store * store, store_of(ctx));
  GPUEMU_TRY(FailureRecord rec, store->get_failure(id));
  // The engine that judged it: a custom op's schema and reference, an envelope override.
  GPUEMU_TRY(RequestEngine re, RequestEngine::for_record(ctx, sc.meta));
  // Regenerate the case from its seed under the run's options and compare the bytes.
  GPUEMU_TRY(const OpSchema* schema, re.engine().catalogue().get(sc.test_case.op));
  CaseGenerator gen(*schema, sc.options);
  Json regen = {{"identical", false}};
  // A minimized case was generated with pinned dims (and maybe value transforms, contiguous
  // inputs); a fuzz case is case `index` of its run.
  bool all_contiguous = true;
  for (const auto& [n, l] : sc.test_case.layouts)
    all_contiguous = all_contiguous && l.kind == "contiguous";
  auto again = sc.meta.contains("minimized_from")
                   ? gen.generate_pinned(sc.test_case.seed, sc.test_case.dims,
                                         sc.test_case.value_transforms, all_contiguous)
                   : gen.generate(sc.test_case.master_seed, sc.test_case.index);
  if (again) {
    const auto bytes = protocol::snapshot_case(*again);
    regen["identical"] = bytes == rec.inputs;
    regen["bytes"] = bytes.size();
  } else {
    regen["error"] = again.error().message;
  }
  wire::ReproduceReply j;
  j.id = id;
  j.op = sc.test_case.op;
  j.seed = sc.test_case.seed;
  j.snapshot_bytes = rec.inputs.size();
  j.regenerated_identical = regen["identical"];
  j.regeneration = regen;
  j.kernel = sc.meta.value("kernel", Json::object());
  j.case_json = protocol::case_to_json(sc.test_case);
  GPUEMU_TRY(Rerun r, rerun(ctx, re, sc, sc.test_case));
  Frame reply = make_reply();
  if (r.result) {
    j.passed = r.result->verdict.passed;
    j.verdict = r.result->verdict.to_json();
    j.message = r.result->verdict.message;
    j.max_error = j.verdict.value("max_error", Json());
    j.still_fails = !r.result->verdict.passed;
    j.envelope_source = re.envelope_source(sc.test_case.op, sc.test_case.dtype);
  } else {
    // A client-side kernel: the client runs it on these inputs and calls submit_outputs.
    j.passed = Json();
    j.message = "the kernel ran in a client: replay it there (Client().reproduce(id, run_op))";
    protocol::add_case_tensors(reply, sc.test_case);
  }
  reply.header["result"] = to_json(j);
  return reply;
}

Result<wire::MinimizeReply> minimize(DaemonContext& ctx, const wire::MinimizeRequest& p) {
  const std::string& id = p.id;
  const int max_eval = p.max_evaluations;
  GPUEMU_TRY(StoredCase sc, load_stored_case(ctx, id));
  GPUEMU_TRY(RequestEngine re, RequestEngine::for_record(ctx, sc.meta));
  GPUEMU_TRY(auto runner,
             resolve_kernel(ctx, sc.test_case.op, sc.meta.value("kernel", Json::object()), &re));
  if (!runner)
    return make_error(ErrorCode::invalid_argument,
                      "failure " + id +
                          " comes from a client-side kernel: minimize it "
                          "from the client (Client().minimize(id, run_op))");
  GPUEMU_TRY(Minimized m,
             re.engine().minimize(sc.test_case.op, sc.options, sc.test_case, *runner, max_eval));
  wire::MinimizeReply j;
  j.minimized = m.to_json();
  j.id = id;
  if (!m.verdict.passed && ctx.store) {
    CaseResult cr;
    cr.test_case = m.test_case;
    cr.verdict = m.verdict;
    cr.diagnosis = {sc.meta.contains("diagnosis")
                        ? sc.meta["diagnosis"].value("bug_class", "no_pattern")
                        : "no_pattern",
                    "minimized from " + id + ": " + m.summary,
                    {}};
    FailureRecord rec =
        make_failure_record(ctx, cr, sc.options, sc.meta.value("kernel", Json::object()),
                            sc.meta.value("client", Json::object()), &re);
    rec.meta["minimized_from"] = id;
    GPUEMU_TRY(std::string mid, ctx.store->put_failure(std::move(rec)));
    j.minimized_id = mid;
    j.repro = "gpuemu repro " + mid;
  }
  return j;
}

Result<wire::DiagnoseReply> diagnose(DaemonContext& ctx, const wire::DiagnoseRequest& p) {
  const std::string& id = p.id;
  GPUEMU_TRY(StoredCase sc, load_stored_case(ctx, id));
  GPUEMU_TRY(RequestEngine re, RequestEngine::for_record(ctx, sc.meta));
  GPUEMU_TRY(Rerun r, rerun(ctx, re, sc, sc.test_case));
  if (!r.result)
    return wire::DiagnoseReply{id, sc.meta.value("diagnosis", Json::object()), false, std::nullopt};
  Diagnosis d = re.engine().diagnose(sc.test_case.op, sc.options, *r.result, &*r.runner);
  return wire::DiagnoseReply{id, d.to_json(), true, r.result->verdict.passed};
}

}  // namespace

void add_failure_handlers(HandlerTable& out) {
  out["failures"] = typed(failures);
  out["push"] = typed(push);
  out["reproduce"] = typed(reproduce);
  out["minimize"] = typed(minimize);
  out["diagnose"] = typed(diagnose);
}

}  // namespace gpuemu::server
