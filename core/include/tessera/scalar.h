// A number that is not a tensor: bool, integer or floating.
#pragma once
#include <cstdint>
#include <ostream>
#include <type_traits>

#include "tessera/dtype.h"
#include "tessera/export.h"

namespace tessera {

class Scalar {
 public:
  enum class Kind : int8_t { Bool, Int, Double };
  Scalar() : kind_(Kind::Int), i_(0) {}
  Scalar(bool v) : kind_(Kind::Bool), i_(v) {}  // NOLINT
  template <typename T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
  Scalar(T v) : kind_(Kind::Int), i_(int64_t(v)) {}  // NOLINT
  template <typename T, std::enable_if_t<std::is_floating_point_v<T>, int> = 0>
  Scalar(T v) : kind_(Kind::Double), d_(double(v)) {}  // NOLINT
  Scalar(Half v) : Scalar(float(v)) {}                  // NOLINT
  Scalar(BFloat16 v) : Scalar(float(v)) {}              // NOLINT

  Kind kind() const { return kind_; }
  bool is_floating() const { return kind_ == Kind::Double; }
  bool is_integral() const { return kind_ == Kind::Int; }
  bool is_bool() const { return kind_ == Kind::Bool; }
  double to_double() const { return kind_ == Kind::Double ? d_ : double(i_); }
  int64_t to_int() const { return kind_ == Kind::Double ? int64_t(d_) : i_; }
  bool to_bool() const { return kind_ == Kind::Double ? d_ != 0 : i_ != 0; }
  template <typename T> T to() const {
    if constexpr (std::is_same_v<T, bool>) return to_bool();
    else if constexpr (std::is_integral_v<T>) return T(to_int());
    else if constexpr (std::is_same_v<T, double>) return to_double();  // no rounding through float
    else return T(float(to_double()));
  }
  // The dtype a wrapped number of this kind has: bool, int64 or float64 (PyTorch semantics).
  DType dtype() const { return kind_ == Kind::Bool ? kBool : (kind_ == Kind::Int ? kInt64 : kFloat64); }

 private:
  Kind kind_;
  union {
    int64_t i_;
    double d_;
  };
};

// PyTorch's checked_convert: true when `s` cannot be stored in `t` without overflow. Integers into
// an unsigned type may wrap from below (-255..255 fit uint8, as in PyTorch); a floating value into
// an integer type must lie in its range (NaN and infinities never fit); a finite value into a
// floating type must lie in its finite range (infinities and NaN fit); bool always fits.
TESSERA_API bool scalar_overflows(const Scalar& s, DType t);
// Throws "value cannot be converted to type uint8_t without overflow" (PyTorch's wording) naming
// `what` (the op and argument) when scalar_overflows(s, t).
TESSERA_API void check_scalar_fits(const Scalar& s, DType t, const char* what);

inline std::ostream& operator<<(std::ostream& os, const Scalar& s) {
  if (s.is_floating()) return os << s.to_double();
  if (s.is_bool()) return os << (s.to_bool() ? "true" : "false");
  return os << s.to_int();
}

}  // namespace tessera
