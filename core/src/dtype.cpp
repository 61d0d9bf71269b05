// Element type names, promotion and result_type. See docs/dtypes.md.
#include "tessera/dtype.h"

#include <atomic>
#include <cmath>
#include <limits>
#include <string>

#include "tessera/error.h"
#include "tessera/scalar.h"

namespace tessera {

namespace {

constexpr std::string_view kDTypeNames[kNumDTypes] = {
    "bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64",
    "qint8", "quint8", "qint32",
};

struct DTypeAlias {
  std::string_view name;
  DType dtype;
};
// Aliases accepted by dtype_from_name besides the canonical names (libtorch and NumPy spellings).
constexpr DTypeAlias kDTypeAliases[] = {
    {"float", kFloat32}, {"double", kFloat64}, {"half", kFloat16},   {"long", kInt64},
    {"int", kInt32},     {"short", kInt16},    {"char", kInt8},      {"byte", kUInt8},
    {"bf16", kBFloat16}, {"f16", kFloat16},    {"fp16", kFloat16},   {"f32", kFloat32},
    {"fp32", kFloat32},  {"f64", kFloat64},    {"fp64", kFloat64},   {"i8", kInt8},
    {"i16", kInt16},     {"i32", kInt32},      {"i64", kInt64},      {"u8", kUInt8},
    {"b1", kBool},       {"boolean", kBool},
};

std::atomic<DType> g_default_dtype{kFloat32};

// Rank inside a category, used to pick the wider of two types.
int float_rank(DType t) {
  switch (t) {
    case DType::Float16: case DType::BFloat16: return 0;
    case DType::Float32: return 1;
    default: return 2;
  }
}

}  // namespace

std::string_view dtype_name(DType t) {
  const int i = int(t);
  if (i < 0 || i >= kNumDTypes) return "invalid_dtype";
  return kDTypeNames[i];
}

DType dtype_from_name(std::string_view name) {
  std::string_view n = name;
  // Accept the PyTorch module prefix ("torch.float32") for convenience.
  if (n.substr(0, 6) == "torch.") n.remove_prefix(6);
  for (int i = 0; i < kNumDTypes; ++i)
    if (kDTypeNames[i] == n) return DType(i);
  for (const auto& a : kDTypeAliases)
    if (a.name == n) return a.dtype;
  std::string valid;
  for (int i = 0; i < kNumDTypes; ++i) {
    if (i) valid += ", ";
    valid += kDTypeNames[i];
  }
  valid += "; aliases:";
  for (const auto& a : kDTypeAliases) {
    valid += ' ';
    valid += a.name;
  }
  TESSERA_CHECK(false, "unknown dtype name '", name, "'; expected one of: ", valid);
  return kFloat32;  // unreachable
}

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  TESSERA_CHECK(!is_quantized(a) && !is_quantized(b), "no type promotion between ", a, " and ", b,
                ": ops other than dequantize do not take quantized tensors; call dequantize() first");
  if (a == kBool) return b;
  if (b == kBool) return a;
  const bool fa = is_floating(a), fb = is_floating(b);
  if (fa && !fb) return a;
  if (fb && !fa) return b;
  if (fa && fb) {
    // float16 and bfloat16 have no common 16-bit type: both convert exactly to float32.
    if ((a == kFloat16 && b == kBFloat16) || (a == kBFloat16 && b == kFloat16)) return kFloat32;
    return float_rank(a) >= float_rank(b) ? a : b;
  }
  // Both integral. uint8 with a signed type needs a signed type wider than 8 bits.
  if (a == kUInt8 || b == kUInt8) {
    const DType other = a == kUInt8 ? b : a;
    return other == kInt8 ? kInt16 : other;
  }
  return int(a) > int(b) ? a : b;  // int8 < int16 < int32 < int64 in enum order
}

