// Where a kernel's `def` is in a Python file's current text. The Python client records the line
// inspect gives (a decorated function's first decorator), script kernels record no line at all,
// and the file may have been edited since: the nearest `def NAME(` wins, searching from the
// recorded line on first.
#pragma once

#include "lsp/lsp_types.hpp"

#include <optional>
#include <string>

namespace gpuemu::lsp {

// `name` may be a qualified name ("Model.forward", "outer.<locals>.kernel"): its last component is
// searched. `recorded_line` is 1-based, 0 when unknown. The range covers the function's name on
// its `def` line; nullopt when the text has no such def.
std::optional<Range> locate_def(const std::string& text, const std::string& name,
                                int recorded_line);

// The text of a file on disk ("" when it cannot be read).
std::string read_file_text(const std::string& path);

}  // namespace gpuemu::lsp
