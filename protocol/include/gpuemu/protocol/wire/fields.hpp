// How a typed message of the wire (gpuemu/protocol/wire/*.hpp) meets its JSON, written once per
// message as clangd's ObjectMapper does: each struct lists its fields in one static `map` (in its
// family's .cpp), and three mappers walk that list — FieldReader (JSON -> struct, the first bad
// field an `invalid_argument` naming it), FieldWriter (struct -> JSON) and FieldNames (the field
// names: what tests/cpp/wire_test.cpp checks docs/protocol.md against).
//
// Reading keeps what the daemon accepted before the layer existed: an absent or null field keeps
// the struct's default; a present field is converted as nlohmann's get<T>() converts it (a number
// for an integer field, as `param<T>` did), and a value it cannot convert is "parameter 'NAME' has
// the wrong type". A request's to_json leaves out the fields whose value is the default (the
// daemon reads an absent field as that default), so clients send what they set.
#pragma once

#include "gpuemu/base/error.hpp"
#include "gpuemu/engine/fuzz.hpp"

#include <concepts>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace gpuemu::wire {

// The error of a field of the wrong type: "parameter 'NAME' has the wrong type" (the daemon's
// wording since protocol version 1).
Error wrong_type(std::string_view name);
// The error of an absent or empty required string: "the request needs a string 'NAME'".
Error missing_string(std::string_view name);
// The `action` of an action-based request's params: `fallback` when absent or null, "" when it is
// not a string (the decoder then names it).
std::string action_of(const Json& params, const char* fallback);

// A struct with a static `template <class M, class S> static void map(M&, S&)` listing its fields.
template <class T>
concept Mapped = requires {
  typename T::Fields;
};

template <class T>
struct is_mapped_vector : std::false_type {};
template <class T>
struct is_mapped_vector<std::vector<T>> : std::bool_constant<Mapped<T>> {};

class FieldReader {
 public:
  explicit FieldReader(const Json& object) : m_object(object.is_object() ? &object : nullptr) {}

  // Absent or null: `out` keeps its value. `message`: the error of a wrong type instead of
  // wrong_type(name).
  template <class T>
  void opt(const char* name, T& out, const char* message = nullptr) {
    const Json* v = find(name);
    if (v == nullptr || m_error) return;
    if (auto e = decode_into(*v, out, name)) {
      if (unread(name)) return;  // as before: a field the request's action never looks at
      // A custom message replaces this field's own wrong type, not an error inside its value.
      if (message != nullptr && e->message == wrong_type(name).message)
        e = make_error(ErrorCode::invalid_argument, message);
      fail(std::move(*e));
    }
  }
  void required(const char* name, std::string& out);
  // A seed: a non-negative integer (unsigned, or signed >= 0); else "'NAME' must be a
  // non-negative integer".
  void seed(const char* name, std::optional<std::uint64_t>& out);
  // The whole object (a reply that is an engine's document plus fields: describe_op's schema).
  void rest(Json& out) {
    if (m_object) out = *m_object;
  }
  void fail(Error e) {
    if (!m_error) m_error = std::move(e);
  }
  Status status() const { return m_error ? Status(*m_error) : Status(); }

  // The value of one field: nullptr when absent or null.
  const Json* find(const char* name) const;
  // Fields the request does not read (its action does not use them): a wrong type there keeps
  // the default instead of failing, as the daemon ignored them before the typed layer.
  void set_unread(std::vector<std::string_view> names) { m_unread = std::move(names); }

  // One value into `out` (nullopt: done; else the error). Public for nested messages and lists.
  template <class T>
  static std::optional<Error> decode_into(const Json& v, T& out, const char* name) {
    if constexpr (std::is_same_v<T, Json>) {
      out = v;
    } else if constexpr (std::is_same_v<T, FuzzOptions>) {
      auto o = decode_options(v);
      if (!o) return o.error();
      out = std::move(o).value();
    } else if constexpr (Mapped<T>) {
      if (!v.is_object()) return wrong_type(name);
      FieldReader r(v);
      T::map(r, out);
      if (!r.status()) return r.status().error();
    } else if constexpr (is_optional<T>::value) {
      typename T::value_type x{};
      if (auto e = decode_into(v, x, name)) return e;
      out = std::move(x);
    } else if constexpr (is_mapped_vector<T>::value) {
      if (!v.is_array()) return wrong_type(name);
      T xs;
      for (const Json& e : v) {
        typename T::value_type x{};
        if (auto err = decode_into(e, x, name)) return err;
        xs.push_back(std::move(x));
      }
      out = std::move(xs);
    } else {
      try {
        out = v.get<T>();
      } catch (const Json::exception&) {
        return wrong_type(name);
      }
    }
    return std::nullopt;
  }

 private:
  template <class T>
  struct is_optional : std::false_type {};
  template <class T>
  struct is_optional<std::optional<T>> : std::true_type {};
  static Result<FuzzOptions> decode_options(const Json& v);

  bool unread(std::string_view name) const {
    for (auto n : m_unread)
      if (n == name) return true;
    return false;
  }

