// A strided view over a shared byte buffer, as frameworks hold tensors: dtype, shape, strides in
// elements, an element offset into the storage, and the storage itself (shared between views).
//
// Storage bytes are the elements in their own format, little-endian (bfloat16 and fp8 as their
// bits). That byte layout is the one the wire protocol and failure snapshots carry; see
// docs/tensor-layout.md.
#pragma once

#include "gpuemu/engine/dtype.hpp"
#include "gpuemu/base/error.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace gpuemu {

using Shape = std::vector<std::int64_t>;

std::int64_t shape_numel(const Shape& shape);
Shape contiguous_strides(const Shape& shape);
std::string shape_to_string(const Shape& shape);  // "[2, 3, 4]"

// A tensor's bytes. Owned: a byte vector (shared with whoever made it, e.g. a decoder). Borrowed:
// memory something else keeps alive and may change once the borrow ends, namely a local client's
// shared-memory arena for the length of one request (protocol/frame.cpp); `own()` copies borrowed
// bytes into an owned vector, so that anything keeping a tensor past that request keeps its own
// bytes (daemon/server/nng_server.cpp calls it before the reply goes). Views share one Storage, so
// `own()` moves every view of it at once. `own()` must not race with readers of the same storage.
class Storage {
 public:
  explicit Storage(std::size_t nbytes)  // zeros
      : Storage(std::make_shared<std::vector<std::byte>>(nbytes)) {}
  explicit Storage(std::shared_ptr<std::vector<std::byte>> bytes)
      : m_data(bytes->data()), m_size(bytes->size()), m_owned(std::move(bytes)) {}
  // `bytes` stay valid while `keep` lives.
  static std::shared_ptr<Storage> borrow(std::span<std::byte> bytes, std::shared_ptr<void> keep);

  std::byte* data() const { return m_data; }
  std::size_t size() const { return m_size; }
  std::span<std::byte> bytes() const { return {m_data, m_size}; }
  std::vector<std::byte> to_vector() const { return {m_data, m_data + m_size}; }
  bool borrowed() const { return m_borrowed; }
  void own();

 private:
  Storage() = default;
  std::byte* m_data = nullptr;
  std::size_t m_size = 0;
  std::shared_ptr<std::vector<std::byte>> m_owned;
  std::shared_ptr<void> m_keep;  // what keeps borrowed bytes valid
  bool m_borrowed = false;
};

class Tensor {
 public:
  Tensor() = default;
  // A new contiguous tensor of zeros.
  static Tensor zeros(DType dtype, Shape shape);
  // A contiguous tensor whose elements are `values` (logical row-major order) rounded to dtype.
  static Tensor from_values(DType dtype, Shape shape, std::span<const double> values,
                            Overflow overflow = Overflow::to_nan);
  // A view over existing storage. Fails when any element would fall outside the storage.
  static Result<Tensor> view(DType dtype, Shape shape, std::vector<std::int64_t> strides,
                             std::int64_t offset, std::shared_ptr<Storage> storage);
  static Result<Tensor> view(DType dtype, Shape shape, std::vector<std::int64_t> strides,
                             std::int64_t offset, std::shared_ptr<std::vector<std::byte>> storage) {
    return view(dtype, std::move(shape), std::move(strides), offset,
                storage ? std::make_shared<Storage>(std::move(storage)) : nullptr);
  }

  DType dtype() const { return m_dtype; }
  const Shape& shape() const { return m_shape; }
  const std::vector<std::int64_t>& strides() const { return m_strides; }
  std::int64_t offset() const { return m_offset; }
  std::int64_t dim() const { return static_cast<std::int64_t>(m_shape.size()); }
  std::int64_t size(std::int64_t d) const;  // negative d counts from the end
  std::int64_t numel() const { return shape_numel(m_shape); }
  bool is_contiguous() const;
  bool defined() const { return static_cast<bool>(m_storage); }
  const std::shared_ptr<Storage>& storage() const { return m_storage; }
  std::size_t storage_bytes() const { return m_storage ? m_storage->size() : 0; }

  // Element access by logical row-major index (0 <= i < numel()).
  double get_flat(std::int64_t i) const;
  void set_flat(std::int64_t i, double value, Overflow overflow = Overflow::to_nan);
  // Element access by multi-index.
  double at(std::span<const std::int64_t> index) const;
  std::int64_t storage_index(std::span<const std::int64_t> index) const;

  // Every element as a double, in logical row-major order: as a new vector, or written to
  // out[0, numel()) (a buffer of the caller's type, e.g. a reference output's RefVec).
  std::vector<double> to_f64() const;
  void to_f64(double* out) const;
  // The logical elements' bytes, contiguous row-major, in this dtype (a digest / wire payload).
  std::vector<std::byte> contiguous_bytes() const;

  // Views sharing storage.
  Tensor transpose(std::int64_t d0, std::int64_t d1) const;
  Tensor slice(std::int64_t d, std::int64_t start, std::int64_t stop, std::int64_t step) const;
  Result<Tensor> expand(const Shape& shape) const;
  // A contiguous copy (same dtype).
  Tensor contiguous() const;

 private:
  DType m_dtype = DType::float32;
  Shape m_shape;
  std::vector<std::int64_t> m_strides;
  std::int64_t m_offset = 0;
  std::shared_ptr<Storage> m_storage;
};

// 64-bit FNV-1a of bytes, and a hex digest of a tensor's logical bytes (used by `gpuemu cases`).
std::uint64_t fnv1a64(std::span<const std::byte> bytes, std::uint64_t seed = 0xcbf29ce484222325ULL);
std::string tensor_digest(const Tensor& t);

}  // namespace gpuemu
