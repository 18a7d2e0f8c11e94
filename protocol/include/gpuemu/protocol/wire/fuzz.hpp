// The fuzz family of the wire (docs/protocol.md, "Requests"): fuzz, get_test_batch,
// submit_outputs, validate, calibrate. Fields are listed once, in fuzz.cpp (`map`).
#pragma once

#include "gpuemu/engine/engine.hpp"
#include "gpuemu/engine/fuzz.hpp"
#include "gpuemu/protocol/wire/fields.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace gpuemu::wire {

// `fuzz`: an op against a kernel the daemon runs (builtin or script).
struct FuzzRequest {
  using Fields = void;
  static constexpr std::string_view k_method = "fuzz";
  std::string op;
  FuzzOptions options;
  std::optional<std::uint64_t> seed;  // the master seed; absent: a random one (in the reply)
  std::int64_t iterations = 100;      // [1, 10,000,000]
  std::int64_t start_index = 0;       // [0, 2^53]
  bool fail_fast = false;
  int diagnose_limit = 3;
  bool minimize = true;
  bool store = true;
  std::string repro_prefix;  // how a failure's repro command starts ("gpuemu fuzz OP --kernel K")
  Json kernel;               // {"kind": "builtin" | "script", ...} (docs/protocol.md, "Kernels")
  Json client = Json::object();  // who asks ({name, version}): kept with each stored failure
  Json custom_op;                // a custom op's spec (docs/custom-ops.md); null: none
  Json envelope;                 // an envelope override: X or {dtype: X}; null: none
  std::string progress_token;    // published for `progress` while the run goes
  template <class M, class S>
  static void map(M& m, S& s);
};
// The report: the engine's (FuzzReport::to_json: op, seed, total, passed, failed, first_failure,
// elapsed, worst) with what the daemon adds.
struct FuzzReply {
  using Fields = void;
  Json report;
  Json failures = Json::array();  // the first 1,000 failures, described
  std::vector<std::string> failure_ids;
  std::optional<std::size_t> failures_not_described;
  Json minimized;  // null: none
  Json kernel;     // the kernel's identity
  FuzzOptions options;
  Json envelope = Json::object();  // {dtype: {value, source, provenance?}}
  std::optional<std::string> custom_op;
  std::optional<std::string> run_id;
  template <class M, class S>
  static void map(M& m, S& s);
};
// The engine's request for a run of `r` under master seed `seed` (the daemon's fuzz and the CLI's
// --no-daemon run read the same struct).
gpuemu::FuzzRequest engine_request(const FuzzRequest& r, std::uint64_t seed);

// get_test_batch's `run`: the client-side run these cases open, kept by the daemon (a FuzzRun,
// gpuemu/engine/fuzz_run.hpp) and fed by every submit_outputs naming its `run_id`: the daemon keeps the
// run's books (counts, first failure, worst case, fail-fast, the diagnosis budget, repro commands)
// and each reply carries its summary (`run`).
struct RunSpec {
  using Fields = void;
  std::int64_t iterations = 100;  // [1, 10,000,000]
  bool fail_fast = false;
  int diagnose_limit = 3;         // failures the client diagnoses (results' `diagnose`)
  std::string repro_prefix;       // how a failure's repro command starts
  template <class M, class S>
  static void map(M& m, S& s);
};

// `get_test_batch`: cases for a kernel the client runs.
struct GetTestBatchRequest {
  using Fields = void;
  static constexpr std::string_view k_method = "get_test_batch";
  std::string op;
  FuzzOptions options;
  std::int64_t count = 10;
  std::int64_t start_index = 0;
  std::optional<std::uint64_t> seed;  // absent: a random master seed
  std::int64_t prefetch = 0;          // cases after these to make meanwhile
  bool digests = true;                // each input's digest in the cases' JSON
  Json custom_op, envelope;
  std::optional<RunSpec> run;         // open a client-side run (its id comes back: `run_id`)
  template <class M, class S>
  static void map(M& m, S& s);
};
// A batch of cases; their tensors travel as cases/<i>/<input>.
struct CaseBatch {
  using Fields = void;
  std::string op;
  std::uint64_t master_seed = 0;
  Json cases = Json::array();  // protocol::case_to_json of each
  FuzzOptions options;
  std::optional<std::string> run_id;  // the run get_test_batch's `run` opened
  template <class M, class S>
  static void map(M& m, S& s);
};
using GetTestBatchReply = CaseBatch;

