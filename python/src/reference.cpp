// The op catalogue and the fp64 reference oracle, in process:
//   reference(op, inputs, attrs, dtype) -> [(output name, float64 array), ...]
// where each input is (array, dtype name): the array's items are that dtype's storage (bfloat16
// and fp8 as their bits), read through its own strides (offset, broadcast and negative strides
// included) straight into the exact fp64 values the reference takes, with no copy of its bytes
// first; the result arrays own the reference's buffers (no copy out either), and only the value
// is computed (RefContext::value_only: no error bounds, which nobody reads here). The Python
// facade (gpuemu/_reference.py) turns numpy arrays and torch tensors into that form.
#include "convert.hpp"
#include "register.hpp"

#include "gpuemu/engine/catalogue.hpp"
#include "gpuemu/engine/malloc_tuning.hpp"
#include "gpuemu/engine/oracle_backend.hpp"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace py = pybind11;

namespace gpuemu::python {
namespace {

// The default catalogue, loaded on first use (GPUEMU_SCHEMA_PATH as it is then) and kept.
std::mutex g_catalogue_mutex;
std::shared_ptr<const Catalogue> g_catalogue;

std::shared_ptr<const Catalogue> catalogue(bool reload = false) {
  std::lock_guard<std::mutex> lock(g_catalogue_mutex);
  if (!g_catalogue || reload) {
    auto loaded = Catalogue::load_default();
    if (!loaded) throw GpuemuException(loaded.error());
    g_catalogue = std::move(loaded).value();
  }
  return g_catalogue;
}

std::shared_ptr<const Catalogue> catalogue_nogil(bool reload = false) {
  py::gil_scoped_release release;
  return catalogue(reload);
}

py::array_t<double> array_of(RefVec&& v, const std::vector<py::ssize_t>& shape) {
  // The array takes the buffer as it is (no copy): the capsule frees it with the array.
  auto* held = new RefVec(std::move(v));
  py::capsule owner(held, [](void* p) { delete static_cast<RefVec*>(p); });
  return py::array_t<double>(shape, held->data(), owner);
}

py::list reference(const std::string& op, const py::dict& inputs, const py::dict& attrs,
                   const std::optional<std::string>& case_dtype, bool bounds) {
  tune_malloc_for_cases(MallocTuning::unless_environment_says);  // the inputs' copies and the outputs
  // Decode everything to exact values while holding the GIL (straight from the arrays' memory),
  // then compute without it.
  std::map<std::string, RefArg, std::less<>> args;
  for (auto [key, value] : inputs) {
    if (!py::isinstance<py::str>(key))
      throw_error(ErrorCode::invalid_argument, "input names must be strings");
    const auto name = key.cast<std::string>();
    if (!py::isinstance<py::tuple>(value) || py::len(value) != 2)
      throw_error(ErrorCode::invalid_argument,
                  "input '" + name + "': expected an (array, dtype name) pair");
    auto pair = value.cast<py::tuple>();
    const DType dtype = dtype_from_name(pair[1].cast<std::string>());
    auto array = py::array::ensure(pair[0]);
    if (!array) throw py::error_already_set();
    args.emplace(name, ref_arg_from_array(array, dtype, "input '" + name + "'"));
  }
  const Json attr_json = json_from_py(attrs, "attrs");
  std::optional<DType> dtype;
  if (case_dtype) dtype = dtype_from_name(*case_dtype);

  std::vector<RefOutput> outputs;
  {
    py::gil_scoped_release release;
    auto cat = catalogue();
    auto schema = cat->get(op);
    if (!schema) throw GpuemuException(schema.error());
    auto ctx = make_ref_context(**schema, std::move(args), attr_json, dtype);
    if (!ctx) throw GpuemuException(ctx.error());
    ctx->value_only = !bounds;  // nobody judges here: the value alone, unless the bounds are asked for
    auto result = run_reference(**schema, *ctx);
    if (!result) throw GpuemuException(result.error());
    outputs = std::move(result).value();
  }

  py::list out;
  for (auto& o : outputs) {
    std::vector<py::ssize_t> shape(o.shape.begin(), o.shape.end());
    if (static_cast<std::int64_t>(o.value.size()) != shape_numel(o.shape))
      throw_error(ErrorCode::internal, "op '" + op + "': reference output '" + o.name + "' has " +
                                           std::to_string(o.value.size()) + " values for shape " +
                                           shape_to_string(o.shape));
    const std::size_t n = o.value.size();
    auto arr = array_of(std::move(o.value), shape);
    if (!bounds) {
      out.append(py::make_tuple(o.name, std::move(arr), std::string(dtype_name(o.dtype))));
      continue;
    }
    // the error model's terms (docs/error-model.md): empty ones are zeros; an exact op's are unused
    if (o.c_acc.empty() || o.exact) o.c_acc.assign(n, 0.0);
    if (o.c_in.empty() || o.exact) o.c_in.assign(n, 0.0);
    out.append(py::make_tuple(o.name, std::move(arr), std::string(dtype_name(o.dtype)),
                              array_of(std::move(o.c_acc), shape), array_of(std::move(o.c_in), shape)));
  }
  return out;
}

}  // namespace

void register_reference(py::module_& m) {
  m.def(
      "set_oracle",
      [](const std::string& name) {
        if (Status st = oracle_backend::select(name); !st) throw GpuemuException(st.error());
      },
      py::arg("backend"),
      "where the fp64 oracle runs in this process: 'cpu' or 'cuda' (raises when unavailable)");
  m.def(
      "oracle",
      [] {
        const oracle_backend::Counters c = oracle_backend::counters();
        py::dict d;
        d["backend"] = oracle_backend::current();
        d["description"] = oracle_backend::description();
        d["min_macs"] = oracle_backend::min_macs();
        d["gemms"] = c.gemms;
        d["attention_blocks"] = c.attention_blocks;
        d["failures"] = c.failures;
        return d;
      },
      "the fp64 oracle's backend in this process, and what the GPU computed so far");
  m.def(
      "set_oracle_min_macs", [](std::int64_t macs) { oracle_backend::set_min_macs(macs); },
      py::arg("macs"), "problems of at least this many multiply-adds go to the GPU backend");
  m.def("reference", &reference, py::arg("op"), py::arg("inputs"), py::arg("attrs"),
        py::arg("dtype") = py::none(), py::arg("bounds") = false,
        "fp64 reference outputs of `op`: a list of (name, float64 array, output dtype name), with "
        "`bounds` (name, value, dtype, c_acc, c_in); inputs map names to (array, dtype name) pairs");
  m.def(
      "ops",
      [] {
        auto cat = catalogue_nogil();
        std::vector<std::string> names;
        for (const OpSchema* s : cat->all()) names.push_back(s->name);
        return names;
      },
      "the names of every op in the catalogue, sorted");
  m.def(
      "op_schema",
      [](const std::string& name) {
        auto cat = catalogue_nogil();
        auto schema = cat->get(name);
        if (!schema) throw GpuemuException(schema.error());
        py::dict out = py_from_json((*schema)->raw);
        out["source_file"] = (*schema)->source_file;
        return out;
      },
      py::arg("op"), "an op's schema document as loaded (plus its source_file)");
  m.def(
      "reload_catalogue", [] { catalogue_nogil(true); },
      "reload the catalogue from the search path (GPUEMU_SCHEMA_PATH as it is now)");
}

}  // namespace gpuemu::python
