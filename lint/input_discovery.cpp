#include "input_discovery.hpp"

#include "file_util.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>

namespace gpuemu::lint {
namespace fs = std::filesystem;

namespace {

struct StemGroup {
  fs::path ptx, cubin, json;
};

// Reads Triton metadata into the unit; false when the JSON is not Triton's.
bool read_triton_metadata(const fs::path& json_path, InputUnit& unit) {
  auto text = read_text_file(json_path);
  if (!text) return false;
  nlohmann::json meta = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!meta.is_object() || !meta.contains("name") || !meta["name"].is_string()) return false;
  unit.kernel_name = meta["name"].get<std::string>();
  auto number = [&](const char* key) -> std::string {
    auto it = meta.find(key);
    return it != meta.end() && it->is_number_integer() ? std::to_string(it->get<long long>()) : "";
  };
  std::string warps = number("num_warps"), stages = number("num_stages"), ctas = number("num_ctas");
  if (!warps.empty()) unit.variant += "w" + warps;
  if (!stages.empty()) unit.variant += "s" + stages;
  if (!ctas.empty() && ctas != "1") unit.variant += "c" + ctas;
  return true;
}

Status scan_directory(const fs::path& dir, std::vector<InputUnit>& units) {
  std::map<fs::path, StemGroup> groups;  // (directory / stem) -> files
  std::error_code ec;
  fs::recursive_directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec), end;
  if (ec) return make_error(ErrorCode::io_error, dir.string() + ": " + ec.message());
  for (; it != end; it.increment(ec)) {
    if (ec) return make_error(ErrorCode::io_error, dir.string() + ": " + ec.message());
    if (!it->is_regular_file(ec)) continue;
    const fs::path& p = it->path();
    std::string ext = p.extension().string();
    if (p.filename().string().rfind("__grp__", 0) == 0) continue;  // Triton group index
    StemGroup& g = groups[p.parent_path() / p.stem()];
    if (ext == ".ptx")
      g.ptx = p;
    else if (ext == ".cubin")
      g.cubin = p;
    else if (ext == ".json")
      g.json = p;
  }
  std::size_t before = units.size();
  for (const auto& [stem, g] : groups) {
    if (g.ptx.empty() && g.cubin.empty()) continue;
    InputUnit unit;
    if (!g.json.empty() && read_triton_metadata(g.json, unit)) {
      unit.kind = InputKind::triton;
      unit.source = g.json;
      unit.ptx = g.ptx;
      unit.cubin = g.cubin;
      units.push_back(unit);
      continue;
    }
    if (!g.ptx.empty()) units.push_back(InputUnit{InputKind::ptx, g.ptx, g.ptx, {}, {}, {}});
    if (!g.cubin.empty())
      units.push_back(InputUnit{InputKind::cubin, g.cubin, {}, g.cubin, {}, {}});
  }
  if (units.size() == before)
    return make_error(ErrorCode::invalid_argument,
                      dir.string() + ": no .ptx or .cubin files found");
  return {};
}

}  // namespace

std::string input_kind_name(InputKind kind) {
  switch (kind) {
    case InputKind::cu:
      return "cu";
    case InputKind::ptx:
      return "ptx";
    case InputKind::cubin:
      return "cubin";
    case InputKind::triton:
      return "triton";
  }
  return "unknown";
}

Result<std::vector<InputUnit>> discover_inputs(const std::vector<fs::path>& paths) {
  if (paths.empty()) return make_error(ErrorCode::invalid_argument, "no input files");
  std::vector<InputUnit> units;
  for (const fs::path& path : paths) {
    std::error_code ec;
    if (!fs::exists(path, ec))
      return make_error(ErrorCode::not_found, path.string() + ": no such file or directory");
    if (fs::is_directory(path, ec)) {
      if (Status st = scan_directory(path, units); !st) return st.error();
      continue;
    }
    std::string ext = path.extension().string();
    if (ext == ".cu")
      units.push_back(InputUnit{InputKind::cu, path, {}, {}, {}, {}});
    else if (ext == ".ptx")
      units.push_back(InputUnit{InputKind::ptx, path, path, {}, {}, {}});
    else if (ext == ".cubin")
      units.push_back(InputUnit{InputKind::cubin, path, {}, path, {}, {}});
    else
      return make_error(
          ErrorCode::invalid_argument,
          path.string() + ": unsupported input (expected .cu, .ptx, .cubin or a directory)");
  }
  return units;
}

}  // namespace gpuemu::lint
