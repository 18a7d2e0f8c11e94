// gpuemu._core.Engine: the validation service in-process (fuzz, judge, minimise, diagnose,
// calibrate), with Python callables as the kernel under test.
#include "convert.hpp"
#include "py_reference.hpp"
#include "register.hpp"

#include "gpuemu/engine/engine.hpp"
#include "gpuemu/engine/malloc_tuning.hpp"

#include <pybind11/functional.h>
#include <pybind11/stl.h>

namespace py = pybind11;

namespace gpuemu::python {
namespace {

// numpy dtype holding a gpuemu dtype's storage (bf16 and fp8 as their bits).
py::dtype storage_dtype(DType d) {
  switch (d) {
    case DType::float64: return py::dtype("float64");
    case DType::float32: return py::dtype("float32");
    case DType::float16: return py::dtype("float16");
    case DType::bfloat16: return py::dtype("uint16");
    case DType::float8_e4m3fn:
    case DType::float8_e5m2: return py::dtype("uint8");
    case DType::int8: return py::dtype("int8");
    case DType::int16: return py::dtype("int16");
    case DType::int32: return py::dtype("int32");
    case DType::int64: return py::dtype("int64");
    case DType::uint8: return py::dtype("uint8");
    case DType::bool_: return py::dtype("bool");
  }
  return py::dtype("float32");
}

// A numpy view sharing the tensor's storage, with its strides and offset.
py::array array_of(const Tensor& t) {
  const auto es = static_cast<py::ssize_t>(dtype_size(t.dtype()));
  std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end());
  std::vector<py::ssize_t> strides;
  for (auto s : t.strides()) strides.push_back(static_cast<py::ssize_t>(s) * es);
  auto* holder = new std::shared_ptr<Storage>(t.storage());
  py::capsule owner(holder, [](void* p) { delete static_cast<std::shared_ptr<Storage>*>(p); });
  auto* data = (*holder)->data() + t.offset() * es;
  return py::array(storage_dtype(t.dtype()), shape, strides, data, owner);
}

FuzzOptions options_from(const py::object& dtypes, const std::string& strategy, const py::object& dims,
                         const py::object& attrs, const py::object& vary_attrs, bool layouts,
                         const py::object& present = py::none(), const py::object& precision = py::none()) {
  FuzzOptions o;
  if (!dtypes.is_none())
    for (auto d : dtypes) o.dtypes.push_back(dtype_from_name(py::str(d)));
  auto dist = parse_distribution(strategy);
  if (!dist)
    throw_error(ErrorCode::invalid_argument,
                "unknown value distribution '" + strategy + "' (regular, boundary, adversarial, special)");
  o.distribution = *dist;
  if (!dims.is_none()) {
    for (auto [k, v] : dims.cast<py::dict>()) {
      std::vector<std::int64_t> sizes;
      if (py::isinstance<py::int_>(v)) sizes.push_back(v.cast<std::int64_t>());
      else
        for (auto x : v) sizes.push_back(x.cast<std::int64_t>());
      o.dims[k.cast<std::string>()] = sizes;
    }
  }
  if (!attrs.is_none()) o.attrs = json_from_py(attrs, "attrs");
  if (!o.attrs.is_object()) o.attrs = Json::object();
  if (!vary_attrs.is_none())
    for (auto a : vary_attrs) o.vary_attrs.push_back(a.cast<std::string>());
  o.layouts = layouts;
  if (!present.is_none()) {
    if (!py::isinstance<py::dict>(present)) throw_error(ErrorCode::invalid_argument, "present must be a dict {input: bool}");
    for (auto [k, v] : present.cast<py::dict>()) {
      if (!py::isinstance<py::str>(k) || !py::isinstance<py::bool_>(v))
        throw_error(ErrorCode::invalid_argument, "present must map input names to True or False, got " +
                                                     std::string(py::repr(k)) + ": " + std::string(py::repr(v)));
      o.present[k.cast<std::string>()] = v.cast<bool>();
    }
  }
  if (!precision.is_none()) {
    if (!py::isinstance<py::dict>(precision))
      throw_error(ErrorCode::invalid_argument, "precision must be a dict {op or family: policy}");
    for (auto [k, v] : precision.cast<py::dict>()) {
      if (!py::isinstance<py::str>(k) || !py::isinstance<py::str>(v))
        throw_error(ErrorCode::invalid_argument, "precision must map op or family names to policy names, got " +
                                                     std::string(py::repr(k)) + ": " + std::string(py::repr(v)));
      o.precision[k.cast<std::string>()] = v.cast<std::string>();
    }
  }
  return o;
}

// Calls a Python kernel: kernel(case) -> list of (array, dtype name).
KernelRunner runner_of(py::function fn) {
  return [fn](const TestCase& c) -> Result<std::vector<Tensor>> {
    py::gil_scoped_acquire gil;
    try {
      py::object result = fn(py::cast(c));
      std::vector<Tensor> out;
      for (auto item : result) {
        auto pair = item.cast<py::tuple>();
        DType d = dtype_from_name(pair[1].cast<std::string>());
        out.push_back(tensor_from_array(pair[0].cast<py::array>(), d, "output"));
      }
      return out;
    } catch (py::error_already_set& e) {
      return make_error(ErrorCode::internal, e.what());
    } catch (const GpuemuException& e) {
      return e.error();
    }
  };
}

template <typename T>
T unwrap(Result<T> r) {
  if (!r) throw GpuemuException(r.error());
  return std::move(r).value();
}

// A candidate's verdict as a dict (the per-output details only when asked for); the candidate's
// tensors and per-element errors are freed before the next one is converted.
py::object judge_outputs(const CaseJudge& j, py::handle outputs, bool with_outputs) {
  std::vector<Tensor> out;
  for (auto item : outputs) {
    auto pair = item.cast<py::tuple>();
    out.push_back(tensor_from_array(pair[0].cast<py::array>(), dtype_from_name(pair[1].cast<std::string>()),
                                    "output"));
  }
  Json v;
  {
    py::gil_scoped_release nogil;
    v = j.judge(out).to_json();
  }
  if (!with_outputs) v.erase("outputs");
  return py_from_json(v);
}

}  // namespace

