// gpuemu::Tensor: views share storage (transpose, slice with a step, expand, offset views), reading
// non-contiguous views gives the logical elements, and views that would leave their storage fail
// with invalid_argument.
#include "gpuemu/engine/tensor.hpp"
#include "gpuemu/engine/strided.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <vector>

namespace {

using gpuemu::DType;
using gpuemu::ErrorCode;
using gpuemu::Shape;
using gpuemu::Tensor;

std::vector<double> iota(std::size_t n, double start = 0.0) {
  std::vector<double> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

// A [2, 3, 4] float32 tensor holding 0..23.
Tensor cube() {
  return Tensor::from_values(DType::float32, {2, 3, 4}, iota(24));
}

TEST(Tensor, ShapeHelpers) {
  EXPECT_EQ(gpuemu::shape_numel({2, 3, 4}), 24);
  EXPECT_EQ(gpuemu::shape_numel({}), 1);
  EXPECT_EQ(gpuemu::shape_numel({5, 0, 2}), 0);
  EXPECT_EQ(gpuemu::contiguous_strides({2, 3, 4}), (Shape{12, 4, 1}));
  EXPECT_EQ(gpuemu::contiguous_strides({}), Shape{});
  EXPECT_EQ(gpuemu::shape_to_string({2, 3, 4}), "[2, 3, 4]");
  EXPECT_EQ(gpuemu::shape_to_string({}), "[]");
}

TEST(Tensor, ZerosAndFromValues) {
  Tensor z = Tensor::zeros(DType::bfloat16, {3, 5});
  EXPECT_TRUE(z.defined());
  EXPECT_EQ(z.numel(), 15);
  EXPECT_EQ(z.storage_bytes(), 30u);
  EXPECT_TRUE(z.is_contiguous());
  for (double v : z.to_f64()) EXPECT_EQ(v, 0.0);

  // Values are rounded to the dtype on the way in.
  Tensor h =
      Tensor::from_values(DType::float16, {3}, std::vector<double>{1.0, 1.0 + 1e-4, 70000.0});
  EXPECT_EQ(h.to_f64(), (std::vector<double>{1.0, 1.0, std::numeric_limits<double>::infinity()}));
  Tensor s = Tensor::from_values(DType::float8_e4m3fn, {1}, std::vector<double>{1000.0},
                                 gpuemu::Overflow::saturate);
  EXPECT_EQ(s.get_flat(0), 448.0);
  EXPECT_THROW(Tensor::from_values(DType::float32, {2, 2}, iota(3)), std::invalid_argument);

  Tensor scalar = Tensor::from_values(DType::float64, {}, std::vector<double>{2.5});
  EXPECT_EQ(scalar.dim(), 0);
  EXPECT_EQ(scalar.numel(), 1);
  EXPECT_EQ(scalar.to_f64(), std::vector<double>{2.5});
}

TEST(Tensor, SizeCountsFromTheEnd) {
  Tensor t = cube();
  EXPECT_EQ(t.dim(), 3);
  EXPECT_EQ(t.size(0), 2);
  EXPECT_EQ(t.size(-1), 4);
  EXPECT_EQ(t.size(-3), 2);
}

TEST(Tensor, TransposeSharesStorage) {
  Tensor t = cube();
  Tensor tr = t.transpose(0, 2);  // [4, 3, 2]
  EXPECT_EQ(tr.shape(), (Shape{4, 3, 2}));
  EXPECT_EQ(tr.strides(), (Shape{1, 4, 12}));
  EXPECT_EQ(tr.storage(), t.storage());
  EXPECT_FALSE(tr.is_contiguous());
  // Element [i, j, k] of the transpose is [k, j, i] of the original.
  std::vector<double> want;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 2; ++k) want.push_back(k * 12 + j * 4 + i);
  EXPECT_EQ(tr.to_f64(), want);
  // A write through the view is seen by the original.
  const std::int64_t idx[] = {3, 1, 1};
  EXPECT_EQ(tr.at(idx), 19.0);
  tr.set_flat(3 * 6 + 1 * 2 + 1, -7.0);
  EXPECT_EQ(t.get_flat(19), -7.0);
  // Negative dims, and transposing back is the identity.
  Tensor back = tr.transpose(-1, 0);
  EXPECT_TRUE(back.is_contiguous());
  EXPECT_EQ(back.to_f64(), t.to_f64());
}

TEST(Tensor, SliceWithStep) {
  Tensor t = cube();
  Tensor s = t.slice(2, 1, 4, 2);  // last dim: elements 1 and 3
  EXPECT_EQ(s.shape(), (Shape{2, 3, 2}));
  EXPECT_EQ(s.strides(), (Shape{12, 4, 2}));
  EXPECT_EQ(s.offset(), 1);
  EXPECT_EQ(s.storage(), t.storage());
  EXPECT_EQ(s.to_f64(), (std::vector<double>{1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23}));
  Tensor s2 = t.slice(1, 1, 3, 1).slice(0, 1, 2, 1);  // [1, 2, 4] starting at element 16
  EXPECT_EQ(s2.offset(), 16);
  EXPECT_EQ(s2.to_f64(), iota(8, 16));
  EXPECT_TRUE(s2.is_contiguous());
  // Out-of-range bounds clamp; an empty slice is empty.
  EXPECT_EQ(t.slice(-1, 2, 100, 1).shape(), (Shape{2, 3, 2}));
  EXPECT_EQ(t.slice(0, 2, 1, 1).numel(), 0);
  EXPECT_TRUE(t.slice(0, 2, 1, 1).to_f64().empty());
  EXPECT_THROW(t.slice(0, 0, 2, 0), std::invalid_argument);
  // Writes through a strided slice land in the shared storage.
  s.set_flat(0, 100.0);
  EXPECT_EQ(t.get_flat(1), 100.0);
}

TEST(Tensor, ExpandSharesStorage) {
  Tensor row = Tensor::from_values(DType::float16, {1, 3}, std::vector<double>{1, 2, 3});
  auto e = row.expand({4, 3});
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->shape(), (Shape{4, 3}));
  EXPECT_EQ(e->strides(), (Shape{0, 1}));
  EXPECT_EQ(e->storage(), row.storage());
  EXPECT_FALSE(e->is_contiguous());
  EXPECT_EQ(e->to_f64(), (std::vector<double>{1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3}));
  // New leading dims.
  auto e2 = row.expand({2, 5, 3});
  ASSERT_TRUE(e2.ok());
  EXPECT_EQ(e2->strides(), (Shape{0, 0, 1}));
  EXPECT_EQ(e2->numel(), 30);
  // One write is seen at every broadcast position.
  row.set_flat(1, 9.0);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(e->get_flat(r * 3 + 1), 9.0);
  // Errors.
  auto bad = row.expand({4, 2});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, ErrorCode::invalid_argument);
  auto fewer = row.expand({3});
  ASSERT_FALSE(fewer.ok());
  EXPECT_EQ(fewer.error().code, ErrorCode::invalid_argument);
}

