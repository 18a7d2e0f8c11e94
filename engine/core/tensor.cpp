#include "gpuemu/engine/tensor.hpp"

#include "gpuemu/engine/strided.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <sstream>
#include <stdexcept>

namespace gpuemu {

std::int64_t shape_numel(const Shape& shape) {
  // Saturates: a product past int64 (dims from a request) is "too many", never a wrapped count.
  std::int64_t n = 1;
  for (auto s : shape)
    if (__builtin_mul_overflow(n, s, &n)) return std::numeric_limits<std::int64_t>::max();
  return n;
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  std::int64_t s = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    s *= std::max<std::int64_t>(shape[i], 1);
  }
  return strides;
}

std::string shape_to_string(const Shape& shape) {
  std::ostringstream os;
  os << "[";
  for (std::size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

std::shared_ptr<Storage> Storage::borrow(std::span<std::byte> bytes, std::shared_ptr<void> keep) {
  std::shared_ptr<Storage> s(new Storage());
  s->m_data = bytes.data();
  s->m_size = bytes.size();
  s->m_keep = std::move(keep);
  s->m_borrowed = true;
  return s;
}

void Storage::own() {
  if (!m_borrowed) return;
  m_owned = std::make_shared<std::vector<std::byte>>(m_data, m_data + m_size);
  m_data = m_owned->data();
  m_keep.reset();
  m_borrowed = false;
}

Tensor Tensor::zeros(DType dtype, Shape shape) {
  Tensor t;
  t.m_dtype = dtype;
  t.m_strides = contiguous_strides(shape);
  t.m_shape = std::move(shape);
  t.m_storage = std::make_shared<Storage>(static_cast<std::size_t>(t.numel()) * dtype_size(dtype));
  return t;
}

Tensor Tensor::from_values(DType dtype, Shape shape, std::span<const double> values,
                           Overflow overflow) {
  Tensor t = zeros(dtype, std::move(shape));
  if (static_cast<std::int64_t>(values.size()) != t.numel())
    throw std::invalid_argument("Tensor::from_values: value count does not match the shape");
  encode_elements(dtype, values.data(), values.size(), t.m_storage->data(), overflow);
  return t;
}

Result<Tensor> Tensor::view(DType dtype, Shape shape, std::vector<std::int64_t> strides,
                            std::int64_t offset, std::shared_ptr<Storage> storage) {
  if (strides.size() != shape.size())
    return make_error(ErrorCode::invalid_argument, "strides and shape have different ranks");
  if (offset < 0) return make_error(ErrorCode::invalid_argument, "negative storage offset");
  std::int64_t lo = offset, hi = offset;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0) return make_error(ErrorCode::invalid_argument, "negative dimension size");
    if (shape[i] == 0) {
      lo = hi = offset;
      break;
    }
    std::int64_t span = strides[i] * (shape[i] - 1);
    (span < 0 ? lo : hi) += span;
  }
  const auto elems = static_cast<std::int64_t>((storage ? storage->size() : 0) / dtype_size(dtype));
  if (shape_numel(shape) > 0 && (lo < 0 || hi >= elems))
    return make_error(ErrorCode::invalid_argument,
                      "view of shape " + shape_to_string(shape) + " reaches element " +
                          std::to_string(hi) + " of a storage holding " + std::to_string(elems));
  Tensor t;
  t.m_dtype = dtype;
  t.m_shape = std::move(shape);
  t.m_strides = std::move(strides);
  t.m_offset = offset;
  t.m_storage = std::move(storage);
  return t;
}

std::int64_t Tensor::size(std::int64_t d) const {
  if (d < 0) d += dim();
  return m_shape.at(static_cast<std::size_t>(d));
}

bool Tensor::is_contiguous() const {
  std::int64_t expected = 1;
  for (std::size_t i = m_shape.size(); i-- > 0;) {
    if (m_shape[i] == 1) continue;
    if (m_strides[i] != expected) return false;
    expected *= m_shape[i];
  }
  return true;
}

