// Internal: the SASS opcode histogram from a disassembly listing. Both listings are understood:
//  - `cuobjdump -sass`: "Function : <name>" headers, then "/*0040*/  @P0 IADD3 R1, ... ;".
//  - `nvdisasm`: ".text.<name>:" labels, then the same instruction lines; other sections' data
//    lines ("/*0000*/ .byte 0x04, ...") are not instructions.
// Opcodes are counted by mnemonic without modifiers ("IMAD.WIDE.U32" counts as "IMAD"); NOPs
// (alignment padding) are not counted.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

namespace gpuemu::lint {

using OpcodeHistogram = std::map<std::string, std::int64_t>;

// Kernel (or function) name -> its opcode histogram.
std::map<std::string, OpcodeHistogram> parse_sass_listing(std::string_view listing);

}  // namespace gpuemu::lint
