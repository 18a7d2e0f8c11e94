// A line-level view of a gpuemu.toml that still works while the user types (the file need not
// parse): which table each line is in, and where a line's key and value are. Table names are
// normalised as project_keys.hpp names them: "op" for [[op]], "custom_ops.*" for
// [custom_ops.NAME], "ci.presets.*" for [ci.presets.NAME], "" above the first header.
#pragma once

#include <string>
#include <vector>

namespace gpuemu::lsp {

struct TomlLine {
  std::string text;
  std::string table;        // the normalised table this line belongs to
  bool header = false;      // "[...]" or "[[...]]"
  std::string header_name;  // as written, without brackets
  std::string key;          // "" when the line has no "key ="
  int key_begin = -1, key_end = -1;
  int equals = -1;  // column of '=' (-1: none)
};

std::vector<TomlLine> scan_toml(const std::string& text);

// "op" for "op", "custom_ops.*" for "custom_ops.my_op", "ci.presets.*" for "ci.presets.nightly".
std::string normalise_table(const std::string& header_name);

// The value of `key = "..."` in the table that contains line `line` (same [[op]] block): ""
// when there is none. Used to complete a [[op]]'s kernel from its name.
std::string string_value_in_block(const std::vector<TomlLine>& lines, int line,
                                  const std::string& key);

}  // namespace gpuemu::lsp
