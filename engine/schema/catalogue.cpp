#include "gpuemu/engine/catalogue.hpp"

#include "gpuemu/engine/install_paths.hpp"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <sstream>

namespace fs = std::filesystem;

namespace gpuemu {
namespace {

std::vector<std::string> split_path(const char* value) {
  std::vector<std::string> out;
  if (!value) return out;
  std::stringstream ss(value);
  std::string item;
  while (std::getline(ss, item, ':'))
    if (!item.empty()) out.push_back(item);
  return out;
}

// Edit distance, for "did you mean" suggestions.
std::size_t distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::vector<fs::path> schema_files(const std::string& dir) {
  std::vector<fs::path> files;
  std::error_code ec;
  for (const fs::path& base : {fs::path(dir), fs::path(dir) / "ops"}) {
    if (!fs::is_directory(base, ec)) continue;
    for (const auto& entry : fs::directory_iterator(base, ec))
      if (entry.is_regular_file(ec) && entry.path().extension() == ".json") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

std::vector<std::string> default_schema_path() {
  std::vector<std::string> dirs = split_path(std::getenv("GPUEMU_SCHEMA_PATH"));
  if (const char* builtin = std::getenv("GPUEMU_BUILTIN_SCHEMAS"); builtin && *builtin)
    dirs.emplace_back(builtin);
  else
    dirs.emplace_back(builtin_schema_dir() + "/ops");
  return dirs;
}

Result<std::shared_ptr<const Catalogue>> Catalogue::load_default() { return load(default_schema_path()); }

Result<std::shared_ptr<const Catalogue>> Catalogue::load(const std::vector<std::string>& dirs) {
  auto cat = std::make_shared<Catalogue>();
  // Earlier directories win: load in reverse so later inserts (earlier dirs) replace.
  for (auto it = dirs.rbegin(); it != dirs.rend(); ++it) {
    for (const auto& file : schema_files(*it)) {
      if (file.filename() == "op.schema.json") continue;
      GPUEMU_TRY(OpSchema s, load_op_schema_file(file.string()));
      std::string name = s.name;
      cat->m_ops.insert_or_assign(std::move(name), std::move(s));
    }
  }
  return std::shared_ptr<const Catalogue>(std::move(cat));
}

const OpSchema* Catalogue::find(std::string_view name) const {
  auto it = m_ops.find(name);
  return it == m_ops.end() ? nullptr : &it->second;
}

Result<const OpSchema*> Catalogue::get(std::string_view name) const {
  if (const OpSchema* s = find(name)) return s;
  std::vector<std::pair<std::size_t, std::string>> close;
  for (const auto& [n, s] : m_ops) {
    auto d = distance(name, n);
    if (d <= 3 || n.find(name) != std::string::npos) close.emplace_back(d, n);
  }
  std::sort(close.begin(), close.end());
  std::string msg = "unknown op '" + std::string(name) + "'";
  if (!close.empty()) {
    msg += " (did you mean";
    for (std::size_t i = 0; i < std::min<std::size_t>(3, close.size()); ++i)
      msg += (i ? ", '" : " '") + close[i].second + "'";
    msg += "?)";
  }
  msg += "; `gpuemu ops list` shows every op";
  return make_error(ErrorCode::unknown_op, msg);
}

Result<std::shared_ptr<const Catalogue>> Catalogue::with_op(OpSchema schema) const {
  if (find(schema.name))
    return make_error(ErrorCode::conflict, "custom op '" + schema.name +
                                               "' has the name of a catalogue op: give it another "
                                               "name (`gpuemu ops list` shows the catalogue)");
  auto cat = std::make_shared<Catalogue>(*this);
  std::string name = schema.name;
  cat->m_ops.emplace(std::move(name), std::move(schema));
  return std::shared_ptr<const Catalogue>(std::move(cat));
}

std::vector<const OpSchema*> Catalogue::all() const {
  std::vector<const OpSchema*> out;
  for (const auto& [n, s] : m_ops) out.push_back(&s);
  return out;
}

Result<RefContext> make_ref_context(const OpSchema& schema,
                                    const std::map<std::string, Tensor, std::less<>>& inputs,
                                    const AttrMap& attrs, std::optional<DType> case_dtype) {
  std::map<std::string, RefArg, std::less<>> args;
  for (const auto& [name, t] : inputs) args.emplace(name, RefArg{t.dtype(), t.shape(), exact_values(t)});
  return make_ref_context(schema, std::move(args), attrs, case_dtype);
}

Result<RefContext> make_ref_context(const OpSchema& schema, std::map<std::string, RefArg, std::less<>> inputs,
                                    const AttrMap& attrs, std::optional<DType> case_dtype) {
  RefContext ctx;
  ctx.schema = &schema;
  GPUEMU_TRY(ctx.attrs, schema.resolve_attrs(attrs));
  for (const auto& [name, t] : inputs) {
    if (!schema.find_input(name)) {
      std::string known;
      for (const auto& i : schema.inputs) known += (known.empty() ? "" : ", ") + i.name;
      return make_error(ErrorCode::invalid_argument,
                        "op '" + schema.name + "' has no input '" + name + "' (inputs: " + known + ")");
    }
  }
  // Each input's rank: the schema's, or at least its rank - 1
  // where the first entry stands for any number of leading dims.
  for (const auto& spec : schema.inputs) {
    auto it = inputs.find(spec.name);
    const std::vector<std::string>& spec_shape = spec.shape_for(ctx.attrs);
    if (it == inputs.end() || spec_shape.empty()) continue;  // a scalar's: its reference checks numel
    const auto want = static_cast<std::int64_t>(spec_shape.size());
    const auto rank = static_cast<std::int64_t>(it->second.shape.size());
    if (spec.any_leading_dims ? rank < want - 1 : rank != want)
      return make_error(ErrorCode::shape_mismatch,
                        "input '" + spec.name + "' of op '" + schema.name + "' must have rank " +
                            (spec.any_leading_dims ? "at least " + std::to_string(want - 1)
                                                   : std::to_string(want)) +
                            ", got shape " + shape_to_string(it->second.shape));
  }
  GPUEMU_TRY_STATUS(schema.check_dim_attrs(ctx.attrs, [&](const InputSpec& in) -> std::int64_t {
    auto it = inputs.find(in.name);
    return it == inputs.end() ? -1 : static_cast<std::int64_t>(it->second.shape.size());
  }));
  std::optional<DType> first_case;
  for (const auto& spec : schema.inputs) {
    auto it = inputs.find(spec.name);
    if (it == inputs.end()) {
      if (spec.optional) continue;
      return make_error(ErrorCode::invalid_argument,
                        "op '" + schema.name + "' needs input '" + spec.name + "'");
    }
    if (spec.dtype_rule == InputDtypeRule::case_dtype && !first_case) first_case = it->second.dtype;
    ctx.inputs.emplace(spec.name, std::move(it->second));
  }
  ctx.case_dtype = case_dtype ? *case_dtype : first_case.value_or(schema.dtypes.front());
  // Dims named by plain input shape entries, for references that want them. A leading entry that
  // stands for several dims binds their product, and inputs that share it must share those dims.
  std::map<std::string, Shape, std::less<>> leading;
  for (const auto& spec : schema.inputs) {
    auto it = ctx.inputs.find(spec.name);
    if (it == ctx.inputs.end()) continue;
    const Shape& shape = it->second.shape;
    const std::vector<std::string>& spec_shape = spec.shape_for(ctx.attrs);
    const std::size_t extra = spec.any_leading_dims ? shape.size() + 1 - spec_shape.size() : 0;
    for (std::size_t d = 0; d < spec_shape.size(); ++d) {
      const std::string& e = spec_shape[d];
      if (!schema.find_dim(e)) continue;
      std::int64_t size = 1;
      if (spec.any_leading_dims && d == 0) {
        const Shape lead(shape.begin(), shape.begin() + static_cast<std::ptrdiff_t>(extra));
        for (auto v : lead) size *= v;
        auto [pos, inserted] = leading.emplace(e, lead);
        if (!inserted && pos->second != lead)
          return make_error(ErrorCode::shape_mismatch,
                            "the leading dims " + shape_to_string(lead) + " of input '" + spec.name +
                                "' differ from another input's " + shape_to_string(pos->second));
      } else {
        size = shape[spec.any_leading_dims ? d - 1 + extra : d];
      }
      auto [pos, inserted] = ctx.dims.emplace(e, size);
      if (!inserted && pos->second != size)
        return make_error(ErrorCode::shape_mismatch,
                          "dim " + e + " is " + std::to_string(pos->second) + " in one input and " +
                              std::to_string(size) + " in input '" + spec.name + "'");
    }
  }
  return ctx;
}

Result<std::vector<RefOutput>> compute_reference(const OpSchema& schema,
                                                 const std::map<std::string, Tensor, std::less<>>& inputs,
                                                 const AttrMap& attrs) {
  GPUEMU_TRY(RefContext ctx, make_ref_context(schema, inputs, attrs));
  return run_reference(schema, ctx);
}

}  // namespace gpuemu
