#include "cli_common.hpp"

#include <gpuemu/base/error.hpp>

#include <sstream>

namespace gpuemu::cli {

std::pair<std::string, std::vector<std::int64_t>> parse_dim_restriction(const std::string& text) {
  auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size())
    throw GpuemuException(make_error(ErrorCode::invalid_argument,
                                     "--dims wants NAME=SIZE[,SIZE...], got '" + text + "'"));
  std::vector<std::int64_t> sizes;
  std::stringstream ss(text.substr(eq + 1));
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      std::size_t used = 0;
      long long v = std::stoll(item, &used);
      if (used != item.size() || v < 0) throw std::invalid_argument(item);
      sizes.push_back(v);
    } catch (const std::exception&) {
      throw GpuemuException(make_error(ErrorCode::invalid_argument,
                                       "--dims " + text + ": '" + item + "' is not a size"));
    }
  }
  return {text.substr(0, eq), sizes};
}

std::pair<std::string, nlohmann::json> parse_attr_assignment(const std::string& text) {
  auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0)
    throw GpuemuException(
        make_error(ErrorCode::invalid_argument, "--attr wants NAME=VALUE, got '" + text + "'"));
  std::string value = text.substr(eq + 1);
  nlohmann::json v;
  if (value == "True" || value == "true")
    v = true;
  else if (value == "False" || value == "false")
    v = false;
  else if (value == "None" || value == "null")
    v = nullptr;
  else {
    try {
      v = nlohmann::json::parse(value);
    } catch (const nlohmann::json::exception&) {
      v = value;  // a bare string
    }
  }
  return {text.substr(0, eq), v};
}

}  // namespace gpuemu::cli
