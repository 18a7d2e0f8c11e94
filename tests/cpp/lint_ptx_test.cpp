// The PTX reader: instruction classes, line info, errors with line numbers, and a fuzz over
// mutated real PTX (Triton's output, recorded on the GPU machine: tests/data/lint/recorded/).
#include "lint/instruction_class.hpp"
#include "lint/ptx_parser.hpp"
#include "lint_test_support.hpp"

#include <gtest/gtest.h>

#include <random>

namespace gpuemu::lint {
namespace {

using testing::lint_data_dir;
using testing::read_fixture_text;

ClassSet bits(std::initializer_list<InstructionClass> classes) {
  ClassSet set = 0;
  for (InstructionClass c : classes) set |= class_bit(c);
  return set;
}

TEST(LintInstructionClass, ClassifiesOpcodes) {
  using C = InstructionClass;
  struct Case {
    const char* opcode;
    ClassSet expected;
  } cases[] = {
      {"ld.global.nc.v4.f32", bits({C::ld_global})},
      {"ldu.global.u32", bits({C::ld_global})},
      {"ld.relaxed.gpu.global.u32", bits({C::ld_global})},
      {"ld.shared::cta.u32", bits({C::ld_shared})},
      {"ld.param.u64", 0},
      {"ld.u32", bits({C::ld_generic})},
      {"st.u32", bits({C::st_generic})},
      {"st.local.v4.f32", bits({C::st_local})},
      {"ld.local.f32", bits({C::ld_local})},
      {"ld.const.f32", bits({C::ld_const})},
      {"ldmatrix.sync.aligned.m8n8.x4.shared.b16", bits({C::ld_shared})},
      {"stmatrix.sync.aligned.m8n8.x4.shared.b16", bits({C::st_shared})},
      {"wmma.load.a.sync.aligned.row.m16n16k16.global.f16", bits({C::ld_global})},
      {"wmma.mma.sync.aligned.row.col.m16n16k16.f32.f32", bits({C::mma})},
      {"mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", bits({C::mma})},
      {"wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16", bits({C::wgmma})},
      {"wgmma.fence.sync.aligned", 0},
      {"tcgen05.mma.cta_group::1.kind::f16", bits({C::mma})},
      {"cp.async.ca.shared.global", bits({C::cp_async})},
      {"cp.async.commit_group", 0},
      {"cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes",
       bits({C::tma})},
      {"cp.async.bulk.commit_group", 0},
      {"fma.rn.f32", bits({C::fma})},
      {"fma.rn.f64", bits({C::fma, C::fp64})},
      {"mad.lo.s32", 0},
      {"mad.rn.f32", bits({C::fma})},
      {"ex2.approx.ftz.f32", bits({C::sfu})},
      {"rsqrt.approx.f32", bits({C::sfu})},
      {"tanh.approx.f32", bits({C::sfu})},
      {"rcp.rn.f64", bits({C::sfu, C::fp64})},
      {"cvt.rn.f32.f64", bits({C::cvt, C::fp64})},
      {"cvta.to.global.u64", 0},
      {"bar.sync", bits({C::barrier})},
      {"barrier.sync.aligned", bits({C::barrier})},
      {"mbarrier.try_wait.parity.shared::cta.b64", bits({C::mbarrier})},
      {"bra.uni", bits({C::branch})},
      {"brx.idx", bits({C::branch})},
      {"call.uni", bits({C::call})},
      {"atom.global.add.f32", bits({C::atomic})},
      {"red.global.add.u32", bits({C::atomic})},
      {"redux.sync.add.s32", 0},
      {"shfl.sync.bfly.b32", bits({C::shfl})},
      {"ld.global.f64", bits({C::ld_global})},  // moving a double is not FP64 arithmetic
      {"mov.f64", 0},
      {"setp.lt.f64", bits({C::fp64})},
  };
  for (const Case& c : cases) EXPECT_EQ(classify_opcode(c.opcode), c.expected) << c.opcode;
}

TEST(LintInstructionClass, NamesRoundTrip) {
  for (int i = 0; i < k_instruction_class_count; ++i) {
    auto cls = static_cast<InstructionClass>(i);
    EXPECT_EQ(instruction_class_from_name(instruction_class_name(cls)), cls);
  }
  EXPECT_FALSE(instruction_class_from_name("local_memory"));
}

constexpr const char* k_small_ptx = R"(//
// hand-written, in the shapes nvcc and Triton emit
.version 8.7
.target sm_90a, debug
.address_size 64
.extern .shared .align 16 .b8 global_smem[];
.global .align 4 .u32 table[2] = {1, 2};
.func (.param .b32 func_retval0) helper(.param .b32 x)
{
	ld.param.b32 	%r1, [x];
	st.param.b32 	[func_retval0], %r1;
	ret;
}
.visible .entry kern(
	.param .u64 kern_param_0
)
.reqntid 128
{
	.local .align 16 .b8 	__local_depot0[64];
	.reg .pred 	%p<3>;
	.reg .b32 	%r<10>, %extra;
	.loc	1 10 3
$L__func_begin0:
	ld.global.v2.f32 	{%f1, %f2}, [%rd1];
	@%p1 bra 	$L__BB0_2;
	.loc	2 84 3, function_name $L__info_string0, inlined_at 1 12 5
	fma.rn.f64 	%fd1, %fd2, %fd3, %fd4; /* trailing comment */
$L__BB0_2:  st.local.f32 [%rd2], %f1;
	// begin inline asm
	{
	.reg .pred %p9;
	@!%p9 atom.global.add.f32 %f3, [%rd3], %f1;
	}
	// end inline asm
	{ // call scope
	.param .b32 param0;
	call.uni (retval0),
	helper,
	(
	param0
	);
	}
	ret;
}
	.file	1 "/src/kern.cu"
	.file	2 "/usr/include/cuda_fp16.hpp", 1700000000, 4096
	.section	.debug_abbrev
	{
.b8 1
.b8 17
	}
	.section	.debug_macinfo	{	}
)";

TEST(LintPtxParser, ParsesFunctionsMixAndLineInfo) {
  auto parsed = parse_ptx(k_small_ptx);
  ASSERT_TRUE(parsed.ok()) << parsed.error().message;
  const PtxModule& m = *parsed;
  EXPECT_EQ(m.version, "8.7");
  EXPECT_EQ(m.target, "sm_90a");
  ASSERT_EQ(m.functions.size(), 2u);
  EXPECT_EQ(m.functions[0].name, "helper");
  EXPECT_FALSE(m.functions[0].is_entry);
  const PtxFunction& k = m.functions[1];
  EXPECT_EQ(k.name, "kern");
  EXPECT_TRUE(k.is_entry);
  EXPECT_EQ(k.line, 14);
  EXPECT_EQ(k.instructions, 7);  // ld, bra, fma, st, atom, call, ret
  EXPECT_EQ(k.local_bytes, 64);
  EXPECT_EQ(k.virtual_registers, 3 + 10 + 1 + 1);
  using C = InstructionClass;
  EXPECT_EQ(k.mix.count(C::ld_global), 1);
  EXPECT_EQ(k.mix.count(C::branch), 1);
  EXPECT_EQ(k.mix.count(C::fma), 1);
  EXPECT_EQ(k.mix.count(C::fp64), 1);
  EXPECT_EQ(k.mix.count(C::st_local), 1);
  EXPECT_EQ(k.mix.count(C::atomic), 1);
  EXPECT_EQ(k.mix.count(C::call), 1);
  EXPECT_EQ(k.mix.count(C::predicated), 2);
  // .file directives come after the function and still resolve; inlined_at wins over the callee.
  ASSERT_TRUE(k.first_loc);
  EXPECT_EQ(m.resolve(*k.first_loc), (SourceLocation{"/src/kern.cu", 10, 3}));
  EXPECT_EQ(m.resolve(k.class_locs.at(C::ld_global)), (SourceLocation{"/src/kern.cu", 10, 3}));
  EXPECT_EQ(m.resolve(k.class_locs.at(C::fp64)), (SourceLocation{"/src/kern.cu", 12, 5}));
  EXPECT_FALSE(m.resolve(PtxLoc{7, 1, 1}));
}

// The error names the line; `expected_line` 0 means "any line".
void expect_malformed(const std::string& ptx, int expected_line, const std::string& what) {
  auto parsed = parse_ptx(ptx);
  ASSERT_FALSE(parsed.ok()) << "accepted: " << ptx;
  EXPECT_EQ(parsed.error().code, ErrorCode::invalid_argument);
  std::string prefix = "malformed PTX: line " + std::to_string(expected_line) + ": ";
  EXPECT_EQ(parsed.error().message.rfind(prefix, 0), 0u) << parsed.error().message;
  EXPECT_NE(parsed.error().message.find(what), std::string::npos) << parsed.error().message;
}

TEST(LintPtxParser, ReportsMalformedInputWithLineNumbers) {
  const std::string head = ".version 8.0\n.target sm_80\n.address_size 64\n";
  expect_malformed(".target sm_80\n", 1, "no .version");
  expect_malformed(".version 8.0\n", 1, "no .target");
  expect_malformed(head + ".visible .entry k()\n{\n\tret;\n", 4, "unterminated body of 'k'");
  expect_malformed(head + "mov.u32 %r1, 1;\n", 4, "unexpected 'mov.u32' at module level");
  expect_malformed(head + ".visible .entry k()\n{\n\tret\n}\n", 6, "without ';' before '}'");
  expect_malformed(head + "}\n", 4, "unbalanced '}'");
  expect_malformed(head + ".visible .entry k()\n{\n.loc 1 x 2\n}\n", 6, "malformed .loc");
  expect_malformed(head + ".visible .entry k()\n{\n\tre\x01t;\n}\n", 6, "binary data");
  expect_malformed(head + ".visible .entry k()\n{\n\t%r1 = 2;\n}\n", 6, "malformed instruction");
  expect_malformed(head + ".visible .entry k()\n{\n.reg .b32 %r<99999999999999999>;\n}\n", 6,
                   "bad .reg count");
  expect_malformed(head + "/* never closed\n", 4, "unterminated /* comment");
  expect_malformed(head + ".section .debug_info {\n.b8 1\n", 5, "unterminated .section");
}

TEST(LintPtxParser, ReadsRealTritonPtx) {
  auto dir = lint_data_dir() / "recorded" / "triton_cache" /
             "EYO3UHXTZDN3YQAK2L5DG4RFG3GLLOKOTPXYFQZXVZE5N33SBSHA";
  std::string text = read_fixture_text(dir / "matmul_kernel.ptx");
  auto parsed = parse_ptx(text);
  ASSERT_TRUE(parsed.ok()) << parsed.error().message;
  EXPECT_EQ(parsed->target, "sm_90a");
  ASSERT_EQ(parsed->functions.size(), 1u);
  const PtxFunction& f = parsed->functions[0];
  EXPECT_EQ(f.name, "matmul_kernel");
  // Independent count: statements that start with the opcode, one per line in this file.
  int wgmma = 0, bar = 0;
  for (std::size_t at = text.find("\twgmma.mma_async"); at != std::string::npos;
       at = text.find("\twgmma.mma_async", at + 1))
    ++wgmma;
  for (std::size_t at = text.find("\tbar.sync"); at != std::string::npos;
       at = text.find("\tbar.sync", at + 1))
    ++bar;
  EXPECT_GT(wgmma, 0);
  EXPECT_EQ(f.mix.count(InstructionClass::wgmma), wgmma);
  EXPECT_EQ(f.mix.count(InstructionClass::barrier), bar);
  ASSERT_TRUE(f.first_loc);
  auto loc = parsed->resolve(*f.first_loc);
  ASSERT_TRUE(loc);
  EXPECT_EQ(loc->file, "/work/main/build/lint-device/triton_kernels.py");
  EXPECT_EQ(loc->line,
            testing::line_of(read_fixture_text(lint_data_dir() / "recorded" / "triton_kernels.py"),
                             "def matmul_kernel"));
}

// Mutations of one real PTX file: every one must parse or fail with a located error.
class PtxMutator {
 public:
  explicit PtxMutator(std::string original) : m_original(std::move(original)) {}