TEST(Tensor, ViewsWithOffsetAndStrides) {
  auto storage = std::make_shared<std::vector<std::byte>>(10 * sizeof(double));
  for (int i = 0; i < 10; ++i) {
    const double v = i;
    std::memcpy(storage->data() + i * sizeof(double), &v, sizeof v);
  }
  // Column 1 of a [3, 3] matrix that starts at element 1: elements 2, 5, 8.
  auto col = Tensor::view(DType::float64, {3}, {3}, 2, storage);
  ASSERT_TRUE(col.ok()) << col.error().message;
  EXPECT_EQ(col->to_f64(), (std::vector<double>{2, 5, 8}));
  EXPECT_EQ(col->offset(), 2);
  // Two views of one storage see each other's writes.
  auto all = Tensor::view(DType::float64, {10}, {1}, 0, storage);
  ASSERT_TRUE(all.ok());
  col->set_flat(1, -5.0);
  EXPECT_EQ(all->get_flat(5), -5.0);
  // Negative strides (a reversed view) are views too.
  auto rev = Tensor::view(DType::float64, {5}, {-1}, 9, storage);
  ASSERT_TRUE(rev.ok()) << rev.error().message;
  EXPECT_EQ(rev->to_f64(), (std::vector<double>{9, 8, 7, 6, -5}));
  // A broadcast (stride 0) view.
  auto bc = Tensor::view(DType::float64, {2, 3}, {0, 1}, 7, storage);
  ASSERT_TRUE(bc.ok());
  EXPECT_EQ(bc->to_f64(), (std::vector<double>{7, 8, 9, 7, 8, 9}));
  // Zero-size views are valid whatever their strides.
  auto empty = Tensor::view(DType::float64, {0, 4}, {100, 100}, 0, storage);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->numel(), 0);
  // The same bytes seen as a narrower dtype.
  auto bytes = Tensor::view(DType::uint8, {80}, {1}, 0, storage);
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ(bytes->numel(), 80);
}

