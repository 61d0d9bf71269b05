// FormulaContext accessors and the look-up of the generated derivative table.
#include "formula_context.h"

#include <unordered_map>

#include "formula_helpers.h"

namespace tessera::autograd::detail {

namespace generated {
#include "autograd_derivatives.inc"
}  // namespace generated

const DerivativeInfo* find_derivative(const std::string& op) {
  static const auto* table = [] {
    auto* t = new std::unordered_map<std::string, const DerivativeInfo*>();
    for (const DerivativeInfo& d : generated::kDerivatives) (*t)[d.op] = &d;
    return t;
  }();
  auto it = table->find(op);
  return it == table->end() ? nullptr : it->second;
}

const Value& FormulaContext::attr(int arg) const {
  TESSERA_INTERNAL_ASSERT(size_t(arg) < args->size(), *node_name, ": argument ", arg, " out of range");
  return (*args)[size_t(arg)];
}

Tensor FormulaContext::tensor(int arg) const {
  const int b = (*flat_begin)[size_t(arg)];
  TESSERA_INTERNAL_ASSERT(b >= 0, *node_name, ": argument ", arg, " is not a tensor");
  const SavedTensor& s = (*saved)[size_t(b)];
  TESSERA_INTERNAL_ASSERT(s.defined(), *node_name, ": argument ", arg, " was not saved");
  return s.unpack(*node_name);
}
std::optional<Tensor> FormulaContext::opt_tensor(int arg) const {
  const int b = (*flat_begin)[size_t(arg)];
  const SavedTensor& s = (*saved)[size_t(b)];
  if (!s.defined()) return std::nullopt;
  return s.unpack(*node_name);
}
std::vector<Tensor> FormulaContext::tensor_list(int arg) const {
  std::vector<Tensor> r;
  const int b = (*flat_begin)[size_t(arg)], n = (*flat_count)[size_t(arg)];
  for (int i = 0; i < n; ++i) r.push_back((*saved)[size_t(b + i)].unpack(*node_name));
  return r;
}
formulas::SavedSizes FormulaContext::sizes(int arg) const {
  const size_t i = size_t((*flat_begin)[size_t(arg)]);
  if (input_dynamic && i < input_dynamic->size() && (*input_dynamic)[i].first.defined())
    return {(*input_sizes)[i], (*input_dynamic)[i].first, (*input_dynamic)[i].second};
  return (*input_sizes)[i];
}
std::vector<std::vector<int64_t>> FormulaContext::list_sizes(int arg) const {
  const int b = (*flat_begin)[size_t(arg)], n = (*flat_count)[size_t(arg)];
  return std::vector<std::vector<int64_t>>(input_sizes->begin() + b, input_sizes->begin() + b + n);
}
Tensor FormulaContext::result(int i) const { return (*results)[size_t(i)].unpack(*node_name); }

Scalar FormulaContext::scalar(int arg) const {
  const Value& v = attr(arg);
  if (auto* d = std::get_if<double>(&v)) return Scalar(*d);
  if (auto* b = std::get_if<bool>(&v)) return Scalar(*b);
  if (auto* i = std::get_if<int64_t>(&v)) return Scalar(*i);
  TESSERA_INTERNAL_ASSERT(false, *node_name, ": argument ", arg, " is not a Scalar");
  return Scalar();
}
std::optional<Scalar> FormulaContext::opt_scalar(int arg) const {
  if (std::holds_alternative<std::monostate>(attr(arg))) return std::nullopt;
  return scalar(arg);
}
int64_t FormulaContext::int_(int arg) const { return std::get<int64_t>(attr(arg)); }
std::optional<int64_t> FormulaContext::opt_int(int arg) const {
  if (std::holds_alternative<std::monostate>(attr(arg))) return std::nullopt;
  return int_(arg);
}
std::vector<int64_t> FormulaContext::ints(int arg) const {
  const Value& v = attr(arg);
  if (std::holds_alternative<std::monostate>(v)) return {};
  return std::get<std::vector<int64_t>>(v);
}
double FormulaContext::float_(int arg) const {
  const Value& v = attr(arg);
  if (auto* i = std::get_if<int64_t>(&v)) return double(*i);
  return std::get<double>(v);
}
std::optional<double> FormulaContext::opt_float(int arg) const {
  if (std::holds_alternative<std::monostate>(attr(arg))) return std::nullopt;
  return float_(arg);
}
bool FormulaContext::bool_(int arg) const { return std::get<bool>(attr(arg)); }
std::string FormulaContext::str(int arg) const { return std::get<std::string>(attr(arg)); }
DType FormulaContext::dtype(int arg) const { return std::get<DType>(attr(arg)); }
std::optional<DType> FormulaContext::opt_dtype(int arg) const {
  if (std::holds_alternative<std::monostate>(attr(arg))) return std::nullopt;
  return dtype(arg);
}

bool FormulaContext::needs(int arg) const {
  const int b = (*flat_begin)[size_t(arg)], n = (*flat_count)[size_t(arg)];
  for (int i = 0; i < n; ++i)
    if ((*needs_grad)[size_t(b + i)]) return true;
  return false;
}
void FormulaContext::set(int arg, Tensor g) { grads_out[size_t((*flat_begin)[size_t(arg)])] = std::move(g); }
void FormulaContext::set_list(int arg, std::vector<Tensor> g) {
  const int b = (*flat_begin)[size_t(arg)], n = (*flat_count)[size_t(arg)];
  TESSERA_INTERNAL_ASSERT(int(g.size()) == n, *node_name, ": formula returned ", g.size(), " gradients for ", n, " tensors");
  for (int i = 0; i < n; ++i) grads_out[size_t(b + i)] = std::move(g[size_t(i)]);
}
void FormulaContext::set_many(std::initializer_list<int> args_, std::vector<Tensor> g) {
  TESSERA_INTERNAL_ASSERT(g.size() == args_.size(), *node_name, ": formula returned ", g.size(), " gradients for ",
                          args_.size(), " arguments");
  size_t i = 0;
  for (int a : args_) {
    if (needs(a)) set(a, std::move(g[i]));
    ++i;
  }
}

}  // namespace tessera::autograd::detail
