// Element types and type promotion. See docs/dtypes.md for the promotion table.
#pragma once
#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>

#include "tessera/export.h"
#include "tessera/half.h"

namespace tessera {

// Values equal tessera_dtype_t of the plugin ABI. The quantized dtypes (docs/quantization.md) hold
// the integer representation of a quantized tensor, whose scale and zero point live in the
// tensor's QuantParams (quant_params.h); they are neither integral nor floating.
enum class DType : int8_t {
  Bool = 0, UInt8 = 1, Int8 = 2, Int16 = 3, Int32 = 4, Int64 = 5,
  Float16 = 6, BFloat16 = 7, Float32 = 8, Float64 = 9,
  QInt8 = 10, QUInt8 = 11, QInt32 = 12,
};
constexpr int kNumDTypes = 13;
// The dtypes before the quantized ones (TESSERA_DTYPE_COUNT_ of the plugin ABI).
constexpr int kNumPlainDTypes = 10;

constexpr DType kBool = DType::Bool, kUInt8 = DType::UInt8, kInt8 = DType::Int8,
                kInt16 = DType::Int16, kInt32 = DType::Int32, kInt64 = DType::Int64,
                kFloat16 = DType::Float16, kBFloat16 = DType::BFloat16,
                kFloat32 = DType::Float32, kFloat64 = DType::Float64, kQInt8 = DType::QInt8,
                kQUInt8 = DType::QUInt8, kQInt32 = DType::QInt32;
// libtorch spellings.
constexpr DType kFloat = kFloat32, kDouble = kFloat64, kHalf = kFloat16, kLong = kInt64, kInt = kInt32;

namespace detail {
// At namespace scope: a constexpr array local to itemsize() was rebuilt on the stack at every call.
inline constexpr uint8_t kItemSizes[] = {1, 1, 1, 2, 4, 8, 2, 2, 4, 8, 1, 1, 4};
}  // namespace detail
constexpr size_t itemsize(DType t) { return detail::kItemSizes[int(t)]; }
constexpr bool is_floating(DType t) { return t >= DType::Float16 && t <= DType::Float64; }
constexpr bool is_quantized(DType t) { return t >= DType::QInt8 && t <= DType::QInt32; }
// The plain integer dtype of a quantized dtype's representation (int_repr): qint8 -> int8,
// quint8 -> uint8, qint32 -> int32; `t` itself otherwise.
constexpr DType underlying_dtype(DType t) {
  return t == DType::QInt8 ? DType::Int8 : t == DType::QUInt8 ? DType::UInt8 : t == DType::QInt32 ? DType::Int32 : t;
}
constexpr bool is_integral(DType t, bool include_bool = false) {
  return (t >= DType::UInt8 && t <= DType::Int64) || (include_bool && t == DType::Bool);
}
constexpr uint64_t dtype_bit(DType t) { return uint64_t(1) << int(t); }

// "float32", "bfloat16", ...
TESSERA_API std::string_view dtype_name(DType t);
// Parses dtype_name() spellings and the usual aliases ("float", "half", "long"); throws otherwise.
TESSERA_API DType dtype_from_name(std::string_view name);
inline std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

// PyTorch's promote_types: the smallest type both convert to without loss of category. Throws for
// a quantized dtype other than the same one twice (dequantize() first).
TESSERA_API DType promote_types(DType a, DType b);

// Category used by result_type: a scalar (wrapped number) or 0-dim tensor only upcasts a tensor of
// a lower category (bool < integral < floating).
enum class DTypeCategory : int8_t { Bool = 0, Integral = 1, Floating = 2 };
constexpr DTypeCategory dtype_category(DType t) {
  return t == DType::Bool ? DTypeCategory::Bool
                          : (is_floating(t) ? DTypeCategory::Floating : DTypeCategory::Integral);
}  // quantized dtypes count as integral here; promote_types refuses them

// Incremental result_type over operands, PyTorch semantics: dimensioned tensors first, then
// 0-dim tensors, then wrapped numbers (Python-like scalars), each only raising the category.
class TESSERA_API ResultTypeState {
 public:
  void add_tensor(DType t, bool zero_dim, bool wrapped_number);
  DType result() const;

 private:
  int dim_ = -1, zero_dim_ = -1, wrapped_ = -1;  // -1: none seen
};

// Default dtype of floating factories (float32).
TESSERA_API DType default_dtype();
TESSERA_API void set_default_dtype(DType t);

template <typename T> struct dtype_of;
template <> struct dtype_of<bool> { static constexpr DType value = kBool; };
template <> struct dtype_of<uint8_t> { static constexpr DType value = kUInt8; };
template <> struct dtype_of<int8_t> { static constexpr DType value = kInt8; };
template <> struct dtype_of<int16_t> { static constexpr DType value = kInt16; };
template <> struct dtype_of<int32_t> { static constexpr DType value = kInt32; };
template <> struct dtype_of<int64_t> { static constexpr DType value = kInt64; };
template <> struct dtype_of<Half> { static constexpr DType value = kFloat16; };
template <> struct dtype_of<BFloat16> { static constexpr DType value = kBFloat16; };
template <> struct dtype_of<float> { static constexpr DType value = kFloat32; };
template <> struct dtype_of<double> { static constexpr DType value = kFloat64; };
template <typename T> constexpr DType dtype_of_v = dtype_of<T>::value;

// Calls f(T{}) with the C++ type of `t`.
template <typename F>
decltype(auto) visit_dtype(DType t, F&& f) {
  switch (t) {
    case DType::Bool: return f(bool{});
    case DType::UInt8: return f(uint8_t{});
    case DType::Int8: return f(int8_t{});
    case DType::Int16: return f(int16_t{});
    case DType::Int32: return f(int32_t{});
    case DType::Int64: return f(int64_t{});
    case DType::Float16: return f(Half{});
    case DType::BFloat16: return f(BFloat16{});
    case DType::Float32: return f(float{});
    case DType::QInt8: return f(int8_t{});    // the representation
    case DType::QUInt8: return f(uint8_t{});
    case DType::QInt32: return f(int32_t{});
    case DType::Float64: default: return f(double{});
  }
}

}  // namespace tessera