TEST(Tensor, ViewBoundsErrors) {
  auto storage = std::make_shared<std::vector<std::byte>>(12 * sizeof(float));
  auto expect_invalid = [](const gpuemu::Result<Tensor>& r, const char* what) {
    ASSERT_FALSE(r.ok()) << what;
    EXPECT_EQ(r.error().code, ErrorCode::invalid_argument) << what;
    EXPECT_FALSE(r.error().message.empty()) << what;
  };
  ASSERT_TRUE(Tensor::view(DType::float32, {3, 4}, {4, 1}, 0, storage).ok());
  expect_invalid(Tensor::view(DType::float32, {3, 4}, {4, 1}, 1, storage), "one past the end");
  expect_invalid(Tensor::view(DType::float32, {4, 4}, {4, 1}, 0, storage), "too many rows");
  expect_invalid(Tensor::view(DType::float32, {3, 4}, {1, 4}, 0, storage), "strides too large");
  expect_invalid(Tensor::view(DType::float64, {7}, {1}, 0, storage), "wider dtype");
  expect_invalid(Tensor::view(DType::float32, {3}, {-1}, 1, storage), "negative stride before 0");
  expect_invalid(Tensor::view(DType::float32, {3}, {1}, -1, storage), "negative offset");
  expect_invalid(Tensor::view(DType::float32, {3, 4}, {4}, 0, storage), "rank mismatch");
  expect_invalid(Tensor::view(DType::float32, {-1}, {1}, 0, storage), "negative size");
  expect_invalid(Tensor::view(DType::float32, {1}, {1}, 0, std::shared_ptr<gpuemu::Storage>()), "no storage");
  auto r = Tensor::view(DType::float32, {3, 4}, {4, 1}, 1, storage);
  EXPECT_NE(r.error().message.find("[3, 4]"), std::string::npos) << r.error().message;
  // value() on an error throws the error as a GpuemuException.
  try {
    (void)r.value();
    ADD_FAILURE() << "value() of an error did not throw";
  } catch (const gpuemu::GpuemuException& e) {
    EXPECT_EQ(e.error().code, ErrorCode::invalid_argument);
  }
}

