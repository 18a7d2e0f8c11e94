// Custom ops' Python references (docs/custom-ops.md): a user's function computing an op in
// float64, run in the same long-lived subprocess as script kernels (script_process.hpp) and bound
// to the op's schema as its OpSchema::external_reference, so the engine's fuzzing, judging,
// diagnosis, minimisation and calibration call it wherever they call a built-in reference.
//
// The function gets every input by name as float64 (exactly the values the kernel received;
// integer and bool inputs keep their dtype), every attr by name, None for an absent optional input.
// It returns one float64 array per schema output (in schema order) or, to give the error model a
// condition term, those followed by one more array per output: the magnitude the kernel may
// accumulate in fp32 at each element (c_acc, docs/error-model.md; e.g. sum(|x|) for a sum).
#pragma once

#include "gpuemu/engine/op.hpp"
#include "gpuemu/script/script_kernel.hpp"

#include <memory>

namespace gpuemu::script {

// Starts the reference's process (spec.function in spec.script). Errors as make_script_kernel's,
// naming a "reference script". Each call's errors: the function raised or returned the wrong
// number or shape of arrays (invalid_argument), timeout, protocol_error.
Result<std::shared_ptr<const ExternalReference>> make_script_reference(ScriptKernelSpec spec);

// The reference of an op made from PyTorch code (docs/torch-ops.md, "In gpuemu.toml"):
// spec.function names a gpuemu.torch_op in spec.script, run by the runner in its torch_op mode.
// Each case returns per output its value, c_acc and c_in (an infinite or NaN bound: unresolved,
// the element is not judged). Each request carries `schema_text`, the schema the op had when the
// run (or the stored failure) was made: an op whose file now infers another schema is refused.
Result<std::shared_ptr<const ExternalReference>> make_torch_op_reference(ScriptKernelSpec spec,
                                                                        std::string schema_text);

}  // namespace gpuemu::script