  std::vector<std::string> all(unsigned seed) {
    std::mt19937 rng(seed);
    std::vector<std::string> out;
    for (int i = 0; i < 150; ++i) out.push_back(m_original.substr(0, m_original.size() * i / 150));
    const std::string specials = "{};:\"@.%/*\n\0\xff";
    for (int i = 0; i < 300; ++i) {
      std::string s = m_original;
      int flips = 1 + static_cast<int>(rng() % 8);
      for (int f = 0; f < flips; ++f) {
        std::size_t at = rng() % s.size();
        s[at] = (rng() % 2) ? specials[rng() % specials.size()] : static_cast<char>(rng() % 256);
      }
      out.push_back(std::move(s));
    }
    std::vector<std::string> lines = split_lines();
    for (int i = 0; i < 200; ++i) {
      std::vector<std::string> copy = lines;
      int edits = 1 + static_cast<int>(rng() % 4);
      for (int e = 0; e < edits && !copy.empty(); ++e) {
        std::size_t at = rng() % copy.size();
        if (i % 2 == 0)
          copy.erase(copy.begin() + static_cast<std::ptrdiff_t>(at));
        else
          copy.insert(copy.begin() + static_cast<std::ptrdiff_t>(at), copy[rng() % copy.size()]);
      }
      std::string joined;
      for (const std::string& l : copy) joined += l + "\n";
      out.push_back(std::move(joined));
    }
    return out;
  }