TEST(Tensor, NonContiguousReadsAndBytes) {
  // A bfloat16 [3, 5] tensor; take a transposed, strided, offset view and check every path that
  // reads it (to_f64, get_flat, at, contiguous_bytes, contiguous, the digest).
  std::vector<double> vals;
  for (int i = 0; i < 15; ++i) vals.push_back(0.5 * i - 3.0);
  Tensor t = Tensor::from_values(DType::bfloat16, {3, 5}, vals);
  Tensor v = t.transpose(0, 1).slice(0, 1, 5, 2);  // [2, 3]: columns 1 and 3
  ASSERT_EQ(v.shape(), (Shape{2, 3}));
  EXPECT_FALSE(v.is_contiguous());
  const std::vector<double> want = {vals[1], vals[6], vals[11], vals[3], vals[8], vals[13]};
  EXPECT_EQ(v.to_f64(), want);
  for (std::int64_t i = 0; i < v.numel(); ++i) EXPECT_EQ(v.get_flat(i), want[i]);
  const std::int64_t idx[] = {1, 2};
  EXPECT_EQ(v.at(idx), vals[13]);
  EXPECT_EQ(v.storage_index(idx), 13);

  Tensor c = v.contiguous();
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_NE(c.storage(), t.storage());
  EXPECT_EQ(c.storage_bytes(), 12u);
  EXPECT_EQ(c.to_f64(), want);
  EXPECT_EQ(v.contiguous_bytes(), c.contiguous_bytes());
  EXPECT_EQ(gpuemu::tensor_digest(v), gpuemu::tensor_digest(c));
  EXPECT_NE(gpuemu::tensor_digest(v), gpuemu::tensor_digest(t));
  EXPECT_EQ(gpuemu::tensor_digest(v).size(), 16u);
  // The bytes are the bf16 bits, little-endian: -2.5 is 0xC020.
  const auto bytes = v.contiguous_bytes();
  EXPECT_EQ(vals[1], -2.5);
  EXPECT_EQ(bytes[0], std::byte{0x20});
  EXPECT_EQ(bytes[1], std::byte{0xC0});

  // An odometer walk over a rank-4 view with every kind of stride.
  Tensor big = Tensor::from_values(DType::float32, {3, 4, 5, 6}, iota(360));
  Tensor w = big.transpose(1, 3).slice(1, 1, 6, 2).slice(3, 0, 4, 3);  // [3, 3, 5, 2]
  auto e = w.slice(0, 1, 2, 1).expand({4, 3, 5, 2});
  ASSERT_TRUE(e.ok());
  std::vector<double> expect;
  for (int a = 0; a < 4; ++a)
    for (int b = 0; b < 3; ++b)
      for (int c2 = 0; c2 < 5; ++c2)
        for (int d = 0; d < 2; ++d) {
          // e[a, b, c, d] = w[1, b, c, d] = big[1, d*3, c, 1 + 2b]
          expect.push_back(1 * 120 + (d * 3) * 30 + c2 * 6 + (1 + 2 * b));
        }
  EXPECT_EQ(e->to_f64(), expect);
  std::vector<double> flat;
  for (std::int64_t i = 0; i < e->numel(); ++i) flat.push_back(e->get_flat(i));
  EXPECT_EQ(flat, expect);
  EXPECT_EQ(e->contiguous().to_f64(), expect);

  // Rows of stride 1 in a non-contiguous view (decoded a row at a time): a slice along dim 2, and
  // the same rows repeated by an expanded leading dim, in float32 and bfloat16.
  for (DType d : {DType::float32, DType::bfloat16}) {
    Tensor src = Tensor::from_values(d, {3, 4, 5, 6}, iota(360));
    Tensor rows = src.slice(2, 1, 5, 2).slice(3, 1, 6, 1);  // [3, 4, 2, 5], last stride 1
    auto rep = rows.slice(0, 2, 3, 1).expand({2, 4, 2, 5});
    ASSERT_TRUE(rep.ok());
    std::vector<double> want_rows, want_rep;
    for (int a = 0; a < 3; ++a)
      for (int b = 0; b < 4; ++b)
        for (int c2 = 0; c2 < 2; ++c2)
          for (int k = 0; k < 5; ++k) want_rows.push_back(a * 120 + b * 30 + (1 + 2 * c2) * 6 + 1 + k);
    for (int a = 0; a < 2; ++a)
      for (int b = 0; b < 4; ++b)
        for (int c2 = 0; c2 < 2; ++c2)
          for (int k = 0; k < 5; ++k) want_rep.push_back(2 * 120 + b * 30 + (1 + 2 * c2) * 6 + 1 + k);
    for (auto& x : want_rows) x = gpuemu::round_to(d, x);
    for (auto& x : want_rep) x = gpuemu::round_to(d, x);
    EXPECT_EQ(rows.to_f64(), want_rows);
    EXPECT_EQ(rep->to_f64(), want_rep);
  }

  // encode_strided writes what set_flat writes, element by element, through every kind of view
  // (rows of stride 1, a transpose, steps, an offset, a negative-free expand of stride 0).
  for (DType d : {DType::float32, DType::bfloat16, DType::float16, DType::int32}) {
    const Tensor base = Tensor::from_values(d, {3, 4, 5, 6}, iota(360));
    std::vector<Tensor> views = {base.slice(2, 1, 5, 2).slice(3, 1, 6, 1), base.transpose(1, 3),
                                 base.slice(0, 1, 3, 1).slice(3, 0, 6, 3), base};
    if (auto e = base.slice(0, 0, 1, 1).expand({2, 4, 5, 6}); e.ok()) views.push_back(*e);
    for (const Tensor& v : views) {
      std::vector<double> vals(static_cast<std::size_t>(v.numel()));
      for (std::size_t i = 0; i < vals.size(); ++i) vals[i] = 0.37 * static_cast<double>(i) - 11.0;
      Tensor one = Tensor::view(d, v.shape(), v.strides(), v.offset(),
                                std::make_shared<std::vector<std::byte>>(v.storage()->data(), v.storage()->data() + v.storage()->size())).value();
      Tensor many = Tensor::view(d, v.shape(), v.strides(), v.offset(),
                                 std::make_shared<std::vector<std::byte>>(v.storage()->data(), v.storage()->data() + v.storage()->size())).value();
      for (std::int64_t i = 0; i < one.numel(); ++i) one.set_flat(i, vals[static_cast<std::size_t>(i)]);
      gpuemu::encode_strided(d, vals.data(), many.shape(), many.strides(),
                             many.storage()->data() + many.offset() * static_cast<std::int64_t>(gpuemu::dtype_size(d)));
      EXPECT_EQ(one.contiguous_bytes(), many.contiguous_bytes()) << gpuemu::dtype_name(d);
      EXPECT_EQ(std::memcmp(one.storage()->data(), many.storage()->data(), one.storage()->size()), 0)
          << gpuemu::dtype_name(d);
    }
  }
}

TEST(Tensor, Fnv1a) {
  // FNV-1a 64 test vectors (Fowler/Noll/Vo): "" and "a".
  EXPECT_EQ(gpuemu::fnv1a64({}), 0xcbf29ce484222325ULL);
  const std::byte a[] = {std::byte{'a'}};
  EXPECT_EQ(gpuemu::fnv1a64(a), 0xaf63dc4c8601ec8cULL);
}

}  // namespace
