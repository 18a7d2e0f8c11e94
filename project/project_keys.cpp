#include <gpuemu/project/project_keys.hpp>

namespace gpuemu::project {

const std::vector<ProjectTable>& project_tables() {
  using V = KeyValue;
  static const std::vector<ProjectTable> k_tables = {
      {"",
       "gpuemu.toml: the ops of this project that `gpuemu ci` fuzzes (docs/ci.md)",
       {{"project", V::table, "[project]: the project's name", "{ name = \"my-kernels\" }"},
        {"defaults", V::table, "[defaults]: apply to every [[op]] that does not set them", "{}"},
        {"op", V::table, "[[op]]: one per kernel under test", "[]"},
        {"custom_ops", V::table, "[custom_ops.NAME]: your own op (docs/custom-ops.md)", "{}"},
        {"lint", V::table, "[lint]: the policy of `gpuemu lint` (docs/lint.md)", "{}"},
        {"ci", V::table, "[ci]: what `gpuemu ci` runs by default", "{}"}}},
      {"project",
       "[project]: the project's name, shown in reports and the JUnit suite name",
       {{"name", V::string, "the project's name, shown in reports and the JUnit suite name",
         "\"my-kernels\""}}},
      {"defaults",
       "[defaults]: apply to every [[op]] that does not set them",
       {{"iterations", V::positive_int, "cases per op and dtype (default 100)", "100"},
        {"strategy", V::strategy,
         "how values are drawn: regular | boundary | adversarial | special (docs/fuzzing.md)",
         "\"adversarial\""},
        {"dtypes", V::dtype_list, "the dtypes to fuzz (default: every dtype the op allows)",
         "[\"float32\"]"},
        {"seed", V::non_negative_int,
         "master seed (default: a fresh random seed per op x dtype, recorded in the reports)",
         "1234"},
        {"framework", V::framework, "what script kernels receive: numpy | torch", "\"numpy\""},
        {"timeout_s", V::positive_number, "seconds a script kernel may take per case", "60.0"}}},
      {"op",
       "[[op]]: one kernel under test, fuzzed once per dtype by `gpuemu ci`",
       {{"name", V::op_name, "a catalogue op (gpuemu ops list) or a [custom_ops.NAME] - required",
         "\"softmax\""},
        {"script", V::script_ref,
         "the kernel: a Python function FILE.py:FUNC, relative to this file "
         "(docs/script-kernels.md); exactly one of script and kernel",
         "\"kernels/softmax.py:softmax\""},
        {"kernel", V::kernel_name, "the kernel: a built-in emulated kernel of the op",
         "\"fp32_online\""},
        {"framework", V::framework, "what the script receives: numpy | torch", "\"numpy\""},
        {"python", V::string, "the interpreter of the script (default: the daemon's choice)",
         "\"/usr/bin/python3\""},
        {"timeout_s", V::positive_number, "seconds the script may take per case", "30.0"},
        {"dtypes", V::dtype_list, "the dtypes to fuzz (default: [defaults], else every dtype)",
         "[\"float16\", \"bfloat16\"]"},
        {"iterations", V::positive_int, "cases per dtype", "200"},
        {"strategy", V::strategy, "regular | boundary | adversarial | special", "\"boundary\""},
        {"seed", V::non_negative_int, "master seed of this op's runs", "7"},
        {"dims", V::table, "restrict dims to these sizes, like --dims N=64,129,4097",
         "{ N = [64, 129, 4097] }"},
        {"attrs", V::table, "pin attrs, like --attr dim=-1", "{ dim = -1 }"},
        {"vary_attrs", V::string_list, "vary these attrs over their domain, like --vary-attr",
         "[\"dim\"]"},
        {"layouts", V::boolean, "false: contiguous inputs only, like --no-layouts", "true"},
        {"with", V::string_list,
         "optional inputs the kernel always takes (always generated), like --with weight,bias",
         "[\"weight\", \"bias\"]"},
        {"without", V::string_list,
         "optional inputs the kernel never takes (never generated), like --without bias",
         "[\"bias\"]"},
        {"precision", V::precision,
         "reduced-precision GEMM operands declared on purpose: ieee | tf32 | tf32x3 | bf16x3, or "
         "{ gemm = \"tf32\" } per op or family (docs/error-model.md), like --precision tf32",
         "\"tf32\""},
        {"envelope", V::envelope,
         "override the envelope of this op: X for all dtypes or { float16 = X } (floor 2; "
         "prefer gpuemu calibrate)",
         "6.0"}}},
      {"custom_ops.*",
       "[custom_ops.NAME]: your own op, a schema plus a float64 reference "
       "(docs/custom-ops.md), or a gpuemu.torch_op (docs/torch-ops.md)",
       {{"schema", V::string,
         "the op's JSON schema (schemas/op.schema.json format), checked on load",
         "\"ops/my_op.json\""},
        {"reference", V::script_ref,
         "the float64 reference FILE.py:FUNC (default: the schema's \"script:FILE.py:FUNC\")",
         "\"ops/ref.py:reference\""},
        {"torch_op", V::script_ref,
         "a gpuemu.torch_op FILE.py:NAME, in place of schema and reference: its schema is "
         "inferred, its reference and error bound derived (docs/torch-ops.md)",
         "\"ops/fused.py:OP\""},
        {"control", V::script_ref,
         "a correct kernel FILE.py:FUNC that `gpuemu calibrate NAME` calibrates against",
         "\"kernels.py:good\""},
        {"python", V::string, "the interpreter of the reference and the control",
         "\"/usr/bin/python3\""},
        {"timeout_s", V::positive_number, "seconds the reference may take per case", "60.0"}}},
      {"ci",
       "[ci]: what `gpuemu ci` runs by default",
       {{"preset", V::string, "the preset without --quick/--thorough/--preset", "\"default\""},
        {"minimize", V::boolean, "minimise the first failure of each op x dtype (slower)", "false"},
        {"presets", V::table, "[ci.presets.NAME]: your own presets", "{}"},
        {"lint_paths", V::string_list,
         "gpuemu ci also runs gpuemu lint on these (relative to this file)", "[\"build/kernels\"]"},
        {"lint_baseline", V::string, "... against this baseline file", "\"lint-baseline.json\""},
        {"lint_baseline_tag", V::string,
         "... or against a baseline stored in the daemon (gpuemu lint --save-baseline-tag)",
         "\"main\""}}},
      {"ci.presets.*",
       "[ci.presets.NAME]: a preset: iterations x scale, at least min_iterations",
       {{"scale", V::positive_number, "iterations x scale (rounded)", "10.0"},
        {"min_iterations", V::positive_int, "but at least this many", "50"}}},
      {"lint",
       "[lint]: the policy of `gpuemu lint` (docs/lint.md), checked by the lint reader",
       {}},
  };
  return k_tables;
}

const ProjectTable* find_project_table(std::string_view name) {
  for (const auto& t : project_tables())
    if (t.name == name) return &t;
  return nullptr;
}

const ProjectKey* find_project_key(std::string_view table, std::string_view key) {
  const ProjectTable* t = find_project_table(table);
  if (t == nullptr) return nullptr;
  for (const auto& k : t->keys)
    if (k.name == key) return &k;
  return nullptr;
}

std::vector<std::string_view> key_value_choices(KeyValue value) {
  switch (value) {
    case KeyValue::strategy:
      return {"regular", "boundary", "adversarial", "special"};
    case KeyValue::framework:
      return {"numpy", "torch"};
    case KeyValue::boolean:
      return {"true", "false"};
    case KeyValue::precision:
      return {"ieee", "tf32", "tf32x3", "bf16x3"};
    default:
      return {};
  }
}

}  // namespace gpuemu::project