 private:
  std::vector<std::string> split_lines() const {
    std::vector<std::string> lines;
    std::size_t start = 0;
    while (start < m_original.size()) {
      std::size_t end = m_original.find('\n', start);
      if (end == std::string::npos) end = m_original.size();
      lines.push_back(m_original.substr(start, end - start));
      start = end + 1;
    }
    return lines;
  }
  std::string m_original;
};

TEST(LintPtxFuzz, MutatedRealPtxParsesOrFailsCleanly) {
  auto cache = lint_data_dir() / "recorded" / "triton_cache";
  int accepted = 0, rejected = 0;
  for (const char* file :
       {"ABIGZCHROZWI4QLRNI7TE3T3KBC6UD6GWQ73HKM5I75BV5H4X7WQ/add_kernel.ptx",
        "EYO3UHXTZDN3YQAK2L5DG4RFG3GLLOKOTPXYFQZXVZE5N33SBSHA/matmul_kernel.ptx"}) {
    std::string original = read_fixture_text(cache / file);
    ASSERT_FALSE(original.empty());
    std::vector<std::string> mutants = PtxMutator(original).all(42);
    for (std::size_t i = 0; i<mutants.size(); i += original.size()> 20000 ? 4 : 1) {
      const std::string& mutant = mutants[i];
      auto parsed = parse_ptx(mutant);
      if (parsed.ok()) {
        ++accepted;
        continue;
      }
      ++rejected;
      EXPECT_EQ(parsed.error().code, ErrorCode::invalid_argument);
      EXPECT_EQ(parsed.error().message.rfind("malformed PTX: line ", 0), 0u)
          << parsed.error().message;
      EXPECT_EQ(parsed.error().message.find('\n'), std::string::npos) << "one line";
    }
  }
  // Both outcomes must occur, or the mutations are not exercising the parser.
  EXPECT_GT(accepted, 50);
  EXPECT_GT(rejected, 50);
}

}  // namespace
}  // namespace gpuemu::lint
