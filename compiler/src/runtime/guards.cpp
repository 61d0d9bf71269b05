// Guards of a compiled artifact (Note [Compiled functions] in tessera/compiler/compile.h).
#include "runtime/guards.h"

#include <algorithm>
#include <array>
#include <map>

#include "tessera/error.h"

namespace tessera::compiler {

ArtifactGuards::ArtifactGuards(const ExportedProgram& program, const std::vector<Device>& devices) {
  std::map<std::string, int32_t> slot_of;
  size_t k = 0;
  for (const InputSpec& in : program.signature.inputs) {
    if (in.kind != InputKind::UserInput) continue;
    TESSERA_INTERNAL_ASSERT(k < devices.size(), "a device per user input");
    const TensorType& t = program.graph.type(in.value);
    InputGuard g;
    g.name = in.name;
    g.dtype = t.dtype;
    g.device = devices[k];
    for (size_t d = 0; d < t.sizes.size(); ++d) {
      const SymSize& s = t.sizes[d];
      g.sizes.push_back(s.maybe_constant().value_or(0));
      g.symbol.push_back(kStatic);
      if (s.is_constant()) continue;
      ++symbolic_dims_;
      if (auto name = s.plain_symbol()) {
        auto [it, fresh] = slot_of.emplace(*name, int32_t(symbols_.size()));
        if (fresh) {
          auto r = program.ranges.find(*name);
          symbols_.push_back({*name, r == program.ranges.end() ? SymbolRange{} : r->second});
        }
        g.symbol.back() = it->second;
      } else {
        derived_.push_back({k, d, s});
      }
    }
    inputs_.push_back(std::move(g));
    ++k;
  }
  relations_ = program.guards;
}

ArtifactGuards ArtifactGuards::exact(const std::vector<Tensor>& inputs) {
  ArtifactGuards a;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& x = inputs[i];
    TESSERA_CHECK(x.defined(), "compiled function: input ", i, " is an undefined tensor");
    InputGuard g;
    g.name = detail::str_cat("x", i);
    g.dtype = x.dtype();
    g.device = x.device();
    g.sizes = x.sizes().vec();
    g.symbol.assign(g.sizes.size(), kStatic);
    a.inputs_.push_back(std::move(g));
  }
  return a;
}

bool ArtifactGuards::check(const std::vector<Tensor>& inputs, std::string* why) const {
  auto fail = [&](auto&&... parts) {
    if (why) *why = detail::str_cat(parts...);
    return false;
  };
  if (inputs.size() != inputs_.size()) return fail(inputs.size(), " inputs, expected ", inputs_.size());
  constexpr size_t kInline = 16;
  std::array<int64_t, kInline> inline_bound;
  std::vector<int64_t> heap_bound;
  int64_t* bound = inline_bound.data();
  if (symbols_.size() > kInline) {
    heap_bound.resize(symbols_.size());
    bound = heap_bound.data();
  }
  for (size_t s = 0; s < symbols_.size(); ++s) bound[s] = -1;
  for (size_t i = 0; i < inputs_.size(); ++i) {
    const InputGuard& g = inputs_[i];
    const Tensor& x = inputs[i];
    if (!x.defined()) return fail(g.name, ": undefined tensor");
    if (x.dtype() != g.dtype)
      return fail(g.name, ": dtype is ", dtype_name(x.dtype()), ", expected ", dtype_name(g.dtype));
    if (x.device() != g.device)
      return fail(g.name, ": device is ", x.device().str(), ", expected ", g.device.str());
    const IntArrayRef sizes = x.sizes();
    if (sizes.size() != g.sizes.size())
      return fail(g.name, ": rank is ", sizes.size(), ", expected ", g.sizes.size());
    for (size_t d = 0; d < sizes.size(); ++d) {
      const int32_t s = g.symbol[d];
      if (s == kStatic) {
        if (sizes[d] != g.sizes[d] && !std::any_of(derived_.begin(), derived_.end(), [&](const Derived& e) {
              return e.input == i && e.dim == d;
            }))
          return fail(g.name, ": dim ", d, " is ", sizes[d], ", expected ", g.sizes[d]);
        continue;
      }
      int64_t& b = bound[size_t(s)];
      const Symbol& sym = symbols_[size_t(s)];
      if (b >= 0 && b != sizes[d])
        return fail(g.name, ": dim ", d, " is ", sizes[d], ", but ", sym.name, " = ", b,
                    " from an earlier dim");
      if (sizes[d] < sym.range.min || sizes[d] > sym.range.max)
        return fail(g.name, ": dim ", d, " is ", sizes[d], ", outside ", sym.name, "'s range [",
                    sym.range.min, ", ", sym.range.max, "]");
      b = sizes[d];
    }
  }
  if (derived_.empty() && relations_.empty()) return true;
  std::map<std::string, int64_t> bindings;
  for (size_t s = 0; s < symbols_.size(); ++s) bindings.emplace(symbols_[s].name, bound[s]);
  for (const Derived& e : derived_) {
    const int64_t want = e.size.evaluate(bindings);
    const int64_t got = inputs[e.input].sizes()[e.dim];
    if (got != want)
      return fail(inputs_[e.input].name, ": dim ", e.dim, " is ", got, ", expected ", e.size.str(), " = ",
                  want);
  }
  for (const Guard& r : relations_)
    if (!r.holds(bindings)) return fail("guard ", r.str(), " fails");
  return true;
}

bool ArtifactGuards::accepts(const std::vector<Tensor>& inputs) const { return check(inputs, nullptr); }

std::string ArtifactGuards::first_failure(const std::vector<Tensor>& inputs) const {
  std::string why;
  check(inputs, &why);
  return why;
}

int ArtifactGuards::similarity(const std::vector<Tensor>& inputs) const {
  if (inputs.size() != inputs_.size()) return 0;
  int score = 2;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& x = inputs[i];
    if (!x.defined() || x.dtype() != inputs_[i].dtype || x.device() != inputs_[i].device) return 0;
    if (x.dim() != int64_t(inputs_[i].sizes.size())) score = 1;
  }
  return score;
}

std::string ArtifactGuards::str() const {
  std::string out;
  for (size_t i = 0; i < inputs_.size(); ++i) {
    const InputGuard& g = inputs_[i];
    out += (i ? ", " : "") + std::string(dtype_short_name(g.dtype)) + "[";
    for (size_t d = 0; d < g.sizes.size(); ++d) {
      std::string size = std::to_string(g.sizes[d]);
      if (g.symbol[d] != kStatic) size = symbols_[size_t(g.symbol[d])].name;
      for (const Derived& e : derived_)
        if (e.input == i && e.dim == d) size = e.size.str();
      out += (d ? ", " : "") + size;
    }
    out += "] " + g.device.str();
  }
  return out;
}

}  // namespace tessera::compiler
