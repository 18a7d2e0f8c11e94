// SuppliedReference (supplied_reference.hpp).
#include "supplied_reference.hpp"

#include <cmath>

namespace gpuemu::server {

void SuppliedReference::point_at(const protocol::Frame* frame, std::string prefix) const {
  m_frame = frame;
  m_prefix = std::move(prefix);
}

Result<std::vector<RefOutput>> SuppliedReference::run(const RefContext& ctx) const {
  if (!ctx.schema) return make_error(ErrorCode::internal, "a supplied reference needs the op's schema");
  const OpSchema& schema = *ctx.schema;
  const auto held_elsewhere = [&](const std::string& why) {
    return make_error(ErrorCode::invalid_argument,
                      "op '" + schema.name + "': its reference is PyTorch code held by the client that made it "
                      "(gpuemu.torch_op), which sends each case's reference with the kernel's outputs" + why +
                      "; replay, minimize or diagnose it from a client that makes the op with gpuemu.torch_op");
  };
  if (!m_frame) return held_elsewhere("");
  std::vector<RefOutput> out(schema.outputs.size());
  for (std::size_t k = 0; k < out.size(); ++k) {
    const std::string base = m_prefix + "reference/" + std::to_string(k) + "/";
    auto value = m_frame->tensors.find(base + "value");
    if (value == m_frame->tensors.end()) return held_elsewhere(", and this item carries no '" + base + "value'");
    RefOutput& o = out[k];
    o.name = schema.outputs[k].name;
    o.dtype = ctx.output_dtype(k);
    o.shape = value->second.shape();
    o.value.resize(static_cast<std::size_t>(value->second.numel()));
    value->second.to_f64(o.value.data());
    for (const char* term : {"c_acc", "c_in"}) {
      auto t = m_frame->tensors.find(base + term);
      if (t == m_frame->tensors.end()) continue;
      if (t->second.shape() != o.shape)
        return make_error(ErrorCode::invalid_argument, "the supplied reference's " + std::string(term) + " of '" +
                                                           o.name + "' has another shape than its value");
      RefVec& dst = std::string(term) == "c_acc" ? o.c_acc : o.c_in;
      dst.resize(o.value.size());
      t->second.to_f64(dst.data());
      for (double& c : dst) c = std::isnan(c) ? HUGE_VAL : std::fabs(c);  // no bound known: unresolved
    }
  }
  GPUEMU_TRY_STATUS(check_reference_shapes(schema, ctx, out, "supplied by the client for op '" + schema.name + "'"));
  return out;
}

const SuppliedReference* supplied_reference_of(const OpSchema& schema) {
  return dynamic_cast<const SuppliedReference*>(schema.external_reference.get());
}

}  // namespace gpuemu::server
