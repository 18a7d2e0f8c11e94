// libFuzzer targets over text inputs, one per parser a user's file or a request reaches:
//   FUZZ_SCHEMA   op schemas (parse_op_schema: schemas/ops/*.json, custom ops' schema files)
//   FUZZ_PTX      PTX modules (lint::parse_ptx: what `gpuemu lint` reads from Triton's cache)
//   FUZZ_TOML     gpuemu.toml (project::parse_project_config)
// Each must return a value or an error for any text; a crash, a sanitizer report or an exception
// escaping the parser aborts the run.
#include <cstdint>
#include <string>

#if defined(FUZZ_SCHEMA)
#include "gpuemu/engine/op_schema.hpp"
#elif defined(FUZZ_PTX)
#include "lint/ptx_parser.hpp"
#elif defined(FUZZ_TOML)
#include <gpuemu/project/project_config.hpp>
#else
#error "define FUZZ_SCHEMA, FUZZ_PTX or FUZZ_TOML"
#endif

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
#if defined(FUZZ_SCHEMA)
  (void)gpuemu::parse_op_schema(text, "fuzz.json");
#elif defined(FUZZ_PTX)
  (void)gpuemu::lint::parse_ptx(text);
#else
  (void)gpuemu::project::parse_project_config(text, "/nonexistent/gpuemu.toml");
#endif
  return 0;
}
