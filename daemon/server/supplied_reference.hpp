// The reference of an op made from PyTorch code (`torch:<name>`, docs/torch-ops.md) when a client
// fuzzes it through the daemon: the code lives in the client's process, so the client sends each
// case's reference with the kernel's outputs (items/<i>/reference/<k>/value, c_acc, c_in: float64
// tensors of the output's shape), and the daemon judges by them. Bound per request (each request
// has its own copy of the op), pointed at the item being judged.
#pragma once

#include "gpuemu/engine/op.hpp"
#include "gpuemu/protocol/protocol.hpp"

#include <memory>
#include <string>

namespace gpuemu::server {

class SuppliedReference final : public ExternalReference {
 public:
  // The frame and the item prefix ("items/3/") the next run() reads from (nullptr: none).
  void point_at(const protocol::Frame* frame, std::string prefix) const;
  Result<std::vector<RefOutput>> run(const RefContext& ctx) const override;

 private:
  mutable const protocol::Frame* m_frame = nullptr;
  mutable std::string m_prefix;
};

// The op's supplied reference, when its reference is one (else nullptr).
const SuppliedReference* supplied_reference_of(const OpSchema& schema);

}  // namespace gpuemu::server
