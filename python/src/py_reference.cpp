// Engine.with_op: an engine whose catalogue also holds an op whose fp64 reference is a Python
// callable of this process (gpuemu.torch_op's references: PyTorch code evaluated in float64 with
// its derived error bounds, docs/torch-ops.md).
#include "py_reference.hpp"

#include "convert.hpp"

#include "gpuemu/engine/op.hpp"

#include <pybind11/numpy.h>

#include <cmath>

namespace py = pybind11;

namespace gpuemu::python {
namespace {

std::string shape_text(const Shape& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// An input as numpy: floating inputs as float64 (exact: every gpuemu float dtype is a subset of
// binary64), integer and bool ones in an integer dtype of their own.
py::array input_array(const RefArg& a) {
  std::vector<py::ssize_t> shape(a.shape.begin(), a.shape.end());
  if (is_floating(a.dtype)) {
    py::array_t<double> out(shape);
    std::copy(a.data.begin(), a.data.end(), out.mutable_data());
    return out;
  }
  if (a.dtype == DType::bool_) {
    py::array_t<bool> out(shape);
    bool* p = out.mutable_data();
    for (std::size_t i = 0; i < a.data.size(); ++i) p[i] = a.data[i] != 0.0;
    return out;
  }
  py::array_t<std::int64_t> out(shape);
  std::int64_t* p = out.mutable_data();
  for (std::size_t i = 0; i < a.data.size(); ++i) p[i] = static_cast<std::int64_t>(a.data[i]);
  return out;
}

RefVec values_of(const py::handle& h, const Shape& shape, const std::string& what) {
  auto arr = py::array_t<double, py::array::c_style | py::array::forcecast>::ensure(h);
  if (!arr) throw_error(ErrorCode::invalid_argument, what + " is not an array of numbers");
  Shape got(arr.shape(), arr.shape() + arr.ndim());
  if (got != shape)
    throw_error(ErrorCode::invalid_argument, what + " has shape " + shape_text(got) + ", its value " + shape_text(shape));
  return RefVec(arr.data(), arr.data() + arr.size());
}

// reference(inputs: {name: ndarray}, attrs: dict, dims: dict, dtype: str) returns one entry per
// schema output: an array (the value), or a tuple (value, c_acc) or (value, c_acc, c_in).
class PyReference final : public ExternalReference {
 public:
  PyReference(py::function fn, std::string op) : m_fn(std::move(fn)), m_op(std::move(op)) {}
  ~PyReference() override {
    py::gil_scoped_acquire gil;
    m_fn = py::function();
  }

  Result<std::vector<RefOutput>> run(const RefContext& ctx) const override {
    if (!ctx.schema) return make_error(ErrorCode::internal, "a Python reference needs the op's schema");
    const OpSchema& schema = *ctx.schema;
    py::gil_scoped_acquire gil;
    try {
      py::dict inputs;
      for (const auto& in : schema.inputs) {
        auto it = ctx.inputs.find(in.name);
        inputs[py::str(in.name)] = it == ctx.inputs.end() ? py::object(py::none()) : py::object(input_array(it->second));
      }
      py::dict dims;
      for (const auto& [k, v] : ctx.dims) dims[py::str(k)] = v;
      py::object result = m_fn(inputs, py_from_json(ctx.attrs), dims, std::string(dtype_name(ctx.case_dtype)));
      const std::size_t k = schema.outputs.size();
      py::list items;
      if (py::isinstance<py::list>(result) || py::isinstance<py::tuple>(result)) items = py::list(result);
      if (items.size() != k)
        return make_error(ErrorCode::invalid_argument,
                          "the reference of op '" + m_op + "' returned " + std::to_string(items.size()) +
                              " outputs; the op has " + std::to_string(k));
      std::vector<RefOutput> out(k);
      for (std::size_t i = 0; i < k; ++i) {
        RefOutput& o = out[i];
        o.name = schema.outputs[i].name;
        o.dtype = ctx.output_dtype(i);
        py::handle item = items[i];
        py::handle value = item;
        py::tuple parts;
        if (py::isinstance<py::tuple>(item)) {
          parts = py::reinterpret_borrow<py::tuple>(item);
          if (parts.size() < 1 || parts.size() > 3)
            return make_error(ErrorCode::invalid_argument,
                              "output '" + o.name + "': give (value), (value, c_acc) or (value, c_acc, c_in)");
          value = parts[0];
        }
        auto arr = py::array_t<double, py::array::c_style | py::array::forcecast>::ensure(value);
        if (!arr) return make_error(ErrorCode::invalid_argument, "output '" + o.name + "' is not an array");
        o.shape.assign(arr.shape(), arr.shape() + arr.ndim());
        o.value.assign(arr.data(), arr.data() + arr.size());
        if (parts && parts.size() >= 2 && !parts[1].is_none()) o.c_acc = values_of(parts[1], o.shape, "c_acc of '" + o.name + "'");
        if (parts && parts.size() >= 3 && !parts[2].is_none()) o.c_in = values_of(parts[2], o.shape, "c_in of '" + o.name + "'");
        for (double& c : o.c_acc) c = std::isnan(c) ? HUGE_VAL : std::fabs(c);  // no bound known: unresolved
        for (double& c : o.c_in) c = std::isnan(c) ? HUGE_VAL : std::fabs(c);
      }
      GPUEMU_TRY_STATUS(check_reference_shapes(schema, ctx, out, "of op '" + m_op + "'"));
      return out;
    } catch (py::error_already_set& e) {
      return make_error(ErrorCode::invalid_argument, "the reference of op '" + m_op + "' raised: " + std::string(e.what()));
    } catch (const GpuemuException& e) {
      return e.error();
    }
  }

 private:
  py::function m_fn;
  std::string m_op;
};

}  // namespace

Engine engine_with_op(const Engine& base, const std::string& schema_text, const std::string& file,
                      py::function reference, py::object envelope) {
  auto parsed = parse_op_schema(schema_text, file);
  if (!parsed) throw GpuemuException(parsed.error());
  OpSchema schema = std::move(parsed).value();
  const std::string name = schema.name;
  schema.source_file = file;
  schema.external_reference = std::make_shared<PyReference>(std::move(reference), name);
  auto cat = base.catalogue().with_op(std::move(schema));
  if (!cat) throw GpuemuException(cat.error());
  Engine e(*cat, base.envelopes());
  if (!envelope.is_none()) {
    const double env = envelope.cast<double>();
    for (const DType d : (*cat)->get(name).value()->dtypes) e.envelopes().set(name, d, env);
  }
  return e;
}

}  // namespace gpuemu::python
