// The error map (gpuemu/engine/error_map.hpp): leading dims folded by max, max-pooling into cells, the
// envelope count, and end to end on a kernel whose last column is wrong.
#include "gpuemu/engine/error_map.hpp"
#include "gpuemu/engine/engine.hpp"
#include "source_engine.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace gpuemu {
namespace {

constexpr double k_inf = std::numeric_limits<double>::infinity();

OutputVerdict output_of(Shape shape) {
  OutputVerdict v;
  v.name = "out";
  v.shape = std::move(shape);
  v.errors.assign(static_cast<std::size_t>(shape_numel(v.shape)), 0.5);
  return v;
}

TEST(ErrorMap, FoldsLeadingDimsByMax) {
  OutputVerdict v = output_of({3, 2, 4});
  v.errors[1 * 8 + 1 * 4 + 3] = 50.0;  // batch 1, row 1, col 3
  v.errors[2 * 8 + 0 * 4 + 0] = 7.0;   // batch 2, row 0, col 0
  auto m = make_error_map(v, 2.0);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->rows, 2);
  EXPECT_EQ(m->cols, 4);
  EXPECT_EQ(m->map_rows, 2);
  EXPECT_EQ(m->map_cols, 4);
  EXPECT_EQ(m->cell_rows, 1);
  EXPECT_EQ(m->cells[1 * 4 + 3], 50.0);
  EXPECT_EQ(m->cells[0], 7.0);
  EXPECT_EQ(m->cells[1], 0.5);
  EXPECT_EQ(m->over, 2);
  EXPECT_EQ(m->max_error, 50.0);
  EXPECT_EQ(m->shape, (Shape{3, 2, 4}));
}

TEST(ErrorMap, PoolsByMaxSoOneBadElementShows) {
  OutputVerdict v = output_of({10, 130});
  v.errors[9 * 130 + 129] = k_inf;  // the last element: a NaN where the reference is finite
  auto m = make_error_map(v, 2.0, 4, 64);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->cell_rows, 3);  // ceil(10 / 4)
  EXPECT_EQ(m->cell_cols, 3);  // ceil(130 / 64)
  EXPECT_EQ(m->map_rows, 4);   // ceil(10 / 3)
  EXPECT_EQ(m->map_cols, 44);  // ceil(130 / 3)
  ASSERT_EQ(m->cells.size(), 4u * 44u);
  EXPECT_TRUE(std::isinf(m->cells.back()));
  EXPECT_EQ(m->over, 1);
  for (std::size_t i = 0; i + 1 < m->cells.size(); ++i) EXPECT_EQ(m->cells[i], 0.5) << i;
}

TEST(ErrorMap, VectorsAndScalars) {
  auto row = make_error_map(output_of({5}), 2.0);
  ASSERT_TRUE(row);
  EXPECT_EQ(row->rows, 1);
  EXPECT_EQ(row->map_cols, 5);
  auto scalar = make_error_map(output_of({}), 2.0);
  ASSERT_TRUE(scalar);
  EXPECT_EQ(scalar->cells.size(), 1u);
}

TEST(ErrorMap, NoMapWithoutPerElementErrors) {
  OutputVerdict v = output_of({4, 4});
  v.errors.clear();  // a shape mismatch: nothing judged element by element
  EXPECT_FALSE(make_error_map(v, 2.0));
  v.errors.assign(3, 0.0);  // does not match the shape
  EXPECT_FALSE(make_error_map(v, 2.0));
  EXPECT_FALSE(make_error_map(Verdict{}));
}

// A correct softmax whose last column is then overwritten: the map lights that column only.
TEST(ErrorMap, JudgedKernelWithBadLastColumn) {
  Engine& engine = testing_support::source_engine();
  const OpSchema& schema = *engine.catalogue().find("softmax");
  FuzzOptions o;
  o.dtypes = {DType::float32};
  o.layouts = false;
  CaseGenerator gen(schema, o);
  auto c = gen.generate_pinned(11, {{"R", 6}, {"N", 200}}, {}, true);
  ASSERT_TRUE(c.ok()) << c.error().message;
  KernelRunner good = engine.builtin_kernel("softmax", "fp32_online").value();
  KernelRunner bad = [&good](const TestCase& tc) -> Result<std::vector<Tensor>> {
    GPUEMU_TRY(auto outs, good(tc));
    Tensor& out = outs[0];
    const std::int64_t n = out.shape().back();
    for (std::int64_t r = 0; r < out.numel() / n; ++r) out.set_flat(r * n + n - 1, 0.75);
    return outs;
  };
  auto passed = engine.run_case("softmax", o, *c, good);
  ASSERT_TRUE(passed.ok());
  ASSERT_TRUE(passed->verdict.passed) << passed->verdict.message;
  auto failed = engine.run_case("softmax", o, *c, bad);
  ASSERT_TRUE(failed.ok());
  ASSERT_FALSE(failed->verdict.passed);
  auto m = make_error_map(failed->verdict);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->rows, 6);
  EXPECT_EQ(m->cols, 200);
  EXPECT_EQ(m->cell_cols, 4);  // ceil(200 / 64)
  EXPECT_EQ(m->map_cols, 50);
  for (std::int64_t r = 0; r < m->map_rows; ++r)
    for (std::int64_t col = 0; col < m->map_cols; ++col) {
      const double e = m->cells[static_cast<std::size_t>(r * m->map_cols + col)];
      if (col == m->map_cols - 1)
        EXPECT_GT(e, m->envelope) << r << "," << col;
      else
        EXPECT_LE(e, m->envelope) << r << "," << col;
    }
  EXPECT_EQ(m->over, m->map_rows);
}

}  // namespace
}  // namespace gpuemu