std::int64_t Tensor::storage_index(std::span<const std::int64_t> index) const {
  std::int64_t pos = m_offset;
  for (std::size_t i = 0; i < index.size(); ++i) pos += index[i] * m_strides[i];
  return pos;
}

double Tensor::at(std::span<const std::int64_t> index) const {
  return decode_element(m_dtype, m_storage->data() + storage_index(index) * dtype_size(m_dtype));
}

namespace {
// Storage element position of logical row-major element i.
std::int64_t flat_to_storage(const Tensor& t, std::int64_t i) {
  std::int64_t pos = t.offset();
  const auto& shape = t.shape();
  const auto& strides = t.strides();
  for (std::size_t d = shape.size(); d-- > 0;) {
    std::int64_t idx = i % shape[d];
    i /= shape[d];
    pos += idx * strides[d];
  }
  return pos;
}
}  // namespace

double Tensor::get_flat(std::int64_t i) const {
  return decode_element(m_dtype, m_storage->data() + flat_to_storage(*this, i) * dtype_size(m_dtype));
}

void Tensor::set_flat(std::int64_t i, double value, Overflow overflow) {
  encode_element(m_dtype, value, m_storage->data() + flat_to_storage(*this, i) * dtype_size(m_dtype),
                 overflow);
}

std::vector<double> Tensor::to_f64() const {
  std::vector<double> out(static_cast<std::size_t>(numel()));
  to_f64(out.data());
  return out;
}

void Tensor::to_f64(double* out) const {
  if (numel() == 0) return;
  const std::byte* first = m_storage->data() + m_offset * static_cast<std::int64_t>(dtype_size(m_dtype));
  decode_strided(m_dtype, first, m_shape, m_strides, out);
}

namespace {

// Calls run(pos, i, len) for the elements of a row-major walk over `shape` in order: element i at
// storage position pos (in elements), and when the last dim has stride 1, a whole row of len
// elements at once (else len = 1).
template <class Run>
void walk_strided(std::span<const std::int64_t> shape, std::span<const std::int64_t> strides, std::int64_t n,
                  Run&& run) {
  const std::size_t rank = shape.size();
  std::vector<std::int64_t> idx(rank, 0);
  std::int64_t pos = 0;
  const std::int64_t len = strides[rank - 1] == 1 ? shape[rank - 1] : 1;
  for (std::int64_t i = 0; i < n;) {
    run(pos, i, len);
    i += len;
    if (len > 1) {
      idx[rank - 1] = shape[rank - 1] - 1;  // the run ends at the last dim's last index
      pos += len - 1;
    }
    for (std::size_t d = rank; d-- > 0;) {
      if (++idx[d] < shape[d]) {
        pos += strides[d];
        break;
      }
      pos -= strides[d] * (shape[d] - 1);
      idx[d] = 0;
    }
  }
}

// n and whether a view of `shape` and `strides` is row-major contiguous (size-1 dims ignored).
std::pair<std::int64_t, bool> extent(std::span<const std::int64_t> shape, std::span<const std::int64_t> strides) {
  std::int64_t n = 1, expected = 1;
  bool contiguous = true;
  for (std::size_t i = shape.size(); i-- > 0;) {
    n *= shape[i];
    if (shape[i] == 1) continue;
    contiguous &= strides[i] == expected;
    expected *= shape[i];
  }
  return {n, contiguous};
}

}  // namespace

void decode_strided(DType dtype, const std::byte* first, std::span<const std::int64_t> shape,
                    std::span<const std::int64_t> strides, double* out) {
  const auto [n, contiguous] = extent(shape, strides);
  if (n == 0) return;
  if (contiguous) {
    decode_elements(dtype, first, static_cast<std::size_t>(n), out);
    return;
  }
  const auto es = static_cast<std::int64_t>(dtype_size(dtype));
  walk_strided(shape, strides, n, [&](std::int64_t pos, std::int64_t i, std::int64_t len) {
    decode_elements(dtype, first + pos * es, static_cast<std::size_t>(len), out + i);
  });
}

