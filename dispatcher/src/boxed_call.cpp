// Boxed calls: arguments as a Stack in schema order, checked and converted to an unboxed call.
#include "tessera/dispatcher.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>

#include "dispatcher_state.h"
#include "host_api.h"
#include "op_registry.h"
#include "profiler.h"
#include "sparse_internal.h"
#include "stream_state.h"
#include "tessera/env.h"
#include "tessera/log.h"
#include "tessera/plugin_loader.h"


namespace tessera {

// ------------------------------------------------------------------------------------------------
// Boxed calls

Stack Dispatcher::call_boxed(OperatorEntry& op, Stack args) {
  const FunctionSchema& s = op.schema;
  TESSERA_CHECK(args.size() <= s.arguments.size(), "call_boxed('", op.name, "'): got ", args.size(),
                " arguments, the schema \"", s.str(), "\" takes at most ", s.arguments.size());
  detail::SmallVector<const TensorImpl*, 8> tensors;
  std::vector<tessera_value_t> attrs;
  std::deque<std::vector<int64_t>> lists;  // backing stores; deque keeps addresses
  auto bad = [&](size_t i, const char* expected) {
    detail::throw_error(ErrorCode::InvalidArgument,
                        "call_boxed('" + op.name + "'): argument " + std::to_string(i) + " ('" +
                            s.arguments[i].name + "') must be " + expected + " (schema \"" + s.str() + "\")");
  };
  for (size_t i = 0; i < s.arguments.size(); ++i) {
    const ArgInfo& a = op.args[i];
    const Argument& sa = s.arguments[i];
    // Absent (past the end, or None): the default, else None for an optional type, else an error.
    bool given = i < args.size() && !std::holds_alternative<std::monostate>(args[i]);
    bool optional = a.type == ArgType::OptionalTensor || a.type == ArgType::OptionalInt ||
                    a.type == ArgType::OptionalFloat || a.type == ArgType::OptionalString ||
                    a.type == ArgType::OptionalDType || a.type == ArgType::OptionalIntList ||
                    a.type == ArgType::OptionalScalar;
    if (!given && !a.has_default && !optional)
      bad(i, (std::string("given (it has no default); a ") + arg_type_name(a.type)).c_str());
    if (a.is_tensor) {
      if (a.type == ArgType::TensorList) {
        if (i >= args.size() || !std::holds_alternative<std::vector<Tensor>>(args[i])) bad(i, "a Tensor[]");
        for (const Tensor& t : std::get<std::vector<Tensor>>(args[i])) {
          TESSERA_CHECK(t.defined(), "call_boxed('", op.name, "'): undefined tensor in list argument '",
                        sa.name, "'");
          tensors.push_back(t.impl());
        }
      } else if (i >= args.size() || std::holds_alternative<std::monostate>(args[i])) {
        if (a.type == ArgType::Tensor) bad(i, "a Tensor");
        tensors.push_back(nullptr);
      } else if (auto* t = std::get_if<Tensor>(&args[i])) {
        if (!t->defined() && a.type == ArgType::Tensor) bad(i, "a defined Tensor");
        tensors.push_back(t->defined() ? t->impl() : nullptr);
      } else if (auto* ot = std::get_if<std::optional<Tensor>>(&args[i])) {
        if (a.type == ArgType::Tensor && !(*ot && ot->value().defined())) bad(i, "a defined Tensor");
        tensors.push_back(*ot && ot->value().defined() ? ot->value().impl() : nullptr);
      } else {
        bad(i, "a Tensor");
      }
      continue;
    }
    tessera_value_t v{};
    if (!given) {
      v = a.has_default ? a.default_value : value_none();
      if (v.kind == TESSERA_VALUE_INT_LIST) v = value_ints(a.default_ints);
      if (v.kind == TESSERA_VALUE_STRING) v = value_string(a.default_string.c_str());
      attrs.push_back(v);
      continue;
    }
    const Value& val = args[i];
    switch (a.type) {
      case ArgType::Int:
      case ArgType::OptionalInt:
        if (auto* p = std::get_if<int64_t>(&val))
          v = value_int(*p);
        else if (std::holds_alternative<std::monostate>(val) && a.type == ArgType::OptionalInt)
          v = value_none();
        else
          bad(i, "an int");
        break;
      case ArgType::Float:
      case ArgType::OptionalFloat:
        if (auto* p = std::get_if<double>(&val))
          v = value_double(*p);
        else if (auto* q = std::get_if<int64_t>(&val))
          v = value_double(double(*q));
        else if (std::holds_alternative<std::monostate>(val) && a.type == ArgType::OptionalFloat)
          v = value_none();
        else
          bad(i, "a float");
        break;
      case ArgType::Bool:
        if (auto* p = std::get_if<bool>(&val))
          v = value_bool(*p);
        else
          bad(i, "a bool");
        break;
      case ArgType::Scalar:
      case ArgType::OptionalScalar:  // None is handled above (not given)
        if (auto* p = std::get_if<int64_t>(&val))
          v = value_int(*p);
        else if (auto* q = std::get_if<double>(&val))
          v = value_double(*q);
        else if (auto* r = std::get_if<bool>(&val))
          v = value_bool(*r);
        else
          bad(i, "a Scalar (int64_t, double or bool)");
        break;
      case ArgType::IntList:
      case ArgType::OptionalIntList:
        if (auto* p = std::get_if<std::vector<int64_t>>(&val)) {
          std::vector<int64_t>& l = lists.emplace_back(*p);
          if (sa.list_size && l.size() == 1) l.assign(size_t(*sa.list_size), l[0]);
          v = value_ints(l);
        } else if (auto* q = std::get_if<int64_t>(&val)) {
          lists.emplace_back(size_t(sa.list_size.value_or(1)), *q);
          v = value_ints(lists.back());
        } else if (std::holds_alternative<std::monostate>(val) && a.type == ArgType::OptionalIntList) {
          v = value_none();
        } else {
          bad(i, "an int list (std::vector<int64_t>)");
        }
        break;
      case ArgType::String:
      case ArgType::OptionalString:
        if (auto* p = std::get_if<std::string>(&val))
          v = value_string(p->c_str());
        else if (std::holds_alternative<std::monostate>(val) && a.type == ArgType::OptionalString)
          v = value_none();
        else
          bad(i, "a string");
        break;
      case ArgType::DType:
      case ArgType::OptionalDType:
        if (auto* p = std::get_if<DType>(&val))
          v = value_dtype(*p);
        else if (std::holds_alternative<std::monostate>(val) && a.type == ArgType::OptionalDType)
          v = value_none();
        else
          bad(i, "a DType");
        break;
      default:
        bad(i, "a value of the schema's type");
    }
    attrs.push_back(v);
  }
  CallFrame f{tensors.data(), int(tensors.size()), attrs.data(), int(attrs.size()), nullptr};
  Tensor outs[kMaxOutputs];
  int n = call_unboxed(op, f, outs);
  Stack result;
  for (int i = 0; i < n; ++i) result.emplace_back(std::move(outs[i]));
  return result;
}

}  // namespace tessera