// submit_outputs's `next`: the next batch in the same reply.
struct NextBatch {
  using Fields = void;
  std::int64_t count = 16;
  std::int64_t start_index = 0;
  std::optional<std::uint64_t> seed;  // absent: the submitted cases' master seed
  std::int64_t prefetch = 0;
  bool digests = true;
  // The options the next batch is drawn under (absent: the submission's). In a client-side run
  // they may differ from the run's only in vary_attrs: a run that starts varying the attrs its
  // kernel was seen to read. The chunk is then submitted under these options.
  std::optional<FuzzOptions> options;
  template <class M, class S>
  static void map(M& m, S& s);
};
// One judged case of submit_outputs; its tensors are items/<i>/outputs/<k> (and, optionally,
// items/<i>/inputs/<name>).
struct SubmitItem {
  using Fields = void;
  Json case_json;  // "case": the case as get_test_batch described it (master_seed, index, seed)
  std::string kernel_error;    // the kernel raised
  std::string contract_error;  // the client's contract check failed
  Json kernel;                 // refines the request's kernel identity (file, line)
  Json diagnosis;              // {bug_class, summary, evidence} the client computed; null: none
  template <class M, class S>
  static void map(M& m, S& s);
};
struct SubmitOutputsRequest {
  using Fields = void;
  static constexpr std::string_view k_method = "submit_outputs";
  std::string op;
  FuzzOptions options;
  bool store = true;
  bool hold_for_diagnosis = false;
  bool hold_by_id = false;
  bool snapshots = false;
  std::string held_id;  // finishing a held submission: `diagnoses` instead of `items`
  std::optional<NextBatch> next;
  Json kernel = Json{{"kind", "client"}};
  Json client = Json::object();
  Json custom_op, envelope;
  std::optional<std::vector<SubmitItem>> items;
  Json diagnoses;  // [{item, diagnosis}] of a held submission
  std::string run_id;  // the client-side run these items belong to (get_test_batch's `run`)
  // The part of a backward=True run these items are, stored with the run record:
  // {part: "forward", run, gradients_op} or {part: "gradients", run, op}: `run` names the
  // backward run, the same in both parts (docs/protocol.md).
  Json part_of;
  template <class M, class S>
  static void map(M& m, S& s);
};
struct SubmitOutputsReply {
  using Fields = void;
  std::string op;
  Json results = Json::array();  // [{passed, max_error, envelope, message, seed, index, ...}]
  std::optional<bool> held;
  std::optional<std::string> held_id;
  std::optional<CaseBatch> next;
  // The run's summary once these items are recorded (with `run_id`): run_id, op, seed, total,
  // passed, failed, first_failure, worst {index, ratio}, elapsed, done.
  Json run;
  template <class M, class S>
  static void map(M& m, S& s);
};

// `validate`: outputs for inputs the client chose (tensors inputs/<name>, outputs/<k>).
struct ValidateRequest {
  using Fields = void;
  static constexpr std::string_view k_method = "validate";
  std::string op;
  Json attrs = Json::object();
  std::optional<std::string> dtype;
  Json custom_op, envelope;
  template <class M, class S>
  static void map(M& m, S& s);
};
struct ValidateReply {
  using Fields = void;
  Json verdict;  // Verdict::to_json
  template <class M, class S>
  static void map(M& m, S& s);
};

// `calibrate`: an op's envelopes from correct controls.
struct CalibrateRequest {
  using Fields = void;
  static constexpr std::string_view k_method = "calibrate";
  std::string op;
  std::vector<std::string> dtypes;  // empty: the op's
  std::int64_t cases = 200;         // [1, 1,000,000]
  std::uint64_t seed = 0xC0FFEE;
  bool apply = true;
  Json controls = Json::array();  // kernel specs run instead of the op's built-in controls
  Json custom_op;
  std::string progress_token;
  template <class M, class S>
  static void map(M& m, S& s);
};
struct CalibrateReply {
  using Fields = void;
  std::string op;
  bool applied = false;
  Json results = Json::array();  // one per dtype: CalibrationResult::to_json + provenance
  template <class M, class S>
  static void map(M& m, S& s);
};

GPUEMU_WIRE_DECLARE(FuzzRequest);
GPUEMU_WIRE_DECLARE(FuzzReply);
GPUEMU_WIRE_DECLARE(GetTestBatchRequest);
GPUEMU_WIRE_DECLARE(CaseBatch);
GPUEMU_WIRE_DECLARE(NextBatch);
GPUEMU_WIRE_DECLARE(RunSpec);
GPUEMU_WIRE_DECLARE(SubmitItem);
GPUEMU_WIRE_DECLARE(SubmitOutputsRequest);
GPUEMU_WIRE_DECLARE(SubmitOutputsReply);
GPUEMU_WIRE_DECLARE(ValidateRequest);
GPUEMU_WIRE_DECLARE(ValidateReply);
GPUEMU_WIRE_DECLARE(CalibrateRequest);
GPUEMU_WIRE_DECLARE(CalibrateReply);

}  // namespace gpuemu::wire
