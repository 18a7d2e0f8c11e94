#include "gpuemu/engine/engine.hpp"
#include "gpuemu/engine/install_paths.hpp"

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace gpuemu {

Result<EnvelopeTable> EnvelopeTable::from_json(const Json& j) {
  EnvelopeTable t;
  if (!j.is_object() || !j.contains("envelopes") || !j["envelopes"].is_object())
    return make_error(ErrorCode::invalid_argument, "an envelope file needs an 'envelopes' object");
  for (const auto& [op, per_dtype] : j["envelopes"].items()) {
    if (!per_dtype.is_object()) return make_error(ErrorCode::invalid_argument, "envelopes." + op + " must be an object");
    for (const auto& [dt, v] : per_dtype.items()) {
      auto d = parse_dtype(dt);
      if (!d) return make_error(ErrorCode::invalid_argument, "envelopes." + op + ": unknown dtype '" + dt + "'");
      double env = v.is_number() ? v.get<double>() : v.value("envelope", 0.0);
      if (!(env > 0)) return make_error(ErrorCode::invalid_argument, "envelopes." + op + "." + dt + " must be positive");
      t.set(op, *d, env, v.is_object() ? v : Json());
    }
  }
  return t;
}

Result<EnvelopeTable> EnvelopeTable::load_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return EnvelopeTable{};
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    auto r = from_json(Json::parse(ss.str()));
    if (!r) return make_error(r.error().code, path + ": " + r.error().message);
    return r;
  } catch (const Json::exception& e) {
    return make_error(ErrorCode::io_error, path + ": " + e.what());
  }
}

EnvelopeTable EnvelopeTable::load_default() {
  const char* env = std::getenv("GPUEMU_ENVELOPES");
  std::string path = env && *env ? env : builtin_schema_dir() + "/envelopes.json";
  auto t = load_file(path);
  return t ? std::move(t).value() : EnvelopeTable{};
}

double EnvelopeTable::get(const std::string& op, DType dtype) const {
  auto it = m_env.find(op);
  if (it != m_env.end()) {
    auto jt = it->second.find(std::string(dtype_name(dtype)));
    if (jt != it->second.end()) return std::max(k_floor, jt->second);
  }
  return k_fallback;
}

bool EnvelopeTable::has(const std::string& op, DType dtype) const {
  auto it = m_env.find(op);
  return it != m_env.end() && it->second.count(std::string(dtype_name(dtype)));
}

void EnvelopeTable::set(const std::string& op, DType dtype, double envelope, Json provenance) {
  m_env[op][std::string(dtype_name(dtype))] = envelope;
  if (!provenance.is_null()) m_provenance[op][std::string(dtype_name(dtype))] = std::move(provenance);
}

Json EnvelopeTable::to_json() const {
  Json j;
  j["envelopes"] = Json::object();
  for (const auto& [op, per] : m_env)
    for (const auto& [dt, v] : per) {
      Json entry = Json::object();
      auto p = m_provenance.find(op);
      if (p != m_provenance.end() && p->second.count(dt)) entry = p->second.at(dt);
      entry["envelope"] = v;
      j["envelopes"][op][dt] = entry;
    }
  return j;
}

}  // namespace gpuemu
