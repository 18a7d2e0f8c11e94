// gpuemu.toml's one reader (project/project_config.cpp): the repro prefix of an [[op]], which
// `gpuemu ci`, the language server's Run and Python's run_registered all take from it.
#include <gpuemu/project/project_config.hpp>

#include "lsp/op_runner.hpp"

#include <gtest/gtest.h>

namespace gpuemu::project {
namespace {

constexpr const char* k_config = R"([defaults]
strategy = "boundary"
dtypes = ["float32", "bfloat16"]

[[op]]
name = "softmax"
kernel = "fp32_online"
dims = { N = [65, 7] }
attrs = { dim = -1 }
vary_attrs = ["dim"]
layouts = false
without = ["mask"]
precision = "tf32"
)";

TEST(ProjectConfig, ReproPrefixCarriesEveryOptionOfTheEntry) {
  auto cfg = parse_project_config(k_config, "/nonexistent/gpuemu.toml");
  ASSERT_TRUE(cfg) << cfg.error().message;
  const ProjectOp& op = cfg->ops.at(0);
  EXPECT_EQ(op.repro_prefix({"float32"}),
            "gpuemu fuzz softmax --kernel fp32_online --strategy boundary --dtype float32 "
            "--dims N=65,7 --attr dim=-1 --vary-attr dim --no-layouts --without mask "
            "--precision softmax=tf32");
  EXPECT_EQ(op.repro_prefix({}),
            "gpuemu fuzz softmax --kernel fp32_online --strategy boundary --dims N=65,7 --attr "
            "dim=-1 --vary-attr dim --no-layouts --without mask --precision softmax=tf32");
  // The editor's Run replays with the entry's own options too (it named only op and kernel).
  EXPECT_EQ(lsp::fuzz_params(*cfg, op, {}).repro_prefix, op.repro_prefix(op.dtypes));
}

TEST(ProjectConfig, ErrorsNameTheFileAndLine) {
  auto cfg = parse_project_config("[[op]]\nname = \"softmax\"\nkernel = \"k\"\ncolour = 1\n",
                                  "/p/gpuemu.toml");
  ASSERT_FALSE(cfg);
  EXPECT_EQ(cfg.error().code, ErrorCode::invalid_argument);
  EXPECT_EQ(cfg.error().message.rfind("/p/gpuemu.toml:4: unknown key 'colour' in [[op]] (known: ", 0), 0u)
      << cfg.error().message;
}

}  // namespace
}  // namespace gpuemu::project