void register_engine(py::module_& m) {
  py::class_<TestCase>(m, "TestCase")
      .def_readonly("op", &TestCase::op)
      .def_readonly("seed", &TestCase::seed)
      .def_readonly("master_seed", &TestCase::master_seed)
      .def_readonly("index", &TestCase::index)
      .def_property_readonly("dtype", [](const TestCase& c) { return std::string(dtype_name(c.dtype)); })
      .def_property_readonly("distribution", [](const TestCase& c) { return std::string(distribution_name(c.distribution)); })
      .def_property_readonly("dims", [](const TestCase& c) {
        py::dict d;
        for (const auto& [k, v] : c.dims) d[py::str(k)] = v;
        return d;
      })
      .def_property_readonly("attrs", [](const TestCase& c) { return py_from_json(c.attrs); })
      .def_property_readonly("layouts", [](const TestCase& c) {
        py::dict d;
        for (const auto& [k, v] : c.layouts) d[py::str(k)] = v.kind;
        return d;
      })
      .def("describe", [](const TestCase& c) { return py_from_json(c.describe()); })
      .def("inputs", [](const TestCase& c) {
        // name -> (numpy view with the case's strides, dtype name)
        py::dict d;
        for (const auto& [k, t] : c.inputs)
          d[py::str(k)] = py::make_tuple(array_of(t), std::string(dtype_name(t.dtype())));
        return d;
      }, "Each input as (numpy view sharing storage with the case's strides, dtype name); bfloat16 "
         "and fp8 as their bits (uint16 / uint8)")
      .def("snapshot", [](const TestCase& c) {
        // name -> (dtype, shape, strides, offset, storage bytes): the exact input bytes.
        py::dict d;
        for (const auto& [k, t] : c.inputs) {
          const auto& s = *t.storage();
          d[py::str(k)] = py::make_tuple(std::string(dtype_name(t.dtype())), t.shape(), t.strides(), t.offset(),
                                         py::bytes(reinterpret_cast<const char*>(s.data()), s.size()));
        }
        return d;
      });

  py::class_<CaseJudge>(m, "CaseJudge")
      .def_property_readonly("envelope", &CaseJudge::envelope)
      .def("judge", [](const CaseJudge& j, py::list outputs, bool with_outputs) {
        return judge_outputs(j, outputs, with_outputs);
      }, py::arg("outputs"), py::arg("with_outputs") = false,
         "The verdict of one candidate's outputs ([(array, dtype)], as Engine.judge takes) against the "
         "reference computed once: {passed, max_error, envelope, message}");

  py::class_<Engine>(m, "Engine")
      .def(py::init([] {
        tune_malloc_for_cases(MallocTuning::unless_environment_says);  // in-process runs make cases here
        return unwrap(Engine::create_default());
      }))
      .def("with_op",
           [](const Engine& e, const std::string& schema, const std::string& file, py::function reference,
              py::object envelope) { return engine_with_op(e, schema, file, std::move(reference), envelope); },
           py::arg("schema"), py::arg("file"), py::arg("reference"), py::arg("envelope") = py::none(),
           "A copy of this engine whose catalogue also holds the op of `schema` (its JSON text), with "
           "reference(inputs, attrs, dims, dtype) -> [value | (value, c_acc[, c_in]) per output] "
           "called in this process, and `envelope` (every dtype) when given")
      .def("builtin_kernels", &Engine::builtin_kernel_names)
      .def("envelope", [](const Engine& e, const std::string& op, const std::string& dtype) {
        return e.envelopes().get(op, dtype_from_name(dtype));
      })
      .def("cases", [](const Engine& e, const std::string& op, std::uint64_t seed, std::int64_t count,
                       py::object dtypes, const std::string& strategy, py::object dims, py::object attrs,
                       py::object vary_attrs, bool layouts, std::int64_t start, py::object present,
                       py::object precision) {
        const OpSchema* s = unwrap(e.catalogue().get(op));
        CaseGenerator gen(*s, options_from(dtypes, strategy, dims, attrs, vary_attrs, layouts, present, precision));
        if (auto st = gen.validate(); !st) throw GpuemuException(st.error());
        std::vector<TestCase> out;
        for (std::int64_t i = start; i < start + count; ++i) out.push_back(unwrap(gen.generate(seed, i)));
        return out;
      }, py::arg("op"), py::arg("seed"), py::arg("count"), py::arg("dtypes") = py::none(),
         py::arg("strategy") = "adversarial", py::arg("dims") = py::none(), py::arg("attrs") = py::none(),
         py::arg("vary_attrs") = py::none(), py::arg("layouts") = true, py::arg("start") = 0,
         py::arg("present") = py::none(), py::arg("precision") = py::none())
      .def("case_from_seed", [](const Engine& e, const std::string& op, std::uint64_t case_seed, py::object dtypes,
                                const std::string& strategy, py::object dims, py::object attrs,
                                py::object vary_attrs, bool layouts, py::object present, py::object precision) {
        const OpSchema* s = unwrap(e.catalogue().get(op));
        CaseGenerator gen(*s, options_from(dtypes, strategy, dims, attrs, vary_attrs, layouts, present, precision));
        if (auto st = gen.validate(); !st) throw GpuemuException(st.error());
        return unwrap(gen.generate_from_seed(case_seed));
      }, py::arg("op"), py::arg("case_seed"), py::arg("dtypes") = py::none(), py::arg("strategy") = "adversarial",
         py::arg("dims") = py::none(), py::arg("attrs") = py::none(), py::arg("vary_attrs") = py::none(),
         py::arg("layouts") = true, py::arg("present") = py::none(), py::arg("precision") = py::none())
      .def("judge", [](const Engine& e, const TestCase& c, py::list outputs) {
        std::vector<Tensor> out;
        for (auto item : outputs) {
          auto pair = item.cast<py::tuple>();
          out.push_back(tensor_from_array(pair[0].cast<py::array>(), dtype_from_name(pair[1].cast<std::string>()), "output"));
        }
        return py_from_json(unwrap(e.judge_case(c, out)).to_json());
      })
      .def("case_judge", [](const Engine& e, const TestCase& c) {
        py::gil_scoped_release nogil;
        return unwrap(e.case_judge(c));
      }, py::arg("case"),
         "The case's fp64 reference, computed once: CaseJudge.judge(outputs) then judges any number "
         "of candidate outputs as judge(case, outputs) would")
      .def("judge_many", [](const Engine& e, const TestCase& c, py::list candidates, bool with_outputs) {
        const CaseJudge j = unwrap(e.case_judge(c));
        py::list res;
        for (auto outputs : candidates) res.append(judge_outputs(j, outputs, with_outputs));
        return res;
      }, py::arg("case"), py::arg("candidates"), py::arg("with_outputs") = false,
         "The verdict of each candidate (a list of (array, dtype) outputs, as judge takes) for one case, "
         "against one fp64 reference computation: [{passed, max_error, envelope, message}]; "
         "with_outputs: each verdict's per-output details too")
      .def("fuzz", [](const Engine& e, const std::string& op, py::function kernel, std::uint64_t seed,
                      std::int64_t iterations, py::object dtypes, const std::string& strategy, py::object dims,
                      py::object attrs, py::object vary_attrs, bool layouts, bool fail_fast, bool diagnose,
                      const std::string& repro_prefix, py::object present, py::object precision,
                      int minimize, std::int64_t start_index, int diagnose_limit) {
        FuzzRequest req;
        req.op = op;
        req.options = options_from(dtypes, strategy, dims, attrs, vary_attrs, layouts, present, precision);
        req.seed = seed;
        req.iterations = iterations;
        req.fail_fast = fail_fast;
        req.diagnose = diagnose;
        req.repro_prefix = repro_prefix;
        req.minimize = std::max(minimize, 0);
        req.start_index = std::max<std::int64_t>(start_index, 0);
        req.diagnose_limit = std::max(diagnose_limit, 0);
        return py_from_json(unwrap(e.fuzz(req, runner_of(kernel))).to_json());
      }, py::arg("op"), py::arg("kernel"), py::arg("seed"), py::arg("iterations") = 100,
         py::arg("dtypes") = py::none(), py::arg("strategy") = "adversarial", py::arg("dims") = py::none(),
         py::arg("attrs") = py::none(), py::arg("vary_attrs") = py::none(), py::arg("layouts") = true,
         py::arg("fail_fast") = false, py::arg("diagnose") = true, py::arg("repro_prefix") = "",
         py::arg("present") = py::none(), py::arg("precision") = py::none(), py::arg("minimize") = 0,
         py::arg("start_index") = 0, py::arg("diagnose_limit") = 3,
         "One fuzz run (Engine::fuzz): the report's JSON; `minimize`: the first that many failures "
         "are shrunk with the same kernel (each failure's `minimized`); `start_index`: the run judges "
         "cases [start_index, start_index + iterations) of the seed; `diagnose_limit`: failures diagnosed")
      .def("minimize", [](const Engine& e, const TestCase& c, py::function kernel, py::object dims,
                          py::object layouts_flag, int max_evaluations, py::object present, py::object precision) {
        FuzzOptions o = options_from(py::none(), std::string(distribution_name(c.distribution)), dims, py::none(),
                                     py::none(), layouts_flag.is_none() ? true : layouts_flag.cast<bool>(), present,
                                     precision);
        return py_from_json(unwrap(e.minimize(c.op, o, c, runner_of(kernel), max_evaluations)).to_json());
      }, py::arg("case"), py::arg("kernel"), py::arg("dims") = py::none(), py::arg("layouts") = py::none(),
         py::arg("max_evaluations") = 200, py::arg("present") = py::none(), py::arg("precision") = py::none())
      .def("set_envelope", [](Engine& e, const std::string& op, const std::string& dtype, double envelope) {
        e.envelopes().set(op, dtype_from_name(dtype), envelope);
      }, py::arg("op"), py::arg("dtype"), py::arg("envelope"),
         "Overrides the envelope of (op, dtype), e.g. with the one a daemon judged a case against")
      .def("diagnose", [](const Engine& e, const TestCase& c, py::object outputs, py::function kernel,
                          py::object dtypes, const std::string& strategy, py::object dims, py::object attrs,
                          py::object vary_attrs, bool layouts, const std::string& kernel_error, py::object present,
                          py::object precision) {
        // The failing case judged here (its verdict keeps the per-element errors the static rules
        // read), then the probes: the kernel re-run on variants of the case.
        FuzzOptions o = options_from(dtypes, strategy, dims, attrs, vary_attrs, layouts, present, precision);
        CaseResult cr;
        cr.test_case = c;
        cr.kernel_error = kernel_error;
        if (kernel_error.empty()) {
          std::vector<Tensor> out;
          for (auto item : outputs) {
            auto pair = item.cast<py::tuple>();
            out.push_back(tensor_from_array(pair[0].cast<py::array>(), dtype_from_name(pair[1].cast<std::string>()),
                                            "output"));
          }
          cr.verdict = unwrap(e.judge_case(c, out));
        } else {
          cr.verdict.passed = false;
          cr.verdict.envelope = e.envelopes().get(c.op, c.dtype);
          cr.verdict.message = "the kernel raised: " + kernel_error;
        }
        py::dict res;
        res["passed"] = cr.verdict.passed;
        res["verdict"] = py_from_json(cr.verdict.to_json());
        if (!cr.verdict.passed) {
          const KernelRunner runner = runner_of(kernel);
          res["diagnosis"] = py_from_json(e.diagnose(c.op, o, cr, &runner).to_json());
        }
        return res;
      }, py::arg("case"), py::arg("outputs"), py::arg("kernel"), py::arg("dtypes") = py::none(),
         py::arg("strategy") = "adversarial", py::arg("dims") = py::none(), py::arg("attrs") = py::none(),
         py::arg("vary_attrs") = py::none(), py::arg("layouts") = true, py::arg("kernel_error") = "",
         py::arg("present") = py::none(), py::arg("precision") = py::none(),
         "Judges the kernel's outputs for a case and, when they fail, diagnoses the failure by re-running "
         "`kernel` on the engine's probes: {passed, verdict, diagnosis?}")
      .def("calibrate", [](const Engine& e, const std::string& op, const std::string& dtype, std::int64_t cases,
                           std::uint64_t seed, py::object controls) {
        std::vector<std::pair<std::string, KernelRunner>> ks;
        if (!controls.is_none())
          for (auto [k, v] : controls.cast<py::dict>()) ks.emplace_back(k.cast<std::string>(), runner_of(v.cast<py::function>()));
        return py_from_json(unwrap(e.calibrate(op, dtype_from_name(dtype), cases, seed, ks)).to_json());
      }, py::arg("op"), py::arg("dtype"), py::arg("cases") = 200, py::arg("seed") = 0xC0FFEE,
         py::arg("controls") = py::none());
}

}  // namespace gpuemu::python