void encode_strided(DType dtype, const double* in, std::span<const std::int64_t> shape,
                    std::span<const std::int64_t> strides, std::byte* first, Overflow overflow) {
  const auto [n, contiguous] = extent(shape, strides);
  if (n == 0) return;
  if (contiguous) {
    encode_elements(dtype, in, static_cast<std::size_t>(n), first, overflow);
    return;
  }
  const auto es = static_cast<std::int64_t>(dtype_size(dtype));
  walk_strided(shape, strides, n, [&](std::int64_t pos, std::int64_t i, std::int64_t len) {
    encode_elements(dtype, in + i, static_cast<std::size_t>(len), first + pos * es, overflow);
  });
}

std::vector<std::byte> Tensor::contiguous_bytes() const {
  const std::size_t es = dtype_size(m_dtype);
  const std::int64_t n = numel();
  std::vector<std::byte> out(static_cast<std::size_t>(n) * es);
  if (n == 0) return out;
  if (is_contiguous()) {
    std::memcpy(out.data(), m_storage->data() + m_offset * static_cast<std::int64_t>(es), out.size());
    return out;
  }
  for (std::int64_t i = 0; i < n; ++i)
    std::memcpy(out.data() + i * es, m_storage->data() + flat_to_storage(*this, i) * es, es);
  return out;
}

Tensor Tensor::transpose(std::int64_t d0, std::int64_t d1) const {
  if (d0 < 0) d0 += dim();
  if (d1 < 0) d1 += dim();
  Tensor t = *this;
  std::swap(t.m_shape.at(d0), t.m_shape.at(d1));
  std::swap(t.m_strides.at(d0), t.m_strides.at(d1));
  return t;
}

Tensor Tensor::slice(std::int64_t d, std::int64_t start, std::int64_t stop, std::int64_t step) const {
  if (d < 0) d += dim();
  if (step <= 0) throw std::invalid_argument("Tensor::slice: step must be positive");
  Tensor t = *this;
  const auto n = m_shape.at(d);
  start = std::clamp<std::int64_t>(start, 0, n);
  stop = std::clamp<std::int64_t>(stop, start, n);
  t.m_offset += start * m_strides[d];
  t.m_shape[d] = (stop - start + step - 1) / step;
  t.m_strides[d] *= step;
  return t;
}

Result<Tensor> Tensor::expand(const Shape& shape) const {
  if (shape.size() < m_shape.size())
    return make_error(ErrorCode::invalid_argument, "expand: fewer dims than the tensor");
  Tensor t = *this;
  const std::size_t lead = shape.size() - m_shape.size();
  t.m_shape = shape;
  t.m_strides.assign(shape.size(), 0);
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i < lead) continue;
    const auto have = m_shape[i - lead];
    if (have == shape[i]) {
      t.m_strides[i] = m_strides[i - lead];
    } else if (have != 1) {
      return make_error(ErrorCode::invalid_argument,
                        "expand: cannot expand " + shape_to_string(m_shape) + " to " + shape_to_string(shape));
    }
  }
  return t;
}

Tensor Tensor::contiguous() const {
  Tensor t = zeros(m_dtype, m_shape);
  auto bytes = contiguous_bytes();
  std::memcpy(t.m_storage->data(), bytes.data(), bytes.size());
  return t;
}

std::uint64_t fnv1a64(std::span<const std::byte> bytes, std::uint64_t seed) {
  std::uint64_t h = seed;
  for (auto b : bytes) {
    h ^= static_cast<std::uint64_t>(b);
    h *= 0x100000001b3ULL;
  }
  return h;
}

std::string tensor_digest(const Tensor& t) {
  auto bytes = t.contiguous_bytes();
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(fnv1a64(bytes)));
  return buf;
}

}  // namespace gpuemu
