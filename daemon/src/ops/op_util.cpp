#include "ops/op_util.hpp"

#include "ops/gemm_blas.hpp"

namespace gpuemu::ops {

Result<ReduceGeom> reduce_geom(const Shape& shape, std::int64_t dim) {
  const auto rank = static_cast<std::int64_t>(shape.size());
  if (rank == 0) return ReduceGeom{};
  if (dim < -rank || dim >= rank)
    return make_error(ErrorCode::invalid_argument, "dim " + std::to_string(dim) +
                                                       " out of range for a tensor of rank " +
                                                       std::to_string(rank));
  if (dim < 0) dim += rank;
  ReduceGeom g;
  for (std::int64_t i = 0; i < rank; ++i) {
    if (i < dim)
      g.outer *= shape[i];
    else if (i == dim)
      g.len = shape[i];
    else
      g.inner *= shape[i];
  }
  return g;
}

Shape reduced_shape(const Shape& shape, std::int64_t dim, bool keepdim) {
  const auto rank = static_cast<std::int64_t>(shape.size());
  if (rank == 0) return shape;
  if (dim < 0) dim += rank;
  Shape out;
  for (std::int64_t i = 0; i < rank; ++i) {
    if (i == dim) {
      if (keepdim) out.push_back(1);
    } else {
      out.push_back(shape[i]);
    }
  }
  return out;
}

std::vector<double> round_all(DType dtype, std::vector<double> v) {
  for (auto& x : v) x = round_to(dtype, x);
  return v;
}

std::vector<RefOutput> single_output(DType dtype, Shape shape, std::vector<double> value,
                                     std::vector<double> c_acc, std::vector<double> c_in) {
  RefOutput o;
  o.name = "out";
  o.dtype = dtype;
  o.shape = std::move(shape);
  o.value = std::move(value);
  o.c_acc = std::move(c_acc);
  o.c_in = std::move(c_in);
  std::vector<RefOutput>
      out;  // not `return {std::move(o)}`: an initializer_list copies its elements
  out.push_back(std::move(o));
  return out;
}

std::vector<double> output_buffer(std::int64_t n) {
  return fresh_buffer(n);
}

bool cpu_has_avx2() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
#else
  return false;
#endif
}

}  // namespace gpuemu::ops
