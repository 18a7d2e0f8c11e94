#include "fuzz/shape_sampler.hpp"

#include "schema/expr.hpp"

#include <algorithm>
#include <limits>

namespace gpuemu {

std::optional<std::int64_t> lookup_name(const std::map<std::string, std::int64_t, std::less<>>& dims,
                                        const Json& attrs, const std::string& name, int index) {
  if (auto it = dims.find(name); it != dims.end()) return it->second;
  if (attrs.is_object() && attrs.contains(name)) {
    const Json& v = attrs[name];
    if (v.is_number_integer()) return v.get<std::int64_t>();
    if (v.is_boolean()) return v.get<bool>() ? 1 : 0;
    if (v.is_array() && !v.empty()) {
      std::size_t i = index < 0 ? 0 : static_cast<std::size_t>(index);
      if (v.size() == 1) i = 0;
      if (i < v.size() && v[i].is_number_integer()) return v[i].get<std::int64_t>();
    }
  }
  return std::nullopt;
}

Result<std::int64_t> eval_expr(const std::string& text,
                               const std::map<std::string, std::int64_t, std::less<>>& dims,
                               const Json& attrs) {
  GPUEMU_TRY(Expr e, Expr::parse(text));
  return e.eval([&](const std::string& n, int i) { return lookup_name(dims, attrs, n, i); });
}

namespace {

bool is_long_role(const std::string& role) { return role == "reduction" || role == "sequence"; }

// Sizes that break tiled kernels, in [lo, hi].
std::vector<std::int64_t> interesting_sizes(std::int64_t lo, std::int64_t hi) {
  std::vector<std::int64_t> out;
  auto add = [&](std::int64_t v) {
    if (v >= lo && v <= hi) out.push_back(v);
  };
  for (std::int64_t p : {1, 2, 3, 5, 7, 11, 13, 17, 31, 37, 61, 97, 127, 131, 251, 509, 1021, 2039})
    add(p);
  for (std::int64_t k = 1; (1LL << k) <= hi * 2; ++k) {
    add((1LL << k) - 1);
    add(1LL << k);
    add((1LL << k) + 1);
  }
  for (std::int64_t b : {16, 32, 64, 128, 256, 1024})
    for (std::int64_t m : {1, 2, 3}) {
      add(b * m + 1);
      add(b * m + 3);
      add(b * m - 1);
    }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace

std::int64_t ShapeSampler::draw_dim(const DimDomain& d, Rng& rng) const {
  if (auto it = m_options.dims.find(d.name); it != m_options.dims.end())
    return it->second[rng.bounded(it->second.size())];
  if (!d.values.empty()) return d.values[rng.bounded(d.values.size())];
  const std::int64_t lo = d.min, hi = d.max;
  if (hi <= lo) return lo;
  // Classes: interesting sizes (boundaries), long sizes for reductions and sequences, the bottom
  // of the range, and regular sizes (log-uniform).
  const bool long_dim = is_long_role(d.role);
  const std::uint64_t weights[] = {50, long_dim ? 30u : 5u, 10, 20};
  switch (rng.weighted(weights)) {
    case 0: {
      auto sizes = interesting_sizes(lo, hi);
      if (!sizes.empty()) return sizes[rng.bounded(sizes.size())];
      break;
    }
    case 1: {
      // The top part of the range: long reductions into the thousands.
      std::int64_t start = std::max(lo, std::min<std::int64_t>(hi, 1000));
      if (hi > start) {
        auto v = rng.integer(start, hi);
        if (rng.chance(1, 2)) v = std::min(hi, (v / 64) * 64 + 1 + static_cast<std::int64_t>(rng.bounded(3)));
        return std::max(lo, v);
      }
      break;
    }
    case 2: return rng.integer(lo, std::min(hi, lo + 8));
    default: break;
  }
  // Log-uniform over the range: pick a power-of-two band, then uniform inside it.
  int bits_hi = 0;
  while ((1LL << (bits_hi + 1)) <= hi) ++bits_hi;
  int bits_lo = 0;
  while ((1LL << (bits_lo + 1)) <= std::max<std::int64_t>(lo, 1)) ++bits_lo;
  const int band = bits_lo + static_cast<int>(rng.bounded(static_cast<std::uint64_t>(bits_hi - bits_lo + 1)));
  const std::int64_t b_lo = std::max(lo, std::int64_t{1} << band);
  const std::int64_t b_hi = std::min(hi, (std::int64_t{1} << (band + 1)) - 1);
  return rng.integer(std::min(b_lo, b_hi), b_hi);
}

std::int64_t ShapeSampler::input_elements(const std::map<std::string, std::int64_t, std::less<>>& dims,
                                          const Json& attrs) const {
  // Saturating, and an input whose shape cannot be evaluated (an overflow) counts as too large:
  // pinned dims come from requests, and a wrapped product once let 2^62 x 512 pass as 0.
  constexpr std::int64_t too_many = std::numeric_limits<std::int64_t>::max();
  std::int64_t total = 0;
  for (const auto& in : m_schema.inputs) {
    // An input present only when pinned (a mode the caller asks for: softmax_backward's logits)
    // is not counted, so that pinning it changes no dim of a case (and not pinning it, none of
    // the cases drawn before it existed).
    if (in.optional && in.presence == InputPresence::when_pinned) continue;
    std::int64_t n = 1;
    for (const auto& e : in.shape_for(attrs)) {
      auto v = eval_expr(e, dims, attrs);
      if (!v.ok()) return too_many;
      if (__builtin_mul_overflow(n, std::max<std::int64_t>(*v, 0), &n)) return too_many;
    }
    if (__builtin_add_overflow(total, n, &total)) return too_many;
  }
  return total;
}

Result<std::map<std::string, std::int64_t, std::less<>>> ShapeSampler::sample(
    std::uint64_t seed, const Json& attrs,
    const std::map<std::string, std::int64_t, std::less<>>& pinned) const {
  const auto budget = static_cast<std::int64_t>(static_cast<double>(m_schema.max_elements) *
                                                m_options.element_budget_scale);
  std::string last_problem;
  for (int attempt = 0; attempt < 200; ++attempt) {
    std::map<std::string, std::int64_t, std::less<>> dims;
    for (const auto& d : m_schema.dims) {
      if (!d.expr.empty()) continue;
      if (auto it = pinned.find(d.name); it != pinned.end()) {
        dims[d.name] = it->second;
        continue;
      }
      Rng dim_rng = Rng::substream(seed, "dim:" + d.name + ":" + std::to_string(attempt));
      dims[d.name] = draw_dim(d, dim_rng);
    }
    // Derived dims, in schema order (a derived dim may use earlier derived ones).
    bool ok = true;
    for (const auto& d : m_schema.dims) {
      if (d.expr.empty()) continue;
      auto v = eval_expr(d.expr, dims, attrs);
      if (!v) {
        last_problem = v.error().message;
        ok = false;
        break;
      }
      dims[d.name] = *v;
      if (*v < d.min || (d.max > 0 && *v > d.max && !d.values.empty())) {
        last_problem = "derived dim " + d.name + " = " + std::to_string(*v) + " is out of its domain";
        ok = false;
        break;
      }
      if (auto it = m_options.dims.find(d.name); it != m_options.dims.end() &&
          std::find(it->second.begin(), it->second.end(), *v) == it->second.end()) {
        last_problem = "derived dim " + d.name + " = " + std::to_string(*v) + " is not among the allowed sizes";
        ok = false;
        break;
      }
    }
    if (!ok) continue;
    for (const auto& c : m_schema.constraints) {
      auto v = eval_expr(c, dims, attrs);
      if (!v || !*v) {
        last_problem = "constraint '" + c + "' does not hold";
        ok = false;
        break;
      }
    }
    if (!ok) continue;
    // Budget: shrink the largest free, unpinned, unrestricted dims until the case fits.
    auto over = [&] {
      if (input_elements(dims, attrs) > budget) return true;
      if (m_schema.work.empty()) return false;
      auto w = eval_expr(m_schema.work, dims, attrs);
      return !w.ok() || *w > m_schema.max_work;  // an overflowing work count is over the budget
    };
    for (int shrink = 0; shrink < 64 && over(); ++shrink) {
      const DimDomain* largest = nullptr;
      for (const auto& d : m_schema.dims) {
        if (!d.expr.empty() || pinned.count(d.name) || m_options.dims.count(d.name) || !d.values.empty())
          continue;
        if (dims[d.name] <= std::max<std::int64_t>(d.min, 1)) continue;
        // Prefer shrinking batch-like dims over reductions and sequences.
        auto weight = [&](const DimDomain& x) {
          return dims[x.name] * (is_long_role(x.role) ? 1 : 8);
        };
        if (!largest || weight(d) > weight(*largest)) largest = &d;
      }
      if (!largest) break;
      dims[largest->name] = std::max(largest->min, dims[largest->name] / 2);
      for (const auto& d : m_schema.dims)
        if (!d.expr.empty())
          if (auto v = eval_expr(d.expr, dims, attrs)) dims[d.name] = *v;
    }
    if (over()) {
      last_problem = "no dims within the element and work budgets";
      continue;
    }
    bool constraints_hold = true;
    for (const auto& c : m_schema.constraints) {
      auto v = eval_expr(c, dims, attrs);
      constraints_hold &= v.ok() && *v != 0;
    }
    if (!constraints_hold) continue;
    return dims;
  }
  return make_error(ErrorCode::invalid_argument,
                    "op '" + m_schema.name + "': cannot draw dims that satisfy the restrictions (" +
                        last_problem + ")");
}

}  // namespace gpuemu