namespace {
// -1 stands for "no operand of this priority seen".
int promote_skip_undefined(int a, DType b) { return a < 0 ? int(b) : int(promote_types(DType(a), b)); }

// PyTorch's combine_categories: a lower-priority result only counts when its category is higher.
int combine_categories(int higher, int lower) {
  if (higher < 0) return lower;
  if (lower < 0) return higher;
  const DType h = DType(higher), l = DType(lower);
  if (is_floating(h)) return higher;
  if (h == kBool || is_floating(l)) return int(promote_types(h, l));
  return higher;
}
}  // namespace

void ResultTypeState::add_tensor(DType t, bool zero_dim, bool wrapped_number) {
  DType current = t;
  // A Python-like float number takes the default dtype, not float64.
  if (wrapped_number && is_floating(current)) current = default_dtype();
  if (!zero_dim && !wrapped_number) {
    dim_ = promote_skip_undefined(dim_, current);
  } else if (wrapped_number) {
    wrapped_ = promote_skip_undefined(wrapped_, current);
  } else {
    zero_dim_ = promote_skip_undefined(zero_dim_, current);
  }
}

DType ResultTypeState::result() const {
  const int r = combine_categories(dim_, combine_categories(zero_dim_, wrapped_));
  TESSERA_CHECK(r >= 0, "result_type: no operand was added; add at least one tensor or number");
  return DType(r);
}

DType default_dtype() { return g_default_dtype.load(std::memory_order_relaxed); }

void set_default_dtype(DType t) {
  TESSERA_CHECK(is_floating(t), "set_default_dtype: got ", dtype_name(t),
                "; the default dtype must be a floating type (float16, bfloat16, float32, float64)");
  g_default_dtype.store(t, std::memory_order_relaxed);
}

namespace {
// The C++ spelling PyTorch's message uses for a dtype.
const char* cpp_type_name(DType t) {
  switch (t) {
    case DType::Bool: return "bool";
    case DType::UInt8: return "uint8_t";
    case DType::Int8: return "int8_t";
    case DType::Int16: return "int16_t";
    case DType::Int32: return "int32_t";
    case DType::Int64: return "int64_t";
    case DType::Float16: return "Half";
    case DType::BFloat16: return "BFloat16";
    case DType::Float32: return "float";
    case DType::Float64: default: return "double";
  }
}
}  // namespace

bool scalar_overflows(const Scalar& s, DType t) {
  if (s.is_bool() || t == kBool) return false;
  return visit_dtype(t, [&](auto zero) -> bool {
    using T = decltype(zero);
    using L = std::numeric_limits<std::conditional_t<std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>, float, T>>;
    double lowest = double(L::lowest()), max = double(L::max());
    if constexpr (std::is_same_v<T, Half>) lowest = -65504.0, max = 65504.0;
    if constexpr (std::is_same_v<T, BFloat16>) lowest = -3.3895313892515355e38, max = 3.3895313892515355e38;
    if (s.is_integral()) {
      const int64_t v = s.to_int();
      if constexpr (std::is_integral_v<T>) {
        if constexpr (std::is_unsigned_v<T>) {
          // two's complement wrap from below is allowed: -max..max
          return v > int64_t(L::max()) || (v < 0 && uint64_t(-(v + 1)) + 1 > uint64_t(L::max()));
        } else {
          return v < int64_t(L::lowest()) || v > int64_t(L::max());
        }
      } else {
        return double(v) < lowest || double(v) > max;
      }
    }
    const double v = s.to_double();
    if constexpr (std::is_integral_v<T>) {
      if (std::isnan(v)) return true;
      return v < lowest || v > max;
    } else {
      if (std::isinf(v) || std::isnan(v)) return false;
      return v < lowest || v > max;
    }
  });
}

void check_scalar_fits(const Scalar& s, DType t, const char* what) {
  TESSERA_CHECK(!scalar_overflows(s, t), what, ": value ", s, " cannot be converted to type ", cpp_type_name(t),
                " without overflow (dtype ", dtype_name(t), "); use a value in range or a wider dtype");
}

}  // namespace tessera
