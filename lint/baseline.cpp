#include "gpuemu/lint/baseline.hpp"

#include "file_util.hpp"

#include <nlohmann/json.hpp>

namespace gpuemu::lint {

using nlohmann::json;

void to_json(json& j, const Baseline& baseline) {
  j = json{{"format", k_baseline_format},
           {"version", k_baseline_version},
           {"toolkit", baseline.toolkit},
           {"kernels", baseline.kernels}};
}

void from_json(const json& j, Baseline& baseline) {
  if (!j.is_object()) throw json::type_error::create(302, "a baseline must be a JSON object", &j);
  if (auto it = j.find("format");
      it != j.end() && *it != k_baseline_format && *it != k_report_format)
    throw json::other_error::create(501,
                                    "\"format\" is neither \"" + std::string(k_baseline_format) +
                                        "\" nor \"" + k_report_format + "\"",
                                    &j);
  if (auto it = j.find("version");
      it != j.end() && (!it->is_number_integer() || *it > k_baseline_version))
    throw json::other_error::create(501,
                                    "unsupported baseline version (this gpuemu reads " +
                                        std::to_string(k_baseline_version) + ")",
                                    &j);
  baseline = Baseline{};
  baseline.toolkit = j.value("toolkit", std::string{});
  const json& kernels = j.at("kernels");
  if (!kernels.is_array()) throw json::type_error::create(302, "\"kernels\" must be an array", &j);
  baseline.kernels = kernels.get<std::vector<KernelMetrics>>();
}

Result<Baseline> baseline_from_json(const json& j) {
  try {
    return j.get<Baseline>();
  } catch (const json::exception& e) {
    // nlohmann's messages start "[json.exception.type_error.302] "; keep the readable part.
    std::string what = e.what();
    std::size_t bracket = what.find("] ");
    return make_error(
        ErrorCode::invalid_argument,
        "not a lint baseline: " + (bracket == std::string::npos ? what : what.substr(bracket + 2)));
  }
}

Result<Baseline> load_baseline(const std::filesystem::path& path) {
  auto text = read_text_file(path);
  if (!text) return text.error();
  json j = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded())
    return make_error(ErrorCode::invalid_argument,
                      path.string() + ": not a lint baseline: invalid JSON");
  auto baseline = baseline_from_json(j);
  if (!baseline)
    return make_error(baseline.error().code, path.string() + ": " + baseline.error().message);
  return baseline;
}

Status save_baseline(const Baseline& baseline, const std::filesystem::path& path) {
  return write_file_atomically(path, json(baseline).dump(2) + "\n");
}

}  // namespace gpuemu::lint
