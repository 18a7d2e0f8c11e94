#include "fuzz/signature.hpp"

#include <cctype>
#include <vector>

namespace gpuemu {
namespace {

// Whether `text` holds `word` delimited by non-identifier characters (so 'weight' does not match
// in "weights" or "running_weight").
bool mentions(const std::string& text, const std::string& word) {
  auto ident = [](char ch) { return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_'; };
  for (std::size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) {
    const bool left = at == 0 || !ident(text[at - 1]);
    const bool right = at + word.size() >= text.size() || !ident(text[at + word.size()]);
    if (left && right) return true;
  }
  return false;
}

std::string quoted_list(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "'" : ", '") + n + "'";
  return s;
}

std::string py_dict(const std::vector<std::string>& names, const char* value) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + ("\"" + n + "\": " + value);
  return "{" + s + "}";
}

std::string joined(const std::vector<std::string>& names, const char* sep) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : sep) + n;
  return s;
}

Diagnosis absent_input(const std::vector<std::string>& names, std::vector<std::string> evidence) {
  const bool one = names.size() == 1;
  return Diagnosis{
      "absent_input",
      "the kernel raised on a case without the optional input" + std::string(one ? " " : "s ") +
          quoted_list(names) + " (absent inputs arrive as None, as in PyTorch's signatures): if the kernel "
          "always takes " + (one ? "it" : "them") + ", pin " + (one ? "it" : "them") + " with present=" +
          py_dict(names, "True") + " (Python), --with " + joined(names, ",") + " (CLI) or with = [" +
          joined(names, ", ") + "] in gpuemu.toml; otherwise accept None",
      std::move(evidence)};
}

Diagnosis unsupported_attr(const std::string& name, const Json& value, const Json& fallback,
                           std::vector<std::string> evidence) {
  std::string v = value.dump(), f = fallback.dump();
  return Diagnosis{"unsupported_attr",
                   "the kernel raised on " + name + "=" + v + " and ran with " + name + "=" + f +
                       ": if it does not support " + v + ", pin the attr with attrs={\"" + name + "\": " + f +
                       "} (Python), --attr " + name + "=" + f + " (CLI) or attrs = { " + name + " = " + f +
                       " } in gpuemu.toml; otherwise handle it",
                   std::move(evidence)};
}

}  // namespace

std::optional<Diagnosis> signature_diagnosis(const Engine& engine, const OpSchema& schema,
                                             const FuzzOptions& options, const TestCase& c,
                                             const std::string& kernel_error,
                                             const KernelRunner* kernel) {
  std::vector<std::string> absent;
  for (const auto& in : schema.inputs)
    if (in.optional && in.presence == InputPresence::drawn && !c.inputs.count(in.name) &&
        !options.present.count(in.name))
      absent.push_back(in.name);  // drawn absent (a mode asked for by a pin is not a draw)
  std::vector<const AttrSpec*> unusual;  // attrs the run drew away from their default
  for (const auto& a : schema.attrs)
    if (c.attrs.contains(a.name) && c.attrs[a.name] != a.default_value &&
        !(options.attrs.is_object() && options.attrs.contains(a.name)))
      unusual.push_back(&a);
  if (absent.empty() && unusual.empty()) return std::nullopt;

  // Probes: the same case seed with one change; the error gone names the cause.
  auto runs_with = [&](FuzzOptions o) -> bool {
    o.dtypes = {c.dtype};
    o.distribution = c.distribution;
    o.vary_attrs.clear();
    CaseGenerator gen(schema, std::move(o));
    std::map<std::string, std::int64_t, std::less<>> free_dims;
    for (const auto& dd : schema.dims)
      if (dd.expr.empty() && c.dims.count(dd.name)) free_dims[dd.name] = c.dims.at(dd.name);
    auto pc = gen.generate_pinned(c.seed, free_dims, c.value_transforms);
    // The change may not fit the case's dims (groups=1 at the same channels exceeds the work
    // budget): then any case of the same seed with the change tells as well.
    if (!pc) pc = gen.generate_pinned(c.seed, {}, c.value_transforms);
    if (!pc) return false;
    auto r = engine.run_case(schema.name, gen.options(), *pc, *kernel);
    return r && r->kernel_error.empty();
  };
  if (kernel) {
    FuzzOptions base = options;
    base.attrs = c.attrs;  // only the change under test differs from the failing case
    std::vector<std::string> culprits;
    for (const auto& name : absent) {
      FuzzOptions o = base;
      o.present[name] = true;
      if (runs_with(o)) culprits.push_back(name);
    }
    if (culprits.empty() && absent.size() > 1) {
      FuzzOptions o = base;
      for (const auto& name : absent) o.present[name] = true;
      if (runs_with(o)) culprits = absent;
    }
    if (!culprits.empty())
      return absent_input(culprits, {kernel_error, "the same case with " + quoted_list(culprits) +
                                                       " given ran without an error"});
    for (const AttrSpec* a : unusual) {
      FuzzOptions o = base;
      o.attrs[a->name] = a->default_value;
      if (runs_with(o))
        return unsupported_attr(a->name, c.attrs[a->name], a->default_value,
                                {kernel_error, "the same case with " + a->name + "=" + a->default_value.dump() +
                                                   " ran without an error"});
    }
  }

  // What the error itself says (no kernel to re-run, or no probe changed anything).
  std::vector<std::string> named;
  for (const auto& name : absent)
    if (mentions(kernel_error, name)) named.push_back(name);
  if (!named.empty()) return absent_input(named, {kernel_error, "the error names the absent input"});
  if (!absent.empty() && mentions(kernel_error, "NoneType"))
    return absent_input(absent, {kernel_error, "the error is about None while the input is absent"});
  for (const AttrSpec* a : unusual)
    if (mentions(kernel_error, a->name) ||
        (c.attrs[a->name].is_string() && mentions(kernel_error, c.attrs[a->name].get<std::string>())))
      return unsupported_attr(a->name, c.attrs[a->name], a->default_value,
                              {kernel_error, "the error names the attr or its value"});
  return std::nullopt;
}

}  // namespace gpuemu