  const Json* m_object;
  std::optional<Error> m_error;
  std::vector<std::string_view> m_unread;
};

class FieldWriter {
 public:
  // Every field is written but an unset optional and a null Json (a request's to_json then
  // leaves out the fields at their default: write_request).
  template <class T>
  void opt(const char* name, const T& value, const char* = nullptr) {
    if constexpr (std::is_same_v<T, Json>) {
      if (!value.is_null()) m_json[name] = value;
    } else if constexpr (requires {
                           value.has_value();
                           typename T::value_type;
                         }) {
      if (value) m_json[name] = encode_value(*value);
    } else {
      m_json[name] = encode_value(value);
    }
  }
  void required(const char* name, const std::string& value) {
    m_json[name] = value;
    m_required.emplace_back(name);
  }
  void seed(const char* name, const std::optional<std::uint64_t>& value) {
    if (value) m_json[name] = *value;
  }
  void rest(const Json& value) {
    if (value.is_object()) m_json.update(value);
  }
  Json& json() { return m_json; }
  const std::vector<std::string>& required_names() const { return m_required; }

  template <class T>
  static Json encode_value(const T& value) {
    if constexpr (std::is_same_v<T, FuzzOptions>) {
      return encode_options(value);
    } else if constexpr (Mapped<T>) {
      FieldWriter w;
      T::map(w, value);
      return std::move(w.json());
    } else if constexpr (is_mapped_vector<T>::value) {
      Json a = Json::array();
      for (const auto& x : value) a.push_back(encode_value(x));
      return a;
    } else {
      return Json(value);
    }
  }

 private:
  static Json encode_options(const FuzzOptions& o);
  Json m_json = Json::object();
  std::vector<std::string> m_required;
};

// Collects the names of a message's fields, in order.
class FieldNames {
 public:
  template <class T>
  void opt(const char* name, const T&, const char* = nullptr) {
    m_names.emplace_back(name);
  }
  void required(const char* name, const std::string&) { m_names.emplace_back(name); }
  void seed(const char* name, const std::optional<std::uint64_t>&) { m_names.emplace_back(name); }
  void rest(const Json&) {}
  std::vector<std::string> take() { return std::move(m_names); }

 private:
  std::vector<std::string> m_names;
};

// The three conversions of a message, from its map (used by the family .cpp files).
template <Mapped T>
Result<T> read_message(const Json& j) {
  T out{};
  FieldReader r(j);
  // An action-based request (failures, baselines, calibrations, outbox) names the fields its
  // action does not read.
  if constexpr (requires { T::unread_fields(j); }) r.set_unread(T::unread_fields(j));
  T::map(r, out);
  if (!r.status()) return r.status().error();
  return out;
}
// A request's JSON: the fields that differ from a default-constructed request, and the required
// ones (the daemon reads an absent field as its default).
template <Mapped T>
Json write_request(const T& value) {
  FieldWriter w;
  T::map(w, value);
  FieldWriter d;
  const T defaults{};
  T::map(d, defaults);
  Json j = std::move(w.json());
  for (const auto& [k, v] : d.json().items()) {
    bool required = false;
    for (const auto& r : w.required_names()) required = required || r == k;
    if (!required && j.contains(k) && j[k] == v) j.erase(k);
  }
  return j;
}
// A reply's JSON: every field (replies are read by scripts that expect each key).
template <Mapped T>
Json write_reply(const T& value) {
  FieldWriter w;
  T::map(w, value);
  return std::move(w.json());
}
template <Mapped T>
std::vector<std::string> field_names() {
  FieldNames n;
  const T value{};
  T::map(n, value);
  return n.take();
}

}  // namespace gpuemu::wire

// Declares the conversions of a message (in its family's header).
#define GPUEMU_WIRE_DECLARE(T)                               \
  Json to_json(const T& value);                              \
  Result<T> from_json(const Json& j, std::type_identity<T>); \
  std::vector<std::string> fields_of(std::type_identity<T>)
// Defines them in the family's .cpp, next to T::map.
#define GPUEMU_WIRE_DEFINE_REQUEST(T)                         \
  Json to_json(const T& value) {                              \
    return write_request(value);                              \
  }                                                           \
  Result<T> from_json(const Json& j, std::type_identity<T>) { \
    return read_message<T>(j);                                \
  }                                                           \
  std::vector<std::string> fields_of(std::type_identity<T>) { \
    return field_names<T>();                                  \
  }
#define GPUEMU_WIRE_DEFINE_REPLY(T)                           \
  Json to_json(const T& value) {                              \
    return write_reply(value);                                \
  }                                                           \
  Result<T> from_json(const Json& j, std::type_identity<T>) { \
    return read_message<T>(j);                                \
  }                                                           \
  std::vector<std::string> fields_of(std::type_identity<T>) { \
    return field_names<T>();                                  \
  }

namespace gpuemu::wire {
// `auto r = wire::decode<FuzzParams>(json)`: the family's from_json, found by ADL.
template <class T>
Result<T> decode(const Json& j) {
  return from_json(j, std::type_identity<T>{});
}
}  // namespace gpuemu::wire
