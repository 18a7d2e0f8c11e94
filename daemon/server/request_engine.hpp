// The engine one request runs on. Most requests use the daemon's own engine (under a shared lock
// on its envelopes). A request that carries a custom op (`custom_op`: a user's schema and Python
// reference, docs/custom-ops.md) or an envelope override (`envelope`, docs/protocol.md) runs on a
// copy: the catalogue plus that op, its reference bound as the schema's external reference, and
// the envelope table with the override applied. Nothing of it outlives the request; the failures
// it stores carry the custom op's spec and the override, so repro/minimize/diagnose rebuild it.
#pragma once

#include "daemon_context.hpp"

#include <memory>
#include <optional>
#include <shared_mutex>

namespace gpuemu::server {

class RequestEngine {
 public:
  // From a request's params: `custom_op` (object, optional) and `envelope` (a number, or an
  // object {dtype: number}, optional; applies to params.op, or to the custom op).
  static Result<RequestEngine> make(DaemonContext& ctx, const Json& params);
  // The same from a typed request's fields (null custom_op / envelope: none).
  static Result<RequestEngine> make(DaemonContext& ctx, const std::string& op,
                                    const Json& custom_op, const Json& envelope);
  // From a stored failure's meta (its `custom_op` and an `envelope_source` of an override).
  static Result<RequestEngine> for_record(DaemonContext& ctx, const Json& meta);

  const Engine& engine() const { return m_copy ? *m_copy : m_ctx->engine; }
  // Releases the shared lock on the daemon's engine (before a handler takes it exclusively);
  // engine() must not be used after it unless this request runs on a copy.
  void release() {
    if (m_lock.owns_lock()) m_lock.unlock();
  }
  // The catalogue with the custom op (null when the request has none: the default catalogue).
  const std::shared_ptr<const Catalogue>& catalogue() const { return m_catalogue; }
  const Json& custom_op() const { return m_custom; }  // the spec as stored (null: none)
  // Which envelope judges (op, dtype) and why: {"value", "source": "override" | "table" |
  // "fallback", "provenance"?}: what a stored failure records.
  Json envelope_source(const std::string& op, DType dtype) const;
  // What make_failure_record adds for a failure of this request: envelope_source, custom_op,
  // schema_version of a custom op.
  Json record_meta(const TestCase& c) const;

 private:
  explicit RequestEngine(DaemonContext& ctx) : m_ctx(&ctx) {}

  DaemonContext* m_ctx;
  std::optional<Engine> m_copy;
  std::shared_lock<std::shared_mutex> m_lock;  // held while the daemon's engine is used directly
  std::shared_ptr<const Catalogue> m_catalogue;
  Json m_custom;                              // null or the custom op spec
  std::map<std::string, double> m_override;   // dtype ("*": every dtype) -> envelope
  std::string m_override_op;
};

// Parses the `envelope` param: a positive number or {dtype: positive number}. Empty map: absent.
Result<std::map<std::string, double>> parse_envelope_override(const Json& value);

}  // namespace gpuemu::server
